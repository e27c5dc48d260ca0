package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
)

// status shows the holder on every master while exec holds the lock, and the
// fence counter after it let go.
func TestStatusShowsHolders(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	// The command run under the lock asks for the status itself, once the
	// acquire's stragglers (past the quorum) have surely landed.
	// A nested exec of the same owner shows as a second hold.
	r := runCLI(t, shared(), "exec", "--fencing", "--ttl", "20s", "--owner", "job-7", name, "--",
		"sh", "-c", `"$0" exec --ttl 15s "$1" -- sh -c 'sleep 0.2; exec "$0" status "$1"' "$0" "$1"`, binary, name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"`+name+`" is held by owner job-7 with 2 holds`) || strings.Count(r.stdout, "owner=job-7,holds=2") != 5 {
		t.Errorf("status of a nested hold does not show owner job-7 with 2 holds on every master:\n%s", r.stdout)
	}
	for _, a := range masters.Addrs() {
		if !strings.Contains(r.stdout, a) {
			t.Errorf("status does not list master %s:\n%s", a, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, `"`+name+`" is held`) || !strings.Contains(r.stdout, "on 5 of 5 masters") {
		t.Errorf("status while held:\n%s", r.stdout)
	}
	for _, line := range strings.Split(r.stdout, "\n")[1:6] {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("want MASTER VALUE PTTL FENCE, got %q", line)
		}
		if d, err := time.ParseDuration(f[2]); err != nil || d <= 10*time.Second || d > 20*time.Second {
			t.Errorf("PTTL %q: want (10s, 20s]", f[2])
		}
		if f[3] == "-" {
			t.Errorf("no fence counter in %q", line)
		}
	}

	r = runCLI(t, shared(), "status", name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "is free") || strings.Count(r.stdout, " - ") < 5 {
		t.Errorf("status after release:\n%s", r.stdout)
	}
}

// status with too few masters answering reports the rest and exits 69.
func TestStatusMastersDown(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 3, redistest.Options{})
	name := lockName(t)
	setOnAll(t, c.Addrs(), name, "v1", time.Minute)
	c.Servers[0].Kill()
	c.Servers[1].Kill()
	r := runCLI(t, strings.Join(c.Addrs(), ","), "status", name)
	wantCode(t, r, exitUnavailable)
	if !strings.Contains(r.stdout, c.Addrs()[0]) || !strings.Contains(r.stdout, "error:") || !strings.Contains(r.stdout, "only 1 of 3") {
		t.Errorf("status with two masters down:\n%s", r.stdout)
	}
}
