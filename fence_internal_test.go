package redlock

import (
	"bytes"
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// oldFencedLock takes and releases key on masters cs as a fenced Lock of a
// version before the counters moved did: acquire_fenced.lua and
// raise_fence.lua on the old counter name key+":fence", then a DEL. It
// returns the token it was handed.
func oldFencedLock(t *testing.T, cs []*redis.Client, key string) uint64 {
	t.Helper()
	ctx := context.Background()
	old := key + ":fence"
	var token uint64
	for i, c := range cs {
		n, err := c.Eval(ctx, acquireFencedSrc.(string), []string{key, old}, "old-holder", 10000).Uint64()
		if err != nil || n == 0 {
			t.Fatalf("master %d: old fenced acquire: %d, %v", i, n, err)
		}
		token = max(token, n)
	}
	for i, c := range cs {
		if ok, err := c.Eval(ctx, raiseFenceSrc.(string), []string{key, old}, "old-holder", token).Int(); err != nil || ok != 1 {
			t.Fatalf("master %d: old raise: %d, %v", i, ok, err)
		}
		if err := c.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return token
}

// TestFenceCounterMovedTokensIncrease: a key without a hash tag had its
// fence counter at key:fence; it is now at fence:{key}, which starts empty.
// Tokens still increase across the move, because round 1 floors a counter
// at the master's clock in µs: the first token from the new counter is
// above every token the old one handed out, and holders that alternate
// between old and new clients (a rolling deploy) get increasing tokens on
// masters whose clocks agree (one machine here; see docs/masters.md).
func TestFenceCounterMovedTokensIncrease(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs), WithFencing())
	ctx := context.Background()
	key := testKey(t)
	if FenceKey(key) == key+":fence" {
		t.Fatalf("FenceKey(%q) is still the old name", key)
	}
	var last uint64
	for range 3 {
		last = oldFencedLock(t, cs, key)
	}
	highest := last
	for i, c := range cs {
		v, err := c.Get(ctx, key+":fence").Uint64()
		if err != nil {
			t.Fatalf("master %d: old counter: %v", i, err)
		}
		highest = max(highest, v)
		if n := c.Exists(ctx, FenceKey(key)).Val(); n != 0 {
			t.Fatalf("master %d: the new counter exists before the first new lock", i)
		}
	}
	l, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("old tokens up to %d (old counters up to %d); first new token %d (+%d µs)", last, highest, l.Fence(), l.Fence()-highest)
	if l.Fence() <= highest {
		t.Fatalf("first token after the move %d, not above the old counter's %d", l.Fence(), highest)
	}
	last = l.Fence()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(r) // Unlock returns at a quorum: the old client needs the key gone everywhere
	// Old and new clients alternating on the key, as in a rolling deploy.
	for i := range 6 {
		var tok uint64
		if i%2 == 0 {
			tok = oldFencedLock(t, cs, key)
		} else {
			l, err := r.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			tok = l.Fence()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			settle(r)
		}
		if tok <= last {
			t.Fatalf("holder %d (old client: %v) got token %d after %d", i, i%2 == 0, tok, last)
		}
		last = tok
	}
}

// limitRapidChecks sets -rapid.checks to n for this test when the command
// line did not set it: each check here talks to real servers.
func limitRapidChecks(t *testing.T, n int) {
	set := false
	goflag.Visit(func(f *goflag.Flag) { set = set || f.Name == "rapid.checks" })
	f := goflag.Lookup("rapid.checks")
	if set || f == nil {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}
