package redlock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// rwKey is the key an RWMutex named name keeps on the masters (see
// Redlock.RWMutex): "rw:{name}" for a name without braces.
func rwKey(name string) string { return "rw:{" + name + "}" }

// rwEntries returns, per master, the fields of the RWMutex's hash with the
// prefix given ("r": readers, "w": writers, "c": claims).
func rwEntries(t *testing.T, cs []*redis.Client, name, prefix string) [][]string {
	t.Helper()
	out := make([][]string, len(cs))
	for i, c := range cs {
		fs, err := c.HKeys(context.Background(), rwKey(name)).Result()
		if err != nil {
			t.Fatalf("master %d: %v", i, err)
		}
		for _, f := range fs {
			if f[:1] == prefix {
				out[i] = append(out[i], f)
			}
		}
	}
	return out
}

func mustRLock(t *testing.T, m *redlock.RWMutex, opts ...redlock.Option) *redlock.Lock {
	t.Helper()
	l, err := m.TryRLock(context.Background(), opts...)
	if err != nil {
		t.Fatalf("TryRLock: %v", err)
	}
	return l
}

func unlock(t *testing.T, l *redlock.Lock) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

func refusedRW(t *testing.T, what string, l *redlock.Lock, err error) {
	t.Helper()
	if err == nil {
		l.Unlock(context.Background())
		t.Fatalf("%s: obtained, want refused", what)
	}
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("%s: %v, want ErrNotObtained", what, err)
	}
}

// TestRWMutexReadersShareWriterExcludes: readers hold together; a writer
// is refused while any reader holds, and holds alone.
func TestRWMutexReadersShareWriterExcludes(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	ctx := context.Background()
	m := r.RWMutex(testKey(t))
	a, b := mustRLock(t, m), mustRLock(t, m)
	l, err := m.TryLock(ctx)
	refusedRW(t, "writer beside two readers", l, err)
	unlock(t, a)
	l, err = m.TryLock(ctx)
	refusedRW(t, "writer beside one reader", l, err)
	unlock(t, b)
	w, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("writer once the readers left: %v", err)
	}
	l, err = m.TryRLock(ctx)
	refusedRW(t, "reader beside the writer", l, err)
	l, err = m.TryLock(ctx)
	refusedRW(t, "second writer", l, err)
	if w.Key() != m.Name() {
		t.Fatalf("Key() = %q, want the RWMutex's name %q", w.Key(), m.Name())
	}
	unlock(t, w)
	unlock(t, mustRLock(t, m))
}

// cutNode is a master its client cannot reach while cut is set: every
// command fails unsent.
type cutNode struct {
	redlock.Node
	cut *atomic.Bool
}

var errCut = errors.New("cut off (test)")

func (n cutNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	if n.cut.Load() {
		for _, c := range cmds {
			c.Err = errCut
		}
		return
	}
	n.Node.Exec(ctx, cmds)
}

// TestRWMutexDifferentMajorities: a reader and a writer that each reach a
// different majority of 3 masters (they share one) never both hold, in
// either order.
func TestRWMutexDifferentMajorities(t *testing.T) {
	addrs := masters().Addrs()[:3]
	ctx := context.Background()
	for _, readerFirst := range []bool{true, false} {
		cs := clients(t, addrs)
		var cut0, cut2, never atomic.Bool
		cut0.Store(true)
		cut2.Store(true)
		ns := nodesOf(t, cs)
		// The reader's Redlock cannot reach master 2, the writer's master 0.
		rr := newRedlock(t, []redlock.Node{ns[0], ns[1], cutNode{ns[2], &cut2}})
		rw := newRedlock(t, []redlock.Node{cutNode{nodesOf(t, clients(t, addrs))[0], &cut0}, cutNode{nodesOf(t, clients(t, addrs))[1], &never}, nodesOf(t, clients(t, addrs))[2]})
		name := testKey(t)
		if readerFirst {
			rd := mustRLock(t, rr.RWMutex(name))
			l, err := rw.RWMutex(name).TryLock(ctx)
			refusedRW(t, "writer on masters 1, 2 while a reader holds 0, 1", l, err)
			unlock(t, rd)
		} else {
			w, err := rw.RWMutex(name).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			l, err := rr.RWMutex(name).TryRLock(ctx)
			refusedRW(t, "reader on masters 0, 1 while a writer holds 1, 2", l, err)
			unlock(t, w)
		}
	}
}

// TestRWMutexReaderExpiryIsItsOwn: a 1 s reader that crashes (never
// unlocks) ends neither an 8 s reader's hold nor, alone, keeps a writer
// out past its 1 s.
func TestRWMutexReaderExpiryIsItsOwn(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()

	name := testKey(t)
	m := r.RWMutex(name)
	mustRLock(t, m, redlock.WithTTL(time.Second)) // crashes: never unlocked
	long := mustRLock(t, m, redlock.WithTTL(8*time.Second))
	settle(r) // the 1 s reader's last vote, landing late, would outlive the sleep
	time.Sleep(1200 * time.Millisecond)
	l, err := m.TryLock(ctx)
	refusedRW(t, "writer while the 8 s reader holds", l, err)
	settle(r)
	// The writer's attempt ran on every master: each dropped the reader
	// that expired there, and kept the other.
	for i, rs := range rwEntries(t, cs, name, "r") {
		if len(rs) != 1 || rs[0] != "r"+long.Value() {
			t.Fatalf("master %d keeps readers %v 1.2 s in, want the 8 s reader's alone", i, rs)
		}
	}
	if time.Until(long.Until()) < 6*time.Second {
		t.Fatalf("8 s reader's Until is %v away", time.Until(long.Until()))
	}
	unlock(t, long)

	m = r.RWMutex(testKey(t))
	mustRLock(t, m, redlock.WithTTL(time.Second))
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	w, err := m.Lock(wctx, redlock.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatalf("writer behind a crashed 1 s reader: %v", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("writer got in %v after a 1 s reader crashed", d)
	}
	unlock(t, w)
}

// TestRWMutexWriterNotStarved: a writer behind 4 readers that loop with
// overlapping holds gets the lock within a few of their holds: its claim
// keeps new readers out while the holding ones drain.
func TestRWMutexWriterNotStarved(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	m := r.RWMutex(testKey(t))
	const hold = 100 * time.Millisecond
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reads atomic.Int64
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * hold / 4) // overlapping holds
			for ctx.Err() == nil {
				l, err := m.RLock(ctx, redlock.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
				if err != nil {
					continue
				}
				reads.Add(1)
				time.Sleep(hold)
				l.Unlock(context.Background())
			}
		}()
	}
	defer func() { stop(); wg.Wait(); settle(r) }()
	time.Sleep(2 * hold)
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	w, err := m.Lock(wctx, redlock.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatalf("writer behind 4 looping readers (%d reads): %v", reads.Load(), err)
	}
	took := time.Since(start)
	unlock(t, w)
	if took > 8*hold {
		t.Fatalf("writer waited %v behind readers holding %v each", took, hold)
	}
}

// TestRWMutexGaveUpWriterLeavesNoClaim: a writer that gives up (its ctx
// ends, or its retries run out) takes its claim away: a new reader gets
// in at once, and no master keeps a claim.
func TestRWMutexGaveUpWriterLeavesNoClaim(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	for _, how := range []string{"ctx", "retries"} {
		name := testKey(t)
		m := r.RWMutex(name)
		rd := mustRLock(t, m)
		limit := 400 * time.Millisecond
		opts := []redlock.Option{redlock.WithBackoff(20*time.Millisecond, 40*time.Millisecond)}
		if how == "retries" {
			limit = 5 * time.Second
			opts = append(opts, redlock.WithRetry(4))
		}
		wctx, cancel := context.WithTimeout(ctx, limit)
		l, err := m.Lock(wctx, opts...)
		cancel()
		refusedRW(t, "writer behind a reader ("+how+")", l, err)
		if how == "retries" && errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("4 attempts outlasted 5 s")
		}
		settle(r)
		for i, c := range rwEntries(t, cs, name, "c") {
			if len(c) != 0 {
				t.Fatalf("%s: master %d keeps claims %v after the writer gave up", how, i, c)
			}
		}
		unlock(t, mustRLock(t, m))
		unlock(t, rd)
	}
}

// TestRWMutexClaimKeepsReadersOut: while a writer waits, a new reader is
// refused; the claim is on the masters that refused the writer.
func TestRWMutexClaimKeepsReadersOut(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	name := testKey(t)
	m := r.RWMutex(name)
	rd := mustRLock(t, m)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		w, err := m.Lock(wctx, redlock.WithBackoff(20*time.Millisecond, 40*time.Millisecond))
		if err == nil {
			err = w.Unlock(ctx)
		}
		done <- err
	}()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := 0
		for _, c := range rwEntries(t, cs, name, "c") {
			n += len(c)
		}
		if n == len(cs) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("claims on %d of %d masters 2 s after the writer queued", n, len(cs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	l, err := m.TryRLock(ctx)
	refusedRW(t, "new reader while a writer waits", l, err)
	unlock(t, rd)
	if err := <-done; err != nil {
		t.Fatalf("writer once the reader left: %v", err)
	}
	cancel()
}

// TestRWMutexOptions: options that do not apply are a *ConfigError naming
// them.
func TestRWMutexOptions(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	ctx := context.Background()
	m := r.RWMutex(testKey(t))
	for _, c := range []struct {
		field string
		call  func() (*redlock.Lock, error)
	}{
		{"WithOwner", func() (*redlock.Lock, error) { return m.RLock(ctx, redlock.WithOwner("a")) }},
		{"WithOwner", func() (*redlock.Lock, error) { return m.TryLock(ctx, redlock.WithOwner("a")) }},
		{"WithFencing", func() (*redlock.Lock, error) { return m.TryRLock(ctx, redlock.WithFencing()) }},
		{"key", func() (*redlock.Lock, error) { return r.RWMutex("").RLock(ctx) }},
		{"RWMutex", func() (*redlock.Lock, error) { return (*redlock.RWMutex)(nil).Lock(ctx) }},
	} {
		_, err := c.call()
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Fatalf("got %v, want a *ConfigError naming %s", err, c.field)
		}
	}
}

// TestRWMutexFencing: writers' tokens strictly increase, across readers
// in between.
func TestRWMutexFencing(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	ctx := context.Background()
	m := r.RWMutex(testKey(t))
	var last uint64
	for range 3 {
		w, err := m.Lock(ctx, redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if w.Fence() <= last {
			t.Fatalf("writer's token %d after %d", w.Fence(), last)
		}
		last = w.Fence()
		unlock(t, w)
		unlock(t, mustRLock(t, m))
	}
}

// TestRWMutexExtendAndAutoExtend: a reader and a writer extend, renew
// with auto-extend past their TTL, and keep Until and Done as a mutex's.
func TestRWMutexExtendAndAutoExtend(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	ctx := context.Background()
	m := r.RWMutex(testKey(t))
	rd, err := m.RLock(ctx, redlock.WithTTL(400*time.Millisecond), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	select {
	case <-rd.Done():
		t.Fatalf("auto-extended reader lost: %v", context.Cause(rd.Context()))
	default:
	}
	l, err := m.TryLock(ctx)
	refusedRW(t, "writer while an auto-extended reader holds", l, err)
	if err := rd.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(rd.Until()); d < 4*time.Second || d > 5*time.Second {
		t.Fatalf("Until %v away after Extend(5 s)", d)
	}
	unlock(t, rd)

	w, err := m.Lock(ctx, redlock.WithTTL(400*time.Millisecond), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	l, err = m.TryRLock(ctx)
	refusedRW(t, "reader while an auto-extended writer holds", l, err)
	if err := w.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	unlock(t, w)
}

// TestRWMutexNameAlsoMutex: a name used as a mutex and as an RWMutex names
// two locks.
func TestRWMutexNameAlsoMutex(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	ctx := context.Background()
	name := testKey(t)
	mu, err := r.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("RWMutex writer beside the mutex of the same name: %v", err)
	}
	unlock(t, w)
	unlock(t, mu)
}

// evalCounted returns a Redlock over the shared masters whose clients
// count the EVALs they send.
func evalCounted(t *testing.T) (*redlock.Redlock, *sentCounter) {
	t.Helper()
	sc := &sentCounter{Name: "eval"}
	cs := clients(t, masters().Addrs())
	for _, c := range cs {
		c.AddHook(sc)
	}
	return newRedlock(t, nodesOf(t, cs)), sc
}

// quiet fails the test when sc counts a request in the next d: the waiting
// calls do not poll.
func quiet(t *testing.T, sc *sentCounter, d time.Duration, what string) {
	t.Helper()
	before := sc.N.Load()
	time.Sleep(d)
	if n := sc.N.Load() - before; n != 0 {
		t.Fatalf("%s sent %d EVALs in %v: they poll", what, n, d)
	}
}

// slow is a backoff whose first step is far longer than a wake-up takes.
var slow = redlock.WithBackoff(10*time.Second, 20*time.Second)

// TestRWMutexWriterReleaseWakesEveryReader: readers of another process
// waiting behind a writer sleep (they send nothing) and are woken together
// by its Unlock, long before their backoff.
func TestRWMutexWriterReleaseWakesEveryReader(t *testing.T) {
	ctx := context.Background()
	ra := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	rb, sc := evalCounted(t)
	name := testKey(t)
	w, err := ra.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 3)
	for range 3 {
		go func() {
			l, err := rb.RWMutex(name).RLock(ctx, slow)
			if err != nil {
				t.Error(err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			<-time.After(200 * time.Millisecond)
			l.Unlock(ctx)
		}()
	}
	time.Sleep(300 * time.Millisecond) // their attempts and registrations
	quiet(t, sc, time.Second, "readers waiting behind a writer")
	unlocked := time.Now()
	unlock(t, w)
	for range 3 {
		at := <-got
		if d := at.Sub(unlocked); d > time.Second {
			t.Fatalf("a reader got in %v after the writer's Unlock", d)
		}
	}
	settle(rb)
}

// TestRWMutexLastReaderWakesWriter: a writer of another process waiting
// behind readers sleeps, and the last reader's Unlock wakes it.
func TestRWMutexLastReaderWakesWriter(t *testing.T) {
	ctx := context.Background()
	ra := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	rb, sc := evalCounted(t)
	name := testKey(t)
	m := ra.RWMutex(name)
	a, b := mustRLock(t, m), mustRLock(t, m)
	got := make(chan time.Time, 1)
	go func() {
		w, err := rb.RWMutex(name).Lock(ctx, slow)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		w.Unlock(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	quiet(t, sc, time.Second, "a writer waiting behind readers")
	unlock(t, a)
	select {
	case <-got:
		t.Fatal("writer got in beside a reader")
	case <-time.After(200 * time.Millisecond):
	}
	unlocked := time.Now()
	unlock(t, b)
	if d := (<-got).Sub(unlocked); d > time.Second {
		t.Fatalf("writer got in %v after the last reader's Unlock", d)
	}
	settle(rb)
}

// TestRWMutexWokenWriterGiveUpWakesNext: the last reader's Unlock wakes
// the first waiting writer and takes its entry off the queue. When that
// writer gives up before it tries (here its wake-up is lost on the way: a
// slow client), the writer behind it is woken at once, not left asleep
// until its backoff with the lock free.
func TestRWMutexWokenWriterGiveUpWakesNext(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	name := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rd := mustRLock(t, newRedlock(t, nodesOf(t, cs)).RWMutex(name))
	var deaf atomic.Bool // its wake-ups are dropped
	slow := wrapped(t, cs, func(n redlock.Node) redlock.Node { return deafNode{Node: n, deaf: &deaf} })
	gctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gave, got := twoWaiting(t, ctx, gctx,
		newRedlock(t, slow, wakeOnly).RWMutex(name).Lock,
		newRedlock(t, nodesOf(t, cs), wakeOnly).RWMutex(name).Lock)
	deaf.Store(true)
	unlock(t, rd) // wakes the first writer, which does not hear it
	time.Sleep(100 * time.Millisecond)
	giveUp()
	passedOn(t, gave, got, "lock")
}

// TestRWMutexWriterUnlockWakesOneWriter: a woken writer that took the lock
// without one master (its vote there failed) has no entry left on that
// master's queue. Its Unlock there takes its call off the queue, then
// releases: the release wakes the next writer, and the withdrawal must not
// wake one too, as a give-up's does (the writer after that one would lose
// its place on that master for a wake-up it cannot use).
func TestRWMutexWriterUnlockWakesOneWriter(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	name := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, c := range cs { // connected: the reader's vote reaches every master
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rr := newRedlock(t, nodesOf(t, cs))
	rd := mustRLock(t, rr.RWMutex(name))
	settle(rr) // TryRLock returns at the quorum; the last vote may still be in flight
	for i, rs := range rwEntries(t, cs, name, "r") {
		if len(rs) != 1 {
			t.Fatalf("master %d holds readers %q; want the one", i, rs)
		}
	}
	var cut atomic.Bool
	ns := nodesOf(t, cs)
	first := newRedlock(t, []redlock.Node{ns[0], ns[1], cutNode{ns[2], &cut}}, wakeOnly).RWMutex(name)
	held := make(chan *redlock.Lock, 3)
	wait := func(m *redlock.RWMutex) {
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			held <- l
		}()
		time.Sleep(200 * time.Millisecond) // queued
	}
	wait(first)
	wait(newRedlock(t, nodesOf(t, cs), wakeOnly).RWMutex(name))
	wait(newRedlock(t, nodesOf(t, cs), wakeOnly).RWMutex(name))
	queue := redlock.RWMutexKey(name) + ":waiters"
	third := make([]string, len(cs)) // the last writer's entry on each master
	for i, c := range cs {
		q := c.ZRange(ctx, queue, 0, -1).Val()
		if len(q) != 3 {
			t.Fatalf("master %d queues %d writers; want 3", i, len(q))
		}
		third[i] = q[2]
	}
	cut.Store(true)
	unlock(t, rd) // wakes the first writer; its vote on master 2 fails
	w1 := <-held
	if w1 == nil {
		t.FailNow()
	}
	cut.Store(false)
	unlock(t, w1)
	w2 := <-held
	if w2 == nil {
		t.FailNow()
	}
	for i, c := range cs {
		if err := c.ZScore(ctx, queue, third[i]).Err(); err != nil {
			t.Errorf("master %d: the third writer's entry: %v; want it still queued while the second holds the lock", i, err)
		}
	}
	unlocked := time.Now()
	unlock(t, w2)
	if w3 := <-held; w3 != nil {
		if d := time.Since(unlocked); d > time.Second {
			t.Errorf("the third writer got the lock %v after the second's Unlock; want it woken", d)
		}
		unlock(t, w3)
	}
}

// deafNode drops the wake-ups its subscriptions receive while deaf is set.
type deafNode struct {
	redlock.Node
	deaf *atomic.Bool
}

func (n deafNode) Subscribe(ctx context.Context, channel string, deliver func(redlock.Message)) (redlock.Subscription, error) {
	return n.Node.Subscribe(ctx, channel, func(m redlock.Message) {
		if !n.deaf.Load() {
			deliver(m)
		}
	})
}

// TestRWMutexFencingDefault: a Redlock made WithFencing gives its writers
// tokens, and its readers none (not a *ConfigError): the default applies
// to the calls that take tokens.
func TestRWMutexFencingDefault(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithFencing())
	ctx := context.Background()
	m := r.RWMutex(testKey(t))
	rd, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatalf("reader of a Redlock made WithFencing: %v", err)
	}
	if rd.Fence() != 0 {
		t.Fatalf("reader got token %d", rd.Fence())
	}
	unlock(t, rd)
	w, err := m.TryLock(ctx)
	if err != nil || w.Fence() == 0 {
		t.Fatalf("writer of a Redlock made WithFencing: token %d, %v", w.Fence(), err)
	}
	unlock(t, w)
}

// TestRWMutexOnClusterMasters: on masters that are each a Redis Cluster,
// readers share, a writer excludes, waits and is woken by this process's
// last reader's Unlock, and takes a fence token: the derived keys the
// scripts name (the queues, the fence counter) are in the lock's slot.
func TestRWMutexOnClusterMasters(t *testing.T) {
	r := newRedlock(t, clusterNodes(clusterMasters(t)))
	ctx := context.Background()
	m := r.RWMutex(testKey(t))
	a, b := mustRLock(t, m), mustRLock(t, m)
	l, err := m.TryLock(ctx)
	refusedRW(t, "writer beside readers on Cluster masters", l, err)
	got := make(chan error, 1)
	go func() {
		w, err := m.Lock(ctx, redlock.WithFencing(), slow)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	unlock(t, a)
	unlock(t, b)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("writer not woken within 1 s of the last reader's Unlock on Cluster masters")
	}
}

// TestRWMutexOnSentinelMasters: two Sentinel-managed masters and a plain
// one: readers share, the writer excludes, and the hash is on the
// primaries.
func TestRWMutexOnSentinelMasters(t *testing.T) {
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
	m := r.RWMutex(name)
	a, b := mustRLock(t, m), mustRLock(t, m)
	l, err := m.TryLock(ctx)
	refusedRW(t, "writer beside readers on Sentinel-managed masters", l, err)
	for _, p := range primaries {
		// TryRLock returns at a quorum: the last EVAL may be on its way.
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		var n int64
		for end := time.Now().Add(2 * time.Second); n < 2 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			n, err = c.HLen(ctx, rwKey(name)).Result()
		}
		c.Close()
		if err != nil || n < 2 {
			t.Errorf("primary %s holds %d entries of the read-write lock, want its 2 readers (%v)", p.Addr(), n, err)
		}
	}
	unlock(t, a)
	unlock(t, b)
	w, err := m.TryLock(ctx, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, w)
}

// TestRWMutexReplicaConfirmAndGate: readers and a fenced writer whose
// votes their masters' replicas confirm (WithReplicaConfirm), and behind
// the restart gate (WithRestartGate): on masters up long enough, they
// hold as without them; a gate longer than the masters' uptime refuses
// every vote with ErrRestartGate.
func TestRWMutexReplicaConfirmAndGate(t *testing.T) {
	ms := startReplicated(t, 3)
	r := newRedlock(t, replicatedNodes(t, ms), redlock.WithReplicaConfirm(1))
	ctx := context.Background()
	m := r.RWMutex(testKey(t))
	a, b := mustRLock(t, m), mustRLock(t, m)
	l, err := m.TryLock(ctx)
	refusedRW(t, "writer beside replica-confirmed readers", l, err)
	unlock(t, a)
	unlock(t, b)
	w, err := m.TryLock(ctx, redlock.WithFencing())
	if err != nil || w.Fence() == 0 {
		t.Fatalf("replica-confirmed fenced writer: token %d, %v", w.Fence(), err)
	}
	unlock(t, w)

	g := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	gm := g.RWMutex(testKey(t))
	rd, err := gm.TryRLock(ctx, redlock.WithTTL(time.Second), redlock.WithRestartGate(time.Second))
	if err != nil {
		t.Fatalf("reader behind a 1 s restart gate: %v", err)
	}
	unlock(t, rd)
	wr, err := gm.TryLock(ctx, redlock.WithTTL(time.Second), redlock.WithRestartGate(time.Second), redlock.WithFencing(), redlock.WithAutoExtend())
	if err != nil {
		t.Fatalf("fenced writer behind a 1 s restart gate: %v", err)
	}
	unlock(t, wr)
	_, err = gm.TryRLock(ctx, redlock.WithRestartGate(24*365*time.Hour))
	if !errors.Is(err, redlock.ErrRestartGate) {
		t.Fatalf("reader behind a gate of a year: %v, want ErrRestartGate", err)
	}
}

// TestRWMutexReadersWokenOnClusterMasters: on Cluster masters a writer's
// Unlock wakes readers waiting in another Redlock (rw_wake.lua publishes
// on the waiters' shard channels, as handon.lua does), well before their
// backoff.
func TestRWMutexReadersWokenOnClusterMasters(t *testing.T) {
	cl := clusterMasters(t)
	writer, readers := newRedlock(t, clusterNodes(cl)), newRedlock(t, clusterNodes(cl))
	ctx := context.Background()
	name := testKey(t)
	w, err := writer.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	for range 2 {
		go func() {
			r, err := readers.RWMutex(name).RLock(ctx, slow)
			if err == nil {
				err = r.Unlock(ctx)
			}
			got <- err
		}()
	}
	time.Sleep(300 * time.Millisecond) // both readers refused and queued
	unlock(t, w)
	for range 2 {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Second):
			t.Fatal("a reader in another Redlock was not woken within 1 s of the writer's Unlock on Cluster masters")
		}
	}
}

// writerBehindReaderOf1 sets up 3 masters with master 2 cut off, so that
// a lock needs masters 0 and 1; a reader of master 1 alone (a Redlock over
// it) holds name there for 10 s, and a writer of all three waits, until
// its claim is on master on. It returns the masters' clients, a Redlock
// over master 0 alone, the writer's Redlock, the reader's lock, and the
// writer's outcome: its Lock's error, else its Unlock's.
func writerBehindReaderOf1(t *testing.T, name string, on int) (cs []*redis.Client, only0, r *redlock.Redlock, rd *redlock.Lock, done <-chan error) {
	t.Helper()
	cs = clients(t, masters().Addrs()[:3])
	ns := nodesOf(t, cs)
	var cut atomic.Bool
	cut.Store(true)
	r = newRedlock(t, []redlock.Node{ns[0], ns[1], cutNode{ns[2], &cut}})
	only0 = newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:1])))
	only1 := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[1:2])))
	ctx := context.Background()
	rd = mustRLock(t, only1.RWMutex(name), redlock.WithTTL(10*time.Second))
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	out := make(chan error, 1)
	go func() {
		w, err := r.RWMutex(name).Lock(wctx, redlock.WithBackoff(20*time.Millisecond, 40*time.Millisecond))
		if err == nil {
			err = w.Unlock(ctx)
		}
		out <- err
	}()
	for deadline := time.Now().Add(2 * time.Second); len(rwEntries(t, cs, name, "c")[on]) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no claim on master %d 2 s after the writer queued", on)
		}
	}
	return cs, only0, r, rd, out
}

// writerIn waits for done, the outcome of writerBehindReaderOf1's writer,
// once the reader left.
func writerIn(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiting writer once the reader left: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiting writer not in 3 s after the reader left")
	}
}

// TestRWMutexClaimOutlivesPartialAdmission: a waiting writer's attempt
// that one master admits and the quorum refuses keeps its claim on the
// master that admitted it, through the attempt's rollback: new readers
// stay out there too. Here master 1 refuses the writer (a reader holds
// it) and master 0 admits it. In rw-minority-pause (2 of 5 masters
// paused), a writer whose admitted votes dropped its claim on those
// masters let readers in behind each failed attempt, and the readers its
// claims refused elsewhere kept it out in turn: nobody held the key for
// 1.3 s of the pause.
func TestRWMutexClaimOutlivesPartialAdmission(t *testing.T) {
	ctx := context.Background()
	name := testKey(t)
	cs, only0, r, rd, done := writerBehindReaderOf1(t, name, 1)
	time.Sleep(100 * time.Millisecond) // a few more attempts, each admitted on master 0
	if c := rwEntries(t, cs, name, "c"); len(c[0]) == 0 {
		t.Fatalf("claims per master %v: master 0 admitted the waiting writer's attempts and kept no claim", c)
	}
	l, err := only0.RWMutex(name).TryRLock(ctx)
	refusedRW(t, "new reader on master 0 while the writer waits", l, err)
	unlock(t, rd)
	writerIn(t, done)
	settle(r)
	for i, c := range rwEntries(t, cs, name, "c") {
		if len(c) != 0 {
			t.Fatalf("master %d keeps claims %v after the writer unlocked", i, c)
		}
	}
}

// TestRWMutexWritersInClaimOrder: a writer is refused where an earlier
// waiting writer's claim lives, whether it waits or tries once, so that
// writers queued on the masters come in in order rather than split the
// masters between them.
func TestRWMutexWritersInClaimOrder(t *testing.T) {
	ctx := context.Background()
	name := testKey(t)
	_, only0, r, rd, done := writerBehindReaderOf1(t, name, 0)
	l, err := only0.RWMutex(name).TryLock(ctx)
	refusedRW(t, "a writer's TryLock on master 0 behind a waiting writer's claim", l, err)
	// A second waiting writer, on master 0 alone: queued behind the first.
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	l, err = only0.RWMutex(name).Lock(sctx, redlock.WithBackoff(20*time.Millisecond, 40*time.Millisecond))
	scancel()
	refusedRW(t, "a later writer's Lock on master 0 behind a waiting writer's claim", l, err)
	unlock(t, rd)
	writerIn(t, done)
	settle(r)
	settle(only0)
	w, err := only0.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("a writer on master 0 once the first writer unlocked: %v", err)
	}
	unlock(t, w)
}

// pausedNode is a master that answers nothing while paused is set: each
// command waits for its batch's context to end (SIGSTOP, seen from the
// client).
type pausedNode struct {
	redlock.Node
	paused *atomic.Bool
}

func (n pausedNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	if n.paused.Load() {
		<-ctx.Done()
		for _, c := range cmds {
			c.Err = ctx.Err()
		}
		return
	}
	n.Node.Exec(ctx, cmds)
}

// TestRWMutexAvailableOnBareQuorum: with 2 masters of 5 answering
// nothing, every lock needs all 3 others. 4 processes that each lock at
// once again, a reader 2 times in 3 and a writer otherwise, holding 5 ms,
// are never all kept out for long: no stretch of 450 ms (TTL 1 s, node
// timeout 100 ms) passes without an acquisition. Longest stretches, 5
// runs idle and 6 beside two busy loops, interleaved: 0.47-1.22 s with
// claims dropped where a writer's attempt was admitted (rw-minority-pause
// in CI: nobody held for 1.4 s); 0.22-0.68 s with claims kept but writers
// unordered (woken together, they split the masters' votes and all rolled
// back); 0.22-0.34 s with writers in claim order.
func TestRWMutexAvailableOnBareQuorum(t *testing.T) {
	var paused atomic.Bool
	paused.Store(true)
	name := testKey(t)
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Second)
	defer stop()
	var mu sync.Mutex
	var got []time.Time
	var wg sync.WaitGroup
	var rls []*redlock.Redlock
	for i := range 4 {
		ns := nodesOf(t, clients(t, masters().Addrs()[:5]))
		r := newRedlock(t, []redlock.Node{ns[0], ns[1], ns[2], pausedNode{ns[3], &paused}, pausedNode{ns[4], &paused}},
			redlock.WithTTL(time.Second), redlock.WithNodeTimeout(100*time.Millisecond))
		rls = append(rls, r)
		m := r.RWMutex(name)
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				lock := m.RLock
				if (n+i)%3 == 2 {
					lock = m.Lock
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				l, err := lock(cctx)
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				got = append(got, time.Now())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				l.Unlock(context.Background())
			}
		})
	}
	wg.Wait()
	for _, r := range rls {
		settle(r)
	}
	end, _ := ctx.Deadline()
	last, longest := end.Add(-3*time.Second), time.Duration(0)
	for _, at := range append(got, end) {
		longest = max(longest, at.Sub(last))
		last = at
	}
	if longest > 450*time.Millisecond {
		t.Fatalf("%d acquisitions in 3 s; the longest stretch without one: %v", len(got), longest)
	}
	t.Logf("%d acquisitions in 3 s; the longest stretch without one: %v", len(got), longest)
}
