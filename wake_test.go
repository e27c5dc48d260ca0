package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

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
		ch <- obtained{l, err, time.Now()}
	}()
	return ch
}

type obtained struct {
	l   *Lock
	err error
	at  time.Time
}

// TestWakeAcrossRedlocks: a goroutine of another Redlock (as in another
// process) waiting for a key takes it about a round trip after the holder
// releases it, not after its backoff (1 s or more here).
func TestWakeAcrossRedlocks(t *testing.T) {
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	for _, owned := range []bool{false, true} {
		key := testKey(t)
		var opts []Option
		if owned {
			opts = append(opts, WithOwner("A"))
		}
		l := mustLock(t, holder, key, opts...)
		if d := handOff(t, l, waiter, 100*time.Millisecond); d > 300*time.Millisecond {
			t.Errorf("owned %v: the waiting Redlock took the key %v after the release; its backoff was at least 1s, a wake-up takes a round trip", owned, d)
		}
	}
}

// handOff has waiter wait for l's key (with a backoff of 1 to 2 s), lets
// it settle (subscribed and queued) for the given time, releases l, and
// returns how long after the release waiter held the key; it releases it.
func handOff(t testing.TB, l *Lock, waiter *Redlock, settle time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	got := lockAsync(t, ctx, waiter, l.Key(), WithBackoff(2*time.Second, 2*time.Second))
	waitQueued(t, waiter, l.Key())
	time.Sleep(settle)
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	if err := o.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return o.at.Sub(released)
}

// setCalls sums the SET calls the masters served: one per master and
// acquire attempt.
func setCalls(t testing.TB, cs []*redis.Client) int64 {
	t.Helper()
	n, err := redistest.Calls(context.Background(), cs, "set")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWakeOneAtATime: with many Redlocks waiting, a release wakes one of
// them per master, not all: within the backoff, at most one attempt per
// master follows the release, and one Redlock takes the key.
func TestWakeOneAtATime(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := clients(t, cl.Addrs())
	holder := newRedlock(t, nodesOf(t, cs))
	key := testKey(t)
	l := mustLock(t, holder, key)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const waiting = 12
	gots := make([]<-chan obtained, waiting)
	for i := range gots {
		r := newRedlock(t, nodesOf(t, clients(t, cl.Addrs())))
		gots[i] = lockAsync(t, ctx, r, key, WithBackoff(3*time.Second, 3*time.Second))
		waitQueued(t, r, key)
	}
	time.Sleep(100 * time.Millisecond)
	before := setCalls(t, cs)
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	var winner obtained
	select {
	case winner = <-merge(gots):
	case <-time.After(time.Second):
		t.Fatal("no waiting Redlock took the key within 1s of the release")
	}
	if winner.err != nil {
		t.Fatal(winner.err)
	}
	time.Sleep(200 * time.Millisecond) // the other woken ones' attempts
	attempts := (setCalls(t, cs) - before) / int64(len(cs))
	t.Logf("%d waiting Redlocks: %d attempts after one release", waiting, attempts)
	if attempts > int64(len(cs)) {
		t.Errorf("%d attempts followed one release with %d Redlocks waiting; want at most one per master (%d)", attempts, waiting, len(cs))
	}
	_ = winner.l.Unlock(context.Background())
	cancel()
}

// merge forwards the first value of any of chs.
func merge(chs []<-chan obtained) <-chan obtained {
	out := make(chan obtained, len(chs))
	for _, ch := range chs {
		go func() { out <- <-ch }()
	}
	return out
}

// TestWakeSkipsWaitersGone: a Redlock whose waiter gave up, one that was
// closed while it waited, and one whose process died (an entry still
// queued, nobody listening) are not woken, or handed the key, in place of
// one still waiting: plain locks (handed the key) and fenced ones (woken).
func TestWakeSkipsWaitersGone(t *testing.T) {
	for _, gone := range []string{"gave up", "closed", "died", "gave up/fenced", "closed/fenced", "died/fenced"} {
		var opts []Option
		if strings.HasSuffix(gone, "/fenced") {
			opts = append(opts, WithFencing())
		}
		t.Run(gone, func(t *testing.T) {
			holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
			key := testKey(t)
			l := mustLock(t, holder, key, opts...)
			first := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
			fctx, stop := context.WithCancel(context.Background())
			defer stop()
			quit := lockAsync(t, fctx, first, key, append(opts, WithBackoff(3*time.Second, 3*time.Second))...)
			waitQueued(t, first, key)
			time.Sleep(50 * time.Millisecond) // queued on the masters
			second := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
			got := lockAsync(t, context.Background(), second, key, append(opts, WithBackoff(3*time.Second, 3*time.Second))...)
			waitQueued(t, second, key)
			switch strings.TrimSuffix(gone, "/fenced") {
			case "gave up":
				stop()
			case "closed":
				first.Close()
			case "died":
				// Queue entries nobody listens on ahead of second: a
				// registration, and a malformed entry.
				for _, c := range clients(t, masters.Addrs()) {
					if err := c.ZAdd(context.Background(), WaitKey(key), redis.Z{Score: 1, Member: "redlock:wake:died|h|0|1"},
						redis.Z{Score: 1, Member: "redlock:wake:died"}).Err(); err != nil {
						t.Fatal(err)
					}
				}
				stop()
			}
			if o := <-quit; o.err == nil {
				t.Fatal("the first waiter took the key")
			}
			settle(first)
			time.Sleep(50 * time.Millisecond)
			released := time.Now()
			if err := l.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			o := <-got
			if o.err != nil {
				t.Fatal(o.err)
			}
			if d := o.at.Sub(released); d > 300*time.Millisecond {
				t.Errorf("the waiting Redlock took the key %v after the release: the wake-up went to the one that %s", d, gone)
			}
			_ = o.l.Unlock(context.Background())
		})
	}
}

// TestWakeSurvivesBrokenSubscriptions: when the masters drop the
// subscription connections while a Redlock waits, it still takes the key
// (by its backoff), and once go-redis has subscribed again, a release wakes
// it again.
func TestWakeSurvivesBrokenSubscriptions(t *testing.T) {
	cs := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, cs))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	ctx := context.Background()

	key := testKey(t)
	l := mustLock(t, holder, key)
	got := lockAsync(t, ctx, waiter, key, WithBackoff(400*time.Millisecond, 400*time.Millisecond))
	waitQueued(t, waiter, key)
	for _, c := range cs {
		if err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.err != nil {
		t.Fatalf("waiter with its subscriptions dropped: %v", o.err)
	}
	_ = o.l.Unlock(ctx)

	// go-redis subscribes again (its reader retries within 100 ms, and its
	// health check pings every 3 s at most).
	deadline := time.Now().Add(10 * time.Second)
	for {
		key := testKey(t)
		l := mustLock(t, holder, key)
		got := lockAsync(t, ctx, waiter, key, WithBackoff(2*time.Second, 2*time.Second))
		waitQueued(t, waiter, key)
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		_ = l.Unlock(ctx)
		o := <-got
		if o.err != nil {
			t.Fatal(o.err)
		}
		_ = o.l.Unlock(ctx)
		if o.at.Sub(released) < 300*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no wake-up 10s after the subscriptions were dropped")
		}
	}
}

// TestReleaserYields: a Redlock whose Unlock woke a waiting Redlock, and
// that locks the key again at once, lets the woken one take it first
// instead of racing it (which it would win: its acquire follows its release
// on the same connections), and gets it after.
func TestReleaserYields(t *testing.T) {
	a := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	b := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	ctx := context.Background()
	for range 5 {
		key := testKey(t)
		l := mustLock(t, a, key)
		got := lockAsync(t, ctx, b, key, WithBackoff(time.Second, time.Second))
		waitQueued(t, b, key)
		time.Sleep(50 * time.Millisecond)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		again := lockAsync(t, ctx, a, key)
		first := <-got
		if first.err != nil {
			t.Fatal(first.err)
		}
		select {
		case o := <-again:
			t.Fatalf("the releaser took the key again before the Redlock its release woke (err %v)", o.err)
		default:
		}
		if err := first.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		o := <-again
		if o.err != nil {
			t.Fatal(o.err)
		}
		if d := o.at.Sub(first.at); d > 300*time.Millisecond {
			t.Errorf("the releaser got the key back %v after the woken Redlock took it; want a wake-up", d)
		}
		_ = o.l.Unlock(ctx)
	}
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
	if o.err != nil {
		t.Fatal(o.err)
	}
	if d := o.at.Sub(freed); d > 300*time.Millisecond {
		t.Errorf("the waiter took the key %v after one master told it; want about the wake grace, not its backoff", d)
	}
	_ = o.l.Unlock(ctx)
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
	for _, e := range rec.take() {
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
