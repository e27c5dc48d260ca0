package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

func checkEvents(t *testing.T, step string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s: events\n\t%s\nwant\n\t%s", step, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// slowPair returns the addresses of two shared masters behind proxies that
// add latency (from the start, or once slow is called) and of a third master
// of the test's own, with the function that kills it. With the two slowed,
// a killed master's error reaches every phase before the quorum does.
//
// The third is reached through a proxy too, which kill resets after it
// stopped the master: the port the Redlock dials stays the proxy's. The
// master's own, freed, was taken by another test binary's redis-server in
// CI once, which then refused a renewal that had to fail.
func slowPair(t *testing.T) (addrs []string, slow, kill func()) {
	spare := redistest.StartT(t, 1, redistest.Options{})
	var pxs []*faultproxy.Proxy
	for _, a := range []string{masters().Addrs()[0], masters().Addrs()[1], spare.Addrs()[0]} {
		px, err := faultproxy.New(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		pxs = append(pxs, px)
		addrs = append(addrs, px.Addr())
	}
	slow = func() {
		for _, px := range pxs[:2] {
			px.SetLatency(40 * time.Millisecond)
		}
	}
	kill = func() {
		if err := spare.Stop(); err != nil {
			t.Fatal(err)
		}
		pxs[2].Reset()
	}
	return addrs, slow, kill
}

// TestObserverEvents runs a script of calls against three real masters, one
// of which is killed halfway, and checks every event the observer got.
func TestObserverEvents(t *testing.T) {
	addrs, slow, kill := slowPair(t)
	cs := clients(t, addrs)
	rec := &recorder{}
	r := newRedlock(t, nodesOf(t, cs), redlock.WithObserver(rec))
	ctx := context.Background()
	key := testKey(t)

	l, err := r.Lock(ctx, key, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "Lock", rec.Take(),
		"start Lock depth=1",
		"acquire depth=1 attempt=1 2/0/0 q=2 [pending succeeded succeeded] ok=true",
		"end Lock depth=1 attempts=1 fenced=true ok=true")
	for i, n := range rec.Nodes[0] {
		if n.Node != r.Nodes()[i].Name() || (n.Outcome == redlock.Succeeded) != (n.Latency > 0) || n.Err != nil {
			t.Errorf("master %d: %+v, want named %s with a latency when it answered", i, n, r.Nodes()[i].Name())
		}
	}

	// Held: TryLock is refused by every master, Lock twice with WithRetry(2).
	if _, err := r.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held key: %v", err)
	}
	if _, err := r.Lock(ctx, key, redlock.WithRetry(2)); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("Lock of a held key: %v", err)
	}
	checkEvents(t, "refused", rec.Take(),
		"start TryLock depth=1",
		"acquire depth=1 attempt=1 0/2/0 q=2 [pending refused refused] ok=false",
		"end TryLock depth=1 attempts=1 fenced=false ok=false",
		"start Lock depth=1",
		"acquire depth=1 attempt=1 0/2/0 q=2 [pending refused refused] ok=false",
		// The Redlock's first wait: it subscribes for wake-ups, once.
		"subscribe depth=1 3/0/0 q=2 [succeeded succeeded succeeded] ok=true",
		"acquire depth=1 attempt=2 0/2/0 q=2 [pending refused refused] ok=false",
		"end Lock depth=1 attempts=2 fenced=false ok=false")

	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "Extend", rec.Take(),
		"start Extend depth=1",
		"extend depth=1 2/0/0 q=2 [pending succeeded succeeded] ok=true",
		"end Extend depth=1 attempts=0 fenced=false ok=true")

	// Do: its Lock and Unlock are calls inside Do's, under its context.
	if err := r.Do(ctx, testKey(t), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "Do", rec.Take(),
		"start Do depth=1",
		"start Lock depth=2",
		"acquire depth=2 attempt=1 2/0/0 q=2 [pending succeeded succeeded] ok=true",
		"end Lock depth=2 attempts=1 fenced=false ok=true",
		"start Unlock depth=2",
		"release depth=2 2/0/0 q=2 [pending succeeded succeeded] ok=true",
		"end Unlock depth=2 attempts=0 fenced=false ok=true",
		"end Do depth=1 attempts=0 fenced=false ok=true")

	// One master killed: the release fails there, and still succeeds.
	kill()
	slow()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "Unlock with a master killed", rec.Take(),
		"start Unlock depth=1",
		"release depth=1 2/0/1 q=2 [failed succeeded succeeded] ok=true",
		"end Unlock depth=1 attempts=0 fenced=false ok=true")
	if n := rec.Nodes[len(rec.Nodes)-1][2]; n.Node != r.Nodes()[2].Name() || n.Outcome != redlock.Failed || n.Err == nil {
		t.Errorf("killed master's reply: %+v", n)
	}
}

// TestObserverLost: a renewal that finds the key gone from every master
// reports the renewal's failure and the lost lock.
func TestObserverLost(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	rec := &recorder{}
	r := newRedlock(t, nodesOf(t, cs), redlock.WithObserver(rec))
	key := testKey(t)
	l, err := r.Lock(context.Background(), key, redlock.WithAutoExtend(), redlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the acquire's last SET to land (Lock returned at a quorum).
	for count(holders(t, cs, key), l.Value()) < len(cs) {
		time.Sleep(time.Millisecond)
	}
	rec.Take()
	for _, c := range cs {
		c.Del(context.Background(), key)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lock not lost")
	}
	settle(r)
	checkEvents(t, "lost", rec.Take(),
		"lost lockLost=true",
		"renew depth=0 0/2/0 q=2 [pending refused refused] ok=false")
}

// TestWithObserverErrors: a nil observer, or one given per call, is a
// ConfigError, not a silent default.
func TestWithObserverErrors(t *testing.T) {
	var ce *redlock.ConfigError
	if _, err := redlock.New(nodesOf(t, clients(t, masters().Addrs()[:1])), redlock.WithObserver(nil)); !errors.As(err, &ce) || ce.Field != "WithObserver" {
		t.Errorf("WithObserver(nil): %v", err)
	}
	var nilRec *recorder
	if _, err := redlock.New(nodesOf(t, clients(t, masters().Addrs()[:1])), redlock.WithObserver(nilRec)); !errors.As(err, &ce) {
		t.Errorf("WithObserver(typed nil): %v", err)
	}
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:1])))
	if _, err := r.TryLock(context.Background(), testKey(t), redlock.WithObserver(&recorder{})); !errors.As(err, &ce) || ce.Field != "WithObserver" {
		t.Errorf("WithObserver per call: %v", err)
	}
}

// TestSlogObserver: Debug lines per attempt and call, a Warn per failing
// master naming it, a Warn for a lost lock; never a password.
func TestSlogObserver(t *testing.T) {
	addrs, slow, kill := slowPair(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug})
	r := newRedlock(t, nodesOf(t, clients(t, addrs)), redlock.WithObserver(redlock.NewSlogObserver(slog.New(h))))
	ctx := context.Background()
	key := testKey(t)
	kill()
	slow()
	l, err := r.Lock(ctx, key, redlock.WithTTL(600*time.Millisecond), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clients(t, masters().Addrs()[:2]) {
		c.Del(ctx, key)
	}
	<-l.Done()
	settle(r)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{
		fmt.Sprintf("level=DEBUG msg=\"redlock: acquire\" lock=%s attempt=1 succeeded=2 refused=0 failed=1 quorum=2", key),
		fmt.Sprintf("level=WARN msg=\"redlock: master failed\" lock=%s op=acquire master=%s err=", key, r.Nodes()[2].Name()),
		fmt.Sprintf("level=DEBUG msg=\"redlock: Lock\" lock=%s duration=", key),
		fmt.Sprintf("level=WARN msg=\"redlock: lock lost\" lock=%s cause=", key),
		fmt.Sprintf("level=DEBUG msg=\"redlock: renew\" lock=%s succeeded=0 refused=1 failed=1 quorum=2", key),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}
