package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// TestHandOffGiveUp: a call that gives up leaves the queues, and gives back
// the key where it was handed to it after all: the next waiter gets it at
// the next release, and nothing of the call is left on the masters.
func TestHandOffGiveUp(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters().Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	quitter := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder) // on every master, not only a quorum
	qctx, cancel := context.WithCancel(ctx)
	quit := lockAsync(t, qctx, quitter, key)
	waitRegistered(t, admin, key, 1)
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin, key, 2)
	cancel()
	if o := <-quit; o.Err == nil {
		t.Fatal("the cancelled call got the key")
	}
	settle(quitter)
	waitRegistered(t, admin, key, 1)
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if d := o.At.Sub(released); d > time.Second {
		t.Errorf("the waiter got the key %v after the release", d)
	}
	settle(holder) // the release reached every master
	if n := count(holders(t, admin, key), o.Lock.Value()); n != len(admin) {
		t.Errorf("%d of %d masters hold the waiter's value", n, len(admin))
	}
	_ = o.Lock.Unlock(ctx)
}

// TestHandOffRelock: a Redlock whose Unlock handed the key to another
// (as another process) and that locks the key again at once waits its turn
// without a request of its own: the Unlock queued it behind the new holder,
// its Lock takes that place over, and the new holder's release hands it the
// key. Before, its Lock queued it again (a request per master), or tried.
func TestHandOffRelock(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters().Addrs())
	sets, evals := &sentCounter{Name: "set"}, &sentCounter{Name: "eval"}
	acs := clients(t, masters().Addrs())
	for _, c := range acs {
		c.AddHook(sets)
		c.AddHook(evals)
	}
	// Long backoffs: any request a's Lock sends is one of the protocol's.
	a := newRedlock(t, nodesOf(t, acs), redlock.WithBackoff(10*time.Second, 10*time.Second))
	b := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	// a waits once, so that its lock comes from a call that queued.
	first := mustLock(t, b, key)
	settle(b)
	gotA := lockAsync(t, ctx, a, key)
	waitRegistered(t, admin, key, 1)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	oa := <-gotA
	if oa.Err != nil {
		t.Fatal(oa.Err)
	}
	gotB := lockAsync(t, ctx, b, key)
	waitRegistered(t, admin, key, 1)
	if err := oa.Lock.Unlock(ctx); err != nil { // hands to b, queues a behind it
		t.Fatal(err)
	}
	// Counted from here, as a's Lock starts at once: the Unlock's releases
	// to the masters beyond its quorum may still go out.
	set0, eval0 := sets.N.Load(), evals.N.Load()
	gotA = lockAsync(t, ctx, a, key)
	// Those releases land before b's: one that lands after it finds the key
	// free there and leaves it so (4 of 5 masters then hand a the key: make
	// test's first run with four test processes beside the simulation; a
	// 300 ms late release to one master gives the same).
	settle(a)
	ob := <-gotB
	if ob.Err != nil {
		t.Fatal(ob.Err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := ob.Lock.Unlock(ctx); err != nil { // hands to a
		t.Fatal(err)
	}
	oa = <-gotA
	if oa.Err != nil {
		t.Fatal(oa.Err)
	}
	defer oa.Lock.Unlock(ctx)
	settle(b) // b's release reached every master
	stragglers := int64(len(admin) - a.Quorum())
	if n, m := sets.N.Load()-set0, evals.N.Load()-eval0; n != 0 || m > stragglers {
		t.Errorf("a's Lock sent %d SET and %d EVAL while it waited its turn, want none (the EVALs of its Unlock to %d masters aside)", n, m, stragglers)
	}
	if n := count(holders(t, admin, key), oa.Lock.Value()); n != len(admin) {
		t.Errorf("%d of %d masters hold a's value", n, len(admin))
	}
}

// TestHandOffOrder: the key goes to the call that has waited longest, then
// to the next: two Redlocks queue one after the other, and each release
// hands it to the first still waiting.
func TestHandOffOrder(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters().Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	first := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	second := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder)
	got1 := lockAsync(t, ctx, first, key)
	waitRegistered(t, admin, key, 1)
	got2 := lockAsync(t, ctx, second, key)
	waitRegistered(t, admin, key, 2)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o1 := obtainedWithin(t, admin, key, got1, 5*time.Second, "the first waiter did not get the key within 5s")
	select {
	case o2 := <-got2:
		t.Fatalf("the second waiter got the key (err %v) while the first held it", o2.Err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := o1.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o2 := obtainedWithin(t, admin, key, got2, 5*time.Second, "the second waiter did not get the key within 5s of the first's release")
	_ = o2.Lock.Unlock(ctx)
}

// TestHandOffAutoExtended: a lock taken by hand-off with auto-extend is
// renewed like one taken by an attempt: after three of its TTLs it is still
// valid, and every master holds it.
func TestHandOffAutoExtended(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters().Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithBackoff(10*time.Second, 10*time.Second))
	const ttl = 300 * time.Millisecond
	o := obtained{Lock: handedLock(t, admin, holder, waiter, redlock.WithTTL(ttl), redlock.WithAutoExtend())}
	key := o.Lock.Key()
	time.Sleep(3 * ttl)
	select {
	case <-o.Lock.Done():
		t.Fatalf("the handed lock was lost: %v", context.Cause(o.Lock.Context()))
	default:
	}
	if left := time.Until(o.Lock.Until()); left <= 0 {
		t.Errorf("the handed lock's validity ended %v ago; auto-extend must renew it", -left)
	}
	if n := count(holders(t, admin, key), o.Lock.Value()); n != len(admin) {
		t.Errorf("%d of %d masters hold the handed lock after three TTLs", n, len(admin))
	}
	if err := o.Lock.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestWakeAcrossRedlocks: a goroutine of another Redlock (as in another
// process) waiting for a key takes it about a round trip after the holder
// releases it, not after its backoff (1 s or more here).
func TestWakeAcrossRedlocks(t *testing.T) {
	holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	for _, owned := range []bool{false, true} {
		key := testKey(t)
		var opts []redlock.Option
		if owned {
			opts = append(opts, redlock.WithOwner("A"))
		}
		l := mustLock(t, holder, key, opts...)
		if d := handOff(t, l, waiter, 100*time.Millisecond); d > 300*time.Millisecond {
			t.Errorf("owned %v: the waiting Redlock took the key %v after the release; its backoff was at least 1s, a wake-up takes a round trip", owned, d)
		}
	}
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
		gots[i] = lockAsync(t, ctx, r, key, redlock.WithBackoff(3*time.Second, 3*time.Second))
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
	if winner.Err != nil {
		t.Fatal(winner.Err)
	}
	time.Sleep(200 * time.Millisecond) // the other woken ones' attempts
	attempts := (setCalls(t, cs) - before) / int64(len(cs))
	t.Logf("%d waiting Redlocks: %d attempts after one release", waiting, attempts)
	if attempts > int64(len(cs)) {
		t.Errorf("%d attempts followed one release with %d Redlocks waiting; want at most one per master (%d)", attempts, waiting, len(cs))
	}
	_ = winner.Lock.Unlock(context.Background())
	cancel()
}

// TestWakeSkipsWaitersGone: a Redlock whose waiter gave up, one that was
// closed while it waited, and one whose process died (an entry still
// queued, nobody listening) are not woken, or handed the key, in place of
// one still waiting: plain locks (handed the key) and fenced ones (woken).
func TestWakeSkipsWaitersGone(t *testing.T) {
	for _, gone := range []string{"gave up", "closed", "died", "gave up/fenced", "closed/fenced", "died/fenced"} {
		var opts []redlock.Option
		if strings.HasSuffix(gone, "/fenced") {
			opts = append(opts, redlock.WithFencing())
		}
		t.Run(gone, func(t *testing.T) {
			holder := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
			key := testKey(t)
			l := mustLock(t, holder, key, opts...)
			first := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
			fctx, stop := context.WithCancel(context.Background())
			defer stop()
			quit := lockAsync(t, fctx, first, key, append(opts, redlock.WithBackoff(3*time.Second, 3*time.Second))...)
			waitQueued(t, first, key)
			time.Sleep(50 * time.Millisecond) // queued on the masters
			second := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
			got := lockAsync(t, context.Background(), second, key, append(opts, redlock.WithBackoff(3*time.Second, 3*time.Second))...)
			waitQueued(t, second, key)
			switch strings.TrimSuffix(gone, "/fenced") {
			case "gave up":
				stop()
			case "closed":
				first.Close()
			case "died":
				// Queue entries nobody listens on ahead of second: a
				// registration, and a malformed entry.
				for _, c := range clients(t, masters().Addrs()) {
					if err := c.ZAdd(context.Background(), redlock.WaitKey(key), redis.Z{Score: 1, Member: "redlock:wake:died|h|0|1"},
						redis.Z{Score: 1, Member: "redlock:wake:died"}).Err(); err != nil {
						t.Fatal(err)
					}
				}
				stop()
			}
			if o := <-quit; o.Err == nil {
				t.Fatal("the first waiter took the key")
			}
			settle(first)
			time.Sleep(50 * time.Millisecond)
			released := time.Now()
			if err := l.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			o := <-got
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			if d := o.At.Sub(released); d > 300*time.Millisecond {
				t.Errorf("the waiting Redlock took the key %v after the release: the wake-up went to the one that %s", d, gone)
			}
			_ = o.Lock.Unlock(context.Background())
		})
	}
}

// TestWakeSurvivesBrokenSubscriptions: when the masters drop the
// subscription connections while a Redlock waits, it still takes the key
// (by its backoff), and once go-redis has subscribed again, a release wakes
// it again.
func TestWakeSurvivesBrokenSubscriptions(t *testing.T) {
	cs := clients(t, masters().Addrs())
	holder := newRedlock(t, nodesOf(t, cs))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	ctx := context.Background()

	key := testKey(t)
	l := mustLock(t, holder, key)
	got := lockAsync(t, ctx, waiter, key, redlock.WithBackoff(400*time.Millisecond, 400*time.Millisecond))
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
	if o.Err != nil {
		t.Fatalf("waiter with its subscriptions dropped: %v", o.Err)
	}
	_ = o.Lock.Unlock(ctx)

	// go-redis subscribes again (its reader retries within 100 ms, and its
	// health check pings every 3 s at most).
	deadline := time.Now().Add(10 * time.Second)
	for {
		key := testKey(t)
		l := mustLock(t, holder, key)
		got := lockAsync(t, ctx, waiter, key, redlock.WithBackoff(2*time.Second, 2*time.Second))
		waitQueued(t, waiter, key)
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		_ = l.Unlock(ctx)
		o := <-got
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		_ = o.Lock.Unlock(ctx)
		if o.At.Sub(released) < 300*time.Millisecond {
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
	a := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	b := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())))
	ctx := context.Background()
	for range 5 {
		key := testKey(t)
		l := mustLock(t, a, key)
		got := lockAsync(t, ctx, b, key, redlock.WithBackoff(time.Second, time.Second))
		waitQueued(t, b, key)
		time.Sleep(50 * time.Millisecond)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		again := lockAsync(t, ctx, a, key)
		first := <-got
		if first.Err != nil {
			t.Fatal(first.Err)
		}
		select {
		case o := <-again:
			t.Fatalf("the releaser took the key again before the Redlock its release woke (err %v)", o.Err)
		default:
		}
		if err := first.Lock.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		o := <-again
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if d := o.At.Sub(first.At); d > 300*time.Millisecond {
			t.Errorf("the releaser got the key back %v after the woken Redlock took it; want a wake-up", d)
		}
		_ = o.Lock.Unlock(ctx)
	}
}

// downNode is a master that does not answer: every command fails at once.
type downNode struct{ redlock.Node }

var errMasterDown = errors.New("master down (test)")

func (n downNode) Exec(_ context.Context, cmds []*redlock.Command) {
	for _, c := range cmds {
		c.Err = errMasterDown
	}
}

// TestHandOffWithBareQuorumUp: two of five masters are down, so a quorum
// (3) needs every master that is up. The holder's key is gone from one of
// them (a failover without the key), so a waiting call's attempt wins that
// master and its rollback frees it again. The holder's Unlock then hands
// the key to the call on the other two: fewer than a quorum. Its attempt
// is refused there by its own hand-offs, and a rollback that left the
// freed master free (or handed only those two back) would repeat that
// forever: the call must get the key within a hand-off's time.
func TestHandOffWithBareQuorumUp(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters().Addrs())
	nodes := func() []redlock.Node {
		ns := nodesOf(t, clients(t, masters().Addrs()))
		ns[3], ns[4] = downNode{ns[3]}, downNode{ns[4]}
		return ns
	}
	holder := newRedlock(t, nodes())
	waiter := newRedlock(t, nodes(), redlock.WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder)
	if err := admin[2].Del(ctx, key).Err(); err != nil { // failed over without the key
		t.Fatal(err)
	}
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin[:3], key, 1)
	settle(waiter) // its rollback reached every master that is up
	if vs := holders(t, admin, key); vs[2] != "" {
		t.Fatalf("master 2 holds %q after the waiter's rollback; want it free", vs[2])
	}
	released := time.Now()
	// The Unlock reports no quorum (master 2 lost the key): it released
	// the key on masters 0 and 1, and that is what hands it on.
	var qe *redlock.QuorumError
	if err := l.Unlock(ctx); err != nil && !errors.As(err, &qe) {
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

// handOffAfter takes key with holder, starts waiter's Lock of it, lets the
// waiter try and queue, and unlocks: it returns the waiter's lock and how
// long after the Unlock started the waiter held it.
func handOffAfter(t *testing.T, holder, waiter *redlock.Redlock, key string, opts ...redlock.Option) (*redlock.Lock, time.Duration) {
	t.Helper()
	ctx := context.Background()
	l, err := holder.Lock(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *redlock.Lock, 1)
	go func() {
		w, err := waiter.Lock(ctx, key, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	time.Sleep(200 * time.Millisecond) // the waiter tried, and queued
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	return w, time.Since(start)
}

// handOff has waiter wait for l's key (with a backoff of 1 to 2 s), lets
// it settle (subscribed and queued) for the given time, releases l, and
// returns how long after the release waiter held the key; it releases it.
func handOff(t testing.TB, l *redlock.Lock, waiter *redlock.Redlock, settle time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	got := lockAsync(t, ctx, waiter, l.Key(), redlock.WithBackoff(2*time.Second, 2*time.Second))
	waitQueued(t, waiter, l.Key())
	time.Sleep(settle)
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if err := o.Lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return o.At.Sub(released)
}

// farNode is a master d away from its client: each batch goes out d late
// and its replies come back d late.
type farNode struct {
	redlock.Node
	d time.Duration
}

func (n farNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	sleep := func() error {
		t := time.NewTimer(n.d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(); err != nil {
		for _, c := range cmds {
			c.Err = err
		}
		return
	}
	n.Node.Exec(ctx, cmds)
	if err := sleep(); err != nil {
		for _, c := range cmds {
			c.Reply, c.Err = nil, err
		}
	}
}

// TestMarkKeepsTurn: a Redlock whose Unlock of a key handed it to, or
// woke, another process's waiting call, and that locks the key again at
// once, waits its turn behind that call (the mark) rather than race it,
// whatever the locks' options: plain locks are handed the key, fenced,
// owned, gated and replica-confirmed ones only woken (issue 39, item 5:
// a fenced A took the key 2 ms after its Unlock, before C, woken by it).
// B holds; A waits; C, 10 ms from the masters, waits behind A; B unlocks
// and A gets the key; A unlocks and at once locks again: C gets it first.
func TestMarkKeepsTurn(t *testing.T) {
	const ttl, backoff = 5 * time.Second, 2 * time.Second
	type kind struct {
		name  string
		nodes func(t *testing.T) []redlock.Node
		opts  func(client string) []redlock.Option
	}
	shared := func(t *testing.T) []redlock.Node { return nodesOf(t, clients(t, masters().Addrs()[:3])) }
	none := func(string) []redlock.Option { return nil }
	for _, k := range []kind{
		{"plain", shared, none},
		{"fenced", shared, func(string) []redlock.Option { return []redlock.Option{redlock.WithFencing()} }},
		{"owned", shared, func(c string) []redlock.Option { return []redlock.Option{redlock.WithOwner(c)} }},
		{"gated", func(t *testing.T) []redlock.Node {
			waitUptime(t, masters().Addrs()[:3], ttl+2*time.Second)
			return shared(t)
		}, func(string) []redlock.Option { return []redlock.Option{redlock.WithRestartGate(ttl)} }},
		{"replicas", func(t *testing.T) []redlock.Node {
			return replicatedNodes(t, startReplicated(t, 3))
		}, func(string) []redlock.Option { return []redlock.Option{redlock.WithReplicaConfirm(1)} }},
	} {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			nodes := k.nodes(t)
			far := make([]redlock.Node, len(nodes))
			for i, n := range nodes {
				far[i] = farNode{n, 10 * time.Millisecond}
			}
			common := []redlock.Option{redlock.WithTTL(ttl), redlock.WithBackoff(backoff, backoff), redlock.WithNodeTimeout(time.Second)}
			a := newRedlock(t, nodes, common...)
			b := newRedlock(t, nodes, common...)
			c := newRedlock(t, far, common...)
			key := testKey(t)
			lb, err := b.TryLock(ctx, key, k.opts("b")...)
			if err != nil {
				t.Fatal(err)
			}
			settle(b)
			for i, nd := range nodes {
				ex := &redlock.Command{Args: []any{"exists", key}, Key: 1, Keys: 1}
				nd.Exec(ctx, []*redlock.Command{ex})
				if ex.Reply != int64(1) {
					t.Fatalf("master %d does not hold the key (%v, %v): the test needs B on every master", i, ex.Reply, ex.Err)
				}
			}
			gotA := lockAsync(t, ctx, a, key, k.opts("a")...)
			waitQueuedOn(t, nodes, key, 1)
			gotC := lockAsync(t, ctx, c, key, k.opts("c")...)
			waitQueuedOn(t, nodes, key, 2)
			if err := lb.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			oa := <-gotA
			if oa.Err != nil {
				t.Fatal(oa.Err)
			}
			if err := oa.Lock.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			again := lockAsync(t, ctx, a, key, k.opts("a")...)
			var first string
			select {
			case oc := <-gotC:
				if oc.Err != nil {
					t.Fatal(oc.Err)
				}
				first = "c"
				time.Sleep(50 * time.Millisecond)
				unlocked := time.Now()
				if err := oc.Lock.Unlock(ctx); err != nil {
					t.Error(err)
				}
				// A waited its turn on the masters, not on its backoff
				// (1 to 2 s): C's Unlock gives it the key.
				o := <-again
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				o.Lock.Unlock(ctx)
				if d := o.At.Sub(unlocked); d > 500*time.Millisecond {
					t.Errorf("A got the key %v after C's Unlock; want it by the hand-off or wake-up, not its backoff", d.Round(time.Millisecond))
				}
			case o := <-again:
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				first = "a"
				o.Lock.Unlock(ctx)
				if oc := <-gotC; oc.Err == nil {
					oc.Lock.Unlock(ctx)
				}
			}
			if first != "c" {
				t.Errorf("A locked the key again before C, which A's Unlock woke or handed it to")
			}
		})
	}
}

// waitQueuedOn waits until key's queue holds n entries on every master
// behind nodes.
func waitQueuedOn(t *testing.T, nodes []redlock.Node, key string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		all := true
		for _, nd := range nodes {
			cmd := &redlock.Command{Args: []any{"zcard", redlock.WaitKey(key)}, Key: 1, Keys: 1}
			nd.Exec(context.Background(), []*redlock.Command{cmd})
			if got, _ := cmd.Reply.(int64); got != n {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			for i, nd := range nodes {
				cmd := &redlock.Command{Args: []any{"zrange", redlock.WaitKey(key), int64(0), int64(-1), "withscores"}, Key: 1, Keys: 1}
				get := &redlock.Command{Args: []any{"get", key}, Key: 1, Keys: 1}
				nd.Exec(context.Background(), []*redlock.Command{cmd, get})
				t.Logf("master %d: queue %v (%v), key %v (%v)", i, cmd.Reply, cmd.Err, get.Reply, get.Err)
			}
			t.Fatalf("key's queue does not hold %d entries on every master after 5s", n)
		}
	}
}

// waitUptime waits until every master at addrs has been up at least d.
func waitUptime(t *testing.T, addrs []string, d time.Duration) {
	t.Helper()
	for i, c := range clients(t, addrs) {
		info, err := c.Info(context.Background(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
		line, _, _ := strings.Cut(rest, "\r\n")
		up, err := time.ParseDuration(strings.TrimSpace(line) + "s")
		if err != nil {
			t.Fatalf("master %d's uptime %q: %v", i, line, err)
		}
		if up < d {
			time.Sleep(d - up)
		}
	}
}
