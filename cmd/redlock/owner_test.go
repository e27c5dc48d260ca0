package main

import (
	"strings"
	"testing"
)

// A script run under redlock exec that calls redlock exec on the same name
// nests in its hold instead of waiting for itself: the inner exec makes one
// attempt (no --wait), which only a nested hold passes.
func TestExecNests(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	r := runCLI(t, shared(), "exec", "--ttl", "5s", name, "--", "sh", "-c",
		`"$0" exec "$1" -- sh -c 'echo "inner $REDLOCK_OWNER"' && echo "outer $REDLOCK_OWNER"`, binary, name)
	wantCode(t, r, 0)
	lines := strings.Fields(r.stdout)
	if len(lines) != 4 || lines[0] != "inner" || lines[2] != "outer" || lines[1] != lines[3] || len(lines[1]) != 36 {
		t.Fatalf("want the inner and the outer command to see one generated owner (a UUID), got:\n%s", r)
	}
}

// --owner names the owner and passes it on; an exec of another owner (here
// one that drops REDLOCK_OWNER) is refused while the lock is held.
func TestExecOwnerFlag(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	r := runCLI(t, shared(), "exec", "--owner", "job-7", name, "--", "sh", "-c",
		`echo "$REDLOCK_OWNER"; env -u REDLOCK_OWNER "$0" exec "$1" -- true; echo "other $?";
		 REDLOCK_OWNER=job-8 "$0" exec "$1" -- true; echo "job-8 $?";
		 "$0" exec --owner job-7 "$1" -- true; echo "job-7 $?"`, binary, name)
	wantCode(t, r, 0)
	want := "job-7\nother 75\njob-8 75\njob-7 0\n"
	if r.stdout != want {
		t.Fatalf("want stdout\n%s\ngot %s", want, r)
	}
}

func TestExecOwnerBad(t *testing.T) {
	t.Parallel()
	r := runCLI(t, shared(), "exec", "--owner", strings.Repeat("x", 2000), lockName(t), "--", "true")
	wantCode(t, r, exitUsage)
	if !strings.Contains(r.stderr, "--owner") {
		t.Fatalf("the error does not name --owner:\n%s", r)
	}
}
