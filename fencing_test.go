package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// faultClients returns clients for masters that the test will pause, kill
// and restart: no go-redis retries, and the context's deadline (the node
// timeout) reaches the socket, so a paused master costs one node timeout, not
// the client's 5 s read timeout.
func faultClients(t testing.TB, addrs []string) []*redis.Client {
	t.Helper()
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{
			Addr: a, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond,
			ContextTimeoutEnabled: true,
			// go-redis stops dialling after PoolSize failed dials (over the
			// client's life) until a probe, once a second, gets through: a
			// restarted master would look dead for up to a second.
			PoolSize: 10000,
		})
		c := cs[i]
		t.Cleanup(func() { c.Close() })
	}
	return cs
}

// waitDialProbes waits, at the end of a test whose masters died, for the
// goroutines go-redis starts to probe a dead master; they notice the client
// was closed only after their one-second sleep.
func waitDialProbes(t testing.TB) {
	t.Cleanup(func() { // registered first, so it runs after the clients closed
		buf := make([]byte, 1<<20)
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial")) {
				return
			}
		}
		t.Error("go-redis dial probes still running 3s after the clients closed")
	})
}

// occupy sets key to a foreign value on the given masters, so an acquire
// cannot win them; free deletes it again.
func occupy(t testing.TB, cs []*redis.Client, key string, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if err := cs[i].Set(context.Background(), key, foreign, time.Minute).Err(); err != nil {
			t.Fatalf("occupying master %d: %v", i, err)
		}
	}
}

func free(t testing.TB, cs []*redis.Client, key string, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if err := cs[i].Del(context.Background(), key).Err(); err != nil {
			t.Fatalf("freeing master %d: %v", i, err)
		}
	}
}

// counters reads the fence counter of key on every master (0 when absent).
func counters(t testing.TB, cs []*redis.Client, key string) []uint64 {
	t.Helper()
	vs := make([]uint64, len(cs))
	for i, c := range cs {
		v, err := c.Get(context.Background(), FenceKey(key)).Uint64()
		if err != nil && err != redis.Nil {
			t.Fatalf("GET %s on master %d: %v", FenceKey(key), i, err)
		}
		vs[i] = v
	}
	return vs
}

// nowMicros is the local clock in µs, the scale of the clock floor.
func nowMicros() uint64 { return uint64(time.Now().UnixMicro()) }

// TestFenceInflatedCounter is the scenario of the design's proof: one master's
// counter runs far ahead of the others (failed attempts that won only that
// master, and a counter ahead of every clock, so the clock floor cannot help).
// Holder A's quorum includes that master, so A's token is the inflated one;
// holder B's quorum excludes it. B's token must still be larger: round 2
// raised A's other masters to A's token, and B's quorum meets them.
func TestFenceInflatedCounter(t *testing.T) {
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithFencing(), WithTTL(5*time.Second))
	ctx := context.Background()
	key := testKey(t)

	// Failed attempts: master 0 free, the others held by someone else.
	occupy(t, cs, key, 1, 2, 3, 4)
	const failed = 200
	for i := range failed {
		if _, err := r.TryLock(ctx, key); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("attempt %d with 4 of 5 masters taken: %v, want ErrNotObtained", i, err)
		}
	}
	settle(r)
	c := counters(t, cs, key)
	if c[0] == 0 || c[1]+c[2]+c[3]+c[4] != 0 {
		t.Fatalf("after %d failed attempts counters are %v; want only master 0's raised", failed, c)
	}
	// A counter ahead of every clock by an hour, as many more failed attempts
	// (or a master whose clock ran ahead) would leave it.
	ahead := nowMicros() + uint64(time.Hour.Microseconds())
	if err := cs[0].Set(ctx, FenceKey(key), ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}

	// A wins masters 0, 1, 2.
	free(t, cs, key, 1, 2)
	a, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fence() != ahead+1 {
		t.Fatalf("A's token %d, want the inflated counter + 1 = %d", a.Fence(), ahead+1)
	}
	if c := counters(t, cs, key); c[1] < a.Fence() || c[2] < a.Fence() || c[3] != 0 {
		t.Fatalf("after A's round 2 counters are %v; want masters 1 and 2 raised to A's token %d", c, a.Fence())
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(r)

	// B wins masters 1, 3, 4: only master 1 is shared with A's quorum.
	free(t, cs, key, 3, 4)
	occupy(t, cs, key, 0, 2)
	b, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's token %d is not above A's %d", b.Fence(), a.Fence())
	}
	t.Logf("A %d, B %d (clock %d): %d failed attempts inflated master 0", a.Fence(), b.Fence(), nowMicros(), failed)
}

// TestFenceRestartEmpty: two masters that held holder A's key restart empty
// while A holds the lock: Redlock's delayed-restart rule is broken, and B
// wins a quorum while A's validity has not ended (two holders at once). The
// clock floor still makes B's token larger, so a Fence rejects A's writes.
func TestFenceRestartEmpty(t *testing.T) {
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithFencing(), WithTTL(10*time.Second), WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()
	key := testKey(t)

	occupy(t, cs, key, 3, 4)
	a, err := r.TryLock(ctx, key) // masters 0, 1, 2
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1} {
		if err := cl.Servers[i].Restart(false); err != nil {
			t.Fatal(err)
		}
	}
	free(t, cs, key, 3, 4)
	if c := counters(t, cs, key); c[0] != 0 || c[1] != 0 {
		t.Fatalf("restarted masters still have counters %v", c)
	}
	var b *Lock
	for range 3 { // the first request to a restarted master fails on the dead connection
		if b, err = r.TryLock(ctx, key); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); !now.Before(a.Until()) || !now.Before(b.Until()) {
		t.Fatal("the test took so long that A's lock expired; the overlap it shows did not happen")
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("after masters restarted empty B's token %d is not above A's %d", b.Fence(), a.Fence())
	}
	var fence Fence
	if err := fence.Check(b.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := fence.Check(a.Fence()); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("A's write after B's: %v, want ErrStaleToken", err)
	}
	t.Logf("two holders at once after restarts without data; tokens A %d < B %d", a.Fence(), b.Fence())
	_ = b.Unlock(ctx)
	_ = a.Unlock(ctx)
}

// TestFenceRejectsStaleHolder: A's lock expires while A is "paused"; B takes
// the lock and writes; A's late write through the Fence is rejected, and A's
// Unlock says the lock was not held.
func TestFenceRejectsStaleHolder(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithFencing(), WithTTL(200*time.Millisecond))
	ctx := context.Background()
	key := testKey(t)
	var fence Fence
	var store []string // the resource; fence.Guard serialises its writes

	a, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Guard(a.Fence(), func() error { store = append(store, "A1"); return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(a.Until()) + a.TTL()) // A is paused past its validity and the keys' TTL

	b, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Guard(b.Fence(), func() error { store = append(store, "B1"); return nil }); err != nil {
		t.Fatal(err)
	}
	err = fence.Guard(a.Fence(), func() error { store = append(store, "A2"); return nil })
	var se *StaleTokenError
	if !errors.As(err, &se) || se.Token != a.Fence() || se.Highest != b.Fence() {
		t.Fatalf("A's late write: %v, want a StaleTokenError{%d, %d}", err, a.Fence(), b.Fence())
	}
	if fmt.Sprint(store) != "[A1 B1]" {
		t.Fatalf("resource holds %v, want [A1 B1]", store)
	}
	if err := a.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("A's Unlock after expiry: %v, want ErrNotHeld", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestFenceConfirmedTooLate: a quorum confirms round 2, but by then the
// validity left is under the minimum. The token must not be used: the
// acquire fails as late, and the keys are rolled back.
func TestFenceConfirmedTooLate(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	// While round 2 is in flight, 9 s pass: 0.9 s of validity is left, under 1 s.
	c := &jumpClock{}
	for _, f := range wrapAll(nodes) {
		f.onSend(jumpOnce(c, reqRaiseFence, 9*time.Second))
	}
	r := newRedlock(t, nodes, WithFencing(), WithTTL(10*time.Second), WithMinValidity(time.Second))
	r.clock = c
	key := testKey(t)
	_, err := r.TryLock(context.Background(), key)
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.As(err, &qe) || qe.Op != opFence || !qe.Late || qe.Succeeded < qe.Quorum {
		t.Fatalf("err %v: want a late fence QuorumError after a quorum confirmed", err)
	}
	settle(r)
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Fatalf("late fenced acquire not rolled back: masters hold %q", vs)
	}
}

// TestFenceCounterChangedByHand: a counter that is not an integer below
// 2^53 fails the fenced acquire on that master with an error naming the
// counter, before the key is taken; a negative one is refused by the Node.
func TestFenceCounterChangedByHand(t *testing.T) {
	c := clients(t, masters.Addrs()[:1])[0]
	n := NewNode(c)
	ctx := context.Background()
	for _, bad := range []string{"abc", "1.5", "-3", strconv.FormatUint(1<<53, 10), "9007199254740993"} {
		key := testKey(t)
		if err := c.Set(ctx, FenceKey(key), bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		q := &request{Op: reqAcquireFenced, Key: key, Value: "v", TTL: time.Second}
		execRequests(ctx, n, q)
		err := q.Err
		if err == nil {
			t.Errorf("counter %q: token %d, want an error", bad, q.Fence)
			continue
		}
		if ex := c.Exists(ctx, key).Val(); ex != 0 {
			t.Errorf("counter %q: the key was taken although the acquire failed (%v)", bad, err)
		}
	}
	// The largest usable counter still increases by one, exactly.
	key := testKey(t)
	const top = 1<<53 - 2
	if err := c.Set(ctx, FenceKey(key), uint64(top), 0).Err(); err != nil {
		t.Fatal(err)
	}
	q := &request{Op: reqAcquireFenced, Key: key, Value: "v", TTL: time.Second}
	if execRequests(ctx, n, q); q.Err != nil || q.Fence != top+1 || !q.OK {
		t.Fatalf("counter 2^53-2: token %d, %v; want %d", q.Fence, q.Err, uint64(top+1))
	}
	if got, _ := c.Get(ctx, FenceKey(key)).Uint64(); got != top+1 {
		t.Fatalf("counter written back as %d, want %d", got, uint64(top+1))
	}
}

// wrapReplies wraps the first n nodes: fn runs after each request went
// through the real master, to change what the Redlock is told.
func wrapReplies(nodes []Node, n int, fn func(q *request)) {
	for i := range n {
		inner := nodes[i]
		nodes[i] = NodeFunc(inner.Name(), func(ctx context.Context, c *Command) {
			inner.Exec(ctx, []*Command{c})
			q := *c.req
			decode(&q, c)
			fn(&q)
			replyFor(&q, c)
		})
	}
}

// TestFenceRound2NeedsQuorum: a token confirmed by fewer than a quorum is
// never handed out; the acquire fails and is rolled back.
func TestFenceRound2NeedsQuorum(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	wrapReplies(nodes, 2, func(q *request) {
		if q.Op == reqRaiseFence {
			q.OK = false // the key was gone there
		}
	})
	r := newRedlock(t, nodes, WithFencing())
	key := testKey(t)
	l, err := r.TryLock(context.Background(), key)
	if err == nil {
		t.Fatalf("fenced acquire succeeded with token %d although 2 of 3 refused round 2", l.Fence())
	}
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.As(err, &qe) || qe.Op != opFence || qe.Refused != 2 {
		t.Fatalf("err %v: want a fence QuorumError with 2 refusals", err)
	}
	settle(r)
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Fatalf("not rolled back: masters hold %q", vs)
	}
}

// TestFenceZeroTokenFails: a master that answers a fenced acquire with a
// token the scripts cannot use (above 2^53) counts as failed (ErrBadReply),
// never as a success. (A 0 is the script's "the key is taken": a refusal;
// TestHostileReplies has every raw reply.)
func TestFenceZeroTokenFails(t *testing.T) {
	for _, bad := range []uint64{1<<53 + 1, 1 << 60} {
		nodes := nodesOf(t, clients(t, masters.Addrs()[:3]))
		wrapReplies(nodes, 2, func(q *request) {
			if q.Op == reqAcquireFenced && q.OK {
				q.Fence = bad
			}
		})
		r := newRedlock(t, nodes, WithFencing())
		_, err := r.TryLock(context.Background(), testKey(t))
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrBadReply) {
			t.Fatalf("token %d from 2 of 3 masters: err %v, want ErrNotObtained with ErrBadReply", bad, err)
		}
	}
}
