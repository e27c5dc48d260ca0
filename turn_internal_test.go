package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The waiting call's pace (turn.go): what its turn lets through while masters
// refuse votes or nudge it.

// TestRollbackNudges: the release scripts say whether what freed the key
// was a failed attempt's rollback: a waiting call they tell is then
// nudged ("r"), else woken ("w").
func TestRollbackNudges(t *testing.T) {
	ctx := context.Background()
	c := clients(t, masters.Addrs()[:1])[0]
	for _, owned := range []bool{false, true} {
		for _, rollback := range []bool{false, true} {
			key := testKey(t)
			q := &request{Op: reqAcquire, Key: key, Value: "v", TTL: time.Minute}
			if owned {
				q.Owner = "o"
			}
			execRequests(ctx, NewNode(c), q)
			if !q.OK {
				t.Fatalf("acquire: %v", q.Err)
			}
			ch := "redlock:wake:test-" + key
			sub := c.Subscribe(ctx, ch)
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.ZAdd(ctx, WaitKey(key), redis.Z{Score: 1, Member: ch + "|hand|0|7"}).Err(); err != nil {
				t.Fatal(err)
			}
			q = &request{Op: reqRelease, Key: key, Value: "v", Waiter: "other", rollback: rollback}
			if owned {
				q.Owner = "o"
			}
			execRequests(ctx, NewNode(c), q)
			if !q.OK || !q.Woke {
				t.Fatalf("release (owned %v, rollback %v): OK %v, Woke %v, Err %v", owned, rollback, q.OK, q.Woke, q.Err)
			}
			m, err := sub.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{false: "w", true: "r"}[rollback] + "hand|7|" + key
			if m.Payload != want {
				t.Errorf("release (owned %v, rollback %v) told %q; want %q", owned, rollback, m.Payload, want)
			}
			sub.Close()
		}
	}
}

// A waiter that gives up passes its pending wake-up on, so the next in line
// is not left to its backoff.
func TestWaitersLeavePassesWakeOn(t *testing.T) {
	var ws waiters
	a, _ := ws.join("k", 0)
	b, _ := ws.join("k", 0)
	ws.wake("k")
	ws.leave("k", a)
	select {
	case <-b.wake:
	default:
		t.Fatal("the wake-up of the waiter that left was lost")
	}
	ws.leave("k", b)
	if q, _ := ws.peek("k"); q || len(ws.keys) != 0 {
		t.Fatalf("queue not empty after everyone left: %v", ws.keys)
	}
}

// A release while a not-yet-queued caller's attempt is out finds no one to
// wake; the caller learns of it when it joins, if it is the head.
func TestWaitersJoinSeesMissedRelease(t *testing.T) {
	var ws waiters
	_, before := ws.peek("k")
	ws.wake("k") // the release, with an empty queue
	a, missed := ws.join("k", before)
	if !missed {
		t.Fatal("the head joining after a release it missed was told to wait")
	}
	if _, missed := ws.join("k", before); missed {
		t.Fatal("a waiter behind the head was told to skip the queue")
	}
	ws.leave("k", a)
	_, now := ws.peek("other")
	if _, missed := ws.join("other", now); missed {
		t.Fatal("no release since the count was taken, yet missed")
	}
}

// The same at the level of Lock: a caller whose first attempt fails because
// the key is still held, and whose reply is slow enough that the holder
// unlocks before it gets back, tries again at once rather than sleeping a
// backoff on a free key.
func TestLockAfterReleaseWhileAttemptOut(t *testing.T) {
	var fs []*faultNode
	var nodes []Node
	for _, n := range nodesOf(t, clients(t, masters.Addrs())) {
		f := wrap(n)
		fs = append(fs, f)
		nodes = append(nodes, f)
	}
	const backoff = 4 * time.Second
	// The node timeout outlasts the slow reply, so the attempt fails on the
	// masters' answer, after the release, not on its timeout, before it.
	r := newRedlock(t, nodes, WithBackoff(backoff, backoff), WithNodeTimeout(time.Second))
	key := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Lock returned on a quorum; let every master's acquire come back, so
	// that the release below has nothing to wait for.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		var n int64
		for _, f := range fs {
			n += f.acquired.Load()
		}
		if n == int64(len(fs)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acquires came back", n, len(fs))
		}
	}
	const slow = 300 * time.Millisecond
	for _, f := range fs {
		f.replyDelay.Store(int64(slow))
	}
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		l, err := r.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(slow / 3) // the attempt's SETs have reached the masters
	for _, f := range fs {
		f.replyDelay.Store(0)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A backoff sleep is at least backoff/2 (jitter).
	if d := time.Since(start); d >= backoff/2 {
		t.Fatalf("Lock took %v after the key was released: it slept through its backoff", d)
	}
}

// Liveness of a waiting Lock call: what it sends while another holds the
// key, what it leaves in memory after its lock ended, how long it sleeps on
// a key a master handed it. Each test puts the masters into the state a
// fault or a race leaves them in, by running the production release on
// some of them only.

// releaseOn runs the release of (key, value) on the masters behind admin
// (a release that reached those masters only: a loser's rollback in a split
// vote, or a holder's Unlock cut short) and checks it freed the key and
// handed it on there.
func releaseOn(t testing.TB, admin []*redis.Client, key, value string) {
	t.Helper()
	for _, c := range admin {
		q := &request{Op: reqRelease, Key: key, Value: value}
		execRequests(context.Background(), NewNode(c), q)
		if !q.OK || !q.Woke {
			t.Fatalf("release on %s: OK %v, Woke %v, Err %v; want it to free the key and hand it on", c.Options().Addr, q.OK, q.Woke, q.Err)
		}
	}
}

// TestPartialHandOffKeepsBackoffPace: a minority of masters hands the key
// to a waiting call while another holder keeps a quorum. The call cannot
// take it before that holder releases; its attempts go back to its backoff's
// pace (here 1 to 2 s) instead of trying every few milliseconds, and the
// holder's release then hands it the rest.
func TestPartialHandOffKeepsBackoffPace(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	wcs := clients(t, masters.Addrs())
	sets := &sentCounter{Name: "set"}
	for _, c := range wcs {
		c.AddHook(sets)
	}
	waiter := newRedlock(t, nodesOf(t, wcs), WithBackoff(2*time.Second, 2*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder)
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin, key, 1)
	releaseOn(t, admin[3:], key, l.Value())
	before := sets.N.Load()
	const window = 2 * time.Second
	time.Sleep(window)
	// One attempt at once (a notice from some masters may come from a split
	// among waiters), then one per backoff interval (at least 1 s).
	n, most := sets.N.Load()-before, int64(3*len(wcs))
	t.Logf("the waiter sent %d SETs in %v while the holder kept a quorum", n, window)
	if n > most {
		t.Errorf("the waiter sent %d SETs in %v while the holder kept a quorum; want at most %d (backoff pace)", n, window, most)
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the waiter did not get the key after the holder's release")
	if d := o.At.Sub(released); d > time.Second {
		t.Errorf("the waiter held the key %v after the release; want a hand-off, not its backoff", d)
	}
	if err := o.Lock.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// handsLen is the number of entries of r's table of hand-off calls, and of
// its marks of keys its Unlocks handed on.
func handsLen(r *Redlock) int {
	r.wake.handsMu.Lock()
	defer r.wake.handsMu.Unlock()
	return len(r.wake.hands) + len(r.wake.marks)
}

// TestHandOffTableEmptiesWhenLocksEnd: locks taken by hand-off and ended
// every way a lock ends (Unlock, expiry with nobody watching, expiry while
// watched, lost by auto-extend, Close) leave nothing in the Redlock's
// tables.
func TestHandOffTableEmptiesWhenLocksEnd(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(5*time.Second, 5*time.Second))
	const ttl = 300 * time.Millisecond
	handed := func(opts ...Option) *Lock {
		t.Helper()
		return handedLock(t, admin, holder, waiter, append([]Option{WithTTL(ttl)}, opts...)...)
	}
	unlocked := handed()
	if err := unlocked.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	handed()          // expires unwatched
	<-handed().Done() // expires while watched
	lost := handed(WithAutoExtend())
	for _, c := range admin {
		c.Del(ctx, lost.Key()) // the renewals find the key gone
	}
	<-lost.Done()
	deadline := time.Now().Add(3 * ttl)
	for handsLen(waiter) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := handsLen(waiter); n != 0 {
		t.Errorf("%d entries left in the hand-off tables after every handed lock ended", n)
	}
	closing := handed()
	waiter.Close()
	if n := handsLen(waiter); n != 0 {
		t.Errorf("%d entries left in the hand-off tables after Close (a lock was held)", n)
	}
	_ = closing.Unlock(ctx)
}

// TestMinorityWakeKeepsBackoffPace: the wake-up twin of
// TestPartialHandOffKeepsBackoffPace, for fenced locks (woken, not handed
// the key). Two Redlocks wait while a holder keeps a quorum, and a
// minority of masters frees the key: each one's attempt takes those
// masters and its rollback frees them again, which wakes the other. Their
// attempts stay at their backoff's pace, and the holder's release still
// wakes one of them at once.
func TestMinorityWakeKeepsBackoffPace(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	sets := &sentCounter{Name: "eval"}
	var waiters []*Redlock
	var got []<-chan obtained
	key := testKey(t)
	l := mustLock(t, holder, key, WithFencing())
	settle(holder)
	for range 2 {
		cs := clients(t, masters.Addrs())
		for _, c := range cs {
			c.AddHook(sets)
		}
		w := newRedlock(t, nodesOf(t, cs), WithBackoff(2*time.Second, 2*time.Second))
		waiters = append(waiters, w)
		got = append(got, lockAsync(t, ctx, w, key, WithFencing()))
		waitQueued(t, w, key)
	}
	waitRegistered(t, admin, key, 2)
	before := sets.N.Load()
	releaseOn(t, admin[3:], key, l.Value())
	const window = 2 * time.Second
	time.Sleep(window)
	// Each waiter: one attempt at once, then one per backoff interval (at
	// least 1 s); an attempt is a fenced acquire and its rollback, two
	// EVALs per master.
	n, most := sets.N.Load()-before, int64(2*3*2*len(admin))
	t.Logf("the waiters sent %d EVALs in %v while the holder kept a quorum", n, window)
	if n > most {
		t.Errorf("the waiters sent %d EVALs in %v while the holder kept a quorum; want at most %d (backoff pace)", n, window, most)
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, merge(got), 5*time.Second, "no waiter got the key after the holder's release")
	if d := o.At.Sub(released); d > time.Second {
		t.Errorf("a waiter took the key %v after the release; want a wake-up, not the backoff", d)
	}
	_ = o.Lock.Unlock(ctx)
	for _, w := range waiters {
		w.Close()
	}
}

// TestRollbackLeavesFreedKeyToOthers: a holder is on a bare quorum (its key
// gone from masters 3 and 4, as after they restarted empty) and a waiting
// call's attempt takes 3 and 4 and fails. Its rollback frees them and
// queues the call again, behind the hand-off: the freed key is not handed
// straight back to it, so the holder's next renewal spreads its lock there
// (and a fault on one master of its quorum no longer loses it). The call
// still gets the key at the holder's release.
func TestRollbackLeavesFreedKeyToOthers(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	const ttl = 600 * time.Millisecond
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	h := mustLock(t, holder, key, WithTTL(ttl), WithAutoExtend())
	for deadline := time.Now().Add(time.Second); count(holders(t, admin, key), h.Value()) < len(admin); {
		if time.Now().After(deadline) {
			t.Fatal("the holder's acquire did not reach every master")
		}
		time.Sleep(time.Millisecond)
	}
	for _, c := range admin[3:] {
		c.Del(ctx, key)
	}
	got := lockAsync(t, ctx, waiter, key)
	waitQueued(t, waiter, key)
	for deadline := time.Now().Add(5 * time.Second); !waiterRegistered(waiter, key); {
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not register")
		}
		time.Sleep(time.Millisecond)
	}
	settle(waiter)  // its rollback reached every master
	time.Sleep(ttl) // a renewal or two of the holder's
	if n := count(holders(t, admin, key), h.Value()); n != len(admin) {
		t.Errorf("the holder's value is on %d of %d masters after its renewals: %v; the waiter's rollback took the freed masters back",
			n, len(admin), holders(t, admin, key))
	}
	released := time.Now()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the waiter did not get the key at the holder's release")
	if d := o.At.Sub(released); d > time.Second {
		t.Errorf("the waiter got the key %v after the release; want a hand-off", d)
	}
	_ = o.Lock.Unlock(ctx)
}

// waiterRegistered reports whether a Lock call of r for key has sent a
// registration for hand-offs.
func waiterRegistered(r *Redlock, key string) bool {
	r.wake.handsMu.Lock()
	defer r.wake.handsMu.Unlock()
	for _, h := range r.wake.hands {
		if h.key == key && h.registered() {
			return true
		}
	}
	return false
}

// TestWokenUnlockLeavesMark: the wake-up twin of
// TestRelockOtherTTLWaitsItsTurn. A fenced lock's key is never handed, so
// its waiting calls are only woken; a Redlock whose fenced lock came from
// a waiting call unlocks, which wakes another Redlock's waiting call, and
// locks the key again at once. Its Unlock leaves the mark that makes that
// Lock wait its turn behind the woken call instead of racing it.
func TestWokenUnlockLeavesMark(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	a := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithFencing(), WithBackoff(10*time.Second, 10*time.Second))
	b := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithFencing(), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	gotB := unlockWaited(t, admin, a, b, key) // wakes b
	a.wake.handsMu.Lock()
	m, marked := a.wake.marks[key]
	a.wake.handsMu.Unlock()
	if !marked || !time.Now().Before(m.until) {
		t.Fatalf("a's Unlock woke b and left no mark (%v, until %v): a's next Lock would race b", marked, m.until)
	}
	gotA := lockAsync(t, ctx, a, key)
	ob := obtainedWithin(t, admin, key, gotB, 5*time.Second, "b did not get the key after a's Unlock woke it")
	if err := ob.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	oa := obtainedWithin(t, admin, key, gotA, 5*time.Second, "a did not get the key at b's release")
	_ = oa.Lock.Unlock(ctx)
}

// unlockWaited gives a a lock that came from a waiting call (b holds key,
// a waits for it and takes it at b's Unlock), makes b wait for key, and
// unlocks a's lock, which hands the key to b or wakes it: it returns b's
// pending Lock.
func unlockWaited(t *testing.T, admin []*redis.Client, a, b *Redlock, key string) <-chan obtained {
	t.Helper()
	ctx := context.Background()
	first := mustLock(t, b, key)
	settle(b)
	gotA := lockAsync(t, ctx, a, key)
	waitRegistered(t, admin, key, 1)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	oa := obtainedWithin(t, admin, key, gotA, 5*time.Second, "a did not get the key at b's Unlock")
	gotB := lockAsync(t, ctx, b, key)
	waitRegistered(t, admin, key, 1)
	settle(b) // its rollback's registrations reached every master (the one entry could be another)
	if err := oa.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return gotB
}

// TestHintWithinLimit: a permit's call asks first for the slot most of the
// masters that woke it freed, but never for one at or above its own
// limit (a registration an Unlock under another limit left behind).
func TestHintWithinLimit(t *testing.T) {
	h := &handoff{hints: make([]uint8, 4)}
	cfg := &config{kind: kindPermit, permits: 2, slot: 0}
	tr := &turn{h: h, cfg: cfg}
	tr.hinted()
	if cfg.slot != 0 {
		t.Fatalf("no hint: slot %d, want 0 kept", cfg.slot)
	}
	h.hints[3], h.hints[1] = 3, 1
	tr.hinted()
	if cfg.slot != 0 {
		t.Fatalf("hint of slot 3 under a limit of 2: slot %d, want 0 kept", cfg.slot)
	}
	h.hints[3] = 0
	tr.hinted()
	if cfg.slot != 1 {
		t.Fatalf("hint of slot 1: slot %d, want 1", cfg.slot)
	}
	h.hints[0] = 2
	tr.hinted()
	if cfg.slot != 0 {
		t.Fatalf("slot 0 named by 2 masters, slot 1 by 1: slot %d, want 0", cfg.slot)
	}
}

// TestWokeDuringAttemptBookkeeping: the wake-ups a call's handoff keeps
// for again (TestWakeDuringAttemptTriesAtOnce is the whole case on real
// masters). Of 3 masters (quorum 2), one woke the call before its attempt
// and one while it was out: the rollback's registration makes it try at
// once, once; a nudge in that one's place does not count. Woken by a
// quorum before the attempt and by none since, it does not try at once
// (the attempt was the answer). A late word under the attempt's
// registration after the rollback registered again counts too; one after
// an Unlock's registration (stay) does not: that call waits its turn.
func TestWokeDuringAttemptBookkeeping(t *testing.T) {
	// Steps, all words under the call's first registration: wI a wake-up
	// from master I, nI a nudge; a the attempt goes out, g its rollback
	// registers (again), s an Unlock's registration (stay); ?y and ?n: the
	// call tries at once (it has a retry pending), or does not.
	for _, c := range []struct{ name, steps string }{
		{"woken before and during the attempt", "w0 a w1 n2 g ?y a g ?n"},
		{"a nudge during the attempt", "w0 a n1 g ?n"},
		{"woken by a quorum before the attempt only", "w0 w1 a g ?n"},
		{"the quorum's last word from the same release, late", "w0 w1 a w2 g ?n"},
		{"a permit's next slot tried before the wait", "w0 a w1 g a g ?y"},
		{"the quorum's last word after the rollback", "w0 a g ?n w2 ?y"},
		{"a late word after an Unlock", "w0 a s w1 ?n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &handoff{r: &Redlock{quorum: 2, clock: systemClock{}}, wake: make(chan struct{}, 1),
				seen: make([]bool, 3), woke: make([]bool, 3)}
			deadline := time.Now().Add(time.Second)
			reg := h.register(deadline)
			for i, step := range strings.Fields(c.steps) {
				switch step[0] {
				case 'w', 'n':
					h.handed(reg, int(step[1]-'0'), step[0] == 'n', -1)
				case 'a':
					h.attempting()
				case 'g':
					h.again(deadline)
				case 's':
					h.register(deadline)
				case '?':
					select { // a pending notice, as turn.wait would read it
					case <-h.wake:
					default:
					}
					if got := h.retried(); got != (step[1] == 'y') {
						t.Fatalf("after %q: retry pending %v, want %v", strings.Fields(c.steps)[:i], got, !got)
					}
				}
			}
		})
	}
}
