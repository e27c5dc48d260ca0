package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/faultproxy"
)

// nodeCounts are the master counts of the latency benchmarks.
var nodeCounts = []int{1, 3, 5, 7, 9}

// contenders is the goroutine count of BenchmarkContended; parallelKeys the
// one of BenchmarkDistinctKeys.
const (
	contenders   = 8
	parallelKeys = 64
)

func addrs(n int) []string { return masters.Addrs()[:n] }

// BenchmarkLockUnlock is one uncontended Lock and Unlock of a key, per op:
// redlock (lib=redlock, go-redis clients through NewNode) and redsync at
// every node count, with the wire floor (lib=wire) and the go-redis floor
// (lib=floor) at each; redlock over rueidis clients (lib=rueidis, through
// redlockrueidis.NewNode) at 1, 5 and 9; redislock on one master.
func BenchmarkLockUnlock(b *testing.B) {
	for _, n := range nodeCounts {
		b.Run(fmt.Sprintf("lib=redlock/nodes=%d", n), func(b *testing.B) {
			lockUnlock(b, newRedlock(b, newClients(b, addrs(n))))
		})
		if n == 1 || n == 5 || n == 9 {
			b.Run(fmt.Sprintf("lib=rueidis/nodes=%d", n), func(b *testing.B) {
				lockUnlock(b, newRueidisRedlock(b, addrs(n)))
			})
		}
		b.Run(fmt.Sprintf("lib=redsync/nodes=%d", n), func(b *testing.B) {
			lockUnlock(b, newRedsync(newClients(b, addrs(n))))
		})
		b.Run(fmt.Sprintf("lib=wire/nodes=%d", n), func(b *testing.B) { benchWire(b, n) })
		b.Run(fmt.Sprintf("lib=floor/nodes=%d", n), func(b *testing.B) { benchFloor(b, n) })
	}
	b.Run("lib=redislock/nodes=1", func(b *testing.B) {
		lockUnlock(b, newRedislock(newClients(b, addrs(1))[0]))
	})
}

// BenchmarkLockUnlockFenced is BenchmarkLockUnlock with fencing tokens: the
// fenced acquire script and the second round. The peers have no fencing.
func BenchmarkLockUnlockFenced(b *testing.B) {
	for _, n := range []int{1, 5, 9} {
		b.Run(fmt.Sprintf("lib=redlock/nodes=%d", n), func(b *testing.B) {
			lockUnlock(b, newRedlock(b, newClients(b, addrs(n)), redlock.WithFencing()))
		})
	}
}

func lockUnlock(b *testing.B, l lib) { lockUnlockKey(b, l, newKey(b)) }

func lockUnlockKey(b *testing.B, l lib, key string) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lockUnlockOnce(ctx, b, l, key)
	}
}

// lockUnlockOnce is one Lock and Unlock of key by l; b fails on an error.
func lockUnlockOnce(ctx context.Context, b *testing.B, l lib, key string) {
	h, err := l.lock(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := h.unlock(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchFloor is the least a go-redis client can do over n masters: SET NX
// PX and a Lua compare-and-delete, with a fresh 128-bit value per op; over
// more than one master each round fans out on one goroutine per master and
// waits for every reply (no quorum, no timeouts, no order kept per master).
func benchFloor(b *testing.B, n int) {
	cs := newClients(b, addrs(n))
	release := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	ctx := context.Background()
	key := newKey(b)
	keys := []string{key}
	set := func(c *redis.Client, v string) {
		if ok, err := c.SetArgs(ctx, key, v, redis.SetArgs{Mode: "NX", TTL: ttl}).Result(); err != nil || ok != "OK" {
			b.Errorf("SET NX: %q, %v", ok, err)
		}
	}
	del := func(c *redis.Client, v string) {
		if n, err := release.Run(ctx, c, keys, v).Int(); err != nil || n != 1 {
			b.Errorf("release: %d, %v", n, err)
		}
	}
	round := func(f func(*redis.Client, string), v string) {
		if n == 1 {
			f(cs[0], v)
			return
		}
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(func() { f(c, v) })
		}
		wg.Wait()
	}
	b.ReportAllocs()
	for b.Loop() {
		var raw [16]byte
		crand.Read(raw[:])
		v := base64.RawURLEncoding.EncodeToString(raw[:])
		round(set, v)
		round(del, v)
		if b.Failed() {
			b.FailNow()
		}
	}
}

// BenchmarkTryLockHeld is one TryLock of a key another holder has: the fast
// failure path, with its rollback.
func BenchmarkTryLockHeld(b *testing.B) {
	run := func(b *testing.B, l lib) {
		ctx := context.Background()
		key := newKey(b)
		h, err := l.lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.tryLock(ctx, key); err == nil {
				b.Fatal("TryLock of a held key succeeded")
			}
		}
		b.StopTimer()
		if err := h.unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("lib=redlock/nodes=5", func(b *testing.B) { run(b, newRedlock(b, newClients(b, addrs(5)))) })
	b.Run("lib=redsync/nodes=5", func(b *testing.B) { run(b, newRedsync(newClients(b, addrs(5)))) })
	b.Run("lib=redislock/nodes=1", func(b *testing.B) { run(b, newRedislock(newClients(b, addrs(1))[0])) })
}

// BenchmarkExtend is one Extend of a held lock.
func BenchmarkExtend(b *testing.B) {
	run := func(b *testing.B, l lib) {
		ctx := context.Background()
		h, err := l.lock(ctx, newKey(b))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := h.extend(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if err := h.unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("lib=redlock/nodes=5", func(b *testing.B) { run(b, newRedlock(b, newClients(b, addrs(5)))) })
	b.Run("lib=redsync/nodes=5", func(b *testing.B) { run(b, newRedsync(newClients(b, addrs(5)))) })
	b.Run("lib=redislock/nodes=1", func(b *testing.B) { run(b, newRedislock(newClients(b, addrs(1))[0])) })
}

// BenchmarkContended is 8 goroutines taking turns on one key over 5
// masters, each with Lock (waiting the library's own way), an empty critical
// section, and Unlock. An op is one critical section. It reports critical
// sections per second and the largest share of them one goroutine won.
func BenchmarkContended(b *testing.B) {
	b.Run("lib=redlock/nodes=5", func(b *testing.B) { contended(b, newRedlock(b, newClients(b, addrs(5)))) })
	b.Run("lib=redsync/nodes=5", func(b *testing.B) { contended(b, newRedsync(newClients(b, addrs(5)))) })
}

func contended(b *testing.B, l lib) {
	key := newKey(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		left    atomic.Int64 // critical sections still to run
		inside  atomic.Int32 // holders in the critical section: must stay ≤ 1
		wins    [contenders]int64
		wg      sync.WaitGroup
		errOnce sync.Once
		fail    error
	)
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for g := range contenders {
		wg.Go(func() {
			for left.Load() > 0 {
				h, err := l.lock(ctx, key)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue // redsync gives up after 32 tries; try again
				}
				if inside.Add(1) != 1 {
					errOnce.Do(func() { fail = fmt.Errorf("two holders at once") })
				}
				if left.Add(-1) >= 0 {
					wins[g]++
				}
				inside.Add(-1)
				if err := h.unlock(context.Background()); err != nil {
					errOnce.Do(func() { fail = err })
				}
				if left.Load() <= 0 {
					cancel() // wake the waiters
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if fail != nil {
		b.Fatal(fail)
	}
	var top int64
	for _, w := range wins {
		top = max(top, w)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cs/s")
	b.ReportMetric(100*float64(top)/float64(b.N), "maxshare-%")
}

// BenchmarkDistinctKeys is 64 goroutines, each locking and unlocking a key of
// its own over 5 masters. It reports locks per second, and the CPU time per
// lock of this process and of the masters (they share this machine's cores,
// so together they bound the throughput). lib=rueidis is redlock over
// rueidis clients.
func BenchmarkDistinctKeys(b *testing.B) {
	b.Run("lib=redlock/nodes=5", func(b *testing.B) { distinct(b, newRedlock(b, newClients(b, addrs(5))), addrs(5)) })
	b.Run("lib=rueidis/nodes=5", func(b *testing.B) { distinct(b, newRueidisRedlock(b, addrs(5)), addrs(5)) })
	b.Run("lib=redsync/nodes=5", func(b *testing.B) { distinct(b, newRedsync(newClients(b, addrs(5))), addrs(5)) })
}

func distinct(b *testing.B, l lib, masters []string) {
	ctx := context.Background()
	cpu := newCPUMeter(b, masters)
	prefix := newKey(b)
	var seq atomic.Int64
	b.SetParallelism((parallelKeys + 1) / max(1, runtimeProcs()))
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("%s:%d", prefix, seq.Add(1))
		for pb.Next() {
			h, err := l.lock(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := h.unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "locks/s")
	cpu.report(b)
}

// BenchmarkSlowMaster is BenchmarkLockUnlock over 5 masters, one of which is
// behind internal/faultproxy with 10 ms added to each round trip; every
// library goes through the same proxy.
func BenchmarkSlowMaster(b *testing.B) {
	run := func(b *testing.B, mk func([]*redis.Client) lib) {
		p, err := faultproxy.New(masters.Addrs()[0])
		if err != nil {
			b.Fatal(err)
		}
		p.SetLatency(10 * time.Millisecond)
		cs := newClients(b, append([]string{p.Addr()}, masters.Addrs()[1:5]...))
		b.Cleanup(func() { p.Close() }) // after the library's Close: cleanups run last-in first-out
		lockUnlock(b, mk(cs))
	}
	b.Run("lib=redlock/nodes=5", func(b *testing.B) {
		run(b, func(cs []*redis.Client) lib { return newRedlock(b, cs) })
	})
	b.Run("lib=redsync/nodes=5", func(b *testing.B) {
		run(b, func(cs []*redis.Client) lib { return newRedsync(cs) })
	})
}

// BenchmarkLockUnlockOwned is BenchmarkLockUnlock for a lock taken with an
// owner (redlock.WithOwner): its first hold, the owned-hold script instead of
// SET NX PX. The peers have no reentrancy across a quorum.
func BenchmarkLockUnlockOwned(b *testing.B) {
	for _, n := range []int{1, 5, 9} {
		b.Run(fmt.Sprintf("lib=redlock/nodes=%d", n), func(b *testing.B) {
			lockUnlock(b, newRedlock(b, newClients(b, addrs(n))).owned("bench"))
		})
	}
}

// BenchmarkNestedEnter is one nested Lock and Unlock by the owner of a hold
// that stays held: the cost of re-entering.
func BenchmarkNestedEnter(b *testing.B) {
	for _, n := range []int{1, 5, 9} {
		b.Run(fmt.Sprintf("lib=redlock/nodes=%d", n), func(b *testing.B) {
			l := newRedlock(b, newClients(b, addrs(n))).owned("bench")
			ctx := context.Background()
			key := newKey(b)
			outer, err := l.lock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			defer outer.unlock(ctx)
			lockUnlockKey(b, l, key)
		})
	}
}
