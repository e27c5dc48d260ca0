package redlock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

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
