package redlock

import (
	"bytes"
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
	"pgregory.net/rapid"
)

func TestFenceCheck(t *testing.T) {
	var f Fence
	for _, tok := range []uint64{5, 5, 7, 100} {
		if err := f.Check(tok); err != nil {
			t.Fatalf("Check(%d) after highest %d: %v", tok, f.Highest(), err)
		}
	}
	err := f.Check(99)
	var se *StaleTokenError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &se) || se.Token != 99 || se.Highest != 100 {
		t.Fatalf("Check(99) after 100: %v, want a StaleTokenError{99, 100}", err)
	}
	if f.Highest() != 100 {
		t.Errorf("a rejected token moved Highest to %d", f.Highest())
	}

	var ce *ConfigError
	if err := f.Check(0); !errors.As(err, &ce) || ce.Field != "token" {
		t.Errorf("Check(0): %v, want a ConfigError on the token", err)
	}
	var nilFence *Fence
	if err := nilFence.Check(1); !errors.As(err, &ce) || nilFence.Highest() != 0 {
		t.Errorf("nil Fence: %v, want a ConfigError", err)
	}
	if err := f.Guard(200, nil); !errors.As(err, &ce) || f.Highest() != 100 {
		t.Errorf("Guard with a nil write: %v, want a ConfigError and no change", err)
	}
}

// TestFenceGuardSerialisesWrites: concurrent writers through Guard with
// random tokens; the writes that ran carry non-decreasing tokens in the order
// they ran, and every rejection names a higher token already written.
func TestFenceGuardSerialisesWrites(t *testing.T) {
	var f Fence
	var written []uint64 // appended by the writes only, which Guard serialises
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				tok := uint64((i*7919+g*104729)%1000 + 1)
				err := f.Guard(tok, func() error {
					written = append(written, tok)
					return nil
				})
				var se *StaleTokenError
				if err != nil && (!errors.As(err, &se) || se.Highest <= tok) {
					t.Errorf("Guard(%d): %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(written); i++ {
		if written[i] < written[i-1] {
			t.Fatalf("write %d carried token %d after %d", i, written[i], written[i-1])
		}
	}
	if len(written) == 0 || written[len(written)-1] != f.Highest() {
		t.Fatalf("last write %v, Highest %d", written[len(written)-1:], f.Highest())
	}
	wantErr := errors.New("disk full")
	if err := f.Guard(f.Highest()+1, func() error { return wantErr }); err != wantErr {
		t.Errorf("Guard returned %v, want the write's error", err)
	}
}

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

// tokenLog records tokens in acquisition order, from inside the critical
// section, and checks that each is above the one before.
type tokenLog struct {
	mu      sync.Mutex // guards the fields below
	last    uint64
	checked int
	late    int // recorded after the holder's validity ended: not ordered
	bad     []string
}

func (l *tokenLog) record(lk *Lock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !time.Now().Before(lk.Until()) {
		l.late++
		return
	}
	if lk.Fence() <= l.last {
		l.bad = append(l.bad, fmt.Sprintf("token %d after %d (holder %d)", lk.Fence(), l.last, l.checked))
	}
	l.last = lk.Fence()
	l.checked++
}

// faults pauses, or kills and restarts with its data, a random minority of
// the masters, over and over, until stop is closed.
type faults struct {
	cl               *redistest.Cluster
	pauses, restarts atomic.Int64
	errs             []error
}

func (f *faults) run(stop <-chan struct{}) {
	n := len(f.cl.Servers)
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(20+rand.N(80)) * time.Millisecond):
		}
		k := 1 // one master at a time, now and then as many as a minority may be
		if rand.N(3) == 0 {
			k = (n - 1) / 2
		}
		hit := rand.Perm(n)[:k]
		var paused, killed []*redistest.Server
		for _, i := range hit {
			s := f.cl.Servers[i]
			var err error
			if rand.N(2) == 0 {
				err = s.Pause()
				paused = append(paused, s)
				f.pauses.Add(1)
			} else {
				err = s.Kill()
				killed = append(killed, s)
				f.restarts.Add(1)
			}
			if err != nil {
				f.errs = append(f.errs, err)
			}
		}
		time.Sleep(time.Duration(10+rand.N(70)) * time.Millisecond)
		for _, s := range paused {
			if err := s.Resume(); err != nil {
				f.errs = append(f.errs, err)
			}
		}
		for _, s := range killed {
			if err := s.Restart(true); err != nil {
				f.errs = append(f.errs, err)
			}
		}
	}
}

// TestFenceTokensIncreaseUnderFaults: 8 goroutines × 300 acquisitions of
// one key on 5 masters of its own, while a random minority is paused, or
// killed and restarted with its data (AOF). Tokens recorded in
// the critical sections, in acquisition order, strictly increase.
func TestFenceTokensIncreaseUnderFaults(t *testing.T) {
	goroutines, rounds := 8, 300
	if testing.Short() {
		rounds = 40
	}
	waitDialProbes(t)
	// AOF keeps the data across a kill. The write(2) to the AOF happens before
	// the reply, so a killed process loses nothing acknowledged even without
	// fsync (only a machine crash would); fsync always would slow the run 3×.
	cl := redistest.StartT(t, 5, redistest.Options{AppendOnly: true, Args: []string{"--appendfsync", "no"}})
	r := newRedlock(t, nodesOf(t, faultClients(t, cl.Addrs())), WithFencing(),
		WithTTL(time.Second), WithNodeTimeout(50*time.Millisecond), WithBackoff(5*time.Millisecond, 40*time.Millisecond))
	key := testKey(t)

	f := &faults{cl: cl}
	stop, faultsDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(faultsDone); f.run(stop) }()

	var log tokenLog
	var unlockErrs atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				l, err := r.Lock(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				log.record(l)
				if l.Unlock(ctx) != nil { // too few masters answered the release: the keys expire
					unlockErrs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	<-faultsDone
	close(errs)
	for err := range errs {
		t.Errorf("after %d acquisitions in %v (faults: %d pauses, %d restarts): %v", log.checked, took, f.pauses.Load(), f.restarts.Load(), err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if len(f.errs) > 0 {
		t.Fatalf("injecting faults: %v", errors.Join(f.errs...))
	}
	for _, b := range log.bad {
		t.Error(b)
	}
	if log.checked+log.late != goroutines*rounds || log.late > log.checked/100 {
		t.Fatalf("%d tokens checked, %d recorded after their validity, of %d", log.checked, log.late, goroutines*rounds)
	}
	t.Logf("%d tokens strictly increasing in %v (%d late, %d unlock errors); faults: %d pauses, %d kill+restart(AOF)",
		log.checked, took.Round(time.Millisecond), log.late, unlockErrs.Load(), f.pauses.Load(), f.restarts.Load())
}

// TestFenceTokensProperty drives one key through random interleavings of
// acquire, expire (the key deleted on some masters, as a lapsed TTL leaves
// it), release and restart-empty of a master, against real servers, and
// checks that every holder's token is above the previous holder's. It makes
// 50 checks unless -rapid.checks says otherwise (10 with -short).
func TestFenceTokensProperty(t *testing.T) {
	limitRapidChecks(t, 50)
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithFencing(), WithTTL(time.Minute), WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()

	var holders, restarts, expiries int
	rapid.Check(t, func(rt *rapid.T) {
		key := testKey(t)
		var held []*Lock
		var last uint64 // the previous holder's token
		defer func() {
			for _, l := range held {
				_ = l.Unlock(ctx)
			}
			settle(r)
		}()
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range steps {
			switch rapid.SampledFrom([]string{"acquire", "acquire", "expire", "release", "restart-empty"}).Draw(rt, "op") {
			case "acquire":
				l, err := r.TryLock(ctx, key)
				settle(r) // a failed attempt's rollback ends before the next step
				if err != nil {
					if !errors.Is(err, ErrNotObtained) {
						rt.Fatalf("acquire: %v", err)
					}
					continue
				}
				if l.Fence() <= last {
					rt.Fatalf("holder's token %d is not above the previous holder's %d", l.Fence(), last)
				}
				last = l.Fence()
				held = append(held, l)
				holders++
			case "expire":
				nodes := rapid.SliceOfNDistinct(rapid.IntRange(0, len(cs)-1), 1, len(cs), rapid.ID[int]).Draw(rt, "expire on")
				for _, i := range nodes {
					if err := cs[i].Del(ctx, key).Err(); err != nil {
						rt.Logf("DEL on master %d (restarted, its old connection failed): %v", i, err)
					}
				}
				expiries++
			case "release":
				if len(held) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(held)-1).Draw(rt, "release")
				_ = held[i].Unlock(ctx) // ErrNotHeld when the key was deleted from a quorum
				settle(r)
				held = append(held[:i], held[i+1:]...)
			case "restart-empty":
				i := rapid.IntRange(0, len(cs)-1).Draw(rt, "restart")
				if err := cl.Servers[i].Restart(false); err != nil {
					rt.Fatal(err)
				}
				restarts++
			}
		}
	})
	t.Logf("%d holders' tokens checked; faults: %d restarts without data, %d expiries", holders, restarts, expiries)
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
