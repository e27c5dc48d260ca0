package redlock_test

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
	"github.com/redlock/redlock"
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
				var opts []redlock.Option
				switch why {
				case "gate":
					c := redistest.StartT(t, 3, redistest.Options{})
					cs = gateClients(t, c)
					// Fresh masters: every gate is closed for a minute.
					opts = []redlock.Option{redlock.WithTTL(time.Second), redlock.WithRestartGate(time.Minute)}
				case "replicas":
					cs = frozenReplicas(t, 3)
					opts = []redlock.Option{redlock.WithTTL(time.Second), redlock.WithReplicaConfirm(1), redlock.WithNodeTimeout(200 * time.Millisecond)}
				}
				opts = append(opts, redlock.WithBackoff(minBackoff, maxBackoff))
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
					nodes := make([]redlock.Node, len(cs))
					for i, c := range cs {
						nodes[i] = redlock.NewNode(ownClient(t, c))
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
	admin := clients(t, masters().Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	key := testKey(t)
	l := mustLock(t, holder, key, redlock.WithFencing())
	settle(holder)
	wcs := clients(t, masters().Addrs())
	evals := &sentCounter{Name: "eval"}
	for _, c := range wcs {
		c.AddHook(evals)
	}
	w := newRedlock(t, nodesOf(t, wcs), redlock.WithFencing(), redlock.WithBackoff(minBackoff, maxBackoff))
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	got := lockAsync(t, wctx, w, key)
	waitRegistered(t, admin, key, 1)
	before := evals.N.Load()
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, c := range admin {
			entries, err := c.ZRange(ctx, redlock.WaitKey(key), 0, -1).Result()
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
	redlockOf := func() *redlock.Redlock {
		nodes := make([]redlock.Node, len(cs))
		for i, c := range cs {
			nodes[i] = redlock.NewNode(ownClient(t, c))
		}
		return newRedlock(t, nodes, redlock.WithTTL(gate), redlock.WithRestartGate(gate), redlock.WithFencing(), redlock.WithBackoff(gate, gate))
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

// TestWakeDuringAttemptTriesAtOnce: a release's wake-ups that reach a
// waiting call while one of its attempts is out are not lost. The set-up
// is TestMinorityGateWakeTriesAtOnce's (master 0's gate closed, X holds
// the key on masters 1 and 2, a fenced call B of another Redlock waits,
// its one cut of a wait spent on master 0's nudges), and B's third
// attempt is held out across X's Unlock: its vote is refused on master 1
// (X still holds there) and lands on master 2 after X's release. X's
// wake-ups from both come while the attempt is out; the attempt fails
// (master 2 alone); its rollback frees master 2 (which tells B nothing:
// the key was B's own), master 1 wakes B and master 0 nudges. A quorum
// woke B: it tries at once, not after its backoff's step (1-2 s here).
func TestWakeDuringAttemptTriesAtOnce(t *testing.T) {
	t.Parallel() // waits out masters' restart gates, mostly asleep: alongside the other gate tests
	// Master 0's gate stays closed for gate+2 s after its restart, past
	// B's third attempt (at most 2 s, the backoff's step, after its second).
	const gate, backoff = 8 * time.Second, 2 * time.Second
	c := redistest.StartT(t, 3, redistest.Options{})
	cs := gateClients(t, c)
	time.Sleep(gate + 2*time.Second) // every master's own gate is open
	if err := c.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	key := testKey(t)
	var armed atomic.Bool
	ran1, go1, go2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var free sync.Once // lets the held votes go, also when the test fails early
	release := func() { free.Do(func() { close(go2); close(go1) }) }
	redlockOf := func(hold bool) *redlock.Redlock {
		nodes := make([]redlock.Node, len(cs))
		for i, c := range cs {
			nodes[i] = redlock.NewNode(ownClient(t, c))
		}
		if hold {
			nodes[1] = &stallNode{Node: nodes[1], key: key, armed: &armed, after: true, ran: ran1, release: go1}
			nodes[2] = &stallNode{Node: nodes[2], key: key, armed: &armed, release: go2}
		}
		return newRedlock(t, nodes, redlock.WithTTL(gate), redlock.WithRestartGate(gate), redlock.WithFencing(), redlock.WithBackoff(backoff, backoff))
	}
	x, b := redlockOf(false), redlockOf(true)
	t.Cleanup(release) // before b's Close, which waits for its requests
	ctx := context.Background()
	lx, err := x.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	settle(x)
	got := lockAsync(t, ctx, b, key)
	waitRegistered(t, cs[1:], key, 1)
	time.Sleep(300 * time.Millisecond) // B's second attempt is over: it waits its step
	armed.Store(true)
	select {
	case <-ran1: // B's third attempt is out, refused on master 1
	case o := <-got:
		t.Fatalf("B ended before its third attempt: %v", o.Err)
	case <-time.After(5 * time.Second):
		t.Fatal("B made no third attempt within 5 s")
	}
	if err := lx.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(x)
	time.Sleep(100 * time.Millisecond) // X's wake-ups reach B, its attempt still out
	released := time.Now()
	release() // B's vote lands on master 2, free now, then master 1 answers
	o := <-got
	if o.Err != nil {
		t.Fatalf("the waiting call: %v", o.Err)
	}
	if d := o.At.Sub(released); d > backoff/4 {
		t.Errorf("the waiting call took the key %v after its attempt across X's Unlock failed; want at once", d.Round(time.Millisecond))
	}
	_ = o.Lock.Unlock(ctx)
}

// stallNode holds the first batch with an acquire vote for key sent while
// armed (then disarms): until release is closed, before sending it, or
// with after set, after it was answered (closing ran then).
type stallNode struct {
	redlock.Node
	key          string
	armed        *atomic.Bool
	after        bool
	ran, release chan struct{}
	once         sync.Once
}

func (n *stallNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	vote := false
	for _, c := range cmds {
		if step, key, _ := c.About(); strings.HasPrefix(step, "acquire") && key == n.key {
			vote = true
		}
	}
	stall := false
	if vote && n.armed.Load() {
		n.once.Do(func() { stall = true })
	}
	if !stall {
		n.Node.Exec(ctx, cmds)
		return
	}
	if !n.after {
		<-n.release
	}
	n.Node.Exec(ctx, cmds)
	if n.after {
		close(n.ran)
		<-n.release
	}
}

// With a backoff of seconds, only the local wake-ups can make 4 goroutines
// take 40 turns on one key quickly; the queue keeps them fair and the
// masters keep them exclusive.
func TestLockWakesLocalWaiters(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(2*time.Second, 2*time.Second))
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

// TestQueueEmptiesWhenWaitersEnd: a waiting call of each kind of lock
// (plain: handed the key; fenced and owned: woken) registers in the key's
// queue on every master. However the call ends — the holder's release
// tells it, the holder's key expires (no release: no master tells it, and
// it takes the key by its own attempt), or it gives up — once it ended and
// its lock was unlocked, no registration of it is left on any master, to
// be told in place of a call that still waits.
func TestQueueEmptiesWhenWaitersEnd(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters().Addrs())
	kinds := []struct {
		name           string
		holder, waiter []redlock.Option
	}{
		{"plain", nil, nil},
		{"fenced", []redlock.Option{redlock.WithFencing()}, []redlock.Option{redlock.WithFencing()}},
		{"owned", []redlock.Option{redlock.WithOwner("h")}, []redlock.Option{redlock.WithOwner("w")}},
	}
	for _, k := range kinds {
		for _, end := range []string{"release", "expiry", "give-up"} {
			t.Run(k.name+"/"+end, func(t *testing.T) {
				holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
				waiter := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(200*time.Millisecond, 200*time.Millisecond))
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
					if m, err := c.ZRange(ctx, redlock.WaitKey(key), 0, -1).Result(); err != nil || len(m) != 0 {
						t.Errorf("master %d: the queue holds %q (err %v) after the call ended; want it empty", i, m, err)
					}
				}
				_ = l.Unlock(ctx)
			})
		}
	}
}

// Liveness of a waiting Lock call: how long it sleeps on a key a master
// handed it, whom an owned release wakes, and what it sends while another
// holds the key.

// TestHandOffTooLateTriesAtOnce: with one master, a hand-off that comes
// when the call's registration is too old to leave the minimum validity
// (the key was held for most of the TTL since) makes the call try at once,
// so it registers again and is handed the key with a fresh validity; it
// does not sleep its backoff (10 s) while the master holds the key for it.
func TestHandOffTooLateTriesAtOnce(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters().Addrs()[:1])
	holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:1])))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters().Addrs()[:1])), redlock.WithBackoff(10*time.Second, 10*time.Second))
	const ttl = 300 * time.Millisecond
	key := testKey(t)
	l := mustLock(t, holder, key)
	got := lockAsync(t, ctx, waiter, key, redlock.WithTTL(ttl))
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
	admin := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	owned := mustLock(t, r, key, redlock.WithOwner("a"))
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
	admin := clients(t, masters().Addrs())
	acs := clients(t, masters().Addrs())
	sets := &sentCounter{Name: "set"}
	for _, c := range acs {
		c.AddHook(sets)
	}
	a := newRedlock(t, nodesOf(t, acs), redlock.WithBackoff(10*time.Second, 10*time.Second))
	b := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	gotB := unlockWaited(t, admin, a, b, key) // hands to b
	before := sets.N.Load()
	gotA := lockAsync(t, ctx, a, key, redlock.WithTTL(20*time.Second))
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

// ownClient returns a client of its own to c's master, with c's options.
// go-redis resolved c's MaxRetries -1 to 0, which a new client would take
// for its default, 3 retries: it is set to -1 again.
func ownClient(t testing.TB, c *redis.Client) *redis.Client {
	o := *c.Options()
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	own := redis.NewClient(&o)
	t.Cleanup(func() { own.Close() })
	return own
}
