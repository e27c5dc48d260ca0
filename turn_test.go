package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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
	evals := &sentCounter{name: "eval"}
	for _, c := range wcs {
		c.AddHook(evals)
	}
	w := newRedlock(t, nodesOf(t, wcs), WithFencing(), WithBackoff(minBackoff, maxBackoff))
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	got := lockAsync(t, wctx, w, key)
	waitRegistered(t, admin, key, 1)
	before := evals.n.Load()
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
	if o := <-got; o.err == nil {
		t.Fatal("the waiting call got the lock the holder keeps")
	}
	// An attempt is a fenced acquire and its rollback on every master: at
	// once, then one per backoff interval, and one more on the wire at the
	// deadline.
	attempts, most := (evals.n.Load()-before)/int64(2*len(admin)), int64(window/minBackoff+2)
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
	if o.err != nil {
		t.Fatalf("the waiting call: %v", o.err)
	}
	if d := o.at.Sub(unlocked); d > gate/4 {
		t.Errorf("the waiting call took the key %v after X's Unlock woke it on a quorum; want at once", d.Round(time.Millisecond))
	}
	_ = o.l.Unlock(ctx)
}
