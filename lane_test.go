package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultproxy"
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

// TestLaneCallerRunsWithinDeadline: at one master the caller sends its own
// request (lane.pushRun) only through a client that keeps context
// deadlines; either way it returns by the node timeout when the master does
// not answer, and the lane keeps working once it answers again.
func TestLaneCallerRunsWithinDeadline(t *testing.T) {
	for _, keeps := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", keeps), func(t *testing.T) {
			px, err := faultproxy.New(masters.Addrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, DialerRetries: 1,
				DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: keeps})
			t.Cleanup(func() { c.Close() })
			r := newRedlock(t, []Node{NewNode(c)}, WithNodeTimeout(50*time.Millisecond))
			if got := r.lanes[0].callerRuns; got != keeps {
				t.Fatalf("callerRuns = %v, want %v", got, keeps)
			}
			ctx := context.Background()
			l, err := r.Lock(ctx, testKey(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			px.Blackhole()
			start := time.Now()
			if _, err := r.TryLock(ctx, testKey(t)); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("TryLock on a silent master: %v, want ErrNotObtained", err)
			}
			if d := time.Since(start); d > 300*time.Millisecond {
				t.Fatalf("TryLock on a silent master returned after %v, node timeout 50ms", d)
			}
			px.Heal()
			settle(r)
			l, err = r.Lock(ctx, testKey(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
