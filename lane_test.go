package redlock

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestLaneDropsExpiredRequests: a request whose phase's deadline passed
// while it waited in its lane is not sent: the master never sees an acquire
// its caller had already counted as failed.
func TestLaneDropsExpiredRequests(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	slow := wrapAll(nodes)[0]
	slow.acquireDelay.Store(int64(300 * time.Millisecond))
	r := newRedlock(t, nodes)
	ctx := context.Background()
	var wg sync.WaitGroup
	// Master 0's lane: a slow acquire, then k2's with a 50 ms deadline
	// (decided on masters 1 and 2), then another slow one.
	wg.Go(func() { r.TryLock(ctx, testKey(t), WithNodeTimeout(2*time.Second)) })
	time.Sleep(20 * time.Millisecond)
	k2 := testKey(t)
	l2, err := r.TryLock(ctx, k2, WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { r.TryLock(ctx, testKey(t), WithNodeTimeout(2*time.Second)) })
	wg.Wait()
	settle(r)
	if vs := holders(t, cs, k2); vs[0] == l2.Value() {
		t.Fatalf("master 0 got an acquire whose deadline had passed while it waited in the lane: masters hold %q", vs)
	}
}
