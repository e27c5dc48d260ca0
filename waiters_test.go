package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// With a backoff of seconds, only the local wake-ups can make 4 goroutines
// take 40 turns on one key quickly; the queue keeps them fair and the
// masters keep them exclusive.
func TestLockWakesLocalWaiters(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(2*time.Second, 2*time.Second))
	key := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const goroutines, turns = 4, 10
	var (
		inside atomic.Int32
		wins   [goroutines]int
		wg     sync.WaitGroup
	)
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			for range turns {
				l, err := r.Lock(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				wins[g]++
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d turns took %v: waiters slept through backoff instead of being woken", goroutines*turns, d)
	}
	for g, w := range wins {
		if w != turns {
			t.Errorf("goroutine %d won %d turns, want %d", g, w, turns)
		}
	}
}

// A waiter that gives up passes its pending wake-up on, so the next in line
// is not left to its backoff.
func TestWaitersLeavePassesWakeOn(t *testing.T) {
	var ws waiters
	a, _ := ws.join("k", 0)
	b, _ := ws.join("k", 0)
	ws.wake("k")
	ws.leave("k", a)
	select {
	case <-b.wake:
	default:
		t.Fatal("the wake-up of the waiter that left was lost")
	}
	ws.leave("k", b)
	if q, _ := ws.peek("k"); q || len(ws.keys) != 0 {
		t.Fatalf("queue not empty after everyone left: %v", ws.keys)
	}
}

// A release while a not-yet-queued caller's attempt is out finds no one to
// wake; the caller learns of it when it joins, if it is the head.
func TestWaitersJoinSeesMissedRelease(t *testing.T) {
	var ws waiters
	_, before := ws.peek("k")
	ws.wake("k") // the release, with an empty queue
	a, missed := ws.join("k", before)
	if !missed {
		t.Fatal("the head joining after a release it missed was told to wait")
	}
	if _, missed := ws.join("k", before); missed {
		t.Fatal("a waiter behind the head was told to skip the queue")
	}
	ws.leave("k", a)
	_, now := ws.peek("other")
	if _, missed := ws.join("other", now); missed {
		t.Fatal("no release since the count was taken, yet missed")
	}
}

// The same at the level of Lock: a caller whose first attempt fails because
// the key is still held, and whose reply is slow enough that the holder
// unlocks before it gets back, tries again at once rather than sleeping a
// backoff on a free key.
func TestLockAfterReleaseWhileAttemptOut(t *testing.T) {
	var fs []*faultNode
	var nodes []Node
	for _, n := range nodesOf(t, clients(t, masters.Addrs())) {
		f := wrap(n)
		fs = append(fs, f)
		nodes = append(nodes, f)
	}
	const backoff = 4 * time.Second
	// The node timeout outlasts the slow reply, so the attempt fails on the
	// masters' answer, after the release, not on its timeout, before it.
	r := newRedlock(t, nodes, WithBackoff(backoff, backoff), WithNodeTimeout(time.Second))
	key := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Lock returned on a quorum; let every master's acquire come back, so
	// that the release below has nothing to wait for.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		var n int64
		for _, f := range fs {
			n += f.acquired.Load()
		}
		if n == int64(len(fs)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acquires came back", n, len(fs))
		}
	}
	const slow = 300 * time.Millisecond
	for _, f := range fs {
		f.replyDelay.Store(int64(slow))
	}
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		l, err := r.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(slow / 3) // the attempt's SETs have reached the masters
	for _, f := range fs {
		f.replyDelay.Store(0)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A backoff sleep is at least backoff/2 (jitter).
	if d := time.Since(start); d >= backoff/2 {
		t.Fatalf("Lock took %v after the key was released: it slept through its backoff", d)
	}
}
