#!/usr/bin/env bash
# test-halves.sh: make test's run of the root module's tests, as two go test
# processes side by side, each with the root package's tests of one half
# (every other test in source order) and one of them with the module's
# other packages after.
#
# Why: the root package's tests mostly wait (TTLs running out, masters
# killed and restarted, restart gates): one after another they used 70% of
# one core of this repository's 2-core machine for 408 s. Two processes,
# each with masters of its own (TestMain starts five), wait side by side.
# Each half still runs its tests one at a time, then its t.Parallel tests
# together, as go test does.
#
# Usage: scripts/test-halves.sh GO-TEST-FLAGS...   (from the repository root)
# Each half's output goes to a file, printed whole when the half ends, so
# that a failure's lines are not interleaved with the other half's.
set -euo pipefail
go=${GO:-go}

# The test names, in source order (go test -list builds the package without
# the flags: the same build as make test's simulation run, so it is cached).
mapfile -t names < <($go test -list '.*' . | grep -E '^(Test|Example|Fuzz)')
if [ "${#names[@]}" -lt 2 ]; then
  echo "test-halves: go test -list found ${#names[@]} tests" >&2
  exit 1
fi
half=("" "")
for i in "${!names[@]}"; do
  h=$((i % 2))
  half[$h]+="${half[$h]:+|}${names[$i]}"
done
others=$($go list ./... | grep -v '^github.com/redlock/redlock$')

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() { # run HALF COMMAND...: one half, its output and its wall time in files
  local h=$1 start=$SECONDS rc=0
  shift
  "$@" >"$dir/$h" 2>&1 || rc=$?
  echo "$rc $((SECONDS - start))" >"$dir/$h.end"
}
first() { # the first half, then the module's other packages
  "$go" test "$@" -run "^(${half[0]})\$" . && "$go" test "$@" $others
}
run 0 first "$@" &
p0=$!
run 1 "$go" test "$@" -run "^(${half[1]})\$" . &
p1=$!
wait $p0 $p1 || true
rc=0
for h in 0 1; do
  read -r hrc took <"$dir/$h.end"
  if [ "$hrc" = 0 ]; then
    echo "# half $((h + 1)) of the root module's tests: passed in $took s"
  else
    rc=1
    echo "# half $((h + 1)) of the root module's tests: FAILED after $took s"
  fi
  cat "$dir/$h"
done
exit $rc
