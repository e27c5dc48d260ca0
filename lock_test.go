package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock"
)

func TestEvenNodeCountUsesMajority(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:4])))
	if r.Quorum() != 3 {
		t.Fatalf("quorum of 4 masters = %d, want 3", r.Quorum())
	}
}

func TestUnlockTwiceAndAfterExpiry(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()

	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) || !strings.Contains(err.Error(), "already unlocked") {
		t.Errorf("second Unlock: %v, want ErrNotHeld (already unlocked)", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Extend after Unlock: %v, want ErrNotHeld", err)
	}

	key := testKey(t)
	l, err = r.TryLock(ctx, key, redlock.WithTTL(50*time.Millisecond), redlock.WithMinValidity(0))
	if err != nil {
		t.Fatal(err)
	}
	settle(r) // TryLock returns at the quorum: a SET landing late would outlive the sleep
	time.Sleep(80 * time.Millisecond)
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Extend after expiry: %v, want ErrNotHeld", err)
	}
	if vs := holders(t, cs, key); count(vs, "") != 3 {
		t.Errorf("Extend of an expired lock recreated keys: %q", vs)
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) || !strings.Contains(err.Error(), "overlapped") {
		t.Errorf("Unlock after expiry: %v, want ErrNotHeld saying the section may have overlapped", err)
	}
}

func TestUnlockWhenKeyGoneFromQuorum(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	settle(r) // TryLock returns at the quorum; a SET still in flight could land after the Del
	cs[0].Set(ctx, key, foreign, time.Minute)
	cs[1].Del(ctx, key)
	err = l.Unlock(ctx)
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotHeld) || !errors.As(err, &qe) || qe.Refused < 2 {
		t.Fatalf("Unlock with the key gone from 2 of 3: %v, want ErrNotHeld with 2 refused", err)
	}
	settle(r)
	if vs := holders(t, cs, key); vs[0] != foreign || vs[1] != "" || vs[2] != "" {
		t.Fatalf("masters hold %q: a release must delete only our own value", vs)
	}
}

func TestExtend(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key, redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := l.Until()
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := l.Until().Sub(before); d < 28*time.Second {
		t.Errorf("Until moved by %v, want about 29s", d)
	}
	settle(r) // Extend returns at the quorum; the last master may still be in flight
	for i, c := range cs {
		if pttl := c.PTTL(ctx, key).Val(); pttl < 29*time.Second {
			t.Errorf("master %d: PTTL %v after Extend(30s)", i, pttl)
		}
	}
	if err := l.Extend(ctx, -time.Second); !errors.As(err, new(*redlock.ConfigError)) {
		t.Errorf("Extend(-1s): %v, want a ConfigError", err)
	}

	// Stolen on a majority: Extend must not succeed and must not re-create keys.
	cs[0].Set(ctx, key, foreign, time.Minute)
	cs[1].Set(ctx, key, foreign, time.Minute)
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Extend after the key was taken on 2 of 3: %v, want ErrNotHeld", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Unlock: %v, want ErrNotHeld", err)
	}
	settle(r)
	if vs := holders(t, cs, key); vs[0] != foreign || vs[1] != foreign || vs[2] != "" {
		t.Errorf("masters hold %q", vs)
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:3])))
	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryLock on a held key: %v, want ErrNotObtained", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		l.Unlock(ctx)
	}()
	l2, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock after the holder released: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLockGivesUpWithContextOrAttempts(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:3])))
	key := testKey(t)
	l, err := r.TryLock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	_, err = r.Lock(ctx, key)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock until ctx deadline: %v, want both ErrNotObtained and DeadlineExceeded", err)
	}

	start := time.Now()
	_, err = r.Lock(context.Background(), key, redlock.WithRetry(3), redlock.WithBackoff(time.Millisecond, time.Millisecond))
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Refused < 2 {
		t.Errorf("Lock with 3 attempts: %v, want a QuorumError with at least 2 refused", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("3 attempts took %v", time.Since(start))
	}
}

func TestClosedRedlock(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:1])))
	l, err := r.TryLock(context.Background(), testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := r.TryLock(context.Background(), testKey(t)); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("TryLock after Close: %v, want ErrClosed", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Errorf("Unlock after Close: %v; held locks must still be released", err)
	}
}

// Close may run while other goroutines release and extend their locks (a
// shutdown that does not wait for its workers): every one of those calls
// still works, and nothing panics or races on the count of background
// requests that Close waits for.
func TestCloseWhileReleasing(t *testing.T) {
	ctx := context.Background()
	nodes := nodesOf(t, clients(t, masters().Addrs()))
	for round := range 20 {
		r := newRedlock(t, nodes)
		const n = 16
		locks := make([]*redlock.Lock, n)
		for i := range locks {
			l, err := r.TryLock(ctx, testKey(t))
			if err != nil {
				t.Fatal(err)
			}
			locks[i] = l
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, l := range locks {
			wg.Go(func() {
				if i%2 == 0 {
					if err := l.Extend(ctx, time.Second); err != nil {
						errs[i] = fmt.Errorf("Extend: %w", err)
						return
					}
				}
				if err := l.Unlock(ctx); err != nil {
					errs[i] = fmt.Errorf("Unlock: %w", err)
				}
			})
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, lock %d: %v", round, i, err)
			}
		}
	}
}

func TestFencingTokensIncrease(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs), redlock.WithFencing())
	ctx := context.Background()
	key := testKey(t)
	var last uint64
	floor := uint64(time.Now().UnixMicro()) - uint64(time.Minute.Microseconds())
	for i := range 20 {
		l, err := r.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last || l.Fence() < floor {
			t.Fatalf("holder %d: token %d after %d (clock floor %d)", i, l.Fence(), last, floor)
		}
		last = l.Fence()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	raised := 0
	for i, c := range cs {
		if v, _ := c.Get(ctx, redlock.FenceKey(key)).Uint64(); v >= last {
			raised++
		}
		if ttl := c.TTL(ctx, redlock.FenceKey(key)).Val(); ttl != -1 {
			t.Errorf("master %d: fence counter has TTL %v; it must never expire", i, ttl)
		}
	}
	if raised < r.Quorum() {
		t.Errorf("fence counter at least the last token on %d masters, want a quorum", raised)
	}
	l, err := r.TryLock(ctx, testKey(t), redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	r2 := newRedlock(t, nodesOf(t, cs))
	l2, err := r2.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock(ctx)
	if l2.Fence() != 0 {
		t.Errorf("token %d without fencing, want 0", l2.Fence())
	}
}

// TestCloseEndsWaitingLock: Close ends the Lock calls that wait for a key:
// they return ErrClosed at once, not when their context ends.
func TestCloseEndsWaitingLock(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	key := testKey(t)
	occupy(t, cs, key, 0, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	locked := make(chan error, 1)
	go func() {
		_, err := r.Lock(ctx, key)
		locked <- err
	}()
	time.Sleep(100 * time.Millisecond) // a few attempts
	closed := time.Now()
	r.Close()
	select {
	case err := <-locked:
		if !errors.Is(err, redlock.ErrClosed) || !errors.Is(err, redlock.ErrNotObtained) {
			t.Errorf("Lock after Close: %v, want ErrClosed and ErrNotObtained", err)
		}
		if took := time.Since(closed); took > time.Second {
			t.Errorf("Lock returned %v after Close", took.Round(time.Millisecond))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Lock still waiting 3s after Close")
	}
}

func TestOwnerNests(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs), redlock.WithTTL(30*time.Second))
	ctx := context.Background()
	for _, order := range []string{"inner first", "outer first"} {
		t.Run(order, func(t *testing.T) {
			key := testKey(t)
			outer := mustLock(t, r, key, redlock.WithOwner("A"))
			// A single attempt: the nested hold does not wait for the outer.
			inner := mustLock(t, r, key, redlock.WithOwner("A"))
			if inner.Value() == outer.Value() {
				t.Fatal("nested hold has the outer hold's value")
			}
			if got := inner.Owner(); got != "A" {
				t.Fatalf("Owner() = %q, want A", got)
			}
			settle(r) // the requests to masters past the quorum
			owners, recs := holds(t, cs, key)
			for i := range cs {
				if owners[i] != "A" || len(recs[i]) != 2 || recs[i][outer.Value()] == "" || recs[i][inner.Value()] == "" {
					t.Fatalf("master %d holds owner %q, holds %v; want A with both holds", i, owners[i], recs[i])
				}
			}
			mustRefuse(t, r, key, "owner B", redlock.WithOwner("B"))
			mustRefuse(t, r, key, "a plain lock")

			first, second := inner, outer
			if order == "outer first" {
				first, second = outer, inner
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatalf("first Unlock: %v", err)
			}
			mustRefuse(t, r, key, "owner B after one of two holds was released", redlock.WithOwner("B"))
			mustRefuse(t, r, key, "a plain lock after one of two holds was released")
			if err := second.Unlock(ctx); err != nil {
				t.Fatalf("second Unlock: %v", err)
			}
			settle(r)
			if vs := holders(t, cs, key); count(vs, "") != len(cs) {
				t.Fatalf("key left on the masters after its last hold was released")
			}
			b := mustLock(t, r, key, redlock.WithOwner("B"))
			if err := b.Unlock(ctx); err != nil {
				t.Fatalf("B's Unlock: %v", err)
			}
		})
	}
}

// TestOwnedAutoExtend: a nested hold with auto-extend outlives its TTL and
// its outer hold.
func TestOwnedAutoExtend(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	outer := mustLock(t, r, key, redlock.WithOwner("A"), redlock.WithTTL(300*time.Millisecond))
	inner := mustLock(t, r, key, redlock.WithOwner("A"), redlock.WithTTL(300*time.Millisecond), redlock.WithAutoExtend())
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	select {
	case <-inner.Done():
		t.Fatalf("auto-extended nested hold lost: %v", context.Cause(inner.Context()))
	default:
	}
	mustRefuse(t, r, key, "owner B while the auto-extended hold is held", redlock.WithOwner("B"))
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mustLock(t, r, key, redlock.WithOwner("B")).Unlock(ctx)
}

// TestOwnerFencing: every hold of an owner gets a token no smaller than its
// first hold's, and the next holder's token is larger than all of them,
// whatever the kinds of lock.
func TestOwnerFencing(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithFencing())
	ctx := context.Background()
	key := testKey(t)
	var last uint64
	for _, who := range []string{"A", "", "B", "A"} {
		var opts []redlock.Option
		if who != "" {
			opts = append(opts, redlock.WithOwner(who))
		}
		outer := mustLock(t, r, key, opts...)
		if outer.Fence() <= last {
			t.Fatalf("%q's token %d is not above the previous holder's %d", who, outer.Fence(), last)
		}
		last = outer.Fence()
		if who == "" {
			if err := outer.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// A nested hold gets the owner's token, or a newer one where a
		// master's counter already went past it: never an older one.
		inner := mustLock(t, r, key, opts...)
		if inner.Fence() < outer.Fence() {
			t.Fatalf("%s's nested hold got token %d, below the owner's %d", who, inner.Fence(), outer.Fence())
		}
		second := mustLock(t, r, key, opts...)
		if second.Fence() < outer.Fence() {
			t.Fatalf("second nested hold got token %d, below the owner's %d", second.Fence(), outer.Fence())
		}
		last = max(last, inner.Fence(), second.Fence())
		for _, l := range []*redlock.Lock{outer, second, inner} {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestWithOwnerBadInput: the owner is checked, and belongs to calls.
func TestWithOwnerBadInput(t *testing.T) {
	nodes := nodesOf(t, clients(t, masters().Addrs()))
	var ce *redlock.ConfigError
	if _, err := redlock.New(nodes, redlock.WithOwner("A")); !errors.As(err, &ce) || ce.Field != "WithOwner" {
		t.Fatalf("New with WithOwner: %v, want a *ConfigError for WithOwner", err)
	}
	r := newRedlock(t, nodes)
	for _, owner := range []string{"", string(make([]byte, redlock.MaxOwnerLen+1))} {
		if _, err := r.TryLock(context.Background(), testKey(t), redlock.WithOwner(owner)); !errors.As(err, &ce) || ce.Field != "WithOwner" {
			t.Fatalf("owner of %d bytes: %v, want a *ConfigError for WithOwner", len(owner), err)
		}
	}
}

// TestOwnerTokenNotBelowCounter: a nested hold never gets a token below
// what the master's counter already handed out, even when the owner's
// stored token was lowered (a fence step of an old hold that landed late;
// the simulation found one, seed 191831647446537): it gets a new one.
func TestOwnerTokenNotBelowCounter(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs), redlock.WithFencing())
	ctx := context.Background()
	key := testKey(t)
	outer := mustLock(t, r, key, redlock.WithOwner("A"))
	settle(r)
	for _, c := range cs {
		if err := c.HSet(ctx, key, "fence", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	inner := mustLock(t, r, key, redlock.WithOwner("A"))
	if inner.Fence() < outer.Fence() {
		t.Fatalf("nested hold got token %d, below the outer hold's %d", inner.Fence(), outer.Fence())
	}
	for _, l := range []*redlock.Lock{inner, outer} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExtendTruncatesTTL: the masters keep whole milliseconds, and so must
// TTL and Until after an Extend.
func TestExtendTruncatesTTL(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:3])))
	ctx := context.Background()
	l, err := r.TryLock(ctx, testKey(t), redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	const asked = 1500*time.Millisecond + 700*time.Microsecond
	before := time.Now()
	if err := l.Extend(ctx, asked); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if got := l.TTL(); got != asked.Truncate(time.Millisecond) {
		t.Errorf("TTL after Extend(%v) = %v, want %v", asked, got, asked.Truncate(time.Millisecond))
	}
	drift := time.Duration(float64(1500*time.Millisecond)*redlock.DefaultDriftFactor) + driftFloor
	if until, most := l.Until(), after.Add(1500*time.Millisecond-drift); until.After(most) {
		t.Errorf("Until %v after the Extend returned, more than the truncated TTL less drift allows (%v)",
			until.Sub(before), most.Sub(before))
	}
}
