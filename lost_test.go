package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// defaultClients are go-redis clients made the way most users make them:
// go-redis's defaults, so no ContextTimeoutEnabled (a request to a paused
// master waits for the 3 s ReadTimeout, whatever its context says) and
// three retries.
func defaultClients(t *testing.T, addrs []string) []*redis.Client {
	t.Helper()
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a})
		c := cs[i]
		if err := c.Ping(context.Background()).Err(); err != nil { // connected before any pause
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	return cs
}

// pauseMajority SIGSTOPs all but the first master until the test ends.
func pauseMajority(t *testing.T, c *redistest.Cluster) {
	t.Helper()
	for _, s := range c.Servers[1:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Resume() })
	}
}

// TestLostSignalWithDefaultClient: with auto-extend and a majority of
// masters frozen, Done closes by Until whatever the go-redis client does
// with deadlines; and Unlock and Extend return when their context ends,
// even while a renewal waits on a frozen master.
func TestLostSignalWithDefaultClient(t *testing.T) {
	const ttl = time.Second
	t.Run("Done", func(t *testing.T) {
		c := redistest.StartT(t, 3, redistest.Options{})
		r := newRedlock(t, nodesOf(t, defaultClients(t, c.Addrs())), WithNodeTimeout(100*time.Millisecond))
		l, err := r.Lock(context.Background(), testKey(t), WithTTL(ttl), WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		pauseMajority(t, c)
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed 10s after a majority froze")
		}
		if late := time.Since(l.Until()); late > 300*time.Millisecond {
			t.Fatalf("Done closed %v after Until; it must close by Until", late.Round(time.Millisecond))
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
	})
	for _, call := range []string{"Unlock", "Extend"} {
		t.Run(call, func(t *testing.T) {
			c := redistest.StartT(t, 3, redistest.Options{})
			r := newRedlock(t, nodesOf(t, defaultClients(t, c.Addrs())), WithNodeTimeout(100*time.Millisecond))
			l, err := r.Lock(context.Background(), testKey(t), WithTTL(ttl), WithAutoExtend())
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // every SET answered
			pauseMajority(t, c)
			time.Sleep(ttl/3 + 50*time.Millisecond) // a renewal is now waiting on the frozen masters
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			if call == "Unlock" {
				err = l.Unlock(ctx)
			} else {
				err = l.Extend(ctx, ttl)
			}
			if took := time.Since(start); took > 700*time.Millisecond {
				t.Errorf("%s with a 200ms context took %v (err %v)", call, took.Round(time.Millisecond), err)
			}
			if err == nil {
				t.Errorf("%s succeeded with a majority frozen", call)
			}
		})
	}
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
