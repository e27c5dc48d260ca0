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
	if directNodes {
		// Once in CI on DirectNodes a waiter slept through one 2 s backoff
		// (40 turns in 2.03 s): not yet explained, so not yet claimed.
		t.Skip("flaky on DirectNodes (one backoff slept through once in CI); under investigation")
	}
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
	a, b := ws.join("k"), ws.join("k")
	ws.wake("k")
	ws.leave("k", a)
	select {
	case <-b.wake:
	default:
		t.Fatal("the wake-up of the waiter that left was lost")
	}
	ws.leave("k", b)
	if ws.queued("k") || len(ws.keys) != 0 {
		t.Fatalf("queue not empty after everyone left: %v", ws.keys)
	}
}
