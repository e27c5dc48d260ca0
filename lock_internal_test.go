package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
	"pgregory.net/rapid"
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

// holds lists, per master, the owner of key and the holds recorded there
// (value → expiry), or "" and nil when key is not an owned key there.
func holds(t testing.TB, cs []*redis.Client, key string) (owners []string, recs []map[string]string) {
	t.Helper()
	owners, recs = make([]string, len(cs)), make([]map[string]string, len(cs))
	for i, c := range cs {
		if typ, err := c.Type(context.Background(), key).Result(); err != nil || typ != "hash" {
			continue
		}
		m, err := c.HGetAll(context.Background(), key).Result()
		if err != nil {
			t.Fatalf("HGETALL %s on master %d: %v", key, i, err)
		}
		owners[i] = m["owner"]
		delete(m, "owner")
		delete(m, "fence")
		recs[i] = m
	}
	return owners, recs
}

// mustLock takes key or fails the test.
func mustLock(t testing.TB, r *Redlock, key string, opts ...Option) *Lock {
	t.Helper()
	l, err := r.TryLock(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("TryLock %s %v: %v", key, opts, err)
	}
	return l
}

// mustRefuse checks that key cannot be taken with opts now.
func mustRefuse(t testing.TB, r *Redlock, key, who string, opts ...Option) {
	t.Helper()
	l, err := r.TryLock(context.Background(), key, opts...)
	if err == nil {
		_ = l.Unlock(context.Background())
		t.Fatalf("%s took %s while another holder held it", who, key)
	}
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("%s: TryLock error %v does not wrap ErrNotObtained", who, err)
	}
}

func TestOwnerNests(t *testing.T) {
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithTTL(30*time.Second))
	ctx := context.Background()
	for _, order := range []string{"inner first", "outer first"} {
		t.Run(order, func(t *testing.T) {
			key := testKey(t)
			outer := mustLock(t, r, key, WithOwner("A"))
			// A single attempt: the nested hold does not wait for the outer.
			inner := mustLock(t, r, key, WithOwner("A"))
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
			mustRefuse(t, r, key, "owner B", WithOwner("B"))
			mustRefuse(t, r, key, "a plain lock")

			first, second := inner, outer
			if order == "outer first" {
				first, second = outer, inner
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatalf("first Unlock: %v", err)
			}
			mustRefuse(t, r, key, "owner B after one of two holds was released", WithOwner("B"))
			mustRefuse(t, r, key, "a plain lock after one of two holds was released")
			if err := second.Unlock(ctx); err != nil {
				t.Fatalf("second Unlock: %v", err)
			}
			settle(r)
			if vs := holders(t, cs, key); count(vs, "") != len(cs) {
				t.Fatalf("key left on the masters after its last hold was released")
			}
			b := mustLock(t, r, key, WithOwner("B"))
			if err := b.Unlock(ctx); err != nil {
				t.Fatalf("B's Unlock: %v", err)
			}
		})
	}
}

// TestOwnerLockDoesNotQueue: a nested Lock does not queue behind this
// process's goroutines waiting for the key its owner holds.
func TestOwnerLockDoesNotQueue(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithTTL(30*time.Second))
	key := testKey(t)
	outer := mustLock(t, r, key, WithOwner("A"))
	wctx, stop := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() {
		l, err := r.Lock(wctx, key)
		if err == nil {
			err = errors.Join(errors.New("took the key while A held it"), l.Unlock(context.Background()))
		}
		waited <- err
	}()
	for queued, _ := r.waiters.peek(key); !queued; queued, _ = r.waiters.peek(key) {
		time.Sleep(time.Millisecond)
	}
	// WithRetry(1): one attempt, no queueing behind the waiter above.
	inner, err := r.Lock(context.Background(), key, WithOwner("A"), WithRetry(1))
	if err != nil {
		t.Fatalf("nested Lock behind a waiting goroutine: %v", err)
	}
	stop()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
	for _, l := range []*Lock{inner, outer} {
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
}

// TestOwnedAndPlainExclude: an owned lock and a plain one on the same key
// exclude each other, and neither's release or extend touches the other's
// key, also when it comes late.
func TestOwnedAndPlainExclude(t *testing.T) {
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()

	t.Run("plain holds", func(t *testing.T) {
		key := testKey(t)
		p := mustLock(t, r, key)
		mustRefuse(t, r, key, "owner A", WithOwner("A"))
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		a := mustLock(t, r, key, WithOwner("A"))
		mustRefuse(t, r, key, "a plain lock")
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// A stale holder of each kind (its key expired, the other kind took it)
	// tries to extend and release: refused, and the new holder's key stays.
	for _, stale := range []string{"plain", "owned"} {
		t.Run("stale "+stale, func(t *testing.T) {
			key := testKey(t)
			short := []Option{WithTTL(200 * time.Millisecond)}
			var next []Option
			if stale == "plain" {
				next = []Option{WithOwner("A")}
			} else {
				short = append(short, WithOwner("A"))
			}
			old := mustLock(t, r, key, short...)
			time.Sleep(time.Until(old.Until()) + 250*time.Millisecond)
			cur := mustLock(t, r, key, append(next, WithTTL(30*time.Second))...)
			settle(r) // Lock returns at a quorum: its SETs reached every master
			before := snapshot(t, cs, key)
			if err := old.Extend(ctx, 30*time.Second); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("stale Extend: %v, want ErrNotHeld", err)
			}
			if err := old.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("stale Unlock: %v, want ErrNotHeld", err)
			}
			if after := snapshot(t, cs, key); after != before {
				t.Fatalf("stale %s holder changed the key:\nbefore %s\nafter  %s", stale, before, after)
			}
			// The stale requests were refused, not failed: the masters
			// answered every one.
			p := old.release(ctx, true, nil)
			if err := p.collect(ctx); err != nil {
				t.Fatal(err)
			}
			if tl := p.tallies[0]; tl.failed != 0 || !tl.lost() {
				t.Fatalf("stale release: %d of %d masters refused, %d failed (%v); want a quorum to refuse, none to fail", tl.refused, len(cs), tl.failed, tl.errs)
			}
			if err := cur.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStaleStepsRefusedNotFailed: every step of a plain lock on an owned key
// and of an owned hold on a plain key is a refusal (the master answered),
// never an error.
func TestStaleStepsRefusedNotFailed(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	ctx := context.Background()
	for _, kind := range []string{"plain key", "owned key"} {
		key := testKey(t)
		var opts []Option
		if kind == "owned key" {
			opts = append(opts, WithOwner("A"))
		}
		r := newRedlock(t, nodes)
		held := mustLock(t, r, key, opts...)
		settle(r) // every master holds it
		other := ""
		if kind == "plain key" {
			other = "B"
		}
		for _, op := range []reqKind{reqAcquire, reqAcquireFenced, reqRaiseFence, reqExtend, reqRelease} {
			q := &request{Op: op, Key: key, Value: newValue(), TTL: time.Second, Token: 7, Owner: other}
			execRequests(ctx, nodes[0], q)
			if q.Err != nil || q.OK {
				t.Errorf("%s on a %s by the other kind: OK %v, Err %v; want a refusal", op, kind, q.OK, q.Err)
			}
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock after the other kind's requests: %v", kind, err)
		}
	}
}

// snapshot renders key's state on every master (type, value or fields, TTL
// rounded to seconds).
func snapshot(t testing.TB, cs []*redis.Client, key string) string {
	t.Helper()
	s := ""
	for i, c := range cs {
		ttl := c.PTTL(context.Background(), key).Val().Round(time.Second)
		switch typ := c.Type(context.Background(), key).Val(); typ {
		case "hash":
			s += strconv.Itoa(i) + ":" + typ + fmtMap(c.HGetAll(context.Background(), key).Val()) + ttl.String() + " "
		default:
			s += strconv.Itoa(i) + ":" + typ + "=" + c.Get(context.Background(), key).Val() + " " + ttl.String() + " "
		}
	}
	return s
}

func fmtMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := "{"
	for _, k := range keys {
		s += k + "=" + m[k] + ","
	}
	return s + "}"
}

// pttls returns key's PTTL on every master.
func pttls(cs []*redis.Client, key string) []time.Duration {
	ds := make([]time.Duration, len(cs))
	for i, c := range cs {
		ds[i] = c.PTTL(context.Background(), key).Val()
	}
	return ds
}

// within checks that every master's TTL of key is in (lo, hi].
func within(t testing.TB, cs []*redis.Client, key string, lo, hi time.Duration, when string) {
	t.Helper()
	for i, d := range pttls(cs, key) {
		if d <= lo || d > hi {
			t.Fatalf("%s: key's TTL on master %d is %v, want in (%v, %v]", when, i, d, lo, hi)
		}
	}
}

// TestOwnedHoldsExpireAndExtend: the key lives as long as its latest hold,
// each hold expires and extends on its own, and the key is free once its
// last live hold is released.
func TestOwnedHoldsExpireAndExtend(t *testing.T) {
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	A := WithOwner("A")

	outer := mustLock(t, r, key, A, WithTTL(20*time.Second))
	inner := mustLock(t, r, key, A, WithTTL(40*time.Second))
	settle(r)
	within(t, cs, key, 35*time.Second, 40*time.Second, "after a longer nested hold")
	if err := inner.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	settle(r)
	within(t, cs, key, 15*time.Second, 20*time.Second, "after the nested hold was shortened below the outer")
	if err := outer.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	settle(r)
	within(t, cs, key, 5*time.Second, 10*time.Second, "after the outer hold was shortened")
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(r)
	within(t, cs, key, 0, 2*time.Second, "with only the nested hold left")

	// A hold that expired on the masters is not live: it neither keeps the
	// key nor comes back with an extend.
	short := mustLock(t, r, key, A, WithTTL(300*time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	mustRefuse(t, r, key, "owner B while the 2 s hold is live", WithOwner("B"))
	for i, n := range nodesOf(t, cs) {
		q := &request{Op: reqExtend, Key: key, Value: short.Value(), TTL: 10 * time.Second, Owner: "A"}
		if execRequests(ctx, n, q); q.OK || q.Err != nil {
			t.Fatalf("master %d extended an expired hold: OK %v, Err %v", i, q.OK, q.Err)
		}
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(r)
	if vs := holders(t, cs, key); count(vs, "") != len(cs) {
		t.Fatalf("key left after its last live hold was released (an expired hold remained)")
	}
	b := mustLock(t, r, key, WithOwner("B"))
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOwnedAutoExtend: a nested hold with auto-extend outlives its TTL and
// its outer hold.
func TestOwnedAutoExtend(t *testing.T) {
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	key := testKey(t)
	outer := mustLock(t, r, key, WithOwner("A"), WithTTL(300*time.Millisecond))
	inner := mustLock(t, r, key, WithOwner("A"), WithTTL(300*time.Millisecond), WithAutoExtend())
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	select {
	case <-inner.Done():
		t.Fatalf("auto-extended nested hold lost: %v", context.Cause(inner.Context()))
	default:
	}
	mustRefuse(t, r, key, "owner B while the auto-extended hold is held", WithOwner("B"))
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mustLock(t, r, key, WithOwner("B")).Unlock(ctx)
}

// TestOwnerFencing: every hold of an owner gets a token no smaller than its
// first hold's, and the next holder's token is larger than all of them,
// whatever the kinds of lock.
func TestOwnerFencing(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithFencing())
	ctx := context.Background()
	key := testKey(t)
	var last uint64
	for _, who := range []string{"A", "", "B", "A"} {
		var opts []Option
		if who != "" {
			opts = append(opts, WithOwner(who))
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
		for _, l := range []*Lock{outer, second, inner} {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestWithOwnerBadInput: the owner is checked, and belongs to calls.
func TestWithOwnerBadInput(t *testing.T) {
	nodes := nodesOf(t, clients(t, masters.Addrs()))
	var ce *ConfigError
	if _, err := New(nodes, WithOwner("A")); !errors.As(err, &ce) || ce.Field != "WithOwner" {
		t.Fatalf("New with WithOwner: %v, want a *ConfigError for WithOwner", err)
	}
	r := newRedlock(t, nodes)
	for _, owner := range []string{"", string(make([]byte, MaxOwnerLen+1))} {
		if _, err := r.TryLock(context.Background(), testKey(t), WithOwner(owner)); !errors.As(err, &ce) || ce.Field != "WithOwner" {
			t.Fatalf("owner of %d bytes: %v, want a *ConfigError for WithOwner", len(owner), err)
		}
	}
}

// TestOwnerTokenNotBelowCounter: a nested hold never gets a token below
// what the master's counter already handed out, even when the owner's
// stored token was lowered (a fence step of an old hold that landed late;
// the simulation found one, seed 191831647446537): it gets a new one.
func TestOwnerTokenNotBelowCounter(t *testing.T) {
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithFencing())
	ctx := context.Background()
	key := testKey(t)
	outer := mustLock(t, r, key, WithOwner("A"))
	settle(r)
	for _, c := range cs {
		if err := c.HSet(ctx, key, "fence", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	inner := mustLock(t, r, key, WithOwner("A"))
	if inner.Fence() < outer.Fence() {
		t.Fatalf("nested hold got token %d, below the outer hold's %d", inner.Fence(), outer.Fence())
	}
	for _, l := range []*Lock{inner, outer} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNestedEnterWithMastersPaused: a nested enter while a minority of the
// masters are stopped (SIGSTOP) succeeds on the others, or fails when one
// more master's reply is lost although its request landed; either way,
// once every hold is released another owner takes the key at once, and a
// failed enter's rollback leaves the outer hold whole on every master.
func TestNestedEnterWithMastersPaused(t *testing.T) {
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	fs, nodes := faultNodes(t, cs)
	r := newRedlock(t, nodes, WithTTL(30*time.Second), WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()
	A := WithOwner("A")

	for _, outcome := range []string{"succeeds", "fails"} {
		t.Run(outcome, func(t *testing.T) {
			key := testKey(t)
			outer := mustLock(t, r, key, A)
			settle(r)
			for _, s := range cl.Servers[3:] {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
			}
			if outcome == "fails" {
				fs[2].lateReply.Store(true) // lands, but its reply is lost
			}
			inner, err := r.TryLock(ctx, key, A)
			fs[2].lateReply.Store(false)
			for _, s := range cl.Servers[3:] {
				if err := s.Resume(); err != nil {
					t.Fatal(err)
				}
			}
			settle(r)
			_, recs := holds(t, cs, key)
			for i, rec := range recs {
				if rec[outer.Value()] == "" {
					t.Fatalf("master %d lost the outer hold during a nested enter that %s: %v", i, outcome, rec)
				}
			}
			switch {
			case outcome == "succeeds" && err != nil:
				t.Fatalf("nested enter with 2 of 5 masters stopped: %v", err)
			case outcome == "fails" && err == nil:
				t.Fatal("nested enter succeeded with 2 replies of 5")
			case outcome == "fails":
				if !errors.Is(err, ErrNotObtained) {
					t.Fatalf("failed nested enter: %v, want ErrNotObtained", err)
				}
				for i, rec := range recs {
					if len(rec) != 1 {
						t.Fatalf("master %d keeps %v after the failed enter's rollback; want the outer hold alone", i, rec)
					}
				}
			}
			mustRefuse(t, r, key, "owner B while A holds", WithOwner("B"))
			if inner != nil {
				if err := inner.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := outer.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			bctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			b, err := r.Lock(bctx, key, WithOwner("B"))
			if err != nil {
				t.Fatalf("owner B a second after A released every hold: %v", err)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOwnedHoldsProperty drives one key through random sequences of nested
// enters (some with requests that never reach a master, some that land but
// whose reply is lost), releases in any order, and attempts by another
// owner and by plain locks, against real masters. After every step it
// checks every master: a hold's record, once there, stays until the hold is
// released; no record is there that no hold owns; and once every hold is
// released another owner takes the key at once. It makes 15 checks unless
// -rapid.checks says otherwise.
func TestOwnedHoldsProperty(t *testing.T) {
	limitRapidChecks(t, 15)
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	fs, nodes := faultNodes(t, cs)
	const timeout = 250 * time.Millisecond // as newRedlock's: not exceeded by a loaded machine
	r := newRedlock(t, nodes, WithTTL(time.Minute), WithNodeTimeout(timeout))
	ctx := context.Background()
	var entered, failed, refused int

	rapid.Check(t, func(rt *rapid.T) {
		key := testKey(t)
		held := map[string]*Lock{}   // value → hold
		where := map[string][]bool{} // value → masters its record reached
		defer func() {
			for _, l := range held {
				_ = l.Unlock(ctx)
			}
			settle(r)
		}()
		check := func(step string) {
			settle(r)
			owners, recs := holds(t, cs, key)
			for i, rec := range recs {
				for v := range rec {
					if held[v] == nil {
						rt.Fatalf("after %s: master %d keeps a record %s that no hold owns: %v", step, i, v, slices.Sorted(maps.Keys(rec)))
					}
				}
				for v, on := range where {
					if on[i] && rec[v] == "" {
						rt.Fatalf("after %s: master %d lost hold %s's record", step, i, v)
					}
					on[i] = rec[v] != ""
				}
				if len(rec) > 0 && owners[i] != "A" {
					rt.Fatalf("after %s: master %d names owner %q", step, i, owners[i])
				}
			}
		}
		steps := rapid.IntRange(1, 15).Draw(rt, "steps")
		for range steps {
			switch op := rapid.SampledFrom([]string{"enter", "enter", "release", "other"}).Draw(rt, "op"); op {
			case "enter":
				// Faults on up to 3 masters: a request delayed past the node
				// timeout is never sent; a late reply lands unseen.
				faulty := rapid.SliceOfNDistinct(rapid.IntRange(0, len(fs)-1), 0, 3, rapid.ID[int]).Draw(rt, "faulty")
				late := rapid.Bool().Draw(rt, "landed")
				for _, i := range faulty {
					if late {
						fs[i].lateReply.Store(true)
					} else {
						fs[i].acquireDelay.Store(int64(2 * timeout))
					}
				}
				l, err := r.TryLock(ctx, key, WithOwner("A"))
				for _, i := range faulty {
					fs[i].lateReply.Store(false)
					fs[i].acquireDelay.Store(0)
				}
				switch {
				case err == nil:
					held[l.Value()] = l
					where[l.Value()] = make([]bool, len(fs))
					entered++
				case len(faulty) < 3 && refusedBy(err) > 0:
					rt.Fatalf("nested enter with faults on %d of 5 masters refused: %v", len(faulty), err)
				default:
					failed++ // the faults, or a loaded machine's timeouts
				}
			case "release":
				if len(held) == 0 {
					continue
				}
				v := rapid.SampledFrom(slices.Sorted(maps.Keys(held))).Draw(rt, "hold")
				if err := held[v].Unlock(ctx); err != nil {
					rt.Fatalf("Unlock: %v", err)
				}
				delete(held, v)
				delete(where, v)
			case "other":
				opts := []Option{WithOwner("B")}
				if rapid.Bool().Draw(rt, "plain") {
					opts = nil
				}
				l, err := r.TryLock(ctx, key, opts...)
				if len(held) > 0 && err == nil {
					rt.Fatalf("another holder took the key while A held %d holds", len(held))
				}
				if len(held) == 0 && refusedBy(err) > 0 {
					rt.Fatalf("another holder refused right after A released every hold: %v", err)
				}
				if err == nil && len(held) == 0 {
					if err := l.Unlock(ctx); err != nil {
						rt.Fatal(err)
					}
				}
				refused++
			}
			check(fmt.Sprint(len(held), " holds"))
		}
	})
	t.Logf("%d nested enters, %d failed under faults, %d attempts by others", entered, failed, refused)
}

// refusedBy is how many masters refused the attempt that failed with err
// (a timeout is no refusal: a loaded machine can make one).
func refusedBy(err error) int {
	var qe *QuorumError
	if errors.As(err, &qe) {
		return qe.Refused
	}
	return 0
}

// faultNodes wraps a Node over each client in a faultNode, and returns
// them also as Nodes, for New.
func faultNodes(t testing.TB, cs []*redis.Client) ([]*faultNode, []Node) {
	fs := wrapAll(nodesOf(t, cs))
	nodes := make([]Node, len(fs))
	for i, f := range fs {
		nodes[i] = f
	}
	return fs, nodes
}

// extendFault wraps a master: each extend is applied on the master (it
// lands), and then its caller is told something else, as happens when a
// reply is lost or late.
type extendFault struct {
	Node
	mode string // "late": the reply is held back until ctx ends; "slow": for 200 ms; "fail": an error instead of the reply
}

var errReplyLost = errors.New("reply lost")

func (f *extendFault) Exec(ctx context.Context, cmds []*Command) {
	for _, c := range cmds {
		f.Node.Exec(context.WithoutCancel(ctx), []*Command{c})
		if c.req == nil || c.req.Op != reqExtend {
			continue
		}
		switch f.mode {
		case "late":
			<-ctx.Done()
			c.Reply, c.Err = nil, ctx.Err()
		case "slow":
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				c.Reply, c.Err = nil, ctx.Err()
			}
		case "fail":
			c.Reply, c.Err = nil, errReplyLost
		}
	}
}

// TestExtendUnknownOutcome: an Extend to a shorter TTL whose outcome is
// unknown (the caller gave up, no quorum answered, the quorum came too late)
// may still have landed on the masters, so the keys may expire at the new
// TTL. Until must then be no later than the new TTL allows: another client
// can take the lock once the keys expired, and the first holder must know
// by then that its lock is over.
func TestExtendUnknownOutcome(t *testing.T) {
	const longTTL, shortTTL = 30 * time.Second, 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		faults string // per master: "" passes through, else the extendFault mode
		ctx    func() (context.Context, context.CancelFunc)
		opts   []Option
	}{
		{"cancelled before", "", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, nil},
		{"cancelled in flight", "late,late,late", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, nil},
		{"no quorum", "fail,fail,", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, nil},
		// The quorum answers after 200 ms of a 300 ms TTL: less than the
		// minimum validity (150 ms) is left.
		{"quorum too late", "slow,slow,slow", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, []Option{WithMinValidity(150 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := clients(t, masters.Addrs()[:3])
			nodes := nodesOf(t, cs)
			faults := make([]string, 3)
			for i, m := range splitComma(tc.faults, 3) {
				faults[i] = m
				if m != "" {
					nodes[i] = &extendFault{Node: nodes[i], mode: m}
				}
			}
			r := newRedlock(t, nodes)
			other := newRedlock(t, nodesOf(t, cs))
			key := testKey(t)
			l, err := r.TryLock(context.Background(), key, append([]Option{WithTTL(longTTL), WithNodeTimeout(time.Second)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.ctx()
			err = l.Extend(ctx, shortTTL)
			cancel()
			if err == nil && tc.name != "cancelled before" {
				t.Fatalf("Extend succeeded; the test needs an unknown outcome")
			}
			// Another client takes the lock as soon as the masters let it.
			var got *Lock
			deadline := time.Now().Add(3 * time.Second)
			for got == nil && time.Now().Before(deadline) {
				if got, _ = other.TryLock(context.Background(), key, WithTTL(longTTL)); got == nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
			at := time.Now()
			if got == nil {
				// The masters still hold the long TTL: safe, and Until may stay.
				return
			}
			defer got.Unlock(context.Background())
			if until := l.Until(); until.After(at) {
				t.Fatalf("Extend(%v) failed (%v), another client took the lock, and the first holder's Until is still %v ahead: two holders",
					shortTTL, err, until.Sub(at).Round(time.Millisecond))
			}
		})
	}
}

// splitComma splits s at commas into n fields ("" when missing).
func splitComma(s string, n int) []string {
	out := make([]string, n)
	i := 0
	for _, c := range s {
		if c == ',' {
			i++
			continue
		}
		if i < n {
			out[i] += string(c)
		}
	}
	return out
}

// TestExtendTruncatesTTL: the masters keep whole milliseconds, and so must
// TTL and Until after an Extend.
func TestExtendTruncatesTTL(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:3])))
	ctx := context.Background()
	l, err := r.TryLock(ctx, testKey(t), WithTTL(time.Second))
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
	drift := time.Duration(float64(1500*time.Millisecond)*DefaultDriftFactor) + driftFloor
	if until, most := l.Until(), after.Add(1500*time.Millisecond-drift); until.After(most) {
		t.Errorf("Until %v after the Extend returned, more than the truncated TTL less drift allows (%v)",
			until.Sub(before), most.Sub(before))
	}
}

// TestDoneNotDelayedByExtend: an Extend still waiting for its masters when
// the lock's validity ends must not hold back Done: the lock is over at
// Until unless the extend reached a quorum before it.
func TestDoneNotDelayedByExtend(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	slow := make([]*faultNode, len(nodes))
	for i := range nodes {
		slow[i] = wrap(nodes[i])
		nodes[i] = slow[i]
	}
	const ttl = time.Second
	r := newRedlock(t, nodes, WithNodeTimeout(900*time.Millisecond))
	ctx := context.Background()
	l, err := r.TryLock(ctx, testKey(t), WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	until := l.Until()
	for _, f := range slow {
		f.extendDelay.Store(int64(5 * time.Second))
	}
	time.Sleep(time.Until(until.Add(-100 * time.Millisecond)))
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, ttl) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Done not closed 3s after Until")
	}
	if late := time.Since(until); late > 300*time.Millisecond {
		t.Errorf("Done closed %v after Until; an Extend in flight held it back", late.Round(time.Millisecond))
	}
	if err := <-extended; err == nil {
		t.Error("Extend that reached no master succeeded")
	}
	l.Unlock(ctx)
}

// TestExtendReturnsByUntil: an Extend whose masters do not answer returns
// by Until, however long the node timeout: a quorum after that is of no use.
func TestExtendReturnsByUntil(t *testing.T) {
	nodes := nodesOf(t, clients(t, masters.Addrs()[:3]))
	for _, f := range wrapAll(nodes) {
		f.extendDelay.Store(int64(5 * time.Second))
	}
	r := newRedlock(t, nodes, WithNodeTimeout(2*time.Second))
	l := held(t, r, WithTTL(time.Second))
	until := l.Until()
	time.Sleep(time.Until(until.Add(-300 * time.Millisecond)))
	if err := l.Extend(context.Background(), time.Second); err == nil {
		t.Fatal("Extend succeeded with no master answering")
	}
	if late := time.Since(until); late > 150*time.Millisecond {
		t.Fatalf("Extend returned %v after Until", late.Round(time.Millisecond))
	}
}

// TestExtendStraggler: an extend request that timed out on a master (go-redis
// then drops the connection) may land later, after a later extend sent on a
// new connection. When it asks for a shorter TTL, it cuts the key short on
// that master; if that master counted in the later extend's quorum, Until
// must already allow for it. In "failed", an Extend to a short TTL times
// out on two of three masters and then a longer one succeeds on all three;
// in "succeeded", the short one succeeds on two masters and times out on
// the third, and the longer one succeeds on that third master and another.
// Either way the short requests land last; the keys on a quorum must then
// still outlive Until, and no other client may take the lock before Until.
func TestExtendStraggler(t *testing.T) {
	// A node timeout a loaded machine does not exceed by accident; the
	// straggler lands well after the long extend, which goes out when the
	// short one's deadline passed.
	const ttl, shortTTL, longTTL = 4 * time.Second, 2 * time.Second, 8 * time.Second
	const nodeTimeout, strayDelay = 600 * time.Millisecond, 1500 * time.Millisecond
	for _, tc := range []struct {
		name         string
		stray, fails []int // the masters where the short extend straggles, where the long one fails
	}{
		{"failed", []int{0, 1}, nil},
		{"succeeded", []int{2}, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := clients(t, masters.Addrs()[:3])
			nodes := nodesOf(t, cs)
			fs := wrapAll(nodes)
			for _, i := range tc.stray {
				fs[i].strayTTL.Store(int64(shortTTL))
				fs[i].strayDelay.Store(int64(strayDelay))
			}
			for _, i := range tc.fails {
				fs[i].failTTL.Store(int64(longTTL))
			}
			r := newRedlock(t, nodes, WithNodeTimeout(nodeTimeout))
			other := newRedlock(t, nodesOf(t, cs), WithNodeTimeout(nodeTimeout))
			ctx := context.Background()
			key := testKey(t)
			l, err := r.TryLock(ctx, key, WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			shortErr := l.Extend(ctx, shortTTL)
			if got, want := shortErr == nil, tc.name == "succeeded"; got != want {
				t.Fatalf("Extend(%v) = %v; the test needs it to succeed: %v", shortTTL, shortErr, want)
			}
			if err := l.Extend(ctx, longTTL); err != nil {
				t.Fatalf("Extend(%v) after Extend(%v) (%v): %v", longTTL, shortTTL, shortErr, err)
			}
			for fs[0].strayed.Load()+fs[1].strayed.Load()+fs[2].strayed.Load() < int64(len(tc.stray)) {
				time.Sleep(5 * time.Millisecond)
			}
			// Every straggler landed: the keys on a quorum must outlive Until.
			until := l.Until()
			var outlive []int
			for i, c := range cs {
				pttl, err := c.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatalf("PTTL on master %d: %v", i, err)
				}
				if expiry := time.Now().Add(pttl + time.Millisecond); pttl > 0 && !expiry.Before(until) {
					outlive = append(outlive, i)
				}
			}
			if len(outlive) < 2 {
				t.Errorf("Until is %v ahead, but only masters %v keep the key that long: no quorum",
					time.Until(until).Round(time.Millisecond), outlive)
			}
			// Another client takes the lock as soon as the masters let it.
			var got *Lock
			for deadline := time.Now().Add(shortTTL + 2*time.Second); got == nil && time.Now().Before(deadline); {
				if got, _ = other.TryLock(ctx, key, WithTTL(ttl)); got == nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if got != nil {
				at := time.Now()
				defer got.Unlock(ctx)
				if until := l.Until(); until.After(at) {
					t.Errorf("another client took the lock and the first holder's Until is still %v ahead: two holders",
						until.Sub(at).Round(time.Millisecond))
				}
			}
			l.Unlock(ctx)
		})
	}
}
