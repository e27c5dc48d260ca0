package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Racing execs with --permits 2 run at most two commands at once, and all
// of them run.
func TestExecPermitsAtMostL(t *testing.T) {
	t.Parallel()
	name, log := lockName(t), filepath.Join(t.TempDir(), "log")
	const racers, permits = 5, 2
	script := `echo "start $(date +%s%N)" >> "$1"; sleep 0.3; echo "end $(date +%s%N)" >> "$1"`
	results := make([]result, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			results[i] = runCLI(t, shared(), "exec", "--permits", strconv.Itoa(permits), "--ttl", "3s", "--wait", "20s", name, "--", "sh", "-c", script, "sh", log)
		})
	}
	wg.Wait()
	for _, r := range results {
		wantCode(t, r, 0)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		at    int64
		start bool
	}
	var evs []ev
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		at, _ := strconv.ParseInt(f[1], 10, 64)
		evs = append(evs, ev{at, f[0] == "start"})
	}
	if len(evs) != 2*racers {
		t.Fatalf("want %d lines, got:\n%s", 2*racers, b)
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if !a.start {
			return -1
		}
		return 1
	})
	running, most := 0, 0
	for _, e := range evs {
		if e.start {
			running++
		} else {
			running--
		}
		most = max(most, running)
	}
	if most > permits {
		t.Fatalf("%d commands ran at once under %d permits:\n%s", most, permits, b)
	}
	if most < permits {
		t.Errorf("at most %d command ran at once: the %d permits were not used:\n%s", most, permits, b)
	}
}

// With every permit held, exec --permits --wait 0 exits 75 without running
// its command; another limit while permits are held is a usage error (64);
// --owner does not apply.
func TestExecPermitsRefused(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	r := runCLI(t, shared(), "exec", "--permits", "1", "--ttl", "10s", name, "--",
		"sh", "-c", `"$0" exec --permits 1 "$1" -- true; echo "same: $?"; "$0" exec --permits 2 "$1" -- true; echo "other: $?"`, binary, name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "same: 75") || !strings.Contains(r.stdout, "other: 64") {
		t.Errorf("nested execs under the only permit: want 75, then 64 for another limit:\n%v", r)
	}
	if !strings.Contains(r.stderr, "--permits 2") {
		t.Errorf("the other limit's error does not name --permits:\n%s", r.stderr)
	}
	r = runCLI(t, shared(), "exec", "--permits", "2", "--owner", "me", name, "--", "true")
	wantCode(t, r, exitUsage)
	r = runCLI(t, shared(), "exec", "--permits", "-1", name, "--", "true")
	wantCode(t, r, exitUsage)
	r = runCLI(t, shared(), "exec", "--permits", "65", name, "--", "true")
	wantCode(t, r, exitUsage)
}

// status shows the permits held and their holders.
func TestStatusShowsPermits(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	r := runCLI(t, shared(), "exec", "--permits", "3", "--ttl", "20s", name, "--",
		"sh", "-c", `"$0" exec --permits 3 --ttl 20s "$1" -- sh -c 'sleep 0.2; exec "$0" status "$1"' "$0" "$1"`, binary, name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "2 of 3 permits held on a quorum") || strings.Count(r.stdout, "slot ") != 2 {
		t.Errorf("status under two permits:\n%s", r.stdout)
	}
	r = runCLI(t, shared(), "exec", "--permits", "3", "--ttl", "20s", name, "--",
		"sh", "-c", `exec "$0" status --json "$1"`, binary, name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"permits": {`) || !strings.Contains(r.stdout, `"limit": "3"`) {
		t.Errorf("status --json under a permit:\n%s", r.stdout)
	}
	r = runCLI(t, shared(), "status", name)
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, "permits held") {
		t.Errorf("status after every permit came back:\n%s", r.stdout)
	}
}
