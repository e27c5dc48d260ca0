package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
)

// The waiting call's pace (turn.go): what its turn lets through while masters
// refuse votes or nudge it.

// TestRefusedWaitersKeepBackoffPace: while a quorum of masters refuses
// every vote for a reason of their own — their restart gates are closed,
// or their replicas do not confirm — each attempt's rollback finds the key
// free (a closed gate wrote nothing; an unconfirmed SET landed and the
// rollback frees it) and wakes the next waiting call. Such a wake-up says
// nothing about whether the votes will count: 2 and 8 waiting
// calls (each in a Redlock of its own) make at most one attempt per
// backoff interval each, counted on the masters (INFO commandstats).
func TestRefusedWaitersKeepBackoffPace(t *testing.T) {
	const window = 3 * time.Second
	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Second
	for _, why := range []string{"gate", "replicas"} {
		for _, k := range []int{2, 8} {
			t.Run(fmt.Sprintf("%s/waiters=%d", why, k), func(t *testing.T) {
				var cs []*redis.Client
				var opts []Option
				switch why {
				case "gate":
					c := redistest.StartT(t, 3, redistest.Options{})
					cs = gateClients(t, c)
					// Fresh masters: every gate is closed for a minute.
					opts = []Option{WithTTL(time.Second), WithRestartGate(time.Minute)}
				case "replicas":
					cs = frozenReplicas(t, 3)
					opts = []Option{WithTTL(time.Second), WithReplicaConfirm(1), WithNodeTimeout(200 * time.Millisecond)}
				}
				opts = append(opts, WithBackoff(minBackoff, maxBackoff))
				ctx := context.Background()
				key := testKey(t)
				// A replica-confirmed vote is a SET; a gated vote is an EVAL
				// (one script with the gate's check), whose SET never runs.
				counted := "set"
				if why == "gate" {
					counted = "eval"
				}
				before, err := redistest.Calls(ctx, cs, counted)
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, window)
				defer cancel()
				done := make(chan error, k)
				for range k {
					nodes := make([]Node, len(cs))
					for i, c := range cs {
						own := redis.NewClient(c.Options())
						t.Cleanup(func() { own.Close() })
						nodes[i] = NewNode(own)
					}
					w := newRedlock(t, nodes, opts...)
					go func() {
						l, err := w.Lock(wctx, key)
						if err == nil {
							_ = l.Unlock(ctx)
							err = errors.New("got the lock")
						}
						done <- err
					}()
				}
				for range k {
					if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("a waiting call ended with %v; want the deadline", err)
					}
				}
				after, err := redistest.Calls(ctx, cs, counted)
				if err != nil {
					t.Fatal(err)
				}
				// Counted on the masters (commandstats; the commands inside
				// scripts count there too, so a hand-off's SET adds one:
				// the bound is an upper one). Behind replicas an attempt is
				// one SET per master. Behind gates it is two EVALs per
				// master, its vote's and its rollback's (a script cannot
				// call EVAL, so none is counted twice). An attempt comes at
				// once, then one per backoff interval (at least
				// minBackoff), and one more may be on the wire at the
				// deadline.
				per := int64(len(cs))
				if why == "gate" {
					per *= 2
				}
				attempts, most := (after-before)/per, int64(k)*int64(window/minBackoff+2)
				t.Logf("%d waiting calls made %d attempts in %v", k, attempts, window)
				if attempts > most {
					t.Errorf("%d waiting calls made %d attempts in %v; want at most %d (one per backoff interval each)", k, attempts, window, most)
				}
			})
		}
	}
}

// frozenReplicas starts n masters, each a primary with one replica that is
// in sync and then frozen (SIGSTOP): WAIT on them confirms nothing. It
// returns the primaries' clients.
func frozenReplicas(t *testing.T, n int) []*redis.Client {
	t.Helper()
	ctx := context.Background()
	cs := make([]*redis.Client, n)
	for i := range cs {
		// hz 100: the master ends a WAIT whose timeout passed within 10 ms;
		// no delay before the replica's first sync (5 s by default).
		p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--repl-diskless-sync-delay", "0"}})
		host, port, _ := net.SplitHostPort(p.Addr())
		r := redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
		cs[i] = redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { cs[i].Close() })
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if n, err := cs[i].Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the replica of master %d is not in sync after 10 s", i)
			}
		}
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Resume() })
	}
	return cs
}

// TestNudgeKeepsBackoffPace: a nudge (the wake-up a failed attempt's
// rollback sends) is not a wake-up. Two waiting calls whose attempts keep
// failing with their SETs landed (a quorum frees the key at every
// rollback) nudge each other after every attempt; here the masters'
// nudges come from the test, every 20 ms, to a fenced waiting call while
// a holder keeps the key. It keeps its backoff's pace.
func TestNudgeKeepsBackoffPace(t *testing.T) {
	const window = 2 * time.Second
	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Second
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	key := testKey(t)
	l := mustLock(t, holder, key, WithFencing())
	settle(holder)
	wcs := clients(t, masters.Addrs())
	evals := &sentCounter{Name: "eval"}
	for _, c := range wcs {
		c.AddHook(evals)
	}
	w := newRedlock(t, nodesOf(t, wcs), WithFencing(), WithBackoff(minBackoff, maxBackoff))
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	got := lockAsync(t, wctx, w, key)
	waitRegistered(t, admin, key, 1)
	before := evals.N.Load()
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, c := range admin {
			entries, err := c.ZRange(ctx, WaitKey(key), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				// channel|hand|ttl|reg, as handon.lua reads it
				f := strings.Split(e, "|")
				if len(f) == 4 {
					c.Publish(ctx, f[0], "r"+f[1]+"|"+f[3]+"|"+key)
				}
			}
		}
	}
	if o := <-got; o.Err == nil {
		t.Fatal("the waiting call got the lock the holder keeps")
	}
	// An attempt is a fenced acquire and its rollback on every master: at
	// once, then one per backoff interval, and one more on the wire at the
	// deadline.
	attempts, most := (evals.N.Load()-before)/int64(2*len(admin)), int64(window/minBackoff+2)
	t.Logf("the nudged call made %d attempts in %v", attempts, window)
	if attempts > most {
		t.Errorf("the nudged call made %d attempts in %v; want at most %d (one per backoff interval)", attempts, window, most)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

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

// TestMinorityGateWakeTriesAtOnce: the pace rule must not cost a wake-up
// that means what it says. Master 0 of three restarted (its gate is
// closed), X holds the key on masters 1 and 2, and a fenced waiting call
// of another Redlock was refused by both and by master 0's gate. X's
// Unlock wakes it on a quorum: the key is free where votes count, so it
// tries at once rather than sleeping its backoff (3 s here).
func TestMinorityGateWakeTriesAtOnce(t *testing.T) {
	const gate = 3 * time.Second
	c := redistest.StartT(t, 3, redistest.Options{})
	cs := gateClients(t, c)
	time.Sleep(gate + 2*time.Second) // every master's own gate is open
	if err := c.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	redlockOf := func() *Redlock {
		nodes := make([]Node, len(cs))
		for i, c := range cs {
			own := redis.NewClient(c.Options())
			t.Cleanup(func() { own.Close() })
			nodes[i] = NewNode(own)
		}
		return newRedlock(t, nodes, WithTTL(gate), WithRestartGate(gate), WithFencing(), WithBackoff(gate, gate))
	}
	x, b := redlockOf(), redlockOf()
	ctx := context.Background()
	key := testKey(t)
	lx, err := x.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	settle(x)
	// Master 0's closed gate refused X's vote in the vote's own script:
	// nothing was written there, so only masters 1 and 2 wake B, once both
	// are free. B's rollbacks find the key free on master 0, so B stays
	// queued on masters 1 and 2 only (on master 0 its own rollback tells it
	// at once, one master's wake-up, not a quorum's).
	if n, err := cs[0].Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("master 0, its gate closed, holds X's key (%d, %v); want nothing written", n, err)
	}
	got := lockAsync(t, ctx, b, key)
	waitRegistered(t, cs[1:], key, 1)
	unlocked := time.Now()
	if err := lx.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.Err != nil {
		t.Fatalf("the waiting call: %v", o.Err)
	}
	if d := o.At.Sub(unlocked); d > gate/4 {
		t.Errorf("the waiting call took the key %v after X's Unlock woke it on a quorum; want at once", d.Round(time.Millisecond))
	}
	_ = o.Lock.Unlock(ctx)
}

// With a backoff of seconds, only the local wake-ups can make 4 goroutines
// take 40 turns on one key quickly; the queue keeps them fair and the
// masters keep them exclusive.
func TestLockWakesLocalWaiters(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(2*time.Second, 2*time.Second))
	key := testKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const goroutines, turns = 4, 10
	var (
		inside atomic.Int32
		wins   [goroutines]int
		wg     sync.WaitGroup
	)
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			for range turns {
				l, err := r.Lock(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				wins[g]++
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d turns took %v: waiters slept through backoff instead of being woken", goroutines*turns, d)
	}
	for g, w := range wins {
		if w != turns {
			t.Errorf("goroutine %d won %d turns, want %d", g, w, turns)
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

// TestQueueEmptiesWhenWaitersEnd: a waiting call of each kind of lock
// (plain: handed the key; fenced and owned: woken) registers in the key's
// queue on every master. However the call ends — the holder's release
// tells it, the holder's key expires (no release: no master tells it, and
// it takes the key by its own attempt), or it gives up — once it ended and
// its lock was unlocked, no registration of it is left on any master, to
// be told in place of a call that still waits.
func TestQueueEmptiesWhenWaitersEnd(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	kinds := []struct {
		name           string
		holder, waiter []Option
	}{
		{"plain", nil, nil},
		{"fenced", []Option{WithFencing()}, []Option{WithFencing()}},
		{"owned", []Option{WithOwner("h")}, []Option{WithOwner("w")}},
	}
	for _, k := range kinds {
		for _, end := range []string{"release", "expiry", "give-up"} {
			t.Run(k.name+"/"+end, func(t *testing.T) {
				holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
				waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(200*time.Millisecond, 200*time.Millisecond))
				key := testKey(t)
				l := mustLock(t, holder, key, k.holder...)
				settle(holder)
				wctx, giveUp := context.WithCancel(ctx)
				defer giveUp()
				got := lockAsync(t, wctx, waiter, key, k.waiter...)
				waitRegistered(t, admin, key, 1)
				switch end {
				case "release":
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				case "expiry":
					for _, c := range admin {
						if err := c.Del(ctx, key).Err(); err != nil {
							t.Fatal(err)
						}
					}
				case "give-up":
					giveUp()
				}
				o := <-got
				if end == "give-up" {
					if o.Err == nil {
						t.Fatal("the call took the key after it gave up")
					}
				} else {
					if o.Err != nil {
						t.Fatal(o.Err)
					}
					if err := o.Lock.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				settle(waiter)
				for i, c := range admin {
					if m, err := c.ZRange(ctx, WaitKey(key), 0, -1).Result(); err != nil || len(m) != 0 {
						t.Errorf("master %d: the queue holds %q (err %v) after the call ended; want it empty", i, m, err)
					}
				}
				_ = l.Unlock(ctx)
			})
		}
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

// TestHandOffTooLateTriesAtOnce: with one master, a hand-off that comes
// when the call's registration is too old to leave the minimum validity
// (the key was held for most of the TTL since) makes the call try at once,
// so it registers again and is handed the key with a fresh validity; it
// does not sleep its backoff (10 s) while the master holds the key for it.
func TestHandOffTooLateTriesAtOnce(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs()[:1])
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:1])))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:1])), WithBackoff(10*time.Second, 10*time.Second))
	const ttl = 300 * time.Millisecond
	key := testKey(t)
	l := mustLock(t, holder, key)
	got := lockAsync(t, ctx, waiter, key, WithTTL(ttl))
	waitRegistered(t, admin, key, 1)
	time.Sleep(ttl) // the registration is now older than the TTL allows
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 15*time.Second, "no lock")
	if d := o.At.Sub(released); d > time.Second {
		t.Errorf("the waiter took the key %v after the release; want about a round trip, not its backoff", d)
	}
	if left := time.Until(o.Lock.Until()); left <= 0 {
		t.Errorf("the lock came with no validity left (%v)", left)
	}
	_ = o.Lock.Unlock(ctx)
}

// TestOwnedReleaseSkipsOwnWaiter: an owned hold's release does not hand
// the key to a plain Lock call of its own Redlock (the Unlock wakes that
// call locally, and it takes the key with its own attempt); the masters
// publish nothing.
func TestOwnedReleaseSkipsOwnWaiter(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	owned := mustLock(t, r, key, WithOwner("a"))
	got := lockAsync(t, ctx, r, key)
	waitRegistered(t, admin, key, 1)
	published, err := redistest.Calls(ctx, admin, "publish")
	if err != nil {
		t.Fatal(err)
	}
	if err := owned.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the plain waiter did not get the key")
	settle(r)
	after, err := redistest.Calls(ctx, admin, "publish")
	if err != nil {
		t.Fatal(err)
	}
	if n := after - published; n != 0 {
		t.Errorf("the masters published %d messages; the owned release must skip its own Redlock's waiter", n)
	}
	if strings.Contains(o.Lock.Value(), "#") {
		t.Errorf("the waiter holds a hand-off (%q) from its own Redlock's release", o.Lock.Value())
	}
	_ = o.Lock.Unlock(ctx)
}

// TestRelockOtherTTLWaitsItsTurn: a Redlock whose lock came from a waiting
// call unlocks, handing the key to another Redlock, and locks the key again
// at once with another TTL (it cannot take over the place its Unlock left
// queued). It waits its turn behind the new holder without an attempt (no
// SET: one would be refused, and could split a vote with the holder), and
// gets the key at its release.
func TestRelockOtherTTLWaitsItsTurn(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	acs := clients(t, masters.Addrs())
	sets := &sentCounter{Name: "set"}
	for _, c := range acs {
		c.AddHook(sets)
	}
	a := newRedlock(t, nodesOf(t, acs), WithBackoff(10*time.Second, 10*time.Second))
	b := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	gotB := unlockWaited(t, admin, a, b, key) // hands to b
	before := sets.N.Load()
	gotA := lockAsync(t, ctx, a, key, WithTTL(20*time.Second))
	ob := obtainedWithin(t, admin, key, gotB, 5*time.Second, "b was not handed the key")
	time.Sleep(50 * time.Millisecond)
	if err := ob.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	oa := obtainedWithin(t, admin, key, gotA, 5*time.Second, "a did not get the key at b's release")
	if n := sets.N.Load() - before; n != 0 {
		t.Errorf("a's Lock sent %d SETs while b held the key; want none: it waits its turn", n)
	}
	_ = oa.Lock.Unlock(ctx)
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
	if err := oa.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return gotB
}
