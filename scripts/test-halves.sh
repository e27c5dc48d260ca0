#!/usr/bin/env bash
# test-halves.sh: make test's run of the root module's tests: the test
# binaries built once, then run by two workers side by side. The root
# package's tests are split in two halves (every other test in source
# order); each worker runs one half, and the module's other packages are
# run by whichever worker is free first.
#
# Why: the root package's tests mostly wait (TTLs running out, masters
# killed and restarted, restart gates): one after another they used 70% of
# one core of this repository's 2-core machine for 408 s. Two processes,
# each with masters of its own (TestMain starts five), wait side by side.
# Each half still runs its tests one at a time, then its t.Parallel tests
# together, as go test does. The binaries are built once, before: two
# `go test` processes built the same race-instrumented package side by
# side, each on its own (about a minute of both cores).
#
# Usage (from the repository root):
#   scripts/test-halves.sh BUILD-FLAGS... -- TEST-BINARY-FLAGS...
# e.g. scripts/test-halves.sh -race -- -test.count=1 -test.timeout=15m
# Each item's output goes to a file, printed whole (a failed item's) once
# both workers are done, so that its lines are not interleaved with the
# other worker's.
set -euo pipefail
go=${GO:-go}

build=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  build+=("$1")
  shift
done
[ $# -gt 0 ] && shift # the --
flags=("$@")

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$SECONDS
# go test -c with a directory as -o writes PKG.test for each package with
# tests (these have distinct last elements).
$go test "${build[@]}" -c -o "$dir/bin/" ./...
echo "# the root module's test binaries built in $((SECONDS - start)) s"

# The root package's test names, in source order.
mapfile -t names < <("$dir/bin/redlock.test" -test.list '.*' | grep -E '^(Test|Example|Fuzz)')
if [ "${#names[@]}" -lt 2 ]; then
  echo "test-halves: -test.list found ${#names[@]} tests" >&2
  exit 1
fi
half=("" "")
for i in "${!names[@]}"; do
  h=$((i % 2))
  half[$h]+="${half[$h]:+|}${names[$i]}"
done

# The items, in the order workers take them: the two halves first, then the
# other packages ("import-path dir" per line, from go list).
items=("root 1" "root 2")
while read -r pkg pdir; do
  [ "$pdir" = "$PWD" ] && continue
  items+=("$pkg $pdir")
done < <($go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' ./...)

# item N: run it, its output in $dir/out.N, "rc seconds name" in $dir/end.N.
item() {
  local n=$1 rc=0 t0=$SECONDS what pdir
  read -r what pdir <<<"${items[$n]}"
  if [ "$what" = root ]; then
    "$dir/bin/redlock.test" "${flags[@]}" -test.run "^(${half[$((pdir - 1))]})\$" >"$dir/out.$n" 2>&1 || rc=$?
    what="half $pdir of github.com/redlock/redlock"
  else
    (cd "$pdir" && "$dir/bin/$(basename "$what").test" "${flags[@]}") >"$dir/out.$n" 2>&1 || rc=$?
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
worker &
w1=$!
worker &
w2=$!
wait $w1 $w2 || true

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
echo "# the root module's tests: $((SECONDS - start)) s"
exit $rc
