package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
)

// exec --verbose logs the attempt, the call and the release to stderr.
func TestExecVerbose(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	r := runCLI(t, shared(), "exec", "--verbose", name, "--", "true")
	wantCode(t, r, 0)
	for _, want := range []string{
		fmt.Sprintf(`level=DEBUG msg="redlock: acquire" lock=%s attempt=1 succeeded=3 refused=0 failed=0 quorum=3`, name),
		fmt.Sprintf(`level=DEBUG msg="redlock: TryLock" lock=%s duration=`, name),
		fmt.Sprintf(`level=DEBUG msg="redlock: release" lock=%s succeeded=3`, name),
		fmt.Sprintf(`level=DEBUG msg="redlock: Unlock" lock=%s duration=`, name),
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	// Without --verbose, nothing is logged.
	r = runCLI(t, shared(), "exec", name, "--", "true")
	wantCode(t, r, 0)
	if r.stderr != "" {
		t.Errorf("stderr without --verbose: %q", r.stderr)
	}
}

// status --json: the same facts as the table, as one object, and the same
// exit statuses.
func TestStatusJSON(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 3, redistest.Options{})
	name := lockName(t)
	setOnAll(t, c.Addrs()[:2], name, "v1", time.Minute)
	r := runCLI(t, strings.Join(c.Addrs(), ","), "status", "--json", name)
	wantCode(t, r, 0)
	var got statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if got.Name != name || got.Quorum != 2 || got.Answered != 3 || got.Holder != "v1" || got.Holders != 2 || !got.Held || len(got.Masters) != 3 {
		t.Fatalf("status --json: %+v", got)
	}
	for i, m := range got.Masters[:2] {
		if m.Master != c.Addrs()[i] || m.Value != "v1" || m.PTTLms == nil || *m.PTTLms <= 0 || *m.PTTLms > 60000 || m.Error != "" {
			t.Errorf("master %d: %+v", i, m)
		}
	}
	if m := got.Masters[2]; m.Value != "" || m.PTTLms != nil || m.Error != "" {
		t.Errorf("master without the key: %+v", m)
	}

	c.Servers[0].Kill()
	c.Servers[1].Kill()
	r = runCLI(t, strings.Join(c.Addrs(), ","), "status", "--json", name)
	wantCode(t, r, exitUnavailable)
	got = statusJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if got.Answered != 1 || got.Held || got.Masters[0].Error == "" || got.Masters[2].Error != "" {
		t.Errorf("status --json with two masters down: %+v", got)
	}
}
