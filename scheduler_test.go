package redlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// TestDoStaysExclusive: Do holds a 300 ms lock for 2 s through auto-extend;
// another Redlock never gets it meanwhile, and it is gone afterwards.
//
// A process stalled for most of the TTL (a loaded test machine) rightly
// loses so short a lock; such a run proves nothing either way and is tried
// again, up to three times.
func TestDoStaysExclusive(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	other := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	for try := 1; ; try++ {
		err := doStaysExclusive(t, r, other, cs)
		if err == nil {
			return
		}
		if !errors.Is(err, redlock.ErrLockLost) || try == 3 {
			t.Fatalf("Do: %v", err)
		}
		t.Logf("try %d: the lock was lost (a stalled process?): %v", try, err)
	}
}

func doStaysExclusive(t *testing.T, r, other *redlock.Redlock, cs []*redis.Client) error {
	key := testKey(t)
	ctx := context.Background()
	var stolen atomic.Int64
	var fnDone atomic.Bool // fn returned: Do is about to unlock
	inside := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		<-inside
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if l, err := other.TryLock(ctx, key, redlock.WithTTL(time.Second)); err == nil {
				if !fnDone.Load() { // taken while fn still ran
					stolen.Add(1)
				}
				l.Unlock(ctx)
			}
		}
	})
	err := r.Do(ctx, key, func(ctx context.Context) error {
		close(inside)
		defer fnDone.Store(true)
		select {
		case <-time.After(2 * time.Second):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, redlock.WithTTL(300*time.Millisecond), redlock.WithNodeTimeout(100*time.Millisecond))
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	if n := stolen.Load(); n > 0 {
		t.Fatalf("another client took the lock %d times while Do held it", n)
	}
	settle(r)
	settle(other)
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Fatalf("after Do masters still hold %q", vs)
	}
	return nil
}

// killMajority stops all but one master of c.
func killMajority(t *testing.T, c *redistest.Cluster) time.Time {
	t.Helper()
	at := time.Now()
	for _, s := range c.Servers[1:] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	return at
}

// TestLockLostWhenMajorityDies: with two of three masters killed, the
// renewals fail and the lock is declared lost before its validity ends.
func TestLockLostWhenMajorityDies(t *testing.T) {
	const ttl = time.Second
	t.Run("Lock", func(t *testing.T) {
		c := redistest.StartT(t, 3, redistest.Options{})
		r := newRedlock(t, nodesOf(t, clients(t, c.Addrs())))
		ctx := context.Background()
		l, err := r.Lock(ctx, testKey(t), redlock.WithTTL(ttl), redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		first := l.Until()
		time.Sleep(ttl / 2) // at least one renewal
		if !l.Until().After(first) {
			t.Fatalf("Until did not move in %v with auto-extend: %v", ttl/2, first)
		}
		select {
		case <-l.Done():
			t.Fatalf("Done closed while the masters are up: %v", context.Cause(l.Context()))
		default:
		}
		killMajority(t, c)
		select {
		case <-l.Done():
		case <-time.After(2 * ttl):
			t.Fatal("Done not closed 2 TTLs after a majority of masters died")
		}
		at := time.Now()
		if until := l.Until(); !at.Before(until) {
			t.Errorf("lost signalled %v after Until; it must come before", at.Sub(until))
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, redlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
		if err := l.Extend(ctx, ttl); !errors.Is(err, redlock.ErrNotHeld) || !errors.Is(err, redlock.ErrLockLost) {
			t.Errorf("Extend of a lost lock: %v, want ErrNotHeld and ErrLockLost", err)
		}
		if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) || !errors.Is(err, redlock.ErrLockLost) {
			t.Errorf("Unlock of a lost lock: %v, want ErrNotHeld and ErrLockLost", err)
		}
	})
	t.Run("Do", func(t *testing.T) {
		c := redistest.StartT(t, 3, redistest.Options{})
		r := newRedlock(t, nodesOf(t, clients(t, c.Addrs())))
		var killed, cancelled time.Time
		start := time.Now()
		err := r.Do(context.Background(), testKey(t), func(ctx context.Context) error {
			time.Sleep(ttl / 2)
			killed = killMajority(t, c)
			select {
			case <-ctx.Done():
				cancelled = time.Now()
				return context.Cause(ctx)
			case <-time.After(2 * ttl):
				return errors.New("fn's context not cancelled 2 TTLs after a majority died")
			}
		}, redlock.WithTTL(ttl))
		if !errors.Is(err, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrNotHeld) {
			t.Fatalf("Do: %v, want fn's ErrLockLost joined with Unlock's ErrNotHeld", err)
		}
		// The last renewal that can have succeeded started before the kill.
		if last := killed.Add(ttl - time.Duration(float64(ttl)*redlock.DefaultDriftFactor) - driftFloor); !cancelled.Before(last) {
			t.Errorf("fn cancelled %v after the latest possible Until", cancelled.Sub(last))
		}
		if d := time.Since(start); d > 3*ttl {
			t.Errorf("Do took %v to return after the lock was lost", d)
		}
	})
}

// TestDoneWithoutAutoExtend: Done closes at Until with ErrLockLost, later
// when Extend moved Until, and at Unlock with ErrUnlocked.
func TestDoneWithoutAutoExtend(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:3])))
	ctx := context.Background()
	const ttl = 200 * time.Millisecond

	l, err := r.TryLock(ctx, testKey(t), redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	select {
	case <-done:
		t.Fatal("Done closed at once")
	default:
	}
	select {
	case <-time.After(ttl + time.Second):
		t.Fatal("Done not closed a second after the TTL")
	case <-done:
	}
	at, until := time.Now(), l.Until()
	if at.Before(until) || at.Sub(until) > 250*time.Millisecond { // loose: a loaded machine
		t.Errorf("Done closed %v after Until, want just after it", at.Sub(until))
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, redlock.ErrLockLost) {
		t.Errorf("cause %v, want ErrLockLost", cause)
	}
	if l.Done() != done {
		t.Error("Done returned another channel")
	}

	l, err = r.TryLock(ctx, testKey(t), redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	done = l.Done()
	if err := l.Extend(ctx, 10*ttl); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if left := time.Until(l.Until()); left > 0 {
			t.Fatalf("Done closed %v before the extended Until: %v", left, context.Cause(l.Context()))
		}
	case <-time.After(2 * ttl):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if cause := context.Cause(l.Context()); cause != redlock.ErrUnlocked {
		t.Errorf("cause after Unlock %v, want ErrUnlocked", cause)
	}

	// Asked for only after the validity ended: closed at once.
	l, err = r.TryLock(ctx, testKey(t), redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done of an expired lock is open")
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Unlock of an expired lock: %v, want ErrNotHeld", err)
	}

	var nl *redlock.Lock
	if cause := context.Cause(nl.Context()); !errors.Is(cause, redlock.ErrNotHeld) {
		t.Errorf("nil *Lock Context cause %v, want ErrNotHeld", cause)
	}
}

// TestExtendWithAutoExtend: Extend of an auto-extended lock sets the TTL the
// renewals go on with.
func TestExtendWithAutoExtend(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	l, err := r.Lock(ctx, key, redlock.WithTTL(300*time.Millisecond), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	var wg sync.WaitGroup
	for range 4 { // concurrent Extends racing the renewals
		wg.Go(func() {
			for range 5 {
				if err := l.Extend(ctx, 2*time.Second); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(800 * time.Millisecond) // two renewals at the new TTL
	if left := time.Until(l.Until()); left < time.Second {
		t.Errorf("validity left %v, want over 1s with the TTL raised to 2s", left)
	}
	if l.TTL() != 2*time.Second {
		t.Errorf("TTL %v, want 2s", l.TTL())
	}
	for i, c := range cs {
		if pttl := c.PTTL(ctx, key).Val(); pttl < time.Second {
			t.Errorf("master %d: PTTL %v, want over 1s", i, pttl)
		}
	}
}

func TestDoBadInputAndPanic(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	if err := r.Do(ctx, "k", nil); !errors.As(err, new(*redlock.ConfigError)) {
		t.Errorf("Do with nil fn: %v, want a ConfigError", err)
	}
	if err := r.Do(ctx, "", func(context.Context) error { return nil }); !errors.As(err, new(*redlock.ConfigError)) {
		t.Errorf("Do with empty key: %v, want a ConfigError", err)
	}
	want := errors.New("work failed")
	if err := r.Do(ctx, testKey(t), func(context.Context) error { return want }); err != want {
		t.Errorf("Do: %v, want fn's error alone", err)
	}
	key := testKey(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("fn's panic was swallowed")
			}
		}()
		r.Do(ctx, key, func(context.Context) error { panic("boom") })
	}()
	settle(r)
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Errorf("masters hold %q after fn panicked", vs)
	}
	// A cancelled ctx while fn runs: fn sees it, the lock is still released.
	key = testKey(t)
	cctx, cancel := context.WithCancel(ctx)
	err := r.Do(cctx, key, func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do: %v, want context.Canceled", err)
	}
	settle(r)
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Errorf("masters hold %q after Do with a cancelled ctx", vs)
	}
}

// TestCloseEndsAutoExtend: Close stops renewing; the locks are lost with
// ErrClosed, and watched locks still close Done at Until.
func TestCloseEndsAutoExtend(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:3])))
	ctx := context.Background()
	auto, err := r.Lock(ctx, testKey(t), redlock.WithTTL(time.Second), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := r.Lock(ctx, testKey(t), redlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	<-auto.Done()
	if cause := context.Cause(auto.Context()); !errors.Is(cause, redlock.ErrLockLost) || !errors.Is(cause, redlock.ErrClosed) {
		t.Errorf("cause %v, want ErrLockLost and ErrClosed", cause)
	}
	select {
	case <-plain.Done():
	case <-time.After(time.Second):
		t.Fatal("Done of a lock without auto-extend not closed at Until after Close")
	}
	auto.Unlock(ctx)
	plain.Unlock(ctx)
}

// TestAutoExtendScales: goroutines do not grow with the number of held
// locks, and every lock keeps being renewed.
func TestAutoExtendScales(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs), redlock.WithTTL(time.Second), redlock.WithNodeTimeout(300*time.Millisecond))

	few := holdMany(t, r, 10)
	gFew := idleGoroutines()
	many := holdMany(t, r, n)
	gMany := idleGoroutines()
	t.Logf("goroutines: %d with 10 locks, %d with %d", gFew, gMany, n+10)
	if gMany > gFew+8 {
		t.Errorf("goroutines grew from %d to %d with %d more locks", gFew, gMany, n)
	}

	time.Sleep(1500 * time.Millisecond) // past the TTL: only renewals keep the keys
	all := append(few, many...)
	fresh := make([]int, len(all)) // masters where the key was renewed lately
	for _, c := range cs {
		pipe := c.Pipeline()
		cmds := make([]*redis.DurationCmd, len(all))
		for j, l := range all {
			cmds[j] = pipe.PTTL(context.Background(), l.Key())
		}
		pipe.Exec(context.Background())
		for j, cmd := range cmds {
			if cmd.Val() >= 300*time.Millisecond { // renewed within the last 700 ms
				fresh[j]++
			}
		}
	}
	stale := 0
	for _, n := range fresh {
		if n < r.Quorum() { // a renewal needs a quorum, not every master
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d keys not renewed on a quorum of masters", stale, len(all))
	}
	for _, l := range all {
		select {
		case <-l.Done():
			t.Fatalf("lock %s lost: %v", l.Key(), context.Cause(l.Context()))
		default:
		}
	}
	unlockAll(t, all)
}

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
		r := newRedlock(t, nodesOf(t, defaultClients(t, c.Addrs())), redlock.WithNodeTimeout(100*time.Millisecond))
		l, err := r.Lock(context.Background(), testKey(t), redlock.WithTTL(ttl), redlock.WithAutoExtend())
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
		if cause := context.Cause(l.Context()); !errors.Is(cause, redlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
	})
	for _, call := range []string{"Unlock", "Extend"} {
		t.Run(call, func(t *testing.T) {
			c := redistest.StartT(t, 3, redistest.Options{})
			r := newRedlock(t, nodesOf(t, defaultClients(t, c.Addrs())), redlock.WithNodeTimeout(100*time.Millisecond))
			l, err := r.Lock(context.Background(), testKey(t), redlock.WithTTL(ttl), redlock.WithAutoExtend())
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

// TestAutoExtendSurvivesMinorityAfterBareQuorum: an auto-extended lock
// whose key is on exactly a quorum of masters (two of five came back empty
// after it was acquired — or a contender's rollback left them free) is
// spread again to the free masters by its renewals, so that a later fault
// on a minority (one master of that quorum among them) does not lose it:
// three of the five masters are healthy and hold its value throughout.
func TestAutoExtendSurvivesMinorityAfterBareQuorum(t *testing.T) {
	const ttl = repairTTL
	c, cs, l := autoExtendedOnFive(t)
	ctx, key := context.Background(), l.Key()
	// Masters 3 and 4 restart empty: the lock is now on 0, 1, 2 alone.
	for _, s := range c.Servers[3:] {
		if err := s.Restart(false); err != nil {
			t.Fatal(err)
		}
	}
	// A renewal at a third of the TTL spreads the key to 3 and 4 once it
	// was answered, in requests nobody waits for: poll, up to the TTL.
	vs := holders(t, cs, key)
	for deadline := time.Now().Add(ttl); count(vs, l.Value()) != 5 && time.Now().Before(deadline); vs = holders(t, cs, key) {
		time.Sleep(10 * time.Millisecond)
	}
	if count(vs, l.Value()) != 5 {
		t.Errorf("a TTL after masters 3 and 4 restarted the masters hold %q; want the lock's value on all five", vs)
	}
	// A minority fault that takes one master of the bare quorum.
	for _, s := range c.Servers[1:3] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-l.Done():
		t.Fatalf("lost with three of five masters healthy: %v", context.Cause(l.Context()))
	case <-time.After(2 * ttl):
	}
	live := clients(t, []string{c.Servers[0].Addr(), c.Servers[3].Addr(), c.Servers[4].Addr()})
	if vs := holders(t, live, key); count(vs, l.Value()) != 3 {
		t.Errorf("the healthy masters hold %q; want the lock's value on all three", vs)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if vs := holders(t, live, key); count(vs, "") != 3 {
		t.Errorf("after Unlock the healthy masters hold %q", vs)
	}
}

// TestAutoExtendRepairsOnlyFreeMasters: a renewal sets the key only where
// it is absent; a master where another value holds it (a contender's key)
// keeps that value, and with too few masters left holding the lock's value
// the lock is lost as before.
func TestAutoExtendRepairsOnlyFreeMasters(t *testing.T) {
	const ttl = repairTTL
	c, cs, l := autoExtendedOnFive(t)
	ctx, key := context.Background(), l.Key()
	// Masters 3 and 4 lose the key and another value takes it there.
	for i, s := range c.Servers[3:] {
		if err := s.Restart(false); err != nil {
			t.Fatal(err)
		}
		if err := cs[3+i].Set(ctx, key, "other", 10*ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * ttl):
		t.Fatal("not lost with two of five masters holding its value")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, redlock.ErrLockLost) {
		t.Errorf("cause %v, want ErrLockLost", cause)
	}
	for i := 3; i < 5; i++ {
		if v, err := cs[i].Get(ctx, key).Result(); err != nil || v != "other" {
			t.Errorf("master %d holds %q (%v); the renewal must leave another value alone", i, v, err)
		}
	}
}

// repairTTL is the TTL of autoExtendedOnFive's lock.
const repairTTL = time.Second

// autoExtendedOnFive starts five masters of the test's own and takes an
// auto-extended lock on them, with the TTL repairTTL.
func autoExtendedOnFive(t *testing.T) (*redistest.Cluster, []*redis.Client, *redlock.Lock) {
	t.Helper()
	c := redistest.StartT(t, 5, redistest.Options{})
	cs := clients(t, c.Addrs())
	r := newRedlock(t, nodesOf(t, cs), redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := r.Lock(context.Background(), testKey(t), redlock.WithTTL(repairTTL), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	return c, cs, l
}
