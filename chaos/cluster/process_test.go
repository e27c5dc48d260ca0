package cluster

import (
	"errors"
	"testing"
)

func newProcess(t *testing.T, opts Options) *Process {
	t.Helper()
	p, err := NewProcess(opts)
	if err != nil {
		t.Fatalf("NewProcess(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func TestProcessFaults(t *testing.T) {
	p := newProcess(t, Options{N: 3})
	addrs := p.Addrs()
	for _, addr := range addrs {
		set(t, client(t, addr), "k", addr)
	}
	c0, c1, c2 := client(t, addrs[0]), client(t, addrs[1]), client(t, addrs[2])

	timed(t, "Kill(1)", func() error { return p.Kill(1) })
	if err := c1.Get(t.Context(), "k").Err(); err == nil {
		t.Fatal("GET on a killed master succeeded")
	} else if isTimeout(err) {
		t.Fatalf("GET on a killed local master timed out (%v), want an error at once", err)
	}
	if err := p.Kill(1); err != nil {
		t.Fatalf("Kill of a killed master: %v", err)
	}
	timed(t, "Start(1)", func() error { return p.Start(1) })
	if got := get(t, c1, "k"); got != "" {
		t.Fatalf("without persistence, k survived a kill: %q", got)
	}
	if err := p.Start(1); err != nil {
		t.Fatalf("Start of a running master: %v", err)
	}

	timed(t, "Pause(0)", func() error { return p.Pause(0) })
	wantTimeout(t, c0, "paused")
	timed(t, "Resume(0)", func() error { return p.Resume(0) })
	if got := get(t, c0, "k"); got != addrs[0] {
		t.Fatalf("after Resume, GET k = %q, want %q", got, addrs[0])
	}
	if err := p.Resume(0); err != nil {
		t.Fatalf("Resume of a running master: %v", err)
	}

	timed(t, "Partition(2)", func() error { return p.Partition(2) })
	wantTimeout(t, c2, "partitioned")
	timed(t, "Heal(2)", func() error { return p.Heal(2) })
	if got := get(t, c2, "k"); got != addrs[2] {
		t.Fatalf("after Heal, GET k = %q, want %q", got, addrs[2])
	}

	// Faults compose: a master restarted empty while partitioned stays
	// partitioned until Heal.
	if err := p.Partition(0); err != nil {
		t.Fatal(err)
	}
	timed(t, "Restart(0, false) while partitioned", func() error { return p.Restart(0, false) })
	wantTimeout(t, c0, "restarted while partitioned")
	if err := p.Heal(0); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c0, "k"); got != "" {
		t.Fatalf("Restart(0, false) kept k = %q", got)
	}

	if err := p.Kill(7); err == nil {
		t.Fatal("Kill(7) of 3 masters: no error")
	}
}

func TestProcessPersistence(t *testing.T) {
	p := newProcess(t, Options{N: 1, Persistence: true})
	c := client(t, p.Addrs()[0])
	set(t, c, "k", "v")
	if err := p.Restart(0, true); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, "k"); got != "v" {
		t.Fatalf("with persistence, Restart(0, true): GET k = %q, want v", got)
	}
	if err := p.Restart(0, false); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, "k"); got != "" {
		t.Fatalf("Restart(0, false): GET k = %q, want nothing", got)
	}
}

func TestProcessClosed(t *testing.T) {
	if _, err := NewProcess(Options{}); err == nil {
		t.Fatal("NewProcess with N=0: no error")
	}
	p, err := NewProcess(Options{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := p.Kill(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Kill after Close = %v, want ErrClosed", err)
	}
}
