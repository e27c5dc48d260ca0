#!/usr/bin/env bash
# test-pool.sh: make test's run of the tests of the root module and of the
# nested modules named in MODULES (not chaos/, which runs on its own):
# every test binary built once, then run by WORKERS workers side by side,
# each taking the next item until none is left: the nested modules'
# packages (in the order MODULES gives: the longest first), the root
# module's other packages, then the root package's tests (but those SKIP
# matches) in PARTS parts (of about equal length; 4 per worker unless set).
#
# Why: the tests mostly wait (TTLs running out, masters killed and
# restarted, restart gates): one after another the root package's used 70%
# of one core of this repository's 2-core machine for 408 s. Processes
# each with masters of their own (TestMain starts five) wait side by side.
# Each part still runs its tests one at a time, then its t.Parallel tests
# together, as go test does. Parts shorter than halves even out the
# workers' ends: two halves took 144 and 231 s, and the nested modules'
# tests ran after them, one module after another (redlockrueidis's
# conformance kit alone 62 to 78 s). The binaries are built once, before
# any runs: two `go test` processes built the same race-instrumented
# package side by side, each on its own (about a minute of both cores).
#
# Every binary runs with -test.v; its output goes to a file, printed whole
# (a failed item's) once the workers are done, so that its lines are not
# interleaved with the others'. The 20 slowest tests of the run are listed
# at the end: where make test's time goes.
#
# Usage (from the repository root):
#   WORKERS=4 MODULES="redlockrueidis cmd/redlock" SKIP='^TestSim$' scripts/test-pool.sh BUILD-FLAGS... -- TEST-BINARY-FLAGS...
# e.g. scripts/test-pool.sh -race -- -test.count=1 -test.timeout=15m
set -euo pipefail
go=${GO:-go}
workers=${WORKERS:-2}
read -r -a modules <<<"${MODULES:-}"

build=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  build+=("$1")
  shift
done
[ $# -gt 0 ] && shift # the --
flags=("$@" -test.v)

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$SECONDS
root=$PWD

# binaries MOD builds MOD's test binaries into $dir/bin/MOD/ (go test -c
# with a directory as -o writes PKG.test for each package with tests; these
# have distinct last elements within a module) and prints "import-path dir
# binary" for each.
binaries() {
  local mod=$1 out="$dir/bin/$1"
  (cd "$root/$mod" && $go test "${build[@]}" -c -o "$out/" ./... >&2)
  (cd "$root/$mod" && $go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' ./...) |
    while read -r pkg pdir; do
      if [ -n "$pkg" ]; then echo "$pkg $pdir $out/$(basename "$pkg").test"; fi
    done
}
mapfile -t rootPkgs < <(binaries .)
others=()
for m in "${modules[@]}"; do
  mapfile -t -O "${#others[@]}" others < <(binaries "$m")
done
echo "# the test binaries built in $((SECONDS - start)) s"

# The root package's test names, in source order.
rootBin=$dir/bin/./redlock.test
# SKIP: a pattern (grep -E) of those it leaves to another stream.
mapfile -t names < <("$rootBin" -test.list '.*' | grep -E '^(Test|Example|Fuzz)' | grep -vE "${SKIP:-^\$}")
if [ "${#names[@]}" -lt 2 ]; then
  echo "test-pool: -test.list found ${#names[@]} tests" >&2
  exit 1
fi
# The root package's tests in parts of about equal length: each test, the
# longest first, joins the part with the least so far (by the seconds each
# took in a run here, kept in $times: `make test-times` writes it anew; a
# test not there counts as the median). Parts of every PARTS-th test in
# source order ended 50 to 77 s after the others: the longest tests
# happened to meet in one.
times=${TIMES:-scripts/test-times.txt}
parts=${PARTS:-$((4 * workers))}
mapfile -t part < <(
  { if [ -f "$times" ]; then sed 's/^/T /' "$times"; fi; printf 'N %s\n' "${names[@]}"; } |
    awk '$1 == "T" { w[$3] = $2; known[++k] = $2; next }
      { t[++n] = $2 }
      END {
        # the median of the known seconds (sorted by insertion)
        for (i = 2; i <= k; i++) for (j = i; j > 1 && known[j-1] > known[j]; j--) { x = known[j]; known[j] = known[j-1]; known[j-1] = x }
        m = k ? known[int((k + 1) / 2)] : 1
        for (i = 1; i <= n; i++) print ((t[i] in w) ? w[t[i]] : m), t[i]
      }' |
    sort -k1,1gr -k2,2 |
    awk -v P="$parts" '{
        b = 1
        for (i = 2; i <= P; i++) if (load[i] < load[b]) b = i
        load[b] += $1; part[b] = part[b] (part[b] == "" ? "" : "|") $2
      }
      END { for (i = 1; i <= P; i++) if (part[i] != "") print part[i] }'
)
parts=${#part[@]}

# The items, in the order workers take them ("import-path dir binary"
# each): the nested modules' packages (the longest first, as MODULES
# orders them), the root module's other packages, then the root package's
# parts, short enough to even out the workers' ends.
items=("${others[@]}")
for p in "${rootPkgs[@]}"; do
  read -r pkg pdir bin <<<"$p"
  [ "$pdir" = "$root" ] || items+=("$p")
done
for p in $(seq "$parts"); do
  items+=("root $p $rootBin")
done

# item N: run it, its output in $dir/out.N, "rc seconds name" in $dir/end.N.
item() {
  local n=$1 rc=0 t0=$SECONDS what pdir bin
  read -r what pdir bin <<<"${items[$n]}"
  if [ "$what" = root ]; then
    (cd "$root" && "$bin" "${flags[@]}" -test.run "^(${part[$((pdir - 1))]})\$") >"$dir/out.$n" 2>&1 || rc=$?
    what="part $pdir/$parts of github.com/redlock/redlock"
  else
    (cd "$pdir" && "$bin" "${flags[@]}") >"$dir/out.$n" 2>&1 || rc=$?
  fi
  echo "$rc $((SECONDS - t0)) $what" >"$dir/end.$n"
}

# worker: take the next item (a counter under flock) until none is left.
echo 0 >"$dir/next"
worker() {
  local n
  while :; do
    n=$(flock "$dir/next" bash -c 'n=$(cat "$1"); echo $((n + 1)) >"$1"; echo "$n"' _ "$dir/next")
    [ "$n" -lt "${#items[@]}" ] || return 0
    item "$n"
  done
}
pids=()
for _ in $(seq "$workers"); do
  worker &
  pids+=($!)
done
wait "${pids[@]}" || true

rc=0
for n in "${!items[@]}"; do
  read -r irc took what <"$dir/end.$n"
  if [ "$irc" = 0 ]; then
    echo "ok   $what ($took s)"
  else
    rc=1
    echo "FAIL $what ($took s)"
    cat "$dir/out.$n"
  fi
done
echo "# the 20 slowest tests (t.Parallel ones overlap):"
for n in "${!items[@]}"; do
  read -r _ _ what <"$dir/end.$n"
  sed -nE "s/^--- (PASS|FAIL|SKIP): ([^ ]+) \\(([0-9.]+)s\\)\$/\\3 \\2 (${what//\//\\/})/p" "$dir/out.$n"
done | sort -rn | awk 'NR <= 20 { printf "#   %6.1f s  %s\n", $1, substr($0, index($0, " ") + 1) }'
# TIMES_OUT: the seconds each of the root package's tests took, for $times.
if [ -n "${TIMES_OUT:-}" ]; then
  for n in "${!items[@]}"; do
    read -r what _ <<<"${items[$n]}"
    [ "$what" = root ] || continue
    sed -nE 's/^--- (PASS|FAIL|SKIP): ([^ ]+) \(([0-9.]+)s\)$/\3 \2/p' "$dir/out.$n"
  done | sort -k2,2 >"$TIMES_OUT"
  echo "# the root package's tests' seconds written to $TIMES_OUT"
fi
echo "# the tests: $((SECONDS - start)) s"
exit $rc
