package main

import (
	"strings"
	"sync"
	"testing"
)

// Readers under exec --read run their commands together; a writer under
// --write runs its alone, and a reader's status shows the readers.
func TestExecReadersShareWriterAlone(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	dir := t.TempDir()
	// Each reader marks itself in, waits until both readers are in (or
	// gives up after 3 s), and says what it saw: readers must overlap.
	reader := `touch "$1/$$"; for i in $(seq 30); do [ "$(ls "$1" | wc -l)" -ge 2 ] && { echo both; exit 0; }; sleep 0.1; done; echo alone`
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() {
			results[i] = runCLI(t, shared(), "exec", "--read", "--ttl", "5s", "--wait", "10s", name, "--", "sh", "-c", reader, "sh", dir)
		})
	}
	wg.Wait()
	for _, r := range results {
		wantCode(t, r, 0)
		if strings.TrimSpace(r.stdout) != "both" {
			t.Fatalf("readers did not hold together:\n%s", r)
		}
	}

	// A writer while a reader holds: refused (75) without --wait.
	r := runCLI(t, shared(), "exec", "--read", "--ttl", "5s", name, "--", "sh", "-c",
		`"$0" exec --write "$1" -- true; echo "writer $?"; "$0" exec --read "$1" -- true; echo "reader $?"; "$0" status "$1"`, binary, name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "writer 75\nreader 0\n") {
		t.Fatalf("want the writer refused and a second reader let in beside a reader:\n%s", r)
	}
	if !strings.Contains(r.stdout, "READERS  WRITER  CLAIMS") || !strings.Contains(r.stdout, `read-write lock "`+name+`" is held by 1 reader on a quorum`) {
		t.Fatalf("status under a reader does not show it:\n%s", r)
	}

	// The writer holds alone: a reader is refused, and status names it.
	r = runCLI(t, shared(), "exec", "--write", "--fencing", "--ttl", "5s", name, "--", "sh", "-c",
		`echo "fence $REDLOCK_FENCE"; "$0" exec --read "$1" -- true; echo "reader $?"; "$0" status --json "$1"`, binary, name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "reader 75\n") || strings.Contains(r.stdout, "fence 0\n") || !strings.Contains(r.stdout, `"writer_on": 5`) {
		t.Fatalf("want a fenced writer alone, shown by status --json:\n%s", r)
	}
	// A plain exec is the mutex NAME: it never meets the read-write lock.
	r = runCLI(t, shared(), "exec", "--write", "--ttl", "5s", name, "--", binary, "exec", name, "--", "echo", "mutex")
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != "mutex" {
		t.Fatalf("plain exec beside the writer of the read-write lock of the same name:\n%s", r)
	}
}

// Flags that do not go with --read or --write are bad usage.
func TestExecReadWriteUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--read", "--write"}, "--read and --write"},
		{[]string{"--read", "--owner", "x"}, "--owner does not apply"},
		{[]string{"--read", "--fencing"}, "--fencing applies to the writer"},
	} {
		r := runCLI(t, shared(), append(append([]string{"exec"}, c.args...), lockName(t), "--", "true")...)
		wantCode(t, r, exitUsage)
		if !strings.Contains(r.stderr, c.want) {
			t.Fatalf("exec %v: want %q in:\n%s", c.args, c.want, r)
		}
	}
}
