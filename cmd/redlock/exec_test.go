package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
)

// Racing execs on one name run their commands one at a time.
func TestExecRunsOneAtATime(t *testing.T) {
	t.Parallel()
	runsOneAtATime(t, shared())
}

// runsOneAtATime runs 4 racing execs of one lock on masterList and fails t
// unless their commands ran one after another.
func runsOneAtATime(t *testing.T, masterList string) {
	name, log := lockName(t), filepath.Join(t.TempDir(), "log")
	const racers = 4
	script := `echo "start $$ $(date +%s%N)" >> "$1"; sleep 0.2; echo "end $$ $(date +%s%N)" >> "$1"`
	results := make([]result, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			results[i] = runCLI(t, masterList, "exec", "--ttl", "3s", "--wait", "20s", name, "--", "sh", "-c", script, "sh", log)
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
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*racers {
		t.Fatalf("want %d lines, got:\n%s", 2*racers, b)
	}
	var lastEnd int64
	for i := 0; i < len(lines); i += 2 {
		s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if s[0] != "start" || e[0] != "end" || s[1] != e[1] {
			t.Fatalf("commands interleaved:\n%s", b)
		}
		start, _ := strconv.ParseInt(s[2], 10, 64)
		end, _ := strconv.ParseInt(e[2], 10, 64)
		if start < lastEnd || end < start {
			t.Fatalf("command %s started before the previous one ended:\n%s", s[1], b)
		}
		lastEnd = end
	}
}

// Losing a majority of the masters during a long command stops the command
// (SIGKILL when it ignores SIGTERM) and exits with the lock-lost status.
func TestExecLockLost(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 3, redistest.Options{})
	dir := t.TempDir()
	ready, pidFile := filepath.Join(dir, "ready"), filepath.Join(dir, "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The command ignores SIGTERM, and so does the sleep it starts.
	cmd, stdout, stderr := command(ctx, strings.Join(c.Addrs(), ","),
		"exec", "--ttl", "1s", "--grace", "300ms", lockName(t), "--",
		"sh", "-c", `trap "" TERM; echo $$ > "$1"; touch "$2"; sleep 30`, "sh", pidFile, ready)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, ready)
	lostAt := time.Now()
	c.Servers[0].Kill()
	c.Servers[1].Kill()
	r := wait(t, cmd, stdout, stderr, start)
	wantCode(t, r, exitLost)
	if !strings.Contains(r.stderr, "lost") {
		t.Errorf("stderr does not say the lock was lost:\n%s", r.stderr)
	}
	// Validity ≤ 1s after the last extend, then 300ms of grace.
	if took := time.Since(lostAt); took > 3*time.Second {
		t.Errorf("the command was stopped %v after the masters died; want under 3s", took)
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err := syscall.Kill(n, 0); err != syscall.ESRCH {
		t.Errorf("the command (pid %d) still runs after exec returned: %v", n, err)
	}
}

// --wait gives up with the not-obtained status while another holds the lock.
func TestExecNotObtained(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	setOnAll(t, masters.Addrs(), name, "someone-else", 20*time.Second)

	r := runCLI(t, shared(), "exec", name, "--", "true")
	wantCode(t, r, exitNotObtained)
	if r.took > 2*time.Second {
		t.Errorf("--wait 0 took %v; want one attempt", r.took)
	}

	r = runCLI(t, shared(), "exec", "--wait", "500ms", name, "--", "true")
	wantCode(t, r, exitNotObtained)
	if r.took < 500*time.Millisecond {
		t.Errorf("--wait 500ms gave up after %v", r.took)
	}
	if !strings.Contains(r.stderr, "--wait 500ms") {
		t.Errorf("stderr does not say the wait ran out:\n%s", r.stderr)
	}
}

// The command gets REDLOCK_KEY, and REDLOCK_FENCE with --fencing.
func TestExecEnvironment(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	show := `echo "key=$REDLOCK_KEY fence=${REDLOCK_FENCE-unset}"`
	r := runCLI(t, shared(), "exec", name, "--", "sh", "-c", show)
	wantCode(t, r, 0)
	if got := strings.TrimSpace(r.stdout); got != "key="+name+" fence=unset" {
		t.Errorf("without --fencing the command saw %q", got)
	}

	var fences []uint64
	for range 2 {
		r = runCLI(t, shared(), "exec", "--fencing", name, "--", "sh", "-c", show)
		wantCode(t, r, 0)
		_, fence, ok := strings.Cut(strings.TrimSpace(r.stdout), " fence=")
		f, err := strconv.ParseUint(fence, 10, 64)
		if !ok || err != nil || f == 0 {
			t.Fatalf("with --fencing the command saw %q", r.stdout)
		}
		fences = append(fences, f)
	}
	if fences[1] <= fences[0] {
		t.Errorf("fence tokens %v do not increase", fences)
	}
}

// exec passes the command's status through, as a shell reports it.
func TestExecStatusPassesThrough(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		command []string
		code    int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"/no/such/command"}, exitNotFound},
		{[]string{"no-such-command-anywhere"}, exitNotFound},
		{[]string{os.TempDir()}, exitCannotRun},
	} {
		name := lockName(t)
		r := runCLI(t, shared(), append([]string{"exec", name, "--"}, tc.command...)...)
		wantCode(t, r, tc.code)
		// The lock is released after the command, whatever its status.
		wantCode(t, runCLI(t, shared(), "exec", name, "--", "true"), 0)
	}
}

// Signals sent to exec reach the command.
func TestExecForwardsSignals(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdout, stderr := command(ctx, shared(), "exec", lockName(t), "--",
		"sh", "-c", `trap "echo got HUP; exit 5" HUP; touch "$1"; while :; do sleep 0.05; done`, "sh", ready)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, ready)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	r := wait(t, cmd, stdout, stderr, start)
	wantCode(t, r, 5)
	if !strings.Contains(r.stdout, "got HUP") {
		t.Errorf("the command did not see SIGHUP: %v", r)
	}
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A master that is down is reported on stderr, in one line, without
// --verbose, when the command ran on the others.
func TestExecReportsDownMaster(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t)
	execTellsFailed(t, dead, dead+"/0 failed: ")
	if r := runCLI(t, shared(), "exec", lockName(t), "--", "true"); r.stderr != "" {
		t.Errorf("with every master up, want nothing on stderr, got %v", r)
	}
}

// slowFailAddr returns the address of a master that accepts connections
// and closes each one, unanswered, after a while: its failure arrives
// after the other masters decided every phase, so no phase event counts it
// as failed.
func slowFailAddr(t *testing.T, after time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				time.Sleep(after)
				c.Close()
			})
		}
	})
	return ln.Addr().String()
}

// A master whose failure comes only after the others decided (the run's
// phases all ended with it pending) is still reported: exec asks it once
// more after the run.
func TestExecReportsLateFailingMaster(t *testing.T) {
	t.Parallel()
	slow := slowFailAddr(t, 60*time.Millisecond)
	execTellsFailed(t, slow, slow+"/0 ")
}

// execTellsFailed runs exec on two masters and bad, and wants it to run
// the command and write one line on stderr: 1 of 3 masters failed, with
// named in it.
func execTellsFailed(t *testing.T, bad, named string) {
	t.Helper()
	list := strings.Join(append(masters.Addrs()[:2], bad), ",")
	r := runCLI(t, list, "exec", lockName(t), "--", "true")
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "1 of 3 masters failed") || !strings.Contains(lines[0], named) {
		t.Errorf("want one line on stderr naming master %s as failed, got %v", bad, r)
	}
}

// exec --wait with every master down gives up within 50 ms of the bound,
// beyond what a run that gives up at once takes (starting the process).
func TestExecWaitBound(t *testing.T) {
	t.Parallel()
	list := strings.Join([]string{deadAddr(t), deadAddr(t), deadAddr(t)}, ",")
	start := runCLI(t, list, "exec", "--wait", "0", lockName(t), "--", "true")
	wantCode(t, start, exitUnavailable)
	const wait = 500 * time.Millisecond
	r := runCLI(t, list, "exec", "--wait", wait.String(), lockName(t), "--", "true")
	wantCode(t, r, exitUnavailable)
	t.Logf("took %v, at once %v", r.took, start.took)
	if over := r.took - wait - start.took; over > 50*time.Millisecond {
		t.Errorf("--wait %v took %v, %v more than the bound and a run that gives up at once (%v)", wait, r.took, over, start.took)
	}
}
