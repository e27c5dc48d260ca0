package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// semPermits is the limit of the Semaphore benchmarks.
const semPermits = 4

// BenchmarkSemaphoreCost is a permit's Acquire+Unlock against the mutex's
// Lock+Unlock, as a ratio from pairs (as BenchmarkGateCost: each op one of
// each, the order alternating, each timed alone; the ratio of the sums),
// over 1, 5 and 9 masters, with every permit free (taken=0) and with all
// but one held by another client (taken=3: the call must find the last
// one). It reports permit/mutex and each one's median µs.
func BenchmarkSemaphoreCost(b *testing.B) {
	for _, n := range []int{1, 5, 9} {
		for _, taken := range []int{0, semPermits - 1} {
			b.Run(fmt.Sprintf("lib=redlock/nodes=%d/taken=%d", n, taken), func(b *testing.B) {
				mutex := newRedlock(b, newClients(b, addrs(n)))
				name := newKey(b)
				sem := newRedlock(b, newClients(b, addrs(n))).r.Semaphore(name, semPermits)
				hold(b, newRedlock(b, newClients(b, addrs(n))).r, name, taken)
				ctx := context.Background()
				key := newKey(b)
				var tm, ts []time.Duration
				mut := func() time.Duration {
					start := time.Now()
					lockUnlockOnce(ctx, b, mutex, key)
					return time.Since(start)
				}
				permit := func() time.Duration {
					start := time.Now()
					acquireUnlockOnce(ctx, b, sem)
					return time.Since(start)
				}
				for i := 0; b.Loop(); i++ {
					if i%2 == 0 {
						tm = append(tm, mut())
						ts = append(ts, permit())
					} else {
						ts = append(ts, permit())
						tm = append(tm, mut())
					}
				}
				var sm, ss time.Duration
				for i := range tm {
					sm += tm[i]
					ss += ts[i]
				}
				b.ReportMetric(float64(ss)/float64(sm), "permit/mutex")
				b.ReportMetric(float64(medianOf(tm).Nanoseconds())/1e3, "mutex-µs")
				b.ReportMetric(float64(medianOf(ts).Nanoseconds())/1e3, "permit-µs")
			})
		}
	}
}

// BenchmarkAcquireUnlock is one uncontended Acquire+Unlock of a permit per
// op, for its allocations against BenchmarkLockUnlock's (the same masters
// and options).
func BenchmarkAcquireUnlock(b *testing.B) {
	for _, n := range []int{1, 5, 9} {
		for _, taken := range []int{0, semPermits - 1} {
			b.Run(fmt.Sprintf("lib=redlock/nodes=%d/taken=%d", n, taken), func(b *testing.B) {
				name := newKey(b)
				sem := newRedlock(b, newClients(b, addrs(n))).r.Semaphore(name, semPermits)
				hold(b, newRedlock(b, newClients(b, addrs(n))).r, name, taken)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					acquireUnlockOnce(ctx, b, sem)
				}
			})
		}
	}
}

// hold takes taken permits of the semaphore name through other (another client), kept
// until the benchmark ends.
func hold(b *testing.B, other *redlock.Redlock, name string, taken int) {
	b.Helper()
	for range taken {
		l, err := other.Semaphore(name, semPermits).TryAcquire(context.Background(), redlock.WithAutoExtend())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Unlock(context.Background()) })
	}
}

func acquireUnlockOnce(ctx context.Context, b *testing.B, sem *redlock.Semaphore) {
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSemaphoreContended is 8 clients (a Redlock each) cycling
// through 4 permits over 5 masters: Acquire, hold for 10 ms (or 50 ms),
// Unlock, again. It reports the permits in use on average (the holds' total time
// over the elapsed time; 4 is the most), permits taken per second, and
// the scripts each master ran per permit taken (INFO commandstats: the
// votes, releases, rollbacks and registrations a permit costs).
func BenchmarkSemaphoreContended(b *testing.B) {
	for _, semHold := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond} {
		semContended(b, semHold)
	}
}

func semContended(b *testing.B, semHold time.Duration) {
	const clients = 8
	b.Run(fmt.Sprintf("lib=redlock/nodes=5/clients=%d/permits=%d/hold=%v", clients, semPermits, semHold), func(b *testing.B) {
		name := newKey(b)
		var left, held atomic.Int64
		var inside, most atomic.Int32
		left.Store(int64(b.N))
		sems := make([]*redlock.Semaphore, clients)
		for i := range sems {
			sems[i] = newRedlock(b, newClients(b, addrs(5))).r.Semaphore(name, semPermits)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stats := newClients(b, addrs(5))
		evals0, err := redistest.Calls(ctx, stats, "eval")
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for _, sem := range sems {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					l, err := sem.Acquire(ctx)
					if err != nil {
						if ctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					in := inside.Add(1)
					for m := most.Load(); in > m && !most.CompareAndSwap(m, in); m = most.Load() {
					}
					t0 := time.Now()
					time.Sleep(semHold)
					held.Add(int64(time.Since(t0)))
					inside.Add(-1)
					_ = l.Unlock(context.Background())
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		if m := most.Load(); m > semPermits {
			b.Fatalf("%d holders of %d permits at once", m, semPermits)
		}
		evals1, err := redistest.Calls(context.Background(), stats, "eval")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(held.Load())/float64(elapsed), "in-use")
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "permits/s")
		b.ReportMetric(float64(evals1-evals0)/float64(b.N)/5, "scripts/permit/master")
	})
}
