package bench

import (
	"context"
	"fmt"
	"net"
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
	waitUp(b, masters.Addrs(), ttl+time.Second)
	for _, n := range []int{1, 5, 9} {
		b.Run(fmt.Sprintf("lib=redlock/nodes=%d", n), func(b *testing.B) {
			lockUnlock(b, newRedlock(b, newClients(b, addrs(n)), redlock.WithRestartGate(ttl)))
		})
	}
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
		cs[i] = newClients(b, []string{p.Addr()})[0]
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
