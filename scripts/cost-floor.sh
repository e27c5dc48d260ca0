#!/usr/bin/env bash
# cost-floor.sh: where the RWMutex's and the Semaphore's uncontended
# Lock+Unlock time goes, against the mutex's (the cost rows of the bench
# report: BenchmarkRWMutexCost, BenchmarkSemaphoreCost with no permit
# taken). It builds the bench four times, in a worktree of HEAD it
# removes after:
#   real   the library as it is;
#   calls  the reader's, the writer's and the permit's vote and release
#          replaced by scripts that make the same redis.calls on the master
#          (TIME, HGETALL, HSET, PEXPIRE; TIME, HGETALL, EXISTS, DEL; the
#          permit's TIME, PTTL, HMGET, HSET, PEXPIRE; HGET, HDEL, EXISTS)
#          and nothing else: no logic, a body of about 200 bytes (a
#          writer's real release also looks at the readers' queue: its
#          floor is one call low). Wrong
#          under contention (it admits everyone): a floor, never a lock;
#   bytes  calls, each body padded (a Lua comment) to the real script's
#          length: what the bytes of the EVAL cost beside the calls;
#   slots  the permit's calls in another layout, each slot a key of its
#          own with a native PX: a vote reads the stored limit, takes the
#          slot with SET NX PX and sets the limit's expiry (GET, SET,
#          SET); a release makes the mutex's release's calls (GET, DEL,
#          EXISTS). The Semaphore's row alone.
# Then it runs the binaries in turn, PASSES times (interleaved: a
# load that comes and goes weighs on all of them), and prints each
# ratio's median per variant. The mutex's scripts and SET are the same in
# all four. Needs redis-server (make redis-server) and a quiet machine;
# about 35 s per pass.
set -euo pipefail
passes=${PASSES:-5}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
wt=$work/wt
cleanup() {
	git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add -q --detach "$wt" HEAD
export GOWORK=$wt/go.work

build() { (cd "$wt/bench" && go test -c -o "$work/$1.test" .); }

# stub FILE VAR LUA PAD: VAR's declaration in FILE gets the body LUA,
# with PAD non-empty padded by floorPad to the real script's length.
stub() {
	local file=$1 var=$2 body=$3 pad=$4
	VAR=$var BODY=$body PAD=$pad perl -0pi -e '
		my ($v, $b, $p) = ($ENV{VAR}, $ENV{BODY}, $ENV{PAD});
		s/^(\t$v\s+any = )(script\([^\n]*\))$/$1 . ($p ? "floorPad(\"$b\", $2)" : "\"$b\"")/me
			or die "cost-floor.sh: no declaration of $v in '"$file"'\n";
	' "$wt/$file"
}

rwAcq="local C=redis.call local T=C('TIME') C('HGETALL',KEYS[1]) C('HSET',KEYS[1],ARGV[2]..ARGV[3],T[1]) C('PEXPIRE',KEYS[1],ARGV[4]) return 1"
rwRel="local C=redis.call C('TIME') C('HGETALL',KEYS[1]) C('EXISTS',KEYS[1]..':waiters') return C('DEL',KEYS[1])"
semAcq="local C=redis.call local T=C('TIME') C('PTTL',KEYS[1]) C('HMGET',KEYS[1],'v'..ARGV[2],'L') C('HSET',KEYS[1],'v'..ARGV[2],ARGV[1],'e'..ARGV[2],T[1]) C('PEXPIRE',KEYS[1],ARGV[3]) return 1"
semRel="local C=redis.call C('HGET',KEYS[1],'v'..ARGV[2]) C('HDEL',KEYS[1],'v'..ARGV[2],'e'..ARGV[2]) C('EXISTS',KEYS[2]) return 1"

semSlotAcq="local C=redis.call C('GET',KEYS[1]..':L') C('SET',KEYS[1]..':'..ARGV[2],ARGV[1],'NX','PX',ARGV[3]) C('SET',KEYS[1]..':L',ARGV[4],'PX',ARGV[3]) return 1"
semSlotRel="local C=redis.call C('GET',KEYS[1]..':'..ARGV[2]) C('DEL',KEYS[1]..':'..ARGV[2]) C('EXISTS',KEYS[2]) return 1"

variant() {
	local pad=$1
	stub rwmutex.go rwAcquireSrc "$rwAcq" "$pad"
	stub rwmutex.go rwReleaseSrc "$rwRel" "$pad"
	stub rwmutex.go rwRReleaseSrc "$rwRel" "$pad"
	stub semaphore.go semAcquireSrc "$semAcq" "$pad"
	stub semaphore.go semReleaseSrc "$semRel" "$pad"
}

cat > "$wt/floorpad.go" <<'EOF'
package redlock

import "strings"

// floorPad is stub with a Lua comment that brings it to real's length.
func floorPad(stub, real string) string {
	return stub + " --[[" + strings.Repeat("x", max(len(real)-len(stub)-7, 0)) + "]]"
}
EOF

build real
variant ""
build calls
git -C "$wt" checkout -q -- rwmutex.go semaphore.go
variant 1
build bytes
git -C "$wt" checkout -q -- rwmutex.go semaphore.go
stub semaphore.go semAcquireSrc "$semSlotAcq" ""
stub semaphore.go semReleaseSrc "$semSlotRel" ""
build slots

out=$work/out
for pass in $(seq "$passes"); do
	for v in real calls bytes slots; do
		echo "pass $pass/$passes: $v" >&2
		for bench in '^BenchmarkRWMutexCost$' '^BenchmarkSemaphoreCost$/^lib=redlock$/./^taken=0$'; do
			if [ "$v" != slots ] || [[ $bench == *Semaphore* ]]; then
				"$work/$v.test" -test.run '^$' -test.bench "$bench" -test.count 1
			fi
		done | awk -v v="$v" '/^Benchmark/ { for (i = 4; i < NF; i++) if ($(i+1) ~ /\/mutex$/) print v, $1, $(i+1), $i }' >> "$out"
	done
done
# Per benchmark and ratio, each variant's median of the passes.
sort -k2,2 -k3,3 -k1,1 -k4,4g "$out" | awk '
	{ k = $2 " " $3; c = ++n[k, $1]; x[k, $1, c] = $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
	END {
		printf "%-62s %7s %7s %7s %7s\n", "ratio (median of the passes)", "real", "calls", "bytes", "slots"
		split("real calls bytes slots", vs, " ")
		for (i = 1; i <= m; i++) {
			k = order[i]
			printf "%-62s", k
			for (j = 1; j <= 4; j++) {
				c = n[k, vs[j]]
				if (c) printf " %7.3f", x[k, vs[j], int((c + 1) / 2)]
				else printf " %7s", "-"
			}
			printf "\n"
		}
	}'
