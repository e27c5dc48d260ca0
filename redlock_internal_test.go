package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

const foreign = "someone-else"

// TestQuorumEverySubset walks every assignment of up / down / taken to the
// masters for N = 1, 3, 5 and checks the quorum rule: the lock is obtained
// exactly when at least N/2+1 masters are up and free, and a failed attempt
// leaves our value on no master.
func TestQuorumEverySubset(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			up := clients(t, masters.Addrs()[:n])
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
				nodes := make([]Node, n)
				free, code := 0, s
				desc := ""
				for i := range n {
					st := code % 3
					code /= 3
					switch st {
					case isUp:
						nodes[i] = NewNode(up[i])
						free++
						desc += "u"
					case isDown:
						nodes[i] = NewNode(down[i])
						desc += "d"
					case isTaken:
						nodes[i] = NewNode(up[i])
						if err := up[i].Set(context.Background(), key, foreign, time.Minute).Err(); err != nil {
							t.Fatal(err)
						}
						desc += "t"
					}
				}
				r, err := New(nodes, WithTTL(5*time.Second), WithNodeTimeout(200*time.Millisecond))
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
					var qe *QuorumError
					if !errors.Is(err, ErrNotObtained) || !errors.As(err, &qe) {
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

// TestEarlyDecision: a slow master does not slow the acquire down, and a
// slow majority fails it within the node timeout.
func TestEarlyDecision(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	slow := make([]*faultNode, len(nodes))
	for i := range nodes {
		slow[i] = wrap(nodes[i])
		nodes[i] = slow[i]
	}
	r := newRedlock(t, nodes, WithNodeTimeout(300*time.Millisecond))

	slow[4].acquireDelay.Store(int64(2 * time.Second))
	start := time.Now()
	l, err := r.TryLock(context.Background(), testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("acquire with one master 2s slow took %v; it should not wait for the slow master", took)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		slow[i].acquireDelay.Store(int64(2 * time.Second))
	}
	start = time.Now()
	_, err = r.TryLock(context.Background(), testKey(t))
	took := time.Since(start)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("with a majority slow: err %v, want ErrNotObtained", err)
	}
	if took > time.Second {
		t.Errorf("with a majority 2s slow the acquire took %v; want about the 300ms node timeout", took)
	}
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Failed < 3 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v: want at least 3 failed masters that timed out", err)
	}
}

// fakeClock advances by step on every reading after the first.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// jumpClock is the real clock plus an offset that a test moves forward
// while requests are in flight (see faultNode.onSend), as a stalled process
// or a slow network would make the validity clock appear to jump.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) Now() time.Time       { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *jumpClock) jump(d time.Duration) { c.offset.Add(int64(d)) }

// jumpOnce returns a faultNode hook that moves c forward by d, once, when
// the first request of op is sent to any of the masters.
func jumpOnce(c *jumpClock, op reqKind, d time.Duration) func(*request) {
	var once sync.Once
	return func(q *request) {
		if q.Op == op {
			once.Do(func() { c.jump(d) })
		}
	}
}

// wrapAll wraps every node in a faultNode.
func wrapAll(nodes []Node) []*faultNode {
	fs := make([]*faultNode, len(nodes))
	for i, n := range nodes {
		fs[i] = wrap(n)
		nodes[i] = fs[i]
	}
	return fs
}

// TestValidityShrinks: validity is the TTL less the acquire's elapsed time
// and the drift allowance; under the minimum the acquire fails and is rolled
// back.
func TestValidityShrinks(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	const ttl = 10 * time.Second
	drift := time.Duration(float64(ttl)*DefaultDriftFactor) + 2*time.Millisecond

	for _, tc := range []struct {
		elapsed time.Duration
		ok      bool
	}{{0, true}, {3 * time.Second, true}, {8 * time.Second, true}, {9 * time.Second, false}} {
		r := newRedlock(t, nodesOf(t, cs), WithTTL(ttl))
		start := time.Now()
		fc := &fakeClock{now: start, step: tc.elapsed}
		r.clock = fc
		key := testKey(t)
		l, err := r.TryLock(context.Background(), key)
		if tc.ok != (err == nil) {
			t.Fatalf("elapsed %v: err %v, want ok=%v", tc.elapsed, err, tc.ok)
		}
		if tc.ok {
			decided := start.Add(tc.elapsed)
			if got, want := l.Until().Sub(decided), ttl-tc.elapsed-drift; got != want {
				t.Errorf("elapsed %v: validity %v, want ttl-elapsed-drift = %v", tc.elapsed, got, want)
			}
			continue
		}
		var qe *QuorumError
		if !errors.As(err, &qe) || !qe.Late || qe.Validity != ttl-tc.elapsed-drift {
			t.Fatalf("elapsed %v: error %v, want a late QuorumError with validity %v", tc.elapsed, err, ttl-tc.elapsed-drift)
		}
		settle(r)
		if vs := holders(t, cs, key); count(vs, "") != len(cs) {
			t.Errorf("late acquire not rolled back: masters hold %q", vs)
		}
	}
}

// TestRollbackCleansEveryMaster: after a failed attempt no master holds our
// value, including one whose SET landed although the client timed out.
func TestRollbackCleansEveryMaster(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	late := wrap(nodes[0])
	late.lateReply.Store(true)
	nodes[0] = late
	r := newRedlock(t, nodes, WithNodeTimeout(100*time.Millisecond))

	key := testKey(t)
	if err := cs[1].Set(context.Background(), key, foreign, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := r.TryLock(context.Background(), key)
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Refused != 1 || qe.Failed != 1 || qe.Succeeded != 1 {
		t.Fatalf("err %v: want 1 succeeded, 1 refused, 1 timed out", err)
	}
	settle(r)
	if vs := holders(t, cs, key); vs[0] != "" || vs[1] != foreign || vs[2] != "" {
		t.Fatalf("after rollback masters hold %q; want [\"\" %q \"\"]", vs, foreign)
	}
}

// TestStragglerCannotOutliveUnlock: Lock then Unlock at once while one master
// is slow; the release to it must follow the acquire still in flight, so soon
// after Unlock no master holds the key.
func TestStragglerCannotOutliveUnlock(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	slow := wrap(nodes[2])
	slow.acquireDelay.Store(int64(20 * time.Millisecond))
	nodes[2] = slow
	r := newRedlock(t, nodes, WithNodeTimeout(200*time.Millisecond))

	for i := range 30 {
		key := testKey(t)
		l, err := r.TryLock(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		settle(r)
		if vs := holders(t, cs, key); count(vs, "") != len(vs) {
			t.Fatalf("round %d: after Unlock masters still hold %q", i, vs)
		}
	}
}

// TestNoOverlapUnderContention: 16 goroutines × 200 acquisitions of one key
// on five masters; never two holders at once.
func TestNoOverlapUnderContention(t *testing.T) {
	goroutines, rounds := 16, 200
	if testing.Short() {
		rounds = 20
	}
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())),
		WithTTL(5*time.Second), WithNodeTimeout(time.Second), WithBackoff(time.Millisecond, 20*time.Millisecond))
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

// TestCancelAfterLockKeepsStragglers: cancelling the caller's context right
// after Lock returned must not cut short the SETs still in flight, or the lock
// would sit on a bare quorum and one master failure would lose it.
func TestCancelAfterLockKeepsStragglers(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	slow := wrap(nodes[4])
	slow.acquireDelay.Store(int64(30 * time.Millisecond))
	nodes[4] = slow
	r := newRedlock(t, nodes, WithNodeTimeout(300*time.Millisecond))
	key := testKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := r.TryLock(ctx, key)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	settle(r)
	if vs := holders(t, cs, key); count(vs, l.Value()) != 5 {
		t.Fatalf("after cancel, masters hold %q; want our value on all 5", vs)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
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
	r := newRedlock(t, nodesOf(t, cs), WithNodeTimeout(100*time.Millisecond))
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
	var qe *QuorumError
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
	px, err := faultproxy.New(masters.Addrs()[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	px.SetLatency(20 * time.Millisecond)
	addrs := masters.Addrs()
	addrs[2] = px.Addr()
	nodes := nodesOf(t, clients(t, addrs))
	direct := clients(t, masters.Addrs())
	r := newRedlock(t, nodes, WithNodeTimeout(200*time.Millisecond))
	other := newRedlock(t, nodes, WithNodeTimeout(200*time.Millisecond))

	for i := range 20 {
		key := testKey(t)
		l, err := r.TryLock(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		// A contender fails against the held key; its rollback must not
		// touch our value, and nothing of it may remain.
		if _, err := other.TryLock(context.Background(), key); !errors.Is(err, ErrNotObtained) {
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
	px, err := faultproxy.New(masters.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	addrs := masters.Addrs()
	addrs[0] = px.Addr()
	cs := clients(t, addrs)
	cs[0].Options().ContextTimeoutEnabled = false
	if err := cs[0].Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	px.SetLatency(300 * time.Millisecond)
	r := newRedlock(t, nodesOf(t, cs), WithNodeTimeout(200*time.Millisecond))
	key := testKey(t)
	l, err := r.TryLock(context.Background(), key, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle(r)
	time.Sleep(100 * time.Millisecond)
	if vs := holders(t, clients(t, masters.Addrs()), key); count(vs, "") != len(vs) {
		t.Fatalf("after Unlock masters hold %q", vs)
	}
}

// yesNode returns an in-memory master that grants everything at once: it
// lets a fuzzer drive the acquire, fence, extend and release arithmetic with
// any options, without a network.
func yesNode(name string) Node {
	return NodeFunc(name, func(_ context.Context, c *Command) {
		q := *c.req
		q.OK, q.Fence = true, 1
		replyFor(&q, c)
	})
}

// FuzzOptions: any combination of option values makes New either succeed or
// return a *ConfigError — never panic — and a Redlock that New accepted takes,
// extends and releases a lock (or refuses with a clean error) under them.
func FuzzOptions(f *testing.F) {
	f.Add(int64(10*time.Second), 0.01, int64(100*time.Millisecond), int64(-1), 0, int64(5*time.Millisecond), int64(250*time.Millisecond), "k", int64(time.Second))
	f.Add(int64(time.Millisecond), 0.0, int64(1), int64(0), 1, int64(1), int64(1), "", int64(0))
	f.Add(int64(math.MaxInt64), 0.9999999999999999, int64(math.MaxInt64), int64(math.MaxInt64), math.MaxInt, int64(math.MaxInt64), int64(math.MaxInt64), "{k}\n", int64(math.MaxInt64))
	f.Add(int64(3*time.Millisecond), math.NaN(), int64(-1), int64(-5), -1, int64(-1), int64(-2), "\x00", int64(-1))
	f.Add(int64(1500*time.Microsecond), math.Inf(1), int64(0), int64(math.MinInt64), 0, int64(0), int64(0), "x", int64(1500*time.Microsecond))
	f.Fuzz(func(t *testing.T, ttl int64, drift float64, nodeTimeout, minValidity int64, retry int, bmin, bmax int64, key string, extend int64) {
		opts := []Option{WithTTL(time.Duration(ttl)), WithDriftFactor(drift)}
		if nodeTimeout != 0 {
			opts = append(opts, WithNodeTimeout(time.Duration(nodeTimeout)))
		}
		if minValidity != -1 {
			opts = append(opts, WithMinValidity(time.Duration(minValidity)))
		}
		if retry != 0 {
			opts = append(opts, WithRetry(retry))
		}
		if bmin != 0 || bmax != 0 {
			opts = append(opts, WithBackoff(time.Duration(bmin), time.Duration(bmax)))
		}
		if ttl%2 == 0 {
			opts = append(opts, WithFencing())
		}
		nodes := []Node{yesNode("a"), yesNode("b"), yesNode("c")}
		r, err := New(nodes, opts...)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("New: %v (%T), want a *ConfigError", err, err)
			}
			return
		}
		defer r.Close()
		cfg, err := r.cfg.resolved()
		if err != nil {
			t.Fatalf("New accepted a config that does not resolve: %v", err)
		}
		if cfg.nodeTimeout <= 0 || cfg.ttl%time.Millisecond != 0 || cfg.ttl-cfg.drift()-cfg.minValidity <= 0 {
			t.Fatalf("New accepted ttl %v, node timeout %v, drift %v, min validity %v", cfg.ttl, cfg.nodeTimeout, cfg.drift(), cfg.minValidity)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		l, err := r.TryLock(ctx, key)
		if err != nil {
			if !isClean(err) {
				t.Fatalf("TryLock: %v (%T)", err, err)
			}
			return
		}
		if err := l.Extend(ctx, time.Duration(extend)); err != nil && !isClean(err) {
			t.Fatalf("Extend: %v (%T)", err, err)
		}
		if err := l.Unlock(ctx); err != nil && !isClean(err) {
			t.Fatalf("Unlock: %v (%T)", err, err)
		}
	})
}

// isClean reports whether err is one of the errors the API documents.
func isClean(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce) || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) ||
		errors.Is(err, context.DeadlineExceeded)
}

// TestTTLWholeMilliseconds: the TTL is what the masters were sent, whole
// milliseconds, so the validity is never computed from a longer TTL.
func TestTTLWholeMilliseconds(t *testing.T) {
	r := newRedlock(t, []Node{yesNode("a")}, WithTTL(10*time.Second+999*time.Microsecond))
	l, err := r.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 10*time.Second {
		t.Errorf("TTL %v, want 10s", l.TTL())
	}
}

// BenchmarkLockUnlock measures one Lock and Unlock of a key on one and on
// five local masters, with and without fencing; the ratio is the cost of the
// second round of a fenced acquire. (bench/ compares with the peers.)
func BenchmarkLockUnlock(b *testing.B) {
	for _, n := range []int{1, 5} {
		for _, fencing := range []bool{false, true} {
			var opts []Option
			if fencing {
				opts = append(opts, WithFencing())
			}
			b.Run(fmt.Sprintf("nodes=%d/fencing=%v", n, fencing), func(b *testing.B) {
				r := newRedlock(b, nodesOf(b, clients(b, masters.Addrs()[:n])), opts...)
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

// refSlot is the Redis Cluster slot of key, computed apart from keySlot:
// the tag scanned as cluster.c's keyHashSlot does, CRC16-XMODEM from a
// table made from the polynomial.
func refSlot(key string) int {
	s := -1
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			s = i
			break
		}
	}
	if s >= 0 {
		for e := s + 1; e < len(key); e++ {
			if key[e] == '}' {
				if e > s+1 {
					key = key[s+1 : e]
				}
				break
			}
		}
	}
	var tab [256]uint16
	for i := range tab {
		c := uint16(i) << 8
		for range 8 {
			c = c<<1 ^ (c>>15)*0x1021
		}
		tab[i] = c
	}
	var crc uint16
	for _, b := range []byte(key) {
		crc = crc<<8 ^ tab[byte(crc>>8)^b]
	}
	return int(crc) % 16384
}

// keyCases are lock keys for every case of derivedKey's rule; the cluster
// test checks their slots with CLUSTER KEYSLOT as well.
var keyCases = []struct{ key, fence string }{
	{"order:42", "fence:{order:42}"},                 // no braces
	{"{user:1}:cart", "{user:1}:cart:fence"},         // a tag
	{"{user:1}", "{user:1}:fence"},                   // nothing but a tag
	{"a{b}c{d}", "a{b}c{d}:fence"},                   // the first tag counts
	{"a{", "fence:{a{}"},                             // '{' without '}'
	{"a{{b}", "a{{b}:fence"},                         // tag "{b"
	{"{{}}", "{{}}:fence"},                           // tag "{"
	{"{}", ""},                                       // empty tag, '}': rule 3
	{"x{}y", ""},                                     // empty tag
	{"{}{a}", ""},                                    // empty first tag: the whole key
	{"a}b", ""},                                      // '}' without '{'
	{"a}b{c", ""},                                    // '}' before '{', no tag
	{"a}b{c}", "a}b{c}:fence"},                       // '}' before a tag
	{"}", ""},                                        // '}' alone
	{"{", "fence:{{}"},                               // '{' alone
	{"\x00\xff{\x00}", "\x00\xff{\x00}:fence"},       // binary tag
	{"\x00\x01\xff\xfe", "fence:{\x00\x01\xff\xfe}"}, // binary, no braces
	{"\xc3\x28}\xa0", ""},                            // invalid UTF-8 with '}'
	{"ünïcødé 🔒 锁", "fence:{ünïcødé 🔒 锁}"},         // unicode
	{"line\nbreak\r\n", "fence:{line\nbreak\r\n}"}, // newlines
	{"fence:{x", ""},                                                       // refused: not derived, but the prefix
	{"{fence:{x}}", "{fence:{x}}:fence"},                                   // a tag holding the prefix
	{strings.Repeat("k", MaxKeyLen), ""},                                   // longest
	{"}" + strings.Repeat("k", MaxKeyLen-1), ""},                           // longest, rule 3
	{"{t}" + strings.Repeat("k", MaxKeyLen-3), ""},                         // longest, tagged
	{"foo{hash_tag}", "foo{hash_tag}:fence"},                               // Redis's own example
	{"somekey", "fence:{somekey}"},                                         // Redis's own example
	{"\x00", "fence:{\x00}"},                                               // one NUL
	{"{\x00}}", "{\x00}}:fence"},                                           // tag "\x00", a '}' after
	{"waiters:{a}b", ""},                                                   // refused: the prefix
	{"{a}:waiters:x", "{a}:waiters:x:fence"},                               // the suffix inside
	{"{}" + strings.Repeat("}", 100), ""},                                  // many '}'
	{strings.Repeat("{", 100) + "}", strings.Repeat("{", 100) + "}:fence"}, // tag of '{'s
}

// TestKeySlotCRC16 checks the checksum and the slot against values Redis
// documents: CRC16("123456789") = 0x31C3, CLUSTER KEYSLOT somekey = 11058,
// foo{hash_tag} = 2515.
func TestKeySlotCRC16(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{"somekey": 11058, "foo{hash_tag}": 2515, "hash_tag": 2515} {
		if got, ref := int(keySlot(key)), refSlot(key); got != want || ref != want {
			t.Errorf("slot(%q) = %d (reference %d), want %d", key, got, ref, want)
		}
	}
}

// TestKeyDerivedNames: every case of the naming rule keeps the lock key's
// slot, names the counter as documented, and can be traced back.
func TestKeyDerivedNames(t *testing.T) {
	for _, tc := range keyCases {
		checkDerived(t, tc.key)
		if tc.fence != "" {
			if got := FenceKey(tc.key); got != tc.fence {
				t.Errorf("FenceKey(%.40q) = %.60q, want %.60q", tc.key, got, tc.fence)
			}
		}
	}
	// Rule 3 names: a tag of the slot, then the key.
	for _, key := range []string{"{}", "a}b", "}"} {
		got := FenceKey(key)
		tag, _ := hashTag(got)
		if got != "fence:{"+tag+"}"+key || strings.Trim(tag, "0123456789") != "" {
			t.Errorf("FenceKey(%q) = %q, want fence:{DIGITS}%s", key, got, key)
		}
	}
}

// checkDerived checks key's derived names: the same slot as key, distinct,
// never a lock key Lock accepts, traced back to key by derivedFrom.
func checkDerived(t *testing.T, key string) {
	t.Helper()
	want := refSlot(key)
	if got := int(keySlot(key)); got != want {
		t.Errorf("keySlot(%.40q) = %d, reference %d", key, got, want)
	}
	fk, wk := FenceKey(key), WaitKey(key)
	if fk == wk {
		t.Errorf("FenceKey(%.40q) = WaitKey = %.60q", key, fk)
	}
	for name, d := range map[string]string{"fence": fk, "waiters": wk} {
		if got := refSlot(d); got != want {
			t.Errorf("%s of %.40q is %.60q in slot %d, the key in %d", name, key, d, got, want)
		}
		if _, _, locked := derivedFrom(key); locked {
			continue // a key Lock refuses: its names need not trace back
		}
		n, lock, ok := derivedFrom(d)
		if !ok || n != name || lock != key {
			t.Errorf("derivedFrom(%.60q) = %q, %.40q, %v; want %s, %.40q, true", d, n, lock, ok, name, key)
		}
	}
}

// TestKeyDerivedRandom: the properties of checkDerived, and that two lock
// keys never share a derived name, for random keys made of the bytes that
// matter ('{', '}', ':', the words of the names) and others.
func TestKeyDerivedRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"{", "}", ":", "fence", "waiters", "a", "b", "\x00", "\xff", "{}", ":fence", "fence:{", "waiters:{", "7"}
	names := map[string]string{} // derived name -> its lock key
	locks := map[string]bool{}
	for range 20000 {
		var b strings.Builder
		for n := 1 + rng.IntN(6); n > 0; n-- {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		key := b.String()
		checkDerived(t, key)
		if _, _, refused := derivedFrom(key); refused {
			continue
		}
		locks[key] = true
		for _, d := range []string{FenceKey(key), WaitKey(key)} {
			if other, ok := names[d]; ok && other != key {
				t.Fatalf("locks %q and %q share the derived key %q", key, other, d)
			}
			names[d] = key
		}
	}
	for d, key := range names {
		if locks[d] {
			t.Fatalf("derived key %q of %q is also a lock key", d, key)
		}
	}
}

// FuzzDerivedKey: for any key, the derived names keep its slot and trace
// back to it; for any two keys Lock accepts, no derived name is shared or
// is the other key.
func FuzzDerivedKey(f *testing.F) {
	for _, tc := range keyCases {
		if len(tc.key) < 100 {
			f.Add(tc.key, "{"+tc.key+"}")
		}
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" || len(a) > MaxKeyLen || len(b) > MaxKeyLen {
			return
		}
		checkDerived(t, a)
		checkDerived(t, b)
		_, _, ra := derivedFrom(a)
		_, _, rb := derivedFrom(b)
		if ra || rb || a == b {
			return
		}
		for _, da := range []string{FenceKey(a), WaitKey(a)} {
			for _, db := range []string{FenceKey(b), WaitKey(b), b} {
				if da == db {
					t.Fatalf("%q (of %q) is also a name of %q", da, a, b)
				}
			}
			if da == b {
				t.Fatalf("derived key %q of %q is the lock key %q", da, a, b)
			}
		}
	})
}

// TestKeyRefusedDerivedShapes: Lock refuses every key of a derived name's
// shape with a *ConfigError that says which shape and whose name it is.
func TestKeyRefusedDerivedShapes(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:1])))
	for key, says := range map[string]string{
		FenceKey("order:42"):  `starts with "fence:{", the shape of the names of fence counters (FenceKey): it could be the fence counter of the lock "order:42"`,
		WaitKey("order:42"):   `starts with "waiters:{", the shape of the names of queues of waiting Redlocks (WaitKey): it could be the queue of the lock "order:42"`,
		FenceKey("{u}:1"):     `ends in ":fence"`,
		WaitKey("{u}:1"):      `the queue of the lock "{u}:1"`,
		"order:42:fence":      `the fence counter of the lock "order:42"`,
		FenceKey("a}b"):       `the fence counter of the lock "a}b"`,
		"fence:{unterminated": `choose a name that does not`,
		"waiters:{x}":         `the queue of the lock "x"`,
	} {
		_, err := r.TryLock(t.Context(), key)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "key" || !strings.Contains(err.Error(), says) {
			t.Errorf("TryLock(%q): %v; want a *ConfigError for key saying %s", key, err, says)
		}
	}
}

// TestAwkwardKeys: keys with braces, spaces, unicode, newlines, binary bytes,
// invalid UTF-8, and up to MaxKeyLen bytes lock, fence, extend and unlock end
// to end; longer keys are a *ConfigError naming the limit.
func TestAwkwardKeys(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs), WithFencing())
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
				key += strings.Repeat("k", MaxKeyLen-len(key))
			}
			l, err := r.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			settle(r)
			if vs := holders(t, cs, key); count(vs, l.Value()) != len(cs) {
				t.Fatalf("masters hold %q under the key, want our value on all", vs)
			}
			if fence, err := cs[0].Get(ctx, FenceKey(key)).Uint64(); err != nil || fence < l.Fence() || l.Fence() == 0 {
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

	for _, n := range []int{MaxKeyLen + 1, 1 << 20} {
		_, err := r.TryLock(ctx, strings.Repeat("k", n))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "key" || !strings.Contains(err.Error(), "MaxKeyLen") {
			t.Errorf("key of %d bytes: err %v, want a *ConfigError for key naming MaxKeyLen", n, err)
		}
		if len(err.Error()) > 200 {
			t.Errorf("key of %d bytes: the error is %d bytes long", n, len(err.Error()))
		}
	}
}

// TestLongKeyInErrors: an error about a long key quotes a short prefix of it,
// and escapes newlines so a key cannot forge a line in a log.
func TestLongKeyInErrors(t *testing.T) {
	key := "line\nbreak" + strings.Repeat("k", MaxKeyLen-20)
	err := (&QuorumError{Op: opAcquire, Key: key, Nodes: 3, Quorum: 2}).Error()
	if len(err) > 300 || strings.Contains(err, "\n") || !strings.Contains(err, `line\nbreak`) {
		t.Errorf("error about a %d-byte key: %q", len(key), err)
	}
}
