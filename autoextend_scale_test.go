package redlock

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	var first atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for l := range next {
				if l == nil {
					continue
				}
				if err := l.Unlock(context.Background()); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
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
		tb.Errorf("%d of %d Unlocks failed, the first with: %v", n, len(locks), first.Load())
	}
}

// TestAutoExtendScales: goroutines do not grow with the number of held
// locks, and every lock keeps being renewed.
func TestAutoExtendScales(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs), WithTTL(time.Second), WithNodeTimeout(300*time.Millisecond))

	few := holdMany(t, r, 10)
	gFew := idleGoroutines()
	many := holdMany(t, r, n)
	gMany := idleGoroutines()
	t.Logf("goroutines: %d with 10 locks, %d with %d", gFew, gMany, n+10)
	if gMany > gFew+8 {
		t.Errorf("goroutines grew from %d to %d with %d more locks", gFew, gMany, n)
	}

	time.Sleep(1500 * time.Millisecond) // past the TTL: only renewals keep the keys
	all := append(few, many...)
	fresh := make([]int, len(all)) // masters where the key was renewed lately
	for _, c := range cs {
		pipe := c.Pipeline()
		cmds := make([]*redis.DurationCmd, len(all))
		for j, l := range all {
			cmds[j] = pipe.PTTL(context.Background(), l.Key())
		}
		pipe.Exec(context.Background())
		for j, cmd := range cmds {
			if cmd.Val() >= 300*time.Millisecond { // renewed within the last 700 ms
				fresh[j]++
			}
		}
	}
	stale := 0
	for _, n := range fresh {
		if n < r.Quorum() { // a renewal needs a quorum, not every master
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d keys not renewed on a quorum of masters", stale, len(all))
	}
	for _, l := range all {
		select {
		case <-l.Done():
			t.Fatalf("lock %s lost: %v", l.Key(), context.Cause(l.Context()))
		default:
		}
	}
	unlockAll(t, all)
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
