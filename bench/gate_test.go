package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// BenchmarkLockUnlockGated is BenchmarkLockUnlock with the restart gate on
// (WithRestartGate(ttl)): the gate's question goes in the same pipeline
// before every vote. Compare with BenchmarkLockUnlock at the same N for the
// gate's cost. It first waits until the masters have been up the gate.
func BenchmarkLockUnlockGated(b *testing.B) {
	waitUp(b, masters.Addrs(), ttl)
	for _, n := range []int{1, 5, 9} {
		b.Run(fmt.Sprintf("lib=redlock/nodes=%d", n), func(b *testing.B) {
			lockUnlock(b, newRedlock(b, newClients(b, addrs(n)), redlock.WithRestartGate(ttl)))
		})
	}
}

// BenchmarkGateCost measures the restart gate's cost as a ratio from pairs:
// every op is one ungated and one gated Lock+Unlock (two Redlocks over the
// same masters, clients and keys of their own), the order alternating from
// op to op, each timed alone. It reports gated÷ungated, the ratio of the two
// sums, and each one's median time per Lock+Unlock. Two sequential
// benchmarks see the machine in different moments (their per-pass ratios
// here spread from 0.9 to 1.4); the pair sees it in the same ones, and its
// per-pass ratios spread about 0.1. With the gate on both sides it reads
// 1.00 (an A/A check: BenchmarkGateCost/lib=redlock/nodes=1/gate=both).
func BenchmarkGateCost(b *testing.B) {
	waitUp(b, masters.Addrs(), ttl)
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprintf("lib=redlock/nodes=%d", n), func(b *testing.B) {
			gateCost(b, newRedlock(b, newClients(b, addrs(n))),
				newRedlock(b, newClients(b, addrs(n)), redlock.WithRestartGate(ttl)))
		})
	}
	b.Run("lib=redlock/nodes=1/gate=both", func(b *testing.B) {
		gateCost(b, newRedlock(b, newClients(b, addrs(1)), redlock.WithRestartGate(ttl)),
			newRedlock(b, newClients(b, addrs(1)), redlock.WithRestartGate(ttl)))
	})
}

// gateCost times pairs of Lock+Unlock, one by base and one by gated, per op.
func gateCost(b *testing.B, base, gated lib) {
	ctx := context.Background()
	kb, kg := newKey(b), newKey(b)
	var tb, tg []time.Duration
	one := func(l lib, key string) time.Duration {
		start := time.Now()
		lockUnlockOnce(ctx, b, l, key)
		return time.Since(start)
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			tb = append(tb, one(base, kb))
			tg = append(tg, one(gated, kg))
		} else {
			tg = append(tg, one(gated, kg))
			tb = append(tb, one(base, kb))
		}
	}
	var sb, sg time.Duration
	for i := range tb {
		sb += tb[i]
		sg += tg[i]
	}
	b.ReportMetric(float64(sg)/float64(sb), "gated/ungated")
	b.ReportMetric(float64(medianOf(tb).Nanoseconds())/1e3, "ungated-µs")
	b.ReportMetric(float64(medianOf(tg).Nanoseconds())/1e3, "gated-µs")
}

// medianOf is the median of ds (which it sorts).
func medianOf(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// waitUp waits until every master at addrs has been up for d.
func waitUp(b *testing.B, addrs []string, d time.Duration) {
	b.Helper()
	for _, a := range addrs {
		if err := redistest.WaitUp(context.Background(), a, d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlockReplicaConfirm is Lock+Unlock over 3 masters that each
// have one replica, without and with WithReplicaConfirm(1) (a WAIT 1 after
// the votes of each batch a master's lane sends, in the same pipeline): one
// goroutine, and keys=64 goroutines on keys of their own as in
// BenchmarkDistinctKeys, whose requests the lanes batch. It starts the 6
// servers itself.
func BenchmarkLockUnlockReplicaConfirm(b *testing.B) {
	cs := make([]*redis.Client, 3)
	primaries := make([]string, len(cs))
	for i := range cs {
		p := redistest.StartServerT(b, redistest.Options{Args: []string{"--save", ""}})
		primaries[i] = p.Addr()
		host, port, _ := net.SplitHostPort(p.Addr())
		redistest.StartServerT(b, redistest.Options{Args: []string{"--save", "", "--replicaof", host, port}})
		// MaxRetries -1: a client that retries a failed pipeline does
		// not promise one connection per batch, and WithReplicaConfirm
		// refuses it (issue 39).
		cs[i] = redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		b.Cleanup(func() { cs[i].Close() })
		for cs[i].Do(context.Background(), "wait", 1, 100).Val() != int64(1) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	b.Run("lib=redlock/nodes=3/confirm=0", func(b *testing.B) { lockUnlock(b, newRedlock(b, cs)) })
	b.Run("lib=redlock/nodes=3/confirm=1", func(b *testing.B) {
		lockUnlock(b, newRedlock(b, cs, redlock.WithReplicaConfirm(1)))
	})
	b.Run("lib=redlock/nodes=3/confirm=0/keys=64", func(b *testing.B) {
		distinct(b, newRedlock(b, cs), primaries)
	})
	b.Run("lib=redlock/nodes=3/confirm=1/keys=64", func(b *testing.B) {
		distinct(b, newRedlock(b, cs, redlock.WithReplicaConfirm(1)), primaries)
	})
}
