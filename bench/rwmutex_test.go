package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
)

// BenchmarkRWMutexLockUnlock is one uncontended Lock and Unlock per op, of
// the mutex (kind=mutex), an RWMutex's reader (RLock) and its writer
// (Lock), for their time and allocations side by side.
func BenchmarkRWMutexLockUnlock(b *testing.B) {
	for _, n := range []int{1, 5, 9} {
		for _, kind := range []string{"mutex", "reader", "writer"} {
			b.Run(fmt.Sprintf("kind=%s/nodes=%d", kind, n), func(b *testing.B) {
				rl := newRedlock(b, newClients(b, addrs(n))).r
				op := rwOp(rl, kind, newKey(b))
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if err := op(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// rwOp returns one Lock and Unlock of key of the kind named.
func rwOp(rl *redlock.Redlock, kind, key string) func(context.Context) error {
	m := rl.RWMutex(key)
	take := map[string]func(context.Context) (*redlock.Lock, error){
		"mutex":  func(ctx context.Context) (*redlock.Lock, error) { return rl.Lock(ctx, key) },
		"reader": func(ctx context.Context) (*redlock.Lock, error) { return m.RLock(ctx) },
		"writer": func(ctx context.Context) (*redlock.Lock, error) { return m.Lock(ctx) },
	}[kind]
	return func(ctx context.Context) error {
		l, err := take(ctx)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
}

// BenchmarkRWMutexCost times the three side by side, op by op: each pass
// runs the mutex's, the reader's and the writer's Lock+Unlock in turn, so
// that a load that comes and goes weighs on all three alike, and the pass
// after starts one op later: in a fixed order the op run third measured
// 5-10% slower than the same op run second. It reports the reader's and
// the writer's time over the mutex's (the ratio of the sums, median over
// windows of 201 passes, a multiple of the 3 orders).
func BenchmarkRWMutexCost(b *testing.B) {
	for _, n := range []int{1, 5, 9} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			rl := newRedlock(b, newClients(b, addrs(n))).r
			ops := []func(context.Context) error{rwOp(rl, "mutex", newKey(b)), rwOp(rl, "reader", newKey(b)), rwOp(rl, "writer", newKey(b))}
			ctx := context.Background()
			var sums [3]time.Duration
			var reader, writer []float64
			i := 0
			for b.Loop() {
				for j := range ops {
					k := (i + j) % len(ops) // each op first, second and third in turn
					start := time.Now()
					if err := ops[k](ctx); err != nil {
						b.Fatal(err)
					}
					sums[k] += time.Since(start)
				}
				if i++; i%201 == 0 {
					reader = append(reader, float64(sums[1])/float64(sums[0]))
					writer = append(writer, float64(sums[2])/float64(sums[0]))
					sums = [3]time.Duration{}
				}
			}
			if len(reader) == 0 && sums[0] > 0 {
				reader = append(reader, float64(sums[1])/float64(sums[0]))
				writer = append(writer, float64(sums[2])/float64(sums[0]))
			}
			b.ReportMetric(median(reader), "reader/mutex")
			b.ReportMetric(median(writer), "writer/mutex")
		})
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// BenchmarkRWMutexContended is 8 goroutines on one RWMutex as readers,
// then 8 on another as writers, over 5 masters: b.N critical sections of
// csHold each. It reports both rates and their ratio: readers share the
// lock, so theirs overlap; writers' follow one another.
func BenchmarkRWMutexContended(b *testing.B) {
	b.Run("nodes=5", func(b *testing.B) {
		rl := newRedlock(b, newClients(b, addrs(5))).r
		b.ReportAllocs()
		readers := rwContended(b, rl.RWMutex(newKey(b)), true)
		writers := rwContended(b, rl.RWMutex(newKey(b)), false)
		b.ReportMetric(readers, "reader-cs/s")
		b.ReportMetric(writers, "writer-cs/s")
		b.ReportMetric(readers/writers, "readers/writers")
	})
}

// csHold is how long a critical section of BenchmarkRWMutexContended
// lasts: the work a lock guards (an empty one measures only the calls,
// which readers and writers make alike).
const csHold = 2 * time.Millisecond

// rwContended runs b.N critical sections of m by 8 goroutines, as readers
// or as writers, and returns their rate; writers must hold alone.
func rwContended(b *testing.B, m *redlock.RWMutex, read bool) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		left    atomic.Int64
		inside  atomic.Int32
		wg      sync.WaitGroup
		errOnce sync.Once
		fail    error
	)
	left.Store(int64(b.N))
	start := time.Now()
	for range contenders {
		wg.Go(func() {
			for left.Load() > 0 {
				var l *redlock.Lock
				var err error
				if read {
					l, err = m.RLock(ctx)
				} else {
					l, err = m.Lock(ctx)
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				if in := inside.Add(1); !read && in != 1 {
					errOnce.Do(func() { fail = fmt.Errorf("two writers at once") })
				}
				left.Add(-1)
				time.Sleep(csHold)
				inside.Add(-1)
				if err := l.Unlock(context.Background()); err != nil {
					errOnce.Do(func() { fail = err })
				}
				if left.Load() <= 0 {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if fail != nil {
		b.Fatal(fail)
	}
	return float64(b.N) / elapsed.Seconds()
}

// BenchmarkRWMutexMaster is BenchmarkRWMutexLockUnlock on one master,
// timed by the master: the µs its INFO commandstats count for the
// commands the client sends (EVAL, with the calls its scripts make, and
// SET), per op. It shows what the scripts cost apart from the client and
// the round trips.
func BenchmarkRWMutexMaster(b *testing.B) {
	for _, kind := range []string{"mutex", "reader", "writer"} {
		b.Run(fmt.Sprintf("kind=%s/nodes=1", kind), func(b *testing.B) {
			cs := newClients(b, addrs(1))
			op := rwOp(newRedlock(b, cs).r, kind, newKey(b))
			ctx := context.Background()
			before := masterUsec(b, cs[0])
			for b.Loop() {
				if err := op(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((masterUsec(b, cs[0])-before)/float64(b.N), "master-µs/op")
		})
	}
}

// masterUsec is the µs c's master has spent on EVAL and SET since it
// started (INFO commandstats).
func masterUsec(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var us float64
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || name != "cmdstat_eval" && name != "cmdstat_set" {
			continue
		}
		for kv := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				us += n
			}
		}
	}
	return us
}
