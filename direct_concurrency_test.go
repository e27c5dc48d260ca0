package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestDirectNodeConcurrent: many goroutines share one DirectNode's
// connection, half of them reading their own replies and half through the
// reader goroutine, and each gets the reply to its own request: every call
// below has one right answer, which a reply meant for another goroutine (a
// refusal for a success, an integer for OK, another key's token) would not
// give.
func TestDirectNodeConcurrent(t *testing.T) {
	const goroutines, rounds = 64, 15
	d := newDirect(t, &redis.Options{Addr: masters.Addrs()[0], ReadTimeout: 10 * time.Second})
	base := testKey(t)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			fenceKey := fmt.Sprintf("%s:fenced:%d", base, g)
			var last uint64
			for i := range rounds {
				ctx := callers[(g+i)%2].ctx(t)
				key := fmt.Sprintf("%s:%d:%d", base, g, i)
				mine, other := fmt.Sprintf("mine-%d-%d", g, i), fmt.Sprintf("other-%d-%d", g, i)
				fail := func(what string, got any, err error, want any) {
					t.Errorf("goroutine %d round %d (%s): %s = %v, %v; want %v", g, i, callers[(g+i)%2].name, what, got, err, want)
				}
				flag := func(what string, ok bool, err error, want bool) {
					if ok != want || err != nil {
						fail(what, ok, err, want)
					}
				}
				ok, err := d.Acquire(ctx, key, mine, time.Minute)
				flag("Acquire", ok, err, true)
				ok, err = d.Acquire(ctx, key, other, time.Minute)
				flag("Acquire by another", ok, err, false)
				ok, err = d.Extend(ctx, key, other, time.Minute)
				flag("Extend by another", ok, err, false)
				ok, err = d.Extend(ctx, key, mine, time.Minute)
				flag("Extend", ok, err, true)
				token, err := d.AcquireFenced(ctx, fenceKey, mine, time.Minute)
				if err != nil || token <= last {
					fail("AcquireFenced", token, err, fmt.Sprintf("a token above %d", last))
				}
				last = token
				ok, err = d.RaiseFence(ctx, fenceKey, mine, token+1)
				flag("RaiseFence", ok, err, true)
				last = token + 1
				ok, err = d.RaiseFence(ctx, fenceKey, other, token+5)
				flag("RaiseFence by another", ok, err, false)
				oks, errs := d.ExtendBatch(ctx, []ExtendRequest{{key, mine, time.Minute}, {key, other, time.Minute}, {fenceKey, mine, time.Minute}})
				if !oks[0] || oks[1] || !oks[2] || errors.Join(errs...) != nil {
					fail("ExtendBatch", oks, errors.Join(errs...), "[true false true]")
				}
				ok, err = d.Release(ctx, fenceKey, mine)
				flag("Release fenced", ok, err, true)
				ok, err = d.Release(ctx, key, other)
				flag("Release by another", ok, err, false)
				ok, err = d.Release(ctx, key, mine)
				flag("Release", ok, err, true)
				ok, err = d.Release(ctx, key, mine)
				flag("Release again", ok, err, false)
			}
		})
	}
	bounded(t, 30*time.Second, "the goroutines' calls", wg.Wait)
}

// TestDirectNodeConcurrentLocks: 64 goroutines lock distinct keys and one
// shared key through the same three DirectNodes. While a goroutine holds a
// lock, a quorum of masters holds its value; no two holders of the shared
// key overlap. With one master, the goroutine that locks reads its own
// reply while others queue behind it: every reply must still be read, and
// Close must not wait for one that nobody reads.
func TestDirectNodeConcurrentLocks(t *testing.T) {
	const goroutines = 64
	cs := clients(t, masters.Addrs()[:3])
	check := func(r *Redlock, key string, l *Lock) error {
		var vs []string
		for _, c := range cs[:len(r.Nodes())] {
			v, err := c.Get(context.Background(), key).Result()
			if err != nil && err != redis.Nil {
				return err
			}
			vs = append(vs, v)
		}
		if n := count(vs, l.Value()); n < r.Quorum() {
			return fmt.Errorf("masters hold %q while %q holds %s; want a quorum of %d", vs, l.Value(), key, r.Quorum())
		}
		return nil
	}

	for _, n := range []int{3, 1} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			nodes := make([]Node, n)
			for i := range nodes {
				nodes[i] = newDirect(t, &redis.Options{Addr: masters.Addrs()[i]})
			}
			r, err := New(nodes, WithTTL(time.Minute), WithNodeTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			shared := testKey(t)
			var inside atomic.Int32
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					ctx := within(t, 30*time.Second)
					for i := range 8 {
						key := fmt.Sprintf("%s:%d:%d", shared, g, i)
						if i%4 == 3 {
							key = shared
						}
						l, err := r.Lock(ctx, key)
						if err != nil {
							t.Errorf("goroutine %d: Lock %s: %v", g, key, err)
							return
						}
						if key == shared && inside.Add(1) != 1 {
							t.Errorf("goroutine %d holds %s together with another", g, key)
						}
						if err := check(r, key, l); err != nil {
							t.Errorf("goroutine %d: %v", g, err)
						}
						if err := l.Extend(ctx, time.Minute); err != nil {
							t.Errorf("goroutine %d: Extend %s: %v", g, key, err)
						}
						if time.Now().After(l.Until()) {
							t.Errorf("goroutine %d: the lock on %s expired in the test; its TTL is too short for this machine", g, key)
						}
						if key == shared {
							inside.Add(-1)
						}
						if err := l.Unlock(ctx); err != nil {
							t.Errorf("goroutine %d: Unlock %s: %v", g, key, err)
						}
					}
				})
			}
			bounded(t, 30*time.Second, "the goroutines' locks", wg.Wait)
			if took := bounded(t, 10*time.Second, "Close", func() { r.Close() }); took > 2*time.Second {
				t.Errorf("Close took %v", took)
			}
		})
	}
}
