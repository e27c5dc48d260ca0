package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
)

// --restart-gate (or $REDLOCK_RESTART_GATE; the flag wins) keeps masters
// that came up less than the gate ago out of the vote: on masters started
// just now exec exits with the unavailable status and says why; with the gate off it runs.
func TestExecRestartGate(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 3, redistest.Options{})
	list := strings.Join(c.Addrs(), ",")
	name := lockName(t)

	r := runCLI(t, list, "exec", "--ttl", "5s", "--restart-gate", "1m", name, "--", "true")
	wantCode(t, r, exitUnavailable)
	if !strings.Contains(r.stderr, "restart gate") {
		t.Errorf("exec refused by the restart gate does not say so:\n%v", r)
	}

	cmd, stdout, stderr := command(t.Context(), list, "exec", "--ttl", "5s", name, "--", "true")
	cmd.Env = append(cmd.Env, "REDLOCK_RESTART_GATE=1m")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmd, stdout, stderr, start); r.code != exitUnavailable {
		t.Errorf("with REDLOCK_RESTART_GATE=1m: %v; want exit %d", r, exitUnavailable)
	}

	cmd, stdout, stderr = command(t.Context(), list, "exec", "--ttl", "5s", "--restart-gate", "0", name, "--", "true")
	cmd.Env = append(cmd.Env, "REDLOCK_RESTART_GATE=1m")
	start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmd, stdout, stderr, start); r.code != 0 {
		t.Errorf("--restart-gate 0 with REDLOCK_RESTART_GATE=1m: %v; want the flag to win and exec to run", r)
	}

	for _, bad := range [][]string{{"--restart-gate", "soon"}, {"--restart-gate", "-1s"}, {"--ttl", "5s", "--restart-gate", "2s"}} {
		r := runCLI(t, list, append(append([]string{"exec"}, bad...), name, "--", "true")...)
		wantCode(t, r, exitUsage)
		if !strings.Contains(r.stderr, "restart-gate") {
			t.Errorf("exec %v: the usage error does not name --restart-gate:\n%v", bad, r)
		}
	}
}
