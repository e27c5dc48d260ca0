package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// cutOff makes cutNode (rwmutex_test.go) a master a client never reaches:
// every command fails at once, as a partition shows it.
var cutOff = func() *atomic.Bool {
	var b atomic.Bool
	b.Store(true)
	return &b
}()

// partialRedlock is a Redlock over cs that reaches only the masters in
// reach.
func partialRedlock(t *testing.T, cs []*redis.Client, reach []int, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	nodes := nodesOf(t, cs)
	for i := range nodes {
		cut := true
		for _, j := range reach {
			cut = cut && i != j
		}
		if cut {
			nodes[i] = cutNode{nodes[i], cutOff}
		}
	}
	return newRedlock(t, nodes, opts...)
}

// semHolders is each master's live holders of the semaphore name: its
// slots' values.
func semHolders(t *testing.T, cs []*redis.Client, name string) []map[string]string {
	t.Helper()
	out := make([]map[string]string, len(cs))
	for i, c := range cs {
		f, err := c.HGetAll(context.Background(), "sem:{"+name+"}").Result()
		if err != nil {
			t.Fatalf("HGETALL on master %d: %v", i, err)
		}
		out[i] = map[string]string{}
		for k, v := range f {
			if k[0] == 'v' {
				out[i][k[1:]] = v
			}
		}
	}
	return out
}

// TestSemaphorePartialViews: clients that each reach a different majority
// of the masters never hold more than L permits between them, where a
// semaphore kept as one set of holders per master would give one to each
// ((L+1)·Q ≤ L·N): N = 3 with L = 2, N = 5 with L = 2 and L = 3. Each
// master is in at most L of the majorities, so each would see at most L
// holders.
func TestSemaphorePartialViews(t *testing.T) {
	for _, tc := range []struct {
		n, permits int
		reach      [][]int
	}{
		{3, 2, [][]int{{0, 1}, {1, 2}, {0, 2}}},
		{5, 2, [][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 3}}},
		{5, 3, [][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 3}, {1, 2, 4}}},
	} {
		for first := range tc.reach {
			t.Run(fmt.Sprintf("N=%d,L=%d,first=%d", tc.n, tc.permits, first), func(t *testing.T) {
				cs := clients(t, masters().Addrs()[:tc.n])
				name := testKey(t)
				ctx := context.Background()
				held := 0
				for k := range tc.reach {
					reach := tc.reach[(first+k)%len(tc.reach)]
					r := partialRedlock(t, cs, reach)
					l, err := r.Semaphore(name, tc.permits).TryAcquire(ctx, redlock.WithTTL(10*time.Second))
					switch {
					case err == nil:
						held++
						t.Cleanup(func() { l.Unlock(context.Background()) })
					case !errors.Is(err, redlock.ErrNotObtained):
						t.Fatalf("client on %v: %v", reach, err)
					}
				}
				if held > tc.permits {
					t.Fatalf("%d clients hold a permit of %d; masters: %v", held, tc.permits, semHolders(t, cs, name))
				}
				if held == 0 {
					t.Fatalf("no client holds a permit")
				}
			})
		}
	}
}

// TestSemaphoreFillsEveryPermit: clients that reach every master take
// all L permits, one slot each, and the next is refused until one is
// given back.
func TestSemaphoreFillsEveryPermit(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	name := testKey(t)
	ctx := context.Background()
	s := r.Semaphore(name, 3)
	var ls []*redlock.Lock
	for range 3 {
		l, err := r.Semaphore(name, 3).TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire with %d held: %v", len(ls), err)
		}
		ls = append(ls, l)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("a fourth TryAcquire of 3 permits: %v, want ErrNotObtained", err)
	}
	if err := ls[1].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after one Unlock: %v", err)
	}
	for _, l := range append(ls[:1], ls[2], l) {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	settle(r) // Unlock returns at a quorum: the other releases may be on their way
	for i, h := range semHolders(t, cs, name) {
		if len(h) != 0 {
			t.Errorf("master %d still holds %v after every Unlock", i, h)
		}
	}
}

// TestSemaphoreLimitDisagreement: while a permit is held under a limit, a
// call with another limit gets a *PermitsError (not ErrNotObtained, and
// never a permit), also Acquire, which does not wait for it to pass; once
// the permits are back, the new limit is stored.
func TestSemaphoreLimitDisagreement(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	name := testKey(t)
	ctx := context.Background()
	l, err := r.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range []func(*redlock.Semaphore) (*redlock.Lock, error){
		func(s *redlock.Semaphore) (*redlock.Lock, error) { return s.TryAcquire(ctx) },
		func(s *redlock.Semaphore) (*redlock.Lock, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return s.Acquire(ctx)
		},
	} {
		got, err := call(r.Semaphore(name, 3))
		var pe *redlock.PermitsError
		if !errors.As(err, &pe) || errors.Is(err, redlock.ErrNotObtained) || got != nil {
			t.Fatalf("a call with 3 permits while one of 2 is held: %v, %v; want a *PermitsError, not ErrNotObtained", got, err)
		}
		if pe.Key != name || pe.Permits != 3 || pe.Stored != 2 {
			t.Errorf("PermitsError = %+v, want Key %q, Permits 3, Stored 2", pe, name)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := r.Semaphore(name, 3).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a call with 3 permits once none is held: %v", err)
	}
	defer l3.Unlock(ctx)
	if _, err := r.Semaphore(name, 2).TryAcquire(ctx); !errors.As(err, new(*redlock.PermitsError)) {
		t.Fatalf("a call with 2 permits while one of 3 is held: %v, want a *PermitsError", err)
	}
}

// TestSemaphoreCrashedHolder: a holder that never gives its permit back
// (it crashed) loses it at its TTL, on the masters' clocks.
func TestSemaphoreCrashedHolder(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	name := testKey(t)
	ctx := context.Background()
	s := r.Semaphore(name, 1)
	if _, err := s.TryAcquire(ctx, redlock.WithTTL(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryAcquire while the only permit is held: %v", err)
	}
	time.Sleep(350 * time.Millisecond)
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after the holder's TTL: %v", err)
	}
	l.Unlock(ctx)
}

// TestSemaphorePartialGrantReleased: an attempt that won its slot on a
// minority of masters (the others unreachable, or too slow for a caller
// that gave up) releases it on every master that granted it.
func TestSemaphorePartialGrantReleased(t *testing.T) {
	ctx := context.Background()
	t.Run("no quorum", func(t *testing.T) {
		cs := clients(t, masters().Addrs()[:3])
		name := testKey(t)
		r := partialRedlock(t, cs, []int{0})
		if _, err := r.Semaphore(name, 2).TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("TryAcquire on one master of 3: %v", err)
		}
		settle(r)
		for i, h := range semHolders(t, cs, name) {
			if len(h) != 0 {
				t.Errorf("master %d holds %v after the failed attempt", i, h)
			}
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cs := clients(t, masters().Addrs()[:3])
		name := testKey(t)
		nodes := nodesOf(t, cs)
		nodes[1], nodes[2] = farNode{nodes[1], 150 * time.Millisecond}, farNode{nodes[2], 150 * time.Millisecond}
		r := newRedlock(t, nodes, redlock.WithNodeTimeout(time.Second))
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := r.Semaphore(name, 2).Acquire(cctx); !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("Acquire cancelled while two masters are slow: %v", err)
		}
		settle(r)
		for i, h := range semHolders(t, cs, name) {
			if len(h) != 0 {
				t.Errorf("master %d holds %v after the cancelled attempt", i, h)
			}
		}
	})
}

// TestSemaphoreConfig: permits out of range and options that do not apply
// are a *ConfigError naming them.
func TestSemaphoreConfig(t *testing.T) {
	cs := clients(t, masters().Addrs()[:1])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	for _, tc := range []struct {
		permits int
		opts    []redlock.Option
		field   string
	}{
		{0, nil, "permits"},
		{-1, nil, "permits"},
		{redlock.MaxPermits + 1, nil, "permits"},
		{2, []redlock.Option{redlock.WithOwner("me")}, "WithOwner"},
	} {
		s := r.Semaphore(testKey(t), tc.permits)
		for name, call := range map[string]func() (*redlock.Lock, error){
			"TryAcquire": func() (*redlock.Lock, error) { return s.TryAcquire(ctx, tc.opts...) },
			"Acquire":    func() (*redlock.Lock, error) { return s.Acquire(ctx, tc.opts...) },
		} {
			_, err := call()
			var ce *redlock.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Errorf("%s with %d permits, %d options: %v; want a *ConfigError naming %s", name, tc.permits, len(tc.opts), err, tc.field)
			}
		}
	}
	if _, err := (*redlock.Semaphore)(nil).TryAcquire(ctx); !errors.As(err, new(*redlock.ConfigError)) {
		t.Errorf("TryAcquire on a nil *Semaphore: %v", err)
	}
}

// TestSemaphoreLockHandle: a permit is a Lock: Extend moves Until,
// auto-extend keeps it past its TTL, Done closes at Unlock, and the
// permit is back for others then.
func TestSemaphoreLockHandle(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	name := testKey(t)
	ctx := context.Background()
	s := r.Semaphore(name, 1)
	l, err := s.Acquire(ctx, redlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if l.Key() != name {
		t.Errorf("Key() = %q, want %q", l.Key(), name)
	}
	before := l.Until()
	if err := l.Extend(ctx, 2*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if !l.Until().After(before.Add(time.Second)) {
		t.Errorf("Until %v after Extend to 2s, was %v", l.Until(), before)
	}
	time.Sleep(400 * time.Millisecond) // past the first TTL
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryAcquire past the first TTL of an extended permit: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Error("Done not closed after Unlock")
	}

	a, err := s.Acquire(ctx, redlock.WithTTL(300*time.Millisecond), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryAcquire while an auto-extended permit is held past its TTL: %v", err)
	}
	select {
	case <-a.Done():
		t.Fatalf("auto-extended permit lost: %v", context.Cause(a.Context()))
	default:
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after Unlock: %v", err)
	}
	l.Unlock(ctx)
}

// TestSemaphoreAcquireWaits: Acquire waits while every permit is held and
// gets the one given back.
func TestSemaphoreAcquireWaits(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	name := testKey(t)
	ctx := context.Background()
	ls := takePermits(t, ctx, newRedlock(t, nodesOf(t, cs)).Semaphore(name, 2), 2)
	var wg sync.WaitGroup
	got := make(chan error, 1)
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := newRedlock(t, nodesOf(t, cs)).Semaphore(name, 2).Acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	})
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("Acquire returned while both permits were held: %v", err)
	default:
	}
	if err := ls[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := <-got; err != nil {
		t.Fatalf("Acquire after one permit came back: %v", err)
	}
	ls[1].Unlock(ctx)
}

// TestSemaphoreUnlockOneRequest: the Unlock of a permit whose call waited
// is one request per master, the release that also takes the call's
// registration off the queue: no request of its own ahead of the release,
// which the release would wait behind.
func TestSemaphoreUnlockOneRequest(t *testing.T) {
	c := redistest.StartT(t, 3, redistest.Options{})
	cs := clients(t, c.Addrs())
	name := testKey(t)
	ctx := context.Background()
	// Both permits expire rather than come back: no release wakes the
	// waiter, whose attempt after a backoff takes one, registered on every
	// master.
	holder := newRedlock(t, nodesOf(t, cs), redlock.WithTTL(500*time.Millisecond)).Semaphore(name, 2)
	for range 2 {
		if _, err := holder.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waiter := newRedlock(t, nodesOf(t, clients(t, c.Addrs())), redlock.WithBackoff(50*time.Millisecond, 100*time.Millisecond))
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := waiter.Semaphore(name, 2).Acquire(actx)
	if err != nil {
		t.Fatal(err)
	}
	queue := redlock.WaitKey(redlock.SemaphoreKey(name))
	var queued int64
	for _, c := range cs {
		queued += c.ZCard(ctx, queue).Val()
	}
	if queued == 0 {
		t.Fatal("the waiter's call left no registration to take off: the test tests nothing")
	}
	settle(waiter) // Acquire returns at a quorum: its last vote (an EVAL) must not count as the Unlock's
	before, err := redistest.Calls(ctx, cs, "eval")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Unlock returns at a quorum of replies: the last master's release may
	// land after it (it failed so in make test). Each release takes the
	// call off its master's queue: count once every queue is empty.
	deadline := time.Now().Add(2 * time.Second)
	for _, c := range cs {
		for c.ZCard(ctx, queue).Val() != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	after, err := redistest.Calls(ctx, cs, "eval")
	if err != nil {
		t.Fatal(err)
	}
	if n := after - before; n != int64(len(cs)) {
		t.Errorf("Unlock sent %d scripts to %d masters; want one each", n, len(cs))
	}
	for i, c := range cs {
		if n := c.ZCard(ctx, queue).Val(); n != 0 {
			t.Errorf("master %d: %d entries left in the queue after the Unlock; want the call's taken off", i, n)
		}
	}
}

// takePermits takes n permits of s, each with TryAcquire.
func takePermits(t *testing.T, ctx context.Context, s *redlock.Semaphore, n int) []*redlock.Lock {
	t.Helper()
	var ls []*redlock.Lock
	for range n {
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire with %d held: %v", len(ls), err)
		}
		ls = append(ls, l)
	}
	return ls
}

// wakeOnly is a backoff so long that a waiting call tries only when a
// release wakes it, within a test.
var wakeOnly = redlock.WithBackoff(5*time.Second, 10*time.Second)

// oneHeld returns 3 masters, a new name whose 1 permit is held (first),
// and a context for the test.
func oneHeld(t *testing.T, timeout time.Duration) (cs []*redis.Client, name string, ctx context.Context, first *redlock.Lock) {
	t.Helper()
	cs = clients(t, masters().Addrs()[:3])
	name = testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	first, err := newRedlock(t, nodesOf(t, cs)).Semaphore(name, 1).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return cs, name, ctx, first
}

// wrapped returns the Nodes of cs, each wrapped by wrap.
func wrapped(t *testing.T, cs []*redis.Client, wrap func(redlock.Node) redlock.Node) []redlock.Node {
	var ns []redlock.Node
	for _, n := range nodesOf(t, cs) {
		ns = append(ns, wrap(n))
	}
	return ns
}

// evalNode counts the scripts its Redlock sends the master, and with sent
// set says what each was for there.
type evalNode struct {
	redlock.Node
	evals *atomic.Int64
	sent  *sentLog
}

func (n evalNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	for _, c := range cmds {
		if c.Args[0] == "eval" {
			n.evals.Add(1)
			if n.sent != nil {
				step, _, _ := c.About()
				n.sent.add(n.Name() + " " + step)
			}
		}
	}
	n.Node.Exec(ctx, cmds)
}

// sentLog lists what a test's Nodes sent, each with when, for a failure
// to show.
type sentLog struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func (l *sentLog) add(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%v %s", time.Since(l.start).Round(time.Microsecond), what))
}

// reset empties l and counts time from now.
func (l *sentLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start, l.lines = time.Now(), nil
}

func (l *sentLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "; ")
}

// TestSemaphoreLoopQueuedByRelease: a client that gives its permit back,
// having waited for it, and at once asks for one again while another call
// waits is queued again by the release itself, behind the call it woke:
// its next Acquire sends nothing until a release wakes it.
func TestSemaphoreLoopQueuedByRelease(t *testing.T) {
	cs, name, ctx, first := oneHeld(t, 10*time.Second)
	var evals atomic.Int64
	sent := &sentLog{}
	counted := wrapped(t, cs, func(n redlock.Node) redlock.Node { return evalNode{Node: n, evals: &evals, sent: sent} })
	lr := newRedlock(t, counted, wakeOnly)
	loop := lr.Semaphore(name, 1)
	other := newRedlock(t, nodesOf(t, cs), wakeOnly).Semaphore(name, 1)
	held := make(chan *redlock.Lock, 2)
	acquire := func(s *redlock.Semaphore) {
		l, err := s.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		held <- l
	}
	go acquire(loop)
	time.Sleep(200 * time.Millisecond) // queued first
	go acquire(other)
	time.Sleep(200 * time.Millisecond)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mine := <-held // woken by the release
	if mine == nil {
		t.FailNow()
	}
	// Acquire returns at a quorum: its last vote, or a failed attempt's
	// rollback, may still be on its way (an acquire counted here failed
	// the test once in 300 runs beside two busy loops).
	settle(lr)
	evals.Store(0)
	sent.reset()
	if err := mine.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	go acquire(loop)
	theirs := <-held // woken by the loop's release
	if theirs == nil {
		t.FailNow()
	}
	time.Sleep(200 * time.Millisecond)
	if n := evals.Load(); n != int64(len(cs)) {
		t.Errorf("the Unlock and the Acquire after it sent %d scripts to %d masters while another call took the permit; want one each: the release, which queues the call again (sent: %v)", n, len(cs), sent)
	}
	released := time.Now()
	if err := theirs.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	again := <-held
	if again == nil {
		t.FailNow()
	}
	if d := time.Since(released); d > time.Second {
		t.Errorf("the loop's Acquire got the permit %v after it came back; want a wake-up, well before its 5s backoff", d)
	}
	again.Unlock(ctx)
}

// TestSemaphoreWakeNamesSlot: a release's wake-up names the slot it freed,
// and the call it wakes asks for that one: one vote per master, not first
// the slot it asked for before, still held.
func TestSemaphoreWakeNamesSlot(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	name := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ls := takePermits(t, ctx, newRedlock(t, nodesOf(t, cs)).Semaphore(name, 2), 2)
	var evals atomic.Int64
	counted := wrapped(t, cs, func(n redlock.Node) redlock.Node { return evalNode{Node: n, evals: &evals} })
	// Its first attempt asks for slot 0 (a new Semaphore's first), held.
	wr := newRedlock(t, counted, wakeOnly)
	waiter := wr.Semaphore(name, 2)
	held := make(chan *redlock.Lock, 1)
	go func() {
		l, err := waiter.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		held <- l
	}()
	time.Sleep(300 * time.Millisecond) // refused, and queued
	settle(wr)                         // its rollback's registrations sent
	evals.Store(0)
	if err := ls[1].Unlock(ctx); err != nil { // slot 1
		t.Fatal(err)
	}
	l := <-held
	if l == nil {
		t.FailNow()
	}
	settle(wr) // the vote a quorum did not wait for
	if n := evals.Load(); n != int64(len(cs)) {
		t.Errorf("the woken call sent %d scripts to %d masters for the slot given back; want one vote each", n, len(cs))
	}
	l.Unlock(ctx)
	ls[0].Unlock(ctx)
}

// TestSemaphoreWokenGiveUpWakesNext: a call that a release woke, and
// that gives up before it takes the permit, passes the wake-up on: the
// call queued behind it gets the permit at once, not at its backoff.
func TestSemaphoreWokenGiveUpWakesNext(t *testing.T) {
	cs, name, ctx, first := oneHeld(t, 15*time.Second)
	var paused atomic.Bool // its attempt's votes wait for their deadline, unsent
	held := wrapped(t, cs, func(n redlock.Node) redlock.Node { return pausedNode{Node: n, paused: &paused} })
	gctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gave, got := twoWaiting(t, ctx, gctx,
		newRedlock(t, held, wakeOnly).Semaphore(name, 1).Acquire,
		newRedlock(t, nodesOf(t, cs), wakeOnly).Semaphore(name, 1).Acquire)
	paused.Store(true)
	if err := first.Unlock(ctx); err != nil { // wakes the first call, whose attempt is held back
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	giveUp()
	paused.Store(false) // its withdrawal goes out
	passedOn(t, gave, got, "permit")
}

// twoWaiting starts two calls that queue one after the other: first
// under gctx (gave: its error), then second under ctx (got: when it held;
// it then unlocks).
func twoWaiting(t *testing.T, ctx, gctx context.Context, first, second func(context.Context, ...redlock.Option) (*redlock.Lock, error)) (gave <-chan error, got <-chan time.Time) {
	t.Helper()
	gv, gt := make(chan error, 1), make(chan time.Time, 1)
	go func() {
		_, err := first(gctx)
		gv <- err
	}()
	time.Sleep(200 * time.Millisecond) // queued first
	go func() {
		l, err := second(ctx)
		if err != nil {
			t.Error(err)
			close(gt)
			return
		}
		gt <- time.Now()
		l.Unlock(ctx)
	}()
	time.Sleep(200 * time.Millisecond)
	return gv, gt
}

// passedOn checks that a woken call gave up (gave: its error), and that the
// call behind it got what it waited for (got: when) well before its
// backoff (wakeOnly): the wake-up was passed on.
func passedOn(t *testing.T, gave <-chan error, got <-chan time.Time, what string) {
	t.Helper()
	if err := <-gave; !errors.Is(err, context.Canceled) {
		t.Fatalf("the woken call gave up with %v; want context.Canceled", err)
	}
	gaveUp := time.Now()
	at, ok := <-got
	if !ok {
		t.FailNow()
	}
	d := at.Sub(gaveUp)
	if d > time.Second {
		t.Errorf("the call behind got the %s %v after the woken one gave up; want the wake-up passed on, well before its 5s backoff", what, d)
	}
	t.Logf("the call behind got the %s %v after the woken one gave up", what, d)
}

// TestSemaphoreFencing: a fenced permit's token is larger than every
// earlier holder's of its slot.
func TestSemaphoreFencing(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	s := r.Semaphore(testKey(t), 2)
	ctx := context.Background()
	var last uint64
	for i := range 4 {
		l, err := s.TryAcquire(ctx, redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("permit %d: token %d, not above the previous %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemaphoreWakeUp: a permit given back in one process wakes an
// Acquire waiting in another at once, through the masters' queue of
// waiting calls, not by polling: the waiter's backoff is seconds long,
// and while it waits it sends next to nothing (counted on the masters,
// INFO commandstats).
func TestSemaphoreWakeUp(t *testing.T) {
	c := redistest.StartT(t, 3, redistest.Options{})
	cs := clients(t, c.Addrs())
	name := testKey(t)
	ctx := context.Background()
	ls := takePermits(t, ctx, newRedlock(t, nodesOf(t, cs)).Semaphore(name, 2), 2)
	waiter := newRedlock(t, nodesOf(t, clients(t, c.Addrs())), redlock.WithBackoff(5*time.Second, 10*time.Second))
	got := make(chan error, 1)
	var at time.Time
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
		defer cancel()
		l, err := waiter.Semaphore(name, 2).Acquire(ctx)
		at = time.Now()
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter's first attempt and its registration
	before, err := redistest.Calls(ctx, cs, "eval")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	after, err := redistest.Calls(ctx, cs, "eval")
	if err != nil {
		t.Fatal(err)
	}
	if n := after - before; n > 0 {
		t.Errorf("the waiting Acquire sent %d scripts in 1s while it waited; want none: it waits for a wake-up", n)
	}
	released := time.Now()
	if err := ls[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire after a permit came back: %v", err)
	}
	if d := at.Sub(released); d > time.Second {
		t.Errorf("Acquire got the permit %v after it came back; want a wake-up, well before its 5s backoff", d)
	}
	ls[1].Unlock(ctx)
}

// TestSemaphoreFair: clients in processes of their own that cycle through
// the permits (take one, use it briefly, give it back, take one again)
// starve no waiting client: each gets a permit in turn.
func TestSemaphoreFair(t *testing.T) {
	const clientsN, permits, window = 5, 2, 3 * time.Second
	c := redistest.StartT(t, 3, redistest.Options{})
	name := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var mu sync.Mutex
	got := make([]int, clientsN)
	var wg sync.WaitGroup
	for i := range clientsN {
		s := newRedlock(t, nodesOf(t, clients(t, c.Addrs())), redlock.WithBackoff(200*time.Millisecond, 400*time.Millisecond)).Semaphore(name, permits)
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := s.Acquire(ctx, redlock.WithTTL(2*time.Second))
				if err != nil {
					continue
				}
				mu.Lock()
				got[i]++
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				_ = l.Unlock(context.Background())
			}
		})
	}
	wg.Wait()
	t.Logf("permits taken per client in %v: %v", window, got)
	total := 0
	for _, n := range got {
		total += n
	}
	for i, n := range got {
		if n < total/clientsN/4 {
			t.Errorf("client %d took %d permits of %d in %v; want at least a quarter of its share: %v", i, n, total, window, got)
		}
	}
}

// TestSemaphoreOnSentinelMasters: two Sentinel-managed masters and a plain
// one: 2 permits, one fenced, a third refused, and the slots on the
// primaries.
func TestSemaphoreOnSentinelMasters(t *testing.T) {
	start := func(opts redistest.Options) *redistest.Server { return redistest.StartServerT(t, opts) }
	var urls []string
	var primaries []*redistest.Server
	for _, master := range []string{"m1", "m2"} {
		p := start(redistest.Options{})
		host, port, _ := net.SplitHostPort(p.Addr())
		start(redistest.Options{Args: []string{"--replicaof", host, port}})
		s := start(redistest.Options{Sentinel: map[string]string{master: p.Addr()}})
		primaries = append(primaries, p)
		urls = append(urls, "redis+sentinel://"+s.Addr()+"?master_name="+master)
	}
	urls = append(urls, masters().Addrs()[0])
	r, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	name := testKey(t)
	s := r.Semaphore(name, 2)
	a, err := s.TryAcquire(ctx, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("a third permit of 2 on Sentinel-managed masters: %v", err)
	}
	for _, p := range primaries {
		// TryAcquire returns at a quorum: the last EVAL may be on its way.
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		var n int
		for end := time.Now().Add(2 * time.Second); n < 2 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			n = len(semHolders(t, []*redis.Client{c}, name)[0])
		}
		c.Close()
		if n < 2 {
			t.Errorf("primary %s holds %d permits, want 2", p.Addr(), n)
		}
	}
	for _, l := range []*redlock.Lock{a, b} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemaphoreOptions: WithRetry bounds Acquire's attempts; with
// WithReplicaConfirm a permit counts once the replicas have it, and not
// while they lag past the node timeout; behind a restart gate longer than
// the masters' uptime no vote counts (ErrRestartGate); an Observer sees
// the calls as Acquire and TryAcquire.
func TestSemaphoreOptions(t *testing.T) {
	ctx := context.Background()
	t.Run("retry", func(t *testing.T) {
		cs := clients(t, masters().Addrs()[:3])
		r := newRedlock(t, nodesOf(t, cs), redlock.WithBackoff(time.Millisecond, 2*time.Millisecond))
		s := r.Semaphore(testKey(t), 1)
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		start := time.Now()
		if _, err := s.Acquire(ctx, redlock.WithRetry(3)); !errors.Is(err, redlock.ErrNotObtained) || time.Since(start) > 2*time.Second {
			t.Errorf("Acquire WithRetry(3) while the only permit is held: %v after %v", err, time.Since(start))
		}
	})
	t.Run("replicas", func(t *testing.T) {
		ms := startReplicated(t, 3)
		r := newRedlock(t, replicatedNodes(t, ms), redlock.WithNodeTimeout(300*time.Millisecond))
		s := r.Semaphore(testKey(t), 2)
		l, err := s.TryAcquire(ctx, redlock.WithReplicaConfirm(1))
		if err != nil {
			t.Fatalf("TryAcquire WithReplicaConfirm(1), replicas in sync: %v", err)
		}
		l.Unlock(ctx)
		setReplicationDelay(ms, time.Second)
		defer setReplicationDelay(ms, 0)
		if _, err := s.TryAcquire(ctx, redlock.WithReplicaConfirm(1)); !errors.Is(err, redlock.ErrNotReplicated) {
			t.Errorf("TryAcquire WithReplicaConfirm(1), replicas 1 s behind: %v; want ErrNotReplicated", err)
		}
	})
	t.Run("gate", func(t *testing.T) {
		c := redistest.StartT(t, 3, redistest.Options{})
		r := newRedlock(t, nodesOf(t, clients(t, c.Addrs())))
		_, err := r.Semaphore(testKey(t), 2).TryAcquire(ctx, redlock.WithTTL(time.Second), redlock.WithRestartGate(time.Hour))
		if !errors.Is(err, redlock.ErrRestartGate) {
			t.Errorf("TryAcquire behind a gate of an hour on fresh masters: %v; want ErrRestartGate", err)
		}
	})
	t.Run("observer", func(t *testing.T) {
		var rec recorder
		r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:3])), redlock.WithObserver(&rec))
		s := r.Semaphore(testKey(t), 1)
		l, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.TryAcquire(ctx)
		l.Unlock(ctx)
		events := strings.Join(rec.Take(), "\n")
		if !strings.Contains(events, "start Acquire ") || !strings.Contains(events, "start TryAcquire ") {
			t.Errorf("the observer saw:\n%s\nwant Acquire and TryAcquire calls among them", events)
		}
	})
}
