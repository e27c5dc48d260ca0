package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// TestDoStaysExclusive: Do holds a 300 ms lock for 2 s through auto-extend;
// another Redlock never gets it meanwhile, and it is gone afterwards.
//
// A process stalled for most of the TTL (a loaded test machine) rightly
// loses so short a lock; such a run proves nothing either way and is tried
// again, up to three times.
func TestDoStaysExclusive(t *testing.T) {
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	other := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	for try := 1; ; try++ {
		err := doStaysExclusive(t, r, other, cs)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrLockLost) || try == 3 {
			t.Fatalf("Do: %v", err)
		}
		t.Logf("try %d: the lock was lost (a stalled process?): %v", try, err)
	}
}

func doStaysExclusive(t *testing.T, r, other *Redlock, cs []*redis.Client) error {
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
			if l, err := other.TryLock(ctx, key, WithTTL(time.Second)); err == nil {
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
	}, WithTTL(300*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
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
		l, err := r.Lock(ctx, testKey(t), WithTTL(ttl), WithAutoExtend())
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
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
		if err := l.Extend(ctx, ttl); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
			t.Errorf("Extend of a lost lock: %v, want ErrNotHeld and ErrLockLost", err)
		}
		if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
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
		}, WithTTL(ttl))
		if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Do: %v, want fn's ErrLockLost joined with Unlock's ErrNotHeld", err)
		}
		// The last renewal that can have succeeded started before the kill.
		if last := killed.Add(ttl - time.Duration(float64(ttl)*DefaultDriftFactor) - driftFloor); !cancelled.Before(last) {
			t.Errorf("fn cancelled %v after the latest possible Until", cancelled.Sub(last))
		}
		if d := time.Since(start); d > 3*ttl {
			t.Errorf("Do took %v to return after the lock was lost", d)
		}
	})
}

// TestUnlockAfterRenewalInFlight: Unlock during a slow renewal does not
// wait for it, yet each master gets the release only after its renewal
// returned (the lane keeps them in order), and no key is left behind.
func TestUnlockAfterRenewalInFlight(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	slow := make([]*faultNode, len(cs))
	nodes := make([]Node, len(cs))
	for i, n := range nodesOf(t, cs) {
		slow[i] = wrap(n)
		nodes[i] = slow[i]
	}
	r := newRedlock(t, nodes, WithTTL(900*time.Millisecond), WithNodeTimeout(400*time.Millisecond))
	key := testKey(t)
	ctx := context.Background()
	l, err := r.Lock(ctx, key, WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range slow {
		f.extendDelay.Store(int64(200 * time.Millisecond))
	}
	// The renewal is due 300 ms after the acquire and takes 200 ms.
	time.Sleep(400 * time.Millisecond)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if cause := context.Cause(l.Context()); cause != ErrUnlocked {
		t.Errorf("cause %v, want ErrUnlocked", cause)
	}
	settle(r)
	for i, f := range slow {
		done, rel := f.extendsDone.Load(), f.firstRelease.Load()
		if done == 0 {
			t.Fatalf("master %d: no renewal was sent", i)
		}
		if rel < done {
			t.Errorf("master %d: release sent %v before the renewal returned", i, time.Duration(done-rel))
		}
	}
	time.Sleep(300 * time.Millisecond) // a late renewal would land by now
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Fatalf("masters hold %q after Unlock", vs)
	}
}

// TestDoneWithoutAutoExtend: Done closes at Until with ErrLockLost, later
// when Extend moved Until, and at Unlock with ErrUnlocked.
func TestDoneWithoutAutoExtend(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:3])))
	ctx := context.Background()
	const ttl = 200 * time.Millisecond

	l, err := r.TryLock(ctx, testKey(t), WithTTL(ttl))
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
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("cause %v, want ErrLockLost", cause)
	}
	if l.Done() != done {
		t.Error("Done returned another channel")
	}

	l, err = r.TryLock(ctx, testKey(t), WithTTL(ttl))
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
	if cause := context.Cause(l.Context()); cause != ErrUnlocked {
		t.Errorf("cause after Unlock %v, want ErrUnlocked", cause)
	}

	// Asked for only after the validity ended: closed at once.
	l, err = r.TryLock(ctx, testKey(t), WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done of an expired lock is open")
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of an expired lock: %v, want ErrNotHeld", err)
	}

	var nl *Lock
	if cause := context.Cause(nl.Context()); !errors.Is(cause, ErrNotHeld) {
		t.Errorf("nil *Lock Context cause %v, want ErrNotHeld", cause)
	}
}

// TestExtendWithAutoExtend: Extend of an auto-extended lock sets the TTL the
// renewals go on with.
func TestExtendWithAutoExtend(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	l, err := r.Lock(ctx, key, WithTTL(300*time.Millisecond), WithAutoExtend())
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
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	if err := r.Do(ctx, "k", nil); !errors.As(err, new(*ConfigError)) {
		t.Errorf("Do with nil fn: %v, want a ConfigError", err)
	}
	if err := r.Do(ctx, "", func(context.Context) error { return nil }); !errors.As(err, new(*ConfigError)) {
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
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:3])))
	ctx := context.Background()
	auto, err := r.Lock(ctx, testKey(t), WithTTL(time.Second), WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := r.Lock(ctx, testKey(t), WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	<-auto.Done()
	if cause := context.Cause(auto.Context()); !errors.Is(cause, ErrLockLost) || !errors.Is(cause, ErrClosed) {
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
