package redlock

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/faultproxy"
)

// sentCounter counts the commands of a name that go-redis clients send,
// pipelined or not (EVALSHA and EVAL count as the script they run: not SET).
type sentCounter struct {
	Name string
	N    atomic.Int64
}

func (s *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), s.Name) {
			s.N.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (s *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if strings.EqualFold(cmd.Name(), s.Name) {
				s.N.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// waitRegistered waits until key's queue on every master holds n entries.
func waitRegistered(t testing.TB, cs []*redis.Client, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok := true
		for _, c := range cs {
			if got, _ := c.ZCard(context.Background(), WaitKey(key)).Result(); got != int64(n) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key's queue does not hold %d entries on every master after 5s", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// obtainedWithin returns the outcome of the Lock call behind got, a held lock, or
// fails with msg (after logging each master's value and queue for key)
// when it does not come within d. A lock taken by hand-off has its keys'
// TTLs checked (handedTTLs).
func obtainedWithin(t testing.TB, admin []*redis.Client, key string, got <-chan obtained, d time.Duration, msg string) obtained {
	t.Helper()
	select {
	case o := <-got:
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if strings.Contains(o.Lock.Value(), "#") {
			handedTTLs(t, admin, o.Lock, o.Until)
		}
		return o
	case <-time.After(d):
		ctx := context.Background()
		for _, c := range admin {
			v, _ := c.Get(ctx, key).Result()
			q, _ := c.ZRangeWithScores(ctx, WaitKey(key), 0, -1).Result()
			t.Logf("master %s: %q queue %v", c.Options().Addr, v, q)
		}
		t.Fatal(msg)
		return obtained{}
	}
}

// handedTTLs checks that each master holding l's value (a lock taken by
// hand-off) keeps it at least until until, l's Until when Lock returned it,
// and for no more than its TTL: a handed key that expires sooner is two
// holders; one that lives longer blocks the key past a crashed holder's
// TTL. Not l.Until() now: an auto-extended lock's renewal may have moved it
// on a quorum while this master's renewal is still on its way (seen on a
// loaded machine: 34 ms "short" for a key that was not).
func handedTTLs(t testing.TB, admin []*redis.Client, l *Lock, until time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, c := range admin {
		if v, _ := c.Get(ctx, l.Key()).Result(); v != l.Value() {
			continue // handed later, or not at all, there
		}
		pttl, err := c.PTTL(ctx, l.Key()).Result()
		// The master read its clock between the PTTL's send and its reply,
		// and PTTL is in whole ms, cut down: the key expires no later than
		// now + pttl + 1 ms. Only that proves it expires before Until (a
		// reading taken before the requests went out said so once on a
		// loaded machine, 153 µs short, for a key that did not).
		latest := time.Now().Add(pttl + time.Millisecond)
		if err != nil {
			t.Fatalf("PTTL on %s: %v", c.Options().Addr, err)
		}
		if pttl > l.TTL() {
			t.Errorf("master %s keeps the handed key for %v, more than the TTL %v", c.Options().Addr, pttl, l.TTL())
		}
		if latest.Before(until) {
			t.Errorf("master %s lets the handed key expire at least %v before the holder's Until", c.Options().Addr, until.Sub(latest))
		}
	}
}

// TestHandOffDirect: a Redlock waiting for a key another Redlock holds (as
// another process would) is handed the key by the release itself: it holds
// the lock without sending an acquire of its own, every master holds its
// value, and its validity counts from its registration, not from the
// release (it waited half a second in between).
func TestHandOffDirect(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	wcs := clients(t, masters.Addrs())
	sets := &sentCounter{Name: "set"}
	for _, c := range wcs {
		c.AddHook(sets)
	}
	// A long backoff: the waiter makes no attempt of its own after queueing.
	waiter := newRedlock(t, nodesOf(t, wcs), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder) // on every master, not only a quorum
	called := time.Now()
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin, key, 1)
	registered := time.Now()
	time.Sleep(500 * time.Millisecond)
	before := sets.N.Load()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the waiter did not get the key within 5s of the release")
	if n := sets.N.Load() - before; n != 0 {
		t.Errorf("the waiter sent %d SET commands after the release; want 0: the release hands the key over", n)
	}
	if d := o.At.Sub(released); d > 300*time.Millisecond {
		t.Errorf("the waiter held the key %v after the release, want about a round trip", d)
	}
	settle(holder) // the release reached every master
	if n := count(holders(t, admin, key), o.Lock.Value()); n != len(admin) {
		t.Errorf("%d of %d masters hold the waiter's value, want all", n, len(admin))
	}
	// Counted from the registration (before registered), not from the
	// hand-off: at least the half second it waited shorter.
	cfg := defaultConfig()
	if latest := registered.Add(cfg.ttl - cfg.drift()); o.Lock.Until().After(latest) {
		t.Errorf("Until is %v after the registration plus the TTL less drift; validity must count from the registration",
			o.Lock.Until().Sub(latest))
	}
	if o.Lock.Until().Before(called.Add(cfg.ttl - cfg.drift())) {
		t.Errorf("Until %v is before the call's start plus the TTL less drift", o.Lock.Until())
	}
	if err := o.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(waiter) // Unlock returns at a quorum: the release reached every master
	if n := count(holders(t, admin, key), o.Lock.Value()); n != 0 {
		t.Errorf("%d masters still hold the value after Unlock", n)
	}
	if got, _ := admin[0].Exists(ctx, WaitKey(key)).Result(); got != 0 {
		t.Errorf("the queue is left after the hand-off and the Unlock")
	}
}

// TestHandOffGhost: a master that hands the key to a call nobody runs any
// more (an entry left in the queue, its Redlock alive) gets it back at
// once from that Redlock, which hands it on: the next waiter does not wait
// for the ghost's TTL (a minute here) or its own backoff (10 s).
func TestHandOffGhost(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	ghost := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	ghost.wake.start(ctx, "", time.Second) // subscribed, as after a wait
	if _, listening := ghost.wake.name(); !listening {
		t.Fatal("the ghost's Redlock does not listen")
	}
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder) // on every master, not only a quorum
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin, key, 1)
	for i, c := range admin {
		// First in the queue: a call of the ghost's that left no trace.
		if err := c.ZAdd(ctx, WaitKey(key), redis.Z{Score: 1, Member: ghost.wake.chans[i] + "|gone|60000|1"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the waiter did not get the key within 5s: the ghost's hand-off was not given back")
	if d := o.At.Sub(released); d > time.Second {
		t.Errorf("the waiter got the key %v after the release", d)
	}
	_ = o.Lock.Unlock(ctx)
}

// TestHandOffRegistrationOrder: on a master, a registration deletes only
// the hand-offs made under earlier registrations of its call: one that
// lands late or twice leaves a later hand-off (which the call may count)
// alone; the call's Unlock or give-up (no registration) deletes any.
func TestHandOffRegistrationOrder(t *testing.T) {
	ctx := context.Background()
	c := clients(t, masters.Addrs()[:1])[0]
	n := NewNode(c)
	key := testKey(t)
	for _, tc := range []struct {
		reg     uint64
		deletes bool
	}{{1, false}, {2, false}, {3, true}, {0, true}} {
		if err := c.Set(ctx, key, handValue("H", 2), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		q := &request{Op: reqRelease, Key: key, Value: "attempt", Waiter: "chan", Place: 7, Queued: 7, Hand: "H", Reg: tc.reg, TTL: time.Minute}
		execRequests(ctx, n, q)
		if q.Err != nil {
			t.Fatal(q.Err)
		}
		v, err := c.Get(ctx, key).Result()
		if deleted := err == redis.Nil; deleted != tc.deletes {
			t.Errorf("registration %d over a hand-off under 2: deleted %v (value %q), want %v", tc.reg, deleted, v, tc.deletes)
		}
		if q.OK != tc.deletes {
			t.Errorf("registration %d: reply OK %v, want %v", tc.reg, q.OK, tc.deletes)
		}
		c.Del(ctx, key, WaitKey(key))
	}
	// A registration that lands after a later one of its call (late, or
	// sent twice) neither takes the later one off the queue nor queues.
	later := "chan|H|60000|3"
	if err := c.ZAdd(ctx, WaitKey(key), redis.Z{Score: 7, Member: later}).Err(); err != nil {
		t.Fatal(err)
	}
	q := &request{Op: reqRelease, Key: key, Value: "attempt", Waiter: "chan", Place: 7, Queued: 7, Hand: "H", Reg: 2, TTL: time.Minute}
	execRequests(ctx, n, q)
	if q.Err != nil {
		t.Fatal(q.Err)
	}
	if got, _ := c.ZRange(ctx, WaitKey(key), 0, -1).Result(); len(got) != 1 || got[0] != later {
		t.Errorf("after a late registration 2, the queue holds %q, want only registration 3's %q", got, later)
	}
	c.Del(ctx, key, WaitKey(key))
}

// TestHandOffLeftBehind: a Redlock whose Unlock handed the key on, and
// that does not lock it again, does not keep the place it was queued at
// for long: the next waiter gets the key at the next release, not after a
// TTL or its backoff.
func TestHandOffLeftBehind(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	a := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	b := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	c := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	ob := leftBehind(t, admin, a, b, key) // b holds; a's Unlock queued a behind b
	time.Sleep(50 * time.Millisecond)     // a does not lock again
	gotC := lockAsync(t, ctx, c, key)
	waitRegistered(t, admin, key, 1)
	released := time.Now()
	if err := ob.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	oc := obtainedWithin(t, admin, key, gotC, 5*time.Second, "c did not get the key within 5s: a's place behind b was kept")
	if d := oc.At.Sub(released); d > time.Second {
		t.Errorf("c got the key %v after the release", d)
	}
	_ = oc.Lock.Unlock(ctx)
}

// TestHandOffLeftBehindUnlockUndecided: the place an Unlock leaves behind
// the next holder is settled once a quorum of masters answered the
// release, not when the slowest master does. Here x's Unlock released the
// key on masters 0 and 1, lost the reply of master 2, and waits for 3 and
// 4 (silent) until its deadline; meanwhile y, handed the key by that
// release, unlocks, and c, queued behind x's place, gets the key at once.
// (Found by the chaos harness's shard-pause on a loaded machine: a
// release that a quorum answered without a quorum of successes left its
// place queued while it waited for the paused shards; the next release
// handed the key to that place, which no call could take over, and every
// client waited 0.8 s.)
func TestHandOffLeftBehindUnlockUndecided(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	xn := nodesOf(t, clients(t, masters.Addrs()))
	f := make([]*faultNode, len(xn))
	for i := range xn {
		f[i] = wrap(xn[i])
		xn[i] = f[i]
	}
	const nodeTimeout = 2 * time.Second
	x := newRedlock(t, xn, WithBackoff(10*time.Second, 10*time.Second), WithNodeTimeout(nodeTimeout))
	y := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	c := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)

	ox, gy := handedBefore(t, admin, x, y, key)

	gate := make(chan struct{})
	f[3].releaseGate.Store(&gate)
	f[4].releaseGate.Store(&gate)
	f[2].releaseReplyLost.Store(true)
	start := time.Now()
	unlocked := make(chan error, 1)
	go func() { unlocked <- ox.Lock.Unlock(ctx) }()
	defer func() {
		close(gate)
		<-unlocked // its QuorumError: masters 3 and 4 never answered
	}()
	oy := obtainedWithin(t, admin, key, gy, 5*time.Second, "y was not handed the key by x's release")
	gc := lockAsync(t, ctx, c, key)
	time.Sleep(200 * time.Millisecond) // c tried, and queued
	released := time.Now()
	if err := oy.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	oc := obtainedWithin(t, admin, key, gc, 5*time.Second, "c did not get the key within 5s")
	d := oc.At.Sub(released)
	t.Logf("c got the key %v after y's release", d)
	if d > 500*time.Millisecond {
		t.Errorf("c got the key %v after y's release: x's place behind y was kept while x's Unlock waited for masters 3 and 4", d)
	}
	select {
	case err := <-unlocked:
		unlocked <- err
		t.Errorf("x's Unlock returned after %v, before its deadline: the test did not make it wait (%v)", time.Since(start), err)
	default:
	}
	_ = oc.Lock.Unlock(ctx)
}

// leftBehind has a call of x wait for key, held by y, and be handed it;
// then a call of y wait, and x unlock: the key goes to y, and x's Unlock
// leaves x's place behind y. It returns y's call's outcome.
func leftBehind(t testing.TB, admin []*redis.Client, x, y *Redlock, key string) obtained {
	t.Helper()
	ctx := context.Background()
	ox, gy := handedBefore(t, admin, x, y, key)
	if err := ox.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	oy := <-gy
	if oy.Err != nil {
		t.Fatal(oy.Err)
	}
	return oy
}

// handedBefore has a call of x wait for key, held by y, and be handed it;
// then a call of y wait behind it. It returns x's call's outcome and y's
// call's.
func handedBefore(t testing.TB, admin []*redis.Client, x, y *Redlock, key string) (obtained, <-chan obtained) {
	t.Helper()
	ctx := context.Background()
	ly := mustLock(t, y, key)
	settle(y)
	gx := lockAsync(t, ctx, x, key)
	waitRegistered(t, admin, key, 1)
	if err := ly.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ox := <-gx
	if ox.Err != nil || ox.Lock.h == nil {
		t.Fatalf("x's call was not handed the key: %v", ox.Err)
	}
	settle(y)
	gy := lockAsync(t, ctx, y, key)
	waitRegistered(t, admin, key, 1)
	return ox, gy
}

// TestHandOffWithdrawWakesOwn: a place an Unlock left behind the next
// holder, which the next Lock call of the same Redlock cannot take over
// (another TTL): that call withdraws it and queues itself, and gets the
// key at the next release, not after its backoff. (Found by review, when
// the place stayed queued: its withdrawal skipped its own Redlock's calls
// and woke none.)
func TestHandOffWithdrawWakesOwn(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	rx := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	rp := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	oc := leftBehind(t, admin, rx, rp, key)
	settle(rx)
	// G3 of rx, another TTL (cannot take the place over), queues instead.
	g3 := lockAsync(t, ctx, rx, key, WithTTL(20*time.Second))
	waitRegistered(t, admin, key, 1)
	released := time.Now()
	if err := oc.Lock.Unlock(ctx); err != nil { // hands to rx's standing place
		t.Fatal(err)
	}
	rp.Close() // the other process is done: it exits
	o := obtainedWithin(t, admin, key, g3, 3*time.Second, "G3 of the same Redlock still waits 3s after the key was freed (its backoff)")
	t.Logf("G3 got the key %v after the release", o.At.Sub(released))
	_ = o.Lock.Unlock(ctx)
}

// TestHandOffSameServer: nodes that are databases of one redis-server (New
// accepts them: their names differ by /DB). Pub/sub ignores the database,
// so a hand-off published on one reaches the subscriptions of all three: it
// must count once, not as a quorum while another holder still has the key
// on two of them. (Found by review.)
func TestHandOffSameServer(t *testing.T) {
	ctx := context.Background()
	addr := masters.Addrs()[0]
	var cs []*redis.Client
	for db := 5; db < 8; db++ {
		c := redis.NewClient(&redis.Options{Addr: addr, DB: db, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	w := newRedlock(t, nodesOf(t, cs), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	for _, c := range cs {
		c.Set(ctx, key, "other", time.Minute)
	}
	got := lockAsync(t, ctx, w, key)
	waitRegistered(t, cs, key, 1)
	// The other holder's release frees DB 5 only (say its Unlock reached
	// one master so far; DBs 6 and 7 still hold its value).
	if err := cs[0].Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	// any release script run on DB 5 hands the key there: use a release of
	// a value nobody holds after setting it.
	cs[0].Set(ctx, key, "x", time.Minute)
	n := NewNode(cs[0])
	q := &request{Op: reqRelease, Key: key, Value: "x"}
	execRequests(ctx, n, q)
	select {
	case o := <-got:
		if o.Err == nil {
			var vs []string
			for _, c := range cs {
				v, _ := c.Get(ctx, key).Result()
				vs = append(vs, v)
			}
			t.Fatalf("waiter holds the lock (value %q) while the DBs hold %q", o.Lock.Value(), vs)
		}
	case <-time.After(time.Second):
		t.Log("no lock taken (ok)")
	}
}

// TestHandOffCloseGivesBack: a Redlock closes while a place its last Unlock
// left behind the next holder has been handed the key: Close gives the key
// back, so that another takes it at once rather than after the TTL.
// (Found by review.)
func TestHandOffCloseGivesBack(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	rx := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	rp := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	oc := leftBehind(t, admin, rx, rp, key)
	if err := oc.Lock.Unlock(ctx); err != nil { // hands to rx's standing place
		t.Fatal(err)
	}
	settle(rp)
	rx.Close() // shutdown within the 10 ms window
	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := rp.Lock(lctx, key)
	if err != nil {
		for _, c := range admin {
			v, _ := c.Get(ctx, key).Result()
			ttl, _ := c.PTTL(ctx, key).Result()
			t.Logf("master: %q pttl %v", v, ttl)
		}
		t.Fatalf("after rx closed, nobody holds the key but rp cannot take it for %v: %v", time.Since(start), err)
	}
	t.Logf("rp took it %v after rx closed", time.Since(start))
	_ = l.Unlock(ctx)
}

// TestHandOffResubscribe: a waiter's connections to every master break
// just before the holder releases, and stay broken until after: the
// masters find nobody listening and drop it from the queue, the key is
// free, and no release will come. Once go-redis subscribes again, the
// waiter tries at once and takes the key, instead of after its backoff
// (10 s here).
func TestHandOffResubscribe(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	proxied := make([]string, len(admin))
	pxs := make([]*faultproxy.Proxy, len(admin))
	for i, a := range masters.Addrs() {
		px, err := faultproxy.New(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		pxs[i], proxied[i] = px, px.Addr()
	}
	waiter := newRedlock(t, nodesOf(t, clients(t, proxied)), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder)
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin, key, 1)
	for _, px := range pxs {
		px.Reset()
	}
	// The masters see the subscriptions go.
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := admin[0].PubSubNumSub(ctx, waiter.wake.chans[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[waiter.wake.chans[0]] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter's subscription is still there 5s after its connections were reset")
		}
		time.Sleep(time.Millisecond)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(holder)
	healed := time.Now()
	for _, px := range pxs {
		px.Heal()
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the waiter did not take the free key within 5s of its connections coming back")
	t.Logf("the waiter took the key %v after its connections came back", o.At.Sub(healed))
	_ = o.Lock.Unlock(ctx)
}

// callHandoff returns the registration of r's one Lock call waiting for a
// hand-off of key.
func callHandoff(t testing.TB, r *Redlock, key string) *handoff {
	t.Helper()
	r.wake.handsMu.Lock()
	defer r.wake.handsMu.Unlock()
	var found *handoff
	for _, h := range r.wake.hands {
		if h.key == key {
			if found != nil {
				t.Fatal("more than one call waits for the key")
			}
			found = h
		}
	}
	if found == nil {
		t.Fatal("no call waits for a hand-off of the key")
	}
	return found
}

// TestHandOffOlderRegistrationNotCounted: hand-offs under a call's earlier
// registration (late words of masters that handed the key before the call
// registered again) do not count towards its quorum: the key they set may
// expire before a validity counted from the latest registration. Here every
// master's word comes for registration 1 while the call waits under 2, and
// the masters hold another's key: the call must not take a lock.
func TestHandOffOlderRegistrationNotCounted(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder)
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin, key, 1)
	h := callHandoff(t, waiter, key)
	h.poke() // tries again: the rollback registers it again
	deadline := time.Now().Add(5 * time.Second)
	for h.current() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the call did not register again")
		}
		time.Sleep(time.Millisecond)
	}
	settle(waiter)
	for i := range admin {
		waiter.wake.message("h"+h.value+"|1|"+key, i)
	}
	select {
	case o := <-got:
		t.Fatalf("the call took a lock (%v, %v) from hand-offs under its earlier registration; the masters hold %v",
			o.Lock.Value(), o.Err, holders(t, admin, key))
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the call did not get the key at the release")
	if err := o.Lock.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// handedLock returns a lock of waiter's on a new key, taken by hand-off:
// holder holds the key, a Lock call of waiter's (with opts) queues, and
// holder's Unlock hands it the key.
func handedLock(t testing.TB, admin []*redis.Client, holder, waiter *Redlock, opts ...Option) *Lock {
	t.Helper()
	ctx := context.Background()
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder)
	got := lockAsync(t, ctx, waiter, key, opts...)
	waitRegistered(t, admin, key, 1)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "no hand-off")
	if !strings.Contains(o.Lock.Value(), "#") {
		t.Fatalf("the call took %q by an attempt; the test needs a hand-off", o.Lock.Value())
	}
	return o.Lock
}

// hookClock is the real clock, and runs hook (when set) on every reading
// with the names of the functions on the reader's stack: a test stops a
// goroutine at a chosen reading to force a schedule.
type hookClock struct {
	hook atomic.Pointer[func(stack string)]
}

func (c *hookClock) Now() time.Time {
	if h := c.hook.Load(); h != nil {
		pcs := make([]uintptr, 32)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
		var b strings.Builder
		for {
			f, more := frames.Next()
			b.WriteString(f.Function)
			b.WriteByte('\n')
			if !more {
				break
			}
		}
		(*h)(b.String())
	}
	return time.Now()
}

// parkedIn waits until some goroutine is parked on a mutex inside fn.
func parkedIn(t testing.TB, fn string) {
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, "SemacquireMutex") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("no goroutine parked on a mutex in " + fn)
}

// TestHandOffKeepTimerRacesUnlock: the keepLocked timer of a lock taken by
// hand-off fires at its first Until, after an Extend moved it, while the
// lock's Unlock runs. The schedule:
//
//  1. the timer's check reads h.held == l (mine) and, under l.mu, that l is
//     neither released nor ended with time left: it will re-arm;
//  2. before it takes handsMu, the Unlock sets l.released, and its stay
//     makes h a registration again: held = nil, h back in the table, and
//     h.expiry stopped and set to nil;
//  3. the check takes handsMu, finds h in the table and calls
//     h.expiry.Reset on the nil timer: a nil pointer dereference in a timer
//     goroutine, which kills the process.
//
// The clock seam stops the check at step 1 (its reading under l.mu) with
// handsMu held, and lets the Unlock's stay take handsMu first.
func TestHandOffKeepTimerRacesUnlock(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	c := &hookClock{}
	waiter.clock = c
	const ttl = 300 * time.Millisecond
	l := handedLock(t, admin, holder, waiter, WithTTL(ttl))
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan error, 1)
	var checked, stayed sync.Once
	hook := func(stack string) {
		switch {
		case strings.Contains(stack, "keepLocked.func1"):
			checked.Do(func() {
				// Step 1 is done: hold handsMu so the check parks on it,
				// and start the Unlock (it waits for l.mu, held here).
				waiter.wake.handsMu.Lock()
				go func() { unlocked <- l.Unlock(ctx) }()
			})
		case strings.Contains(stack, "(*wakeups).stay"):
			stayed.Do(func() {
				// Step 2, in stay's register: the check waits for
				// handsMu; let stay take it first.
				parkedIn(t, "keepLocked.func1")
				waiter.wake.handsMu.Unlock()
			})
		}
	}
	c.hook.Store(&hook)
	select {
	case err := <-unlocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Unlock did not run: the keepLocked timer did not fire at the first Until")
	}
	c.hook.Store(nil)
	settle(waiter)
}

// waitQueued waits until a goroutine of r waits for key (its first
// attempt failed).
func waitQueued(t testing.TB, r *Redlock, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for queued, _ := r.waiters.peek(key); !queued; queued, _ = r.waiters.peek(key) {
		if time.Now().After(deadline) {
			t.Fatal("no goroutine waits for the key after 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// lockAsync runs r.Lock(key) in a goroutine and returns a channel that gets
// the lock (nil on error) and the time it was obtained.
func lockAsync(t testing.TB, ctx context.Context, r *Redlock, key string, opts ...Option) <-chan obtained {
	ch := make(chan obtained, 1)
	go func() {
		l, err := r.Lock(ctx, key, opts...)
		o := obtained{Lock: l, Err: err, At: time.Now()}
		if l != nil {
			o.Until = l.Until() // before a renewal can move it
		}
		ch <- o
	}()
	return ch
}

type obtained struct {
	Lock  *Lock
	Err   error
	At    time.Time
	Until time.Time // Lock's Until when Lock returned
}

// merge forwards the first value of any of chs.
func merge(chs []<-chan obtained) <-chan obtained {
	out := make(chan obtained, len(chs))
	for _, ch := range chs {
		go func() { out <- <-ch }()
	}
	return out
}

// TestWakeOnMinorityTell: a waiter told by fewer masters than a quorum that
// the key was freed (the others let it expire, which tells nobody, or were
// freed by the rollback of a split vote) still tries soon, not after its
// backoff.
func TestWakeOnMinorityTell(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	ctx := context.Background()
	key := testKey(t)
	for _, c := range cs[:3] { // held on a quorum by a holder gone silent
		if err := c.Set(ctx, key, "gone", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := lockAsync(t, ctx, waiter, key, WithBackoff(2*time.Second, 2*time.Second))
	waitQueued(t, waiter, key)
	time.Sleep(100 * time.Millisecond)
	freed := time.Now()
	// Master 0 releases it (and tells); 1 and 2 let it expire (no word).
	q := &request{Op: reqRelease, Key: key, Value: "gone"}
	if execRequests(ctx, nodes[0], q); !q.OK || !q.Woke {
		t.Fatalf("release on master 0: OK %v, Woke %v, Err %v; want it to free the key and tell the waiter", q.OK, q.Woke, q.Err)
	}
	for _, c := range cs[1:3] {
		c.Del(ctx, key)
	}
	o := <-got
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if d := o.At.Sub(freed); d > 300*time.Millisecond {
		t.Errorf("the waiter took the key %v after one master told it; want about the wake grace, not its backoff", d)
	}
	_ = o.Lock.Unlock(ctx)
}

// TestSubscribeSlowMaster: a master slow to subscribe (its round trips take
// longer than the node timeout) does not keep the others from subscribing
// within it: each subscribes on its own.
func TestSubscribeSlowMaster(t *testing.T) {
	px, err := faultproxy.New(masters.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	px.SetLatency(200 * time.Millisecond)
	addrs := append([]string{px.Addr()}, masters.Addrs()[1:3]...)
	rec := &recorder{}
	r := newRedlock(t, nodesOf(t, clients(t, addrs)), WithObserver(rec), WithNodeTimeout(250*time.Millisecond))
	r.wake.start(context.Background(), testKey(t), 250*time.Millisecond)
	var subscribe []string
	for _, e := range rec.Take() {
		if strings.HasPrefix(e, "subscribe") {
			subscribe = append(subscribe, e)
		}
	}
	if len(subscribe) != 1 || !strings.Contains(subscribe[0], "[failed succeeded succeeded]") {
		t.Fatalf("subscribe events %q; want the two fast masters subscribed, the slow one failed", subscribe)
	}
	if _, ok := r.wake.name(); !ok {
		t.Fatal("not listening after two of three masters subscribed")
	}
}

// TestLateHandOffGivenBackWhereHanded: a hand-off that comes after the lock
// the call took by hand-off is past its Until is given back on the master
// that handed it, and nowhere else: the other masters' keys carry the same
// value, which a quorum may still hold for the lock (issue 39: a renewal
// that moved Until back, then this give-back deleting the lock's live keys
// on every master, made two holders). Here the holder's release to master
// 2 is held back until the waiter's lock, handed to it by masters 0 and 1,
// is past its Until; master 2 then hands the key to the waiter's
// registration late.
func TestLateHandOffGivenBackWhereHanded(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, admin)
	late := wrap(nodes[2])
	gate := make(chan struct{})
	late.releaseGate.Store(&gate)
	nodes[2] = late
	holder := newRedlock(t, nodes, WithNodeTimeout(5*time.Second))
	waiter := newRedlock(t, nodesOf(t, admin))
	key := testKey(t)
	hl := mustLock(t, holder, key)
	settle(holder)
	const ttl = 2 * time.Second
	// A backoff that makes no second attempt (and registration) meanwhile.
	got := lockAsync(t, ctx, waiter, key, WithTTL(ttl), WithBackoff(10*time.Second, 10*time.Second))
	waitRegistered(t, admin, key, 1)
	// The lock counts from the registration; its keys live a TTL from the
	// hand-off: they outlive Until by this pause.
	time.Sleep(500 * time.Millisecond)
	if err := hl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "no hand-off")
	l := o.Lock
	if !strings.Contains(l.Value(), "#") {
		t.Fatalf("the call took %q by an attempt; the test needs a hand-off", l.Value())
	}
	for i := range 2 {
		if v, _ := admin[i].Get(ctx, key).Result(); v != l.Value() {
			t.Fatalf("master %d holds %q, not the handed value %q", i, v, l.Value())
		}
	}
	time.Sleep(time.Until(l.Until()) + 20*time.Millisecond)
	for i := range 2 {
		if pttl, _ := admin[i].PTTL(ctx, key).Result(); pttl < 200*time.Millisecond {
			t.Fatalf("master %d keeps the key %v past Until; the test needs longer", i, pttl)
		}
	}
	close(gate) // master 2 hands the key to the call now
	deadline := time.Now().Add(time.Second)
	for {
		v, _ := admin[2].Get(ctx, key).Result()
		if v == "" {
			break // given back there
		}
		if time.Now().After(deadline) {
			t.Fatalf("master 2 still holds %q a second after its late hand-off", v)
		}
		time.Sleep(time.Millisecond)
	}
	settle(waiter)
	for i := range 2 {
		if v, _ := admin[i].Get(ctx, key).Result(); v != l.Value() {
			t.Errorf("master %d holds %q after master 2's late hand-off was given back; it must keep the lock's value %q until its TTL", i, v, l.Value())
		}
	}
}
