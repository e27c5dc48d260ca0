package redlock

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestUnlockAfterRenewalInFlight: Unlock during a slow renewal does not
// wait for it, yet each master gets the release only after its renewal
// returned (the lane keeps them in order), and no key is left behind.
func TestUnlockAfterRenewalInFlight(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	slow := make([]*faultNode, len(cs))
	nodes := make([]Node, len(cs))
	for i, n := range nodesOf(t, cs) {
		slow[i] = wrap(n)
		nodes[i] = slow[i]
	}
	r := newRedlock(t, nodes, WithTTL(900*time.Millisecond), WithNodeTimeout(400*time.Millisecond))
	key := testKey(t)
	ctx := context.Background()
	l, err := r.Lock(ctx, key, WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range slow {
		f.extendDelay.Store(int64(200 * time.Millisecond))
	}
	// The renewal is due 300 ms after the acquire and takes 200 ms.
	time.Sleep(400 * time.Millisecond)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if cause := context.Cause(l.Context()); cause != ErrUnlocked {
		t.Errorf("cause %v, want ErrUnlocked", cause)
	}
	settle(r)
	for i, f := range slow {
		done, rel := f.extendsDone.Load(), f.firstRelease.Load()
		if done == 0 {
			t.Fatalf("master %d: no renewal was sent", i)
		}
		if rel < done {
			t.Errorf("master %d: release sent %v before the renewal returned", i, time.Duration(done-rel))
		}
	}
	time.Sleep(300 * time.Millisecond) // a late renewal would land by now
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Fatalf("masters hold %q after Unlock", vs)
	}
}

// idleGoroutines is the least goroutine count seen over a few samples, so
// that renewals in flight do not count.
func idleGoroutines() int {
	n := runtime.NumGoroutine()
	for range 20 {
		time.Sleep(5 * time.Millisecond)
		n = min(n, runtime.NumGoroutine())
	}
	return n
}

// holdMany takes n auto-extended locks with distinct keys, a few at a time.
func holdMany(tb testing.TB, r *Redlock, n int, opts ...Option) []*Lock {
	tb.Helper()
	locks := make([]*Lock, n)
	errs := make(chan error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				l, err := r.Lock(context.Background(), testKey(tb), append(opts, WithAutoExtend())...)
				if err != nil {
					errs <- err
					continue
				}
				locks[i] = l
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	return locks
}

// unlockAll releases locks, a few at a time.
func unlockAll(tb testing.TB, locks []*Lock) {
	tb.Helper()
	next := make(chan *Lock)
	var failed atomic.Int64
	// The first failure: a Value would panic on a second error of another
	// type (CompareAndSwap of inconsistently typed values).
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for l := range next {
				if l == nil {
					continue
				}
				if err := l.Unlock(context.Background()); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for _, l := range locks {
		next <- l
	}
	close(next)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		tb.Errorf("%d of %d Unlocks failed, the first with: %v", n, len(locks), *first.Load())
	}
}

// BenchmarkAutoExtendHeld holds 10,000 auto-extended locks (3 masters, TTL
// 3 s) from one Redlock through several renewal rounds, and reports the
// goroutines running, the heap bytes per held lock (with its Done channel
// made), and the time of one renewal round of all the locks.
func BenchmarkAutoExtendHeld(b *testing.B) {
	const n = 10_000
	cs := clients(b, masters.Addrs()[:3])
	// A generous node timeout: on a loaded test machine 10,000 locks'
	// requests queue behind each other.
	r := newRedlock(b, nodesOf(b, cs), WithTTL(3*time.Second), WithNodeTimeout(time.Second))
	// Grow the clients' connection pools first: their buffers are not a
	// per-lock cost.
	warm := holdMany(b, r, n)
	forceRound(r)
	unlockAll(b, warm)
	settle(r)
	warm = nil
	var ms runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		g0 := idleGoroutines()

		locks := holdMany(b, r, n)
		for _, l := range locks {
			l.Done()
		}
		time.Sleep(3 * time.Second) // a few renewal rounds
		b.ReportMetric(float64(idleGoroutines()), "goroutines")
		b.ReportMetric(float64(idleGoroutines()-g0), "goroutines-added")
		b.ReportMetric(float64(forceRound(r).Milliseconds()), "ms/round")
		// Right after the round nothing is in flight: the heap is the locks.
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(int64(ms.HeapAlloc)-int64(before))/n, "B/lock")
		for _, l := range locks {
			select {
			case <-l.Done():
				b.Fatalf("lock %s lost: %v", l.Key(), context.Cause(l.Context()))
			default:
			}
		}
		unlockAll(b, locks)
		settle(r)
	}
}

// forceRound renews every queued auto-extended lock now, in rounds, and
// returns how long the round took.
func forceRound(r *Redlock) time.Duration {
	s := &r.sched
	start := time.Now()
	s.mu.Lock()
	var rounds []*round
	for len(s.queue) > 0 {
		more, _ := s.takeDueLocked(s.queue[0].due)
		rounds = append(rounds, more...)
	}
	r.bg.Add(len(rounds))
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, rd := range rounds {
		wg.Go(func() { s.renew(rd) })
	}
	wg.Wait()
	return time.Since(start)
}

// TestLostByUntilWithLongNodeTimeout: a renewal round ends at its locks'
// Until even when the node timeout is longer, so the loss is known by then.
func TestLostByUntilWithLongNodeTimeout(t *testing.T) {
	nodes := nodesOf(t, clients(t, masters.Addrs()[:3]))
	fs := wrapAll(nodes)
	r := newRedlock(t, nodes, WithNodeTimeout(2*time.Second))
	l := held(t, r, WithTTL(time.Second), WithAutoExtend())
	for _, f := range fs {
		f.extendDelay.Store(int64(5 * time.Second))
	}
	until := l.Until()
	select {
	case <-l.Done():
	case <-time.After(4 * time.Second):
		t.Fatal("lock not lost 4s after its renewals stopped answering")
	}
	if late := time.Since(until); late > 100*time.Millisecond {
		t.Fatalf("loss signalled %v after Until", late.Round(time.Millisecond))
	}
}

// TestSimSpreadAfterExtend replays the simulation's schedule that found
// the follow-up of a renewal (spreadLocked) queued behind an Extend of the
// same lock to a longer TTL: its extend to the renewal's shorter TTL landed
// last on two masters, the key expired there before the lock's Until, and
// another holder took it. A follow-up is now never sent while an Extend
// runs, and uses the TTL the last Extend set.
func TestSimSpreadAfterExtend(t *testing.T) {
	for range 5 {
		s := genSchedule(84009693132816)
		if res := runSchedule(t, s, false); len(res.violations) > 0 {
			t.Fatalf("seed 84009693132816:\n  %s", strings.Join(res.violations, "\n  "))
		}
	}
}

// TestNoRenewalAfterUnlock: locks unlocked around their renewal leave no
// key behind. Their keys are gone from two of five masters, so each
// renewal that succeeds is followed by one that puts the key back there
// (spreadLocked, lua/extend.lua with its renew flag): it must never reach a
// master after the Unlock's release.
func TestNoRenewalAfterUnlock(t *testing.T) {
	const ttl = 600 * time.Millisecond
	const n = 400
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	base := testKey(t)
	for round := range 5 {
		locks := make([]*Lock, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				l, err := r.TryLock(ctx, fmt.Sprintf("%s:%d:%d", base, round, i), WithTTL(ttl), WithAutoExtend())
				if err != nil {
					t.Error(err)
					return
				}
				locks[i] = l
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for i := range n {
			for _, c := range cs[3:] {
				c.Del(ctx, fmt.Sprintf("%s:%d:%d", base, round, i))
			}
		}
		// Unlock them all around the first renewal's due time.
		due := renewalDue(locks[0].Until(), &config{ttl: ttl, driftFactor: DefaultDriftFactor})
		time.Sleep(time.Until(due) - 2*time.Millisecond)
		for _, l := range locks {
			wg.Go(func() { _ = l.Unlock(ctx) })
			time.Sleep(40 * time.Microsecond)
		}
		wg.Wait()
		settle(r)
		left := 0
		for i := range n {
			left += 5 - count(holders(t, cs, fmt.Sprintf("%s:%d:%d", base, round, i)), "")
		}
		if left > 0 {
			t.Fatalf("round %d: %d keys left on the masters after every lock was unlocked", round, left)
		}
	}
}
