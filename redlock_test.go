package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

// TestQuorumEverySubset walks every assignment of up / down / taken to the
// masters for N = 1, 3, 5 and checks the quorum rule: the lock is obtained
// exactly when at least N/2+1 masters are up and free, and a failed attempt
// leaves our value on no master.
func TestQuorumEverySubset(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			up := clients(t, masters().Addrs()[:n])
			// Masters whose process was stopped: the address refuses connections.
			dead := redistest.StartT(t, n, redistest.Options{})
			deadAddrs := dead.Addrs()
			if err := dead.Stop(); err != nil {
				t.Fatal(err)
			}
			down := clients(t, deadAddrs)

			states := 1
			for range n {
				states *= 3
			}
			for s := range states {
				const isUp, isDown, isTaken = 0, 1, 2
				key := testKey(t)
				nodes := make([]redlock.Node, n)
				free, code := 0, s
				desc := ""
				for i := range n {
					st := code % 3
					code /= 3
					switch st {
					case isUp:
						nodes[i] = redlock.NewNode(up[i])
						free++
						desc += "u"
					case isDown:
						nodes[i] = redlock.NewNode(down[i])
						desc += "d"
					case isTaken:
						nodes[i] = redlock.NewNode(up[i])
						if err := up[i].Set(context.Background(), key, foreign, time.Minute).Err(); err != nil {
							t.Fatal(err)
						}
						desc += "t"
					}
				}
				r, err := redlock.New(nodes, redlock.WithTTL(5*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				l, err := r.TryLock(context.Background(), key)
				want := free >= n/2+1
				if got := err == nil; got != want {
					t.Fatalf("%s: obtained=%v (err %v), want %v", desc, got, err, want)
				}
				if want {
					settle(r) // TryLock returns at the quorum; the last SETs may still be in flight
					if left := time.Until(l.Until()); left <= 4*time.Second || left > 5*time.Second {
						t.Fatalf("%s: validity %v, want just under 5s", desc, left)
					}
					settle(r) // TryLock returns at the quorum; the last SET may still be in flight
					if vs := holders(t, up, key); count(vs, l.Value()) != free {
						t.Fatalf("%s: masters hold %q, want our value on the %d free ones", desc, vs, free)
					}
					if err := l.Unlock(context.Background()); err != nil {
						t.Fatalf("%s: Unlock: %v", desc, err)
					}
				} else {
					var qe *redlock.QuorumError
					if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &qe) {
						t.Fatalf("%s: error %v is not a QuorumError wrapping ErrNotObtained", desc, err)
					}
					if qe.Succeeded >= qe.Quorum || qe.Quorum != n/2+1 || qe.Nodes != n {
						t.Fatalf("%s: inconsistent counts %+v", desc, qe)
					}
				}
				r.Close()
				for i, v := range holders(t, up, key) {
					if v != "" && v != foreign {
						t.Fatalf("%s: master %d still holds our value %q after the attempt ended", desc, i, v)
					}
				}
			}
		})
	}
}

// TestNoOverlapUnderContention: 16 goroutines × 200 acquisitions of one key
// on five masters; never two holders at once.
func TestNoOverlapUnderContention(t *testing.T) {
	goroutines, rounds := 16, 200
	if testing.Short() {
		rounds = 20
	}
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())),
		redlock.WithTTL(5*time.Second), redlock.WithNodeTimeout(time.Second), redlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
	key := testKey(t)
	var inside, maxInside, total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for range rounds {
				l, err := r.Lock(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				total.Add(1)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if maxInside.Load() != 1 || total.Load() != int64(goroutines*rounds) {
		t.Fatalf("max holders at once %d (want 1), critical sections %d (want %d)", maxInside.Load(), total.Load(), goroutines*rounds)
	}
}

// TestNodeTimeoutHoldsWithoutContextDeadlines: a go-redis client made without
// ContextTimeoutEnabled ignores context deadlines on the socket and waits for
// its ReadTimeout (3 s). The node timeout must hold anyway: with a majority of
// masters paused, TryLock fails within about the node timeout.
func TestNodeTimeoutHoldsWithoutContextDeadlines(t *testing.T) {
	c := redistest.StartT(t, 5, redistest.Options{})
	cs := clients(t, c.Addrs())
	for _, cl := range cs {
		cl.Options().ContextTimeoutEnabled = false                  // the go-redis default
		if err := cl.Ping(context.Background()).Err(); err != nil { // connect before the pause
			t.Fatal(err)
		}
	}
	r := newRedlock(t, nodesOf(t, cs), redlock.WithNodeTimeout(100*time.Millisecond))
	for i := range 3 {
		if err := c.Servers[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := r.TryLock(context.Background(), testKey(t))
	took := time.Since(start)
	for i := range 3 {
		if err := c.Servers[i].Resume(); err != nil {
			t.Fatal(err)
		}
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Failed != 3 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v: want 3 masters failed with a deadline", err)
	}
	if took > time.Second {
		t.Fatalf("TryLock with a paused majority took %v; the 100ms node timeout must bound it", took)
	}
}

// TestStragglerThroughPipelinedNode: the production path (NewNode's
// pipelines through the lanes, no fault-injecting wrapper) with one master behind a proxy that
// delays every request by 20 ms, so its SET is still in flight when Unlock
// queues the release: no master may hold the key afterwards, and a
// contender's failed attempt against the held key leaves nothing behind.
// (A proxy delays every connection alike, so it cannot reorder a SET and a
// later release; TestStragglerCannotOutliveUnlock holds a SET back before it
// is sent, which can.)
func TestStragglerThroughPipelinedNode(t *testing.T) {
	px, err := faultproxy.New(masters().Addrs()[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	px.SetLatency(20 * time.Millisecond)
	addrs := masters().Addrs()
	addrs[2] = px.Addr()
	nodes := nodesOf(t, clients(t, addrs))
	direct := clients(t, masters().Addrs())
	r := newRedlock(t, nodes, redlock.WithNodeTimeout(200*time.Millisecond))
	other := newRedlock(t, nodes, redlock.WithNodeTimeout(200*time.Millisecond))

	for i := range 20 {
		key := testKey(t)
		l, err := r.TryLock(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		// A contender fails against the held key; its rollback must not
		// touch our value, and nothing of it may remain.
		if _, err := other.TryLock(context.Background(), key); !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("round %d: contender: %v, want ErrNotObtained", i, err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		settle(r)
		settle(other)
		if vs := holders(t, direct, key); count(vs, "") != len(vs) {
			t.Fatalf("round %d: after Unlock masters still hold %q", i, vs)
		}
	}
}

// TestReleaseAfterAcquireOutlivesDeadline: a master whose client ignores
// context deadlines (go-redis without ContextTimeoutEnabled) keeps its lane
// busy past the acquire's deadline; the release queued behind it gets its
// own node timeout from when the acquire's deadline passed, so it is still
// sent and no key stays behind.
func TestReleaseAfterAcquireOutlivesDeadline(t *testing.T) {
	px, err := faultproxy.New(masters().Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	addrs := masters().Addrs()
	addrs[0] = px.Addr()
	cs := clients(t, addrs)
	cs[0].Options().ContextTimeoutEnabled = false
	if err := cs[0].Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	px.SetLatency(300 * time.Millisecond)
	r := newRedlock(t, nodesOf(t, cs), redlock.WithNodeTimeout(200*time.Millisecond))
	key := testKey(t)
	l, err := r.TryLock(context.Background(), key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(r)
	time.Sleep(100 * time.Millisecond)
	if vs := holders(t, clients(t, masters().Addrs()), key); count(vs, "") != len(vs) {
		t.Fatalf("after Unlock masters hold %q", vs)
	}
}

// BenchmarkLockUnlock measures one Lock and Unlock of a key on one and on
// five local masters, with and without fencing; the ratio is the cost of the
// second round of a fenced acquire. (bench/ compares with the peers.)
func BenchmarkLockUnlock(b *testing.B) {
	for _, n := range []int{1, 5} {
		for _, fencing := range []bool{false, true} {
			var opts []redlock.Option
			if fencing {
				opts = append(opts, redlock.WithFencing())
			}
			b.Run(fmt.Sprintf("nodes=%d/fencing=%v", n, fencing), func(b *testing.B) {
				r := newRedlock(b, nodesOf(b, clients(b, masters().Addrs()[:n])), opts...)
				key := testKey(b)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					l, err := r.Lock(ctx, key)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestKeyRefusedDerivedShapes: Lock refuses every key of a derived name's
// shape with a *ConfigError that says which shape and whose name it is.
func TestKeyRefusedDerivedShapes(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:1])))
	for key, says := range map[string]string{
		redlock.FenceKey("order:42"): `starts with "fence:{", the shape of the names of fence counters (FenceKey): it could be the fence counter of the lock "order:42"`,
		redlock.WaitKey("order:42"):  `starts with "waiters:{", the shape of the names of queues of waiting Redlocks (WaitKey): it could be the queue of the lock "order:42"`,
		redlock.FenceKey("{u}:1"):    `ends in ":fence"`,
		redlock.WaitKey("{u}:1"):     `the queue of the lock "{u}:1"`,
		"order:42:fence":             `the fence counter of the lock "order:42"`,
		redlock.FenceKey("a}b"):      `the fence counter of the lock "a}b"`,
		"fence:{unterminated":        `choose a name that does not`,
		"waiters:{x}":                `the queue of the lock "x"`,
	} {
		_, err := r.TryLock(t.Context(), key)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || ce.Field != "key" || !strings.Contains(err.Error(), says) {
			t.Errorf("TryLock(%q): %v; want a *ConfigError for key saying %s", key, err, says)
		}
	}
}

// TestAwkwardKeys: keys with braces, spaces, unicode, newlines, binary bytes,
// invalid UTF-8, and up to MaxKeyLen bytes lock, fence, extend and unlock end
// to end; longer keys are a *ConfigError naming the limit.
func TestAwkwardKeys(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs), redlock.WithFencing())
	ctx := context.Background()
	for _, tc := range []struct{ name, suffix string }{
		{"braces", "{user:1}:{x}"},
		{"spaces", " a key with  spaces "},
		{"unicode", "ünïcødé 🔒 锁"},
		{"newlines", "line\nbreak\r\nDEL *\r\n"},
		{"binary", "\x00\x01\xff\xfe\x00"},
		{"invalid UTF-8", "\xc3\x28\xa0\xa1"},
		{"RESP in key", "*1\r\n$4\r\nPING\r\n"},
		{"longest", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := testKey(t) + tc.suffix
			if tc.name == "longest" {
				key += strings.Repeat("k", redlock.MaxKeyLen-len(key))
			}
			l, err := r.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			settle(r)
			if vs := holders(t, cs, key); count(vs, l.Value()) != len(cs) {
				t.Fatalf("masters hold %q under the key, want our value on all", vs)
			}
			if fence, err := cs[0].Get(ctx, redlock.FenceKey(key)).Uint64(); err != nil || fence < l.Fence() || l.Fence() == 0 {
				t.Fatalf("fence counter %d (%v), token %d", fence, err, l.Fence())
			}
			if err := l.Extend(ctx, 20*time.Second); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			settle(r)
			if ttl := cs[0].PTTL(ctx, key).Val(); ttl <= 10*time.Second {
				t.Fatalf("PTTL after Extend(20s) is %v", ttl)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			settle(r)
			if vs := holders(t, cs, key); count(vs, "") != len(cs) {
				t.Fatalf("after Unlock masters hold %q", vs)
			}
		})
	}

	for _, n := range []int{redlock.MaxKeyLen + 1, 1 << 20} {
		_, err := r.TryLock(ctx, strings.Repeat("k", n))
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || ce.Field != "key" || !strings.Contains(err.Error(), "MaxKeyLen") {
			t.Errorf("key of %d bytes: err %v, want a *ConfigError for key naming MaxKeyLen", n, err)
		}
		if len(err.Error()) > 200 {
			t.Errorf("key of %d bytes: the error is %d bytes long", n, len(err.Error()))
		}
	}
}

// TestCloseAfterWaitOnDeadMasters: Close after a Lock that waited while
// every master was down returns at once. (It took 100 to 200 ms: go-redis
// retries a subscription on a dead master every 100 ms, and closing it
// waited for the retry to notice. redlock exec --wait 500ms took 0.7 s.)
func TestCloseAfterWaitOnDeadMasters(t *testing.T) {
	urls := []string{deadAddr(t), deadAddr(t), deadAddr(t)}
	for range 3 {
		r, err := redlock.NewFromURLs(urls)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err = r.Lock(ctx, testKey(t))
		cancel()
		if !errors.Is(err, redlock.ErrNotObtained) {
			t.Errorf("Lock = %v; want ErrNotObtained", err)
		}
		start := time.Now()
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		if took := time.Since(start); took > 50*time.Millisecond {
			t.Errorf("Close took %v; want at most 50ms", took)
		}
	}
}
