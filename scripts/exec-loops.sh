#!/usr/bin/env bash
# exec-loops: the hand-off between processes, tried as a user would. LOOPS
# shell loops each run `redlock exec --ttl 2s --wait 10s NAME -- sleep JOB`
# (a new process every time) for SECONDS_TO_RUN seconds against 5 masters
# this script starts, then count each loop's jobs and the waits that ran
# out (exit 75) although the lock was busy all along.
#
# It passes when no wait ran out and the busiest loop ran at most 3 times
# the jobs of the least busy one.
#
#   scripts/exec-loops.sh                        # 6 loops, 0.5 s jobs, 40 s
#   LOOPS=6 JOB=0.03 SECONDS_TO_RUN=20 scripts/exec-loops.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LOOPS=${LOOPS:-6} JOB=${JOB:-0.5} SECONDS_TO_RUN=${SECONDS_TO_RUN:-40}

command -v redis-server >/dev/null || { echo "needs redis-server: apt-get install -y redis-server" >&2; exit 1; }
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

go build -o "$dir/redlock" ./cmd/redlock
masters=()
for i in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 20000))
  redis-server --port "$port" --save '' --appendonly no --dir "$dir" --daemonize no >/dev/null &
  pids+=($!)
  masters+=("redis://127.0.0.1:$port")
done
export REDLOCK_MASTERS=$(IFS=,; echo "${masters[*]}")
for m in "${masters[@]}"; do
  for _ in $(seq 50); do redis-cli -u "$m" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

end=$(( $(date +%s) + SECONDS_TO_RUN ))
for l in $(seq "$LOOPS"); do
  (
    jobs=0 timeouts=0
    while [ "$(date +%s)" -lt "$end" ]; do
      status=0
      "$dir/redlock" exec --ttl 2s --wait 10s loops -- sleep "$JOB" || status=$?
      case $status in
        0) jobs=$((jobs + 1)) ;;
        75) timeouts=$((timeouts + 1)) ;;
        *) echo "loop $l: redlock exec exited $status" >&2 ;;
      esac
    done
    echo "$l $jobs $timeouts" > "$dir/loop-$l"
  ) &
done
wait $(jobs -p | tail -n "$LOOPS") 2>/dev/null || true
for l in $(seq "$LOOPS"); do while [ ! -s "$dir/loop-$l" ]; do sleep 0.2; done; done

cat "$dir"/loop-* | sort -n | awk -v job="$JOB" -v secs="$SECONDS_TO_RUN" '
  { jobs[$1] = $2; t += $3; total += $2
    if (min == "" || $2 < min) min = $2; if ($2 > max) max = $2 }
  END {
    printf "%d loops, %ss jobs, %ss: jobs per loop", NR, job, secs
    for (l = 1; l <= NR; l++) printf " %d", jobs[l]
    printf " (total %d); waits that ran out: %d\n", total, t
    ok = (t == 0 && min > 0 && max <= 3 * min)
    verdict = "FAIL"; if (ok) verdict = "PASS"
    ratio = "inf"; if (min > 0) ratio = sprintf("%.2f", max / min)
    printf "%s: no wait ran out and busiest/least busy = %s (want <= 3)\n", verdict, ratio
    exit (ok ? 0 : 1)
  }'
