package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestBadInput(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	var typedNil *redisNode
	r := newRedlock(t, nodes)

	for _, tc := range []struct {
		name  string
		err   func() error
		field string
		says  string
	}{
		{"no nodes", func() error { _, err := New(nil); return err }, "nodes", "at least one"},
		{"nil node", func() error { _, err := New([]Node{nodes[0], nil}); return err }, "nodes", "node 1 is nil"},
		{"typed nil node", func() error { _, err := New([]Node{typedNil}); return err }, "nodes", "node 0 is nil"},
		{"NewNode(nil)", func() error { _, err := New([]Node{NewNode(nil)}); return err }, "nodes", "nil"},
		{"same master twice", func() error {
			again := redis.NewClient(&redis.Options{Addr: masters.Addrs()[0]})
			defer again.Close()
			_, err := New([]Node{nodes[0], nodes[1], NewNode(again)})
			return err
		}, "nodes", "same master"},
		{"nil option", func() error { _, err := New(nodes, nil); return err }, "options", "nil"},
		{"zero TTL", func() error { _, err := New(nodes, WithTTL(0)); return err }, "WithTTL", "at least 1ms"},
		{"negative TTL", func() error { _, err := New(nodes, WithTTL(-time.Second)); return err }, "WithTTL", "-1s"},
		{"TTL all drift", func() error { _, err := New(nodes, WithTTL(2*time.Millisecond)); return err }, "WithTTL", "no validity"},
		{"negative node timeout", func() error { _, err := New(nodes, WithNodeTimeout(-1)); return err }, "WithNodeTimeout", "positive"},
		{"negative drift", func() error { _, err := New(nodes, WithDriftFactor(-0.1)); return err }, "WithDriftFactor", "[0, 1)"},
		{"NaN drift", func() error { _, err := New(nodes, WithDriftFactor(math.NaN())); return err }, "WithDriftFactor", "NaN"},
		{"negative min validity", func() error { _, err := New(nodes, WithMinValidity(-time.Second)); return err }, "WithMinValidity", "negative"},
		{"min validity eats TTL", func() error { _, err := New(nodes, WithTTL(time.Second), WithMinValidity(time.Second)); return err }, "WithTTL", "no validity"},
		{"zero retries", func() error { _, err := New(nodes, WithRetry(0)); return err }, "WithRetry", "at least 1"},
		{"backoff upside down", func() error { _, err := New(nodes, WithBackoff(time.Second, time.Millisecond)); return err }, "WithBackoff", "min <= max"},
		{"empty key", func() error { _, err := r.Lock(context.Background(), ""); return err }, "key", "empty"},
		{"fence counter as key", func() error { _, err := r.TryLock(context.Background(), FenceKey("order:42")); return err }, "key", `fence counter of the lock "order:42"`},
		{"bad per-call option", func() error { _, err := r.TryLock(context.Background(), "k", WithTTL(-1)); return err }, "WithTTL", "at least 1ms"},
		{"nil Redlock", func() error { var nr *Redlock; _, err := nr.Lock(context.Background(), "k"); return err }, "Redlock", "New"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err %v (%T), want a *ConfigError", err, err)
			}
			if ce.Field != tc.field || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %q: want field %s and a message saying %q", err, tc.field, tc.says)
			}
		})
	}

	var nl *Lock
	if nl.Key() != "" || nl.Value() != "" || nl.Fence() != 0 || !nl.Until().IsZero() || nl.TTL() != 0 {
		t.Errorf("getters on a nil *Lock must return zero values")
	}
	if err := nl.Unlock(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock on nil *Lock: %v, want ErrNotHeld", err)
	}
	if err := nl.Extend(context.Background(), time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend on nil *Lock: %v, want ErrNotHeld", err)
	}
}

func TestEvenNodeCountUsesMajority(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:4])))
	if r.Quorum() != 3 {
		t.Fatalf("quorum of 4 masters = %d, want 3", r.Quorum())
	}
}

func TestUnlockTwiceAndAfterExpiry(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()

	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "already unlocked") {
		t.Errorf("second Unlock: %v, want ErrNotHeld (already unlocked)", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend after Unlock: %v, want ErrNotHeld", err)
	}

	key := testKey(t)
	l, err = r.TryLock(ctx, key, WithTTL(50*time.Millisecond), WithMinValidity(0))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(80 * time.Millisecond)
	if err := l.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend after expiry: %v, want ErrNotHeld", err)
	}
	if vs := holders(t, cs, key); count(vs, "") != 3 {
		t.Errorf("Extend of an expired lock recreated keys: %q", vs)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "overlapped") {
		t.Errorf("Unlock after expiry: %v, want ErrNotHeld saying the section may have overlapped", err)
	}
}

func TestUnlockWhenKeyGoneFromQuorum(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
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
	var qe *QuorumError
	if !errors.Is(err, ErrNotHeld) || !errors.As(err, &qe) || qe.Refused < 2 {
		t.Fatalf("Unlock with the key gone from 2 of 3: %v, want ErrNotHeld with 2 refused", err)
	}
	settle(r)
	if vs := holders(t, cs, key); vs[0] != foreign || vs[1] != "" || vs[2] != "" {
		t.Fatalf("masters hold %q: a release must delete only our own value", vs)
	}
}

func TestExtend(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key, WithTTL(time.Second))
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
	if err := l.Extend(ctx, -time.Second); !errors.As(err, new(*ConfigError)) {
		t.Errorf("Extend(-1s): %v, want a ConfigError", err)
	}

	// Stolen on a majority: Extend must not succeed and must not re-create keys.
	cs[0].Set(ctx, key, foreign, time.Minute)
	cs[1].Set(ctx, key, foreign, time.Minute)
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend after the key was taken on 2 of 3: %v, want ErrNotHeld", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock: %v, want ErrNotHeld", err)
	}
	settle(r)
	if vs := holders(t, cs, key); vs[0] != foreign || vs[1] != foreign || vs[2] != "" {
		t.Errorf("masters hold %q", vs)
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:3])))
	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryLock(ctx, key); !errors.Is(err, ErrNotObtained) {
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
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:3])))
	key := testKey(t)
	l, err := r.TryLock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	_, err = r.Lock(ctx, key)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock until ctx deadline: %v, want both ErrNotObtained and DeadlineExceeded", err)
	}

	start := time.Now()
	_, err = r.Lock(context.Background(), key, WithRetry(3), WithBackoff(time.Millisecond, time.Millisecond))
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Refused < 2 {
		t.Errorf("Lock with 3 attempts: %v, want a QuorumError with at least 2 refused", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("3 attempts took %v", time.Since(start))
	}
}

func TestClosedRedlock(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:1])))
	l, err := r.TryLock(context.Background(), testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := r.TryLock(context.Background(), testKey(t)); !errors.Is(err, ErrClosed) {
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
	nodes := nodesOf(t, clients(t, masters.Addrs()))
	for round := range 20 {
		r := newRedlock(t, nodes)
		const n = 16
		locks := make([]*Lock, n)
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
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithFencing())
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
		if v, _ := c.Get(ctx, FenceKey(key)).Uint64(); v >= last {
			raised++
		}
		if ttl := c.TTL(ctx, FenceKey(key)).Val(); ttl != -1 {
			t.Errorf("master %d: fence counter has TTL %v; it must never expire", i, ttl)
		}
	}
	if raised < r.Quorum() {
		t.Errorf("fence counter at least the last token on %d masters, want a quorum", raised)
	}
	l, err := r.TryLock(ctx, testKey(t), WithTTL(time.Second))
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
	cs := clients(t, masters.Addrs()[:3])
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
		if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotObtained) {
			t.Errorf("Lock after Close: %v, want ErrClosed and ErrNotObtained", err)
		}
		if took := time.Since(closed); took > time.Second {
			t.Errorf("Lock returned %v after Close", took.Round(time.Millisecond))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Lock still waiting 3s after Close")
	}
}
