// Package redlocktest checks that a [redlock.Node] of a Redis client keeps
// the Node contract, against real servers: the conformance kit an adapter
// author runs (the go-redis Node passes it in this package's own tests).
//
//	func TestConformance(t *testing.T) {
//		redlocktest.Run(t, redlocktest.Adapter{
//			Node: func(t testing.TB, addr string) redlock.Node { ... },
//		})
//	}
//
// Run starts the redis-server processes it needs (redis-server on $PATH, or
// $REDIS_SERVER), so a Node under test reaches servers that nothing else
// uses. It checks the replies a master can give (every kind a Node must
// hand back, error replies by their text, order within a batch), a batch's
// deadline with a master that stops answering, a master that is down,
// every lock kind through the public API (plain, fenced, owned, extend,
// auto-extend, unlock), hand-offs between Redlocks when the Node
// subscribes, the restart gate, replica confirmation (refused where the
// Node routes by key), what a Node that declares Traits.OneConnection
// promises (each batch on one connection, also from several goroutines at
// once; a WAIT after a write in its batch counts only the replicas that
// acknowledged it, on a primary with a replica the kit starts; nothing
// sent again when a connection breaks mid-batch: skipped, with the Node's
// reason, for a Node that does not declare it), subscriptions, and, when
// the adapter makes Nodes over a Redis Cluster, locks on keys of every
// shape there, a shard's replica found once it took over from its dead
// master and, when its Node declares Traits.ShardChannels, wake-ups on
// shard channels (following a slot that moves) and hand-offs.
package redlocktest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// Adapter is the Node kind under test.
type Adapter struct {
	// Node returns a Node of the adapter over the one redis-server at addr
	// (host:port), closed at the end of the test (tb.Cleanup). Required.
	Node func(tb testing.TB, addr string) redlock.Node
	// ClusterNode, when set, returns a Node of the adapter over the Redis
	// Cluster whose nodes are at addrs, closed at the end of the test: Run
	// then checks locks on a cluster too.
	ClusterNode func(tb testing.TB, addrs []string) redlock.Node
}

// Run runs the conformance tests of a as subtests of t.
func Run(t *testing.T, a Adapter) {
	if a.Node == nil {
		t.Fatal("redlocktest: Adapter.Node is nil")
	}
	servers := redistest.StartT(t, 3, redistest.Options{Args: []string{"--save", ""}})
	k := &kit{a: a, addrs: servers.Addrs()}
	t.Run("replies", k.replies)
	t.Run("order", k.order)
	t.Run("deadline", k.deadline)
	t.Run("down", k.down)
	t.Run("locks", k.locks)
	t.Run("hand-off", k.handOff)
	t.Run("restart gate", k.gate)
	t.Run("replica confirmation", k.replicas)
	t.Run("one connection", k.oneConnection)
	t.Run("subscribe", k.subscribe)
	if a.ClusterNode != nil {
		t.Run("cluster", k.cluster)
	}
}

type kit struct {
	a     Adapter
	addrs []string
}

var keySeq atomic.Int64

// key returns a key no other check uses.
func key(tb testing.TB) string {
	return fmt.Sprintf("redlocktest:%s:%d", tb.Name(), keySeq.Add(1))
}

// exec runs cmds on n in one Exec (each command's Args as given, the first
// key at index 1 unless told otherwise by the caller) within d.
func exec(n redlock.Node, d time.Duration, cmds ...*redlock.Command) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	n.Exec(ctx, cmds)
}

// cmd is a command whose first key is Args[1] (keys 0: none).
func cmd(keys int, args ...any) *redlock.Command {
	c := &redlock.Command{Args: args}
	if keys > 0 {
		c.Key, c.Keys = 1, keys
	}
	return c
}

// eval is an EVAL of script over keys and args.
func eval(script string, keys []string, args ...any) *redlock.Command {
	a := []any{"eval", script, int64(len(keys))}
	for _, k := range keys {
		a = append(a, k)
	}
	c := &redlock.Command{Args: append(a, args...)}
	if len(keys) > 0 {
		c.Key, c.Keys = 3, len(keys)
	}
	return c
}

// replies: every kind of reply a master gives reaches the core as the
// contract says: nil for a nil reply, int64, string for simple and bulk
// strings, []any for arrays, an error reply as Err with its text; an error
// reply fails only its own command.
func (k *kit) replies(t *testing.T) {
	n := k.a.Node(t, k.addrs[0])
	ky, counter := key(t), key(t)
	set := cmd(1, "set", ky, "v", "px", int64(60000), "nx")
	again := cmd(1, "set", ky, "w", "px", int64(60000), "nx")
	get := cmd(1, "get", ky)
	missing := cmd(1, "get", key(t))
	incr := cmd(1, "incr", counter)
	arr := eval("return {1, 'a', {2}}", nil)
	refused := eval("return redis.error_reply('GATE 1200')", nil)
	wrong := cmd(1, "lpush", ky, "x") // WRONGTYPE
	after := cmd(1, "get", ky)
	wait := cmd(0, "wait", int64(0), int64(10))
	exec(n, 5*time.Second, set, again, get, missing, incr, arr, refused, wrong, after, wait)
	check := func(name string, c *redlock.Command, want any) {
		t.Helper()
		if c.Err != nil || fmt.Sprintf("%#v", c.Reply) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s: Reply %#v, Err %v; want Reply %#v", name, c.Reply, c.Err, want)
		}
	}
	check("SET NX of a new key", set, "OK")
	check("SET NX of an existing key", again, nil)
	check("GET", get, "v")
	check("GET of a missing key", missing, nil)
	check("INCR", incr, int64(1))
	check("EVAL returning an array", arr, []any{int64(1), "a", []any{int64(2)}})
	if refused.Err == nil || refused.Err.Error() != "GATE 1200" {
		t.Errorf("an error reply: Reply %#v, Err %v; want Err with the text GATE 1200", refused.Reply, refused.Err)
	}
	if wrong.Err == nil || !strings.HasPrefix(wrong.Err.Error(), "WRONGTYPE") {
		t.Errorf("LPUSH on a string: Err %v; want the WRONGTYPE error reply", wrong.Err)
	}
	check("GET after error replies", after, "v")
	check("WAIT (no key)", wait, int64(0))
}

// order: the commands of a batch run in order.
func (k *kit) order(t *testing.T) {
	n := k.a.Node(t, k.addrs[0])
	ky := key(t)
	cmds := make([]*redlock.Command, 200)
	for i := range cmds {
		if i%2 == 0 {
			cmds[i] = cmd(1, "incr", ky)
		} else {
			cmds[i] = cmd(1, "get", ky)
		}
	}
	exec(n, 5*time.Second, cmds...)
	for i, c := range cmds {
		want := any(int64(i/2 + 1))
		if i%2 == 1 {
			want = strconv.Itoa(i/2 + 1)
		}
		if c.Err != nil || c.Reply != want {
			t.Fatalf("command %d of a batch of INCR and GET: Reply %#v, Err %v; want %#v (in order)", i, c.Reply, c.Err, want)
		}
	}
}

// deadline: with its master paused (CLIENT PAUSE), Exec returns promptly
// once its context's deadline passed, every command failed with an error;
// a Node whose Traits promise KeepsDeadlines returns by the deadline.
func (k *kit) deadline(t *testing.T) {
	admin := k.a.Node(t, k.addrs[1])
	n := k.a.Node(t, k.addrs[1])
	exec(n, 5*time.Second, cmd(0, "ping")) // connected before the pause
	exec(admin, 5*time.Second, cmd(0, "client", "pause", int64(1500), "all"))
	defer exec(admin, 5*time.Second, cmd(0, "client", "unpause"))
	cmds := []*redlock.Command{cmd(1, "set", key(t), "v"), cmd(1, "get", key(t))}
	const d = 100 * time.Millisecond
	began := time.Now()
	exec(n, d, cmds...)
	took := time.Since(began)
	for i, c := range cmds {
		if c.Err == nil {
			t.Errorf("command %d to a paused master: Reply %#v and no error; want its deadline's error", i, c.Reply)
		}
	}
	most := 1200 * time.Millisecond // promptly: well before the pause ends
	if n.Traits().KeepsDeadlines {
		most = d + 150*time.Millisecond
	}
	if took > most {
		t.Errorf("Exec to a paused master with a %v deadline returned after %v; want within %v (KeepsDeadlines %v)", d, took, most, n.Traits().KeepsDeadlines)
	}
	// The same Node answers once the master does: the errors above were
	// the deadline's, not a Node that fails everything.
	exec(admin, 5*time.Second, cmd(0, "client", "unpause"))
	again := cmd(1, "set", key(t), "v")
	exec(n, 5*time.Second, again)
	if again.Err != nil || again.Reply != "OK" {
		t.Errorf("SET once the pause ended: Reply %#v, Err %v; want OK from the same Node", again.Reply, again.Err)
	}
}

// down: a master nobody listens for fails every command with an error,
// promptly.
func (k *kit) down(t *testing.T) {
	n := k.a.Node(t, "127.0.0.1:1")
	cmds := []*redlock.Command{cmd(1, "set", key(t), "v"), cmd(1, "get", key(t))}
	began := time.Now()
	exec(n, 2*time.Second, cmds...)
	for i, c := range cmds {
		if c.Err == nil {
			t.Errorf("command %d to a master that is down: Reply %#v, no error", i, c.Reply)
		}
	}
	if took := time.Since(began); took > 2500*time.Millisecond {
		t.Errorf("Exec to a master that is down returned after %v", took)
	}
}

// nodes returns a Node of the adapter per server.
func (k *kit) nodes(t *testing.T) []redlock.Node {
	ns := make([]redlock.Node, len(k.addrs))
	for i, a := range k.addrs {
		ns[i] = k.a.Node(t, a)
	}
	return ns
}

// newRedlock returns a Redlock over nodes, closed at the end of the test.
func newRedlock(t *testing.T, nodes []redlock.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	r, err := redlock.New(nodes, append([]redlock.Option{redlock.WithNodeTimeout(500 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// locks: every lock kind works through the Node.
func (k *kit) locks(t *testing.T) {
	lockKinds(t, k.nodes(t), []string{key(t)})
}

// lockKinds takes, extends and releases a plain, a fenced, an owned and an
// auto-extended lock of each key on nodes, and checks that a second
// Redlock is refused while each is held.
func lockKinds(t *testing.T, nodes []redlock.Node, keys []string) {
	t.Helper()
	ctx := context.Background()
	r := newRedlock(t, nodes, redlock.WithTTL(2*time.Second))
	other := newRedlock(t, nodes, redlock.WithTTL(2*time.Second))
	for _, ky := range keys {
		var last uint64
		for _, kind := range []struct {
			name string
			opts []redlock.Option
		}{
			{"plain", nil},
			{"fenced", []redlock.Option{redlock.WithFencing()}},
			{"fenced again", []redlock.Option{redlock.WithFencing()}},
			{"owned", []redlock.Option{redlock.WithOwner("job")}},
			{"auto-extended", []redlock.Option{redlock.WithAutoExtend()}},
		} {
			l, err := r.TryLock(ctx, ky, kind.opts...)
			if err != nil {
				t.Fatalf("%s lock of %q: %v", kind.name, ky, err)
			}
			if _, err := other.TryLock(ctx, ky); !errors.Is(err, redlock.ErrNotObtained) {
				t.Errorf("%s lock of %q held: another Redlock's TryLock = %v; want ErrNotObtained", kind.name, ky, err)
			}
			if tok := l.Fence(); tok != 0 {
				if tok <= last {
					t.Errorf("fence token %d of %q after %d; want it to increase", tok, ky, last)
				}
				last = tok
			}
			if kind.name == "owned" {
				again, err := r.TryLock(ctx, ky, kind.opts...)
				if err != nil {
					t.Fatalf("owned lock of %q entered again: %v", ky, err)
				}
				if err := again.Unlock(ctx); err != nil {
					t.Fatalf("owned lock of %q, inner Unlock: %v", ky, err)
				}
			}
			if err := l.Extend(ctx, 3*time.Second); err != nil {
				t.Errorf("%s lock of %q: Extend: %v", kind.name, ky, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("%s lock of %q: Unlock: %v", kind.name, ky, err)
			}
		}
		if last == 0 {
			t.Errorf("no fence token for %q", ky)
		}
		permits(t, r, other, ky)
	}
}

// permits takes the 2 permits of the Semaphore named ky, one fenced, one
// by each Redlock, checks that a third is refused, extends one and gives
// both back: the permit scripts' keys share ky's hash slot.
func permits(t *testing.T, r, other *redlock.Redlock, ky string) {
	t.Helper()
	ctx := context.Background()
	a, err := r.Semaphore(ky, 2).TryAcquire(ctx, redlock.WithFencing())
	if err != nil {
		t.Fatalf("fenced permit of %q: %v", ky, err)
	}
	if a.Fence() == 0 {
		t.Errorf("fenced permit of %q: no token", ky)
	}
	b, err := other.Semaphore(ky, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("second permit of %q: %v", ky, err)
	}
	if _, err := r.Semaphore(ky, 2).TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("third permit of 2 of %q: %v; want ErrNotObtained", ky, err)
	}
	if err := a.Extend(ctx, 3*time.Second); err != nil {
		t.Errorf("permit of %q: Extend: %v", ky, err)
	}
	for _, l := range []*redlock.Lock{a, b} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("permit of %q: Unlock: %v", ky, err)
		}
	}
}

// handOff: when the Node subscribes, a waiting Lock call of one Redlock
// gets the key from another Redlock's Unlock at once, not after its
// backoff; when it cannot (errors.ErrUnsupported), the call still gets it
// by its backoff.
func (k *kit) handOff(t *testing.T) {
	// Bounded: a Node that fails every command must fail the check, not
	// hang it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder := newRedlock(t, k.nodes(t))
	waiter := newRedlock(t, k.nodes(t), redlock.WithBackoff(5*time.Second, 5*time.Second))
	sub, err := k.a.Node(t, k.addrs[0]).Subscribe(ctx, "redlocktest:probe", func(redlock.Message) {})
	if sub != nil {
		defer sub.Close()
	}
	subscribes := !errors.Is(err, errors.ErrUnsupported)
	ky := key(t)
	l, err := holder.Lock(ctx, ky)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var wl *redlock.Lock
	go func() {
		var err error
		wl, err = waiter.Lock(ctx, ky)
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter's first attempt failed and queued it
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	most := 7 * time.Second
	if subscribes {
		most = time.Second
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting call: %v", err)
		}
		t.Logf("the waiting call got the key %v after the Unlock (the Node subscribes: %v)", time.Since(released).Round(time.Millisecond), subscribes)
		if err := wl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(most):
		t.Fatalf("the waiting call did not get the key within %v of the Unlock (the Node subscribes: %v; its backoff is 5 s)", most, subscribes)
	}
}

// gate: with a restart gate longer than the masters have been up, every
// vote is refused with ErrRestartGate and nothing is written.
func (k *kit) gate(t *testing.T) {
	ctx := context.Background()
	nodes := k.nodes(t)
	info := cmd(0, "info", "server")
	exec(nodes[0], 5*time.Second, info)
	s, _ := info.Reply.(string)
	_, rest, _ := strings.Cut(s, "uptime_in_seconds:")
	up, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	if info.Err != nil || err != nil {
		t.Fatalf("INFO server: %v %v", info.Err, err)
	}
	gate := time.Duration(up+3600) * time.Second
	r := newRedlock(t, nodes, redlock.WithTTL(gate), redlock.WithRestartGate(gate))
	ky := key(t)
	_, err = r.TryLock(ctx, ky, redlock.WithFencing())
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("TryLock behind closed gates = %v; want a QuorumError", err)
	}
	for _, e := range qe.Errs {
		if !errors.Is(e, redlock.ErrRestartGate) {
			t.Errorf("a master's vote behind its closed gate failed with %v; want ErrRestartGate", e)
		}
	}
	exists := cmd(2, "exists", ky, redlock.FenceKey(ky))
	exec(nodes[0], 5*time.Second, exists)
	if exists.Err != nil || exists.Reply != int64(0) {
		t.Errorf("EXISTS of the key and its fence counter after a vote behind a closed gate: %#v, %v; want 0: a closed gate writes nothing", exists.Reply, exists.Err)
	}
}

// replicas: on masters without replicas, a vote that asks for one is not
// confirmed (ErrNotReplicated); a Node that routes by key, or does not
// declare Traits.OneConnection, is refused the option, with a ConfigError
// that names its master.
func (k *kit) replicas(t *testing.T) {
	nodes := k.nodes(t)
	if tr := nodes[0].Traits(); tr.Routing == redlock.RouteByKey || !tr.OneConnection {
		var ce *redlock.ConfigError
		_, err := redlock.New(nodes, redlock.WithReplicaConfirm(1))
		if !errors.As(err, &ce) || ce.Field != "WithReplicaConfirm" || !strings.Contains(ce.Reason, nodes[0].Name()) {
			t.Errorf("New with WithReplicaConfirm over Nodes that route by key or do not declare OneConnection (Traits %+v) = %v; want a ConfigError on WithReplicaConfirm naming %s", tr, err, nodes[0].Name())
		}
		return
	}
	r := newRedlock(t, nodes, redlock.WithReplicaConfirm(1))
	if _, err := r.TryLock(context.Background(), key(t)); !errors.Is(err, redlock.ErrNotReplicated) {
		t.Errorf("TryLock asking one replica of masters that have none = %v; want ErrNotReplicated", err)
	}
}

// subscribe: a Node that subscribes delivers what is published on its
// channel, and nothing once Close returned.
func (k *kit) subscribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := k.a.Node(t, k.addrs[2])
	ch := key(t)
	var mu sync.Mutex
	var got []string
	sub, err := n.Subscribe(ctx, ch, func(m redlock.Message) {
		if m.Resubscribed {
			return
		}
		mu.Lock()
		got = append(got, m.Payload)
		mu.Unlock()
	})
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("the Node delivers no wake-ups: %v", err)
	}
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	pub := k.a.Node(t, k.addrs[2])
	exec(pub, 5*time.Second, cmd(0, "publish", ch, "one"), cmd(0, "publish", ch, "two"))
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(end) {
			break
		}
	}
	if err := sub.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	mu.Lock()
	if strings.Join(got, ",") != "one,two" {
		t.Errorf("delivered %q; want one, two", got)
	}
	got = nil
	mu.Unlock()
	exec(pub, 5*time.Second, cmd(0, "publish", ch, "three"))
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Errorf("delivered %q after Close", got)
	}
}

// cluster: locks of every key shape on a Redis Cluster master (with a hash
// tag, without, with a '}' but no tag), and the Node declares RouteByKey.
func (k *kit) cluster(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{})
	n := k.a.ClusterNode(t, rc.Addrs())
	if got := n.Traits().Routing; got != redlock.RouteByKey {
		t.Errorf("a cluster Node's Traits().Routing = %v; want RouteByKey", got)
	}
	if n.Traits().OneConnection {
		t.Error("a cluster Node declares Traits.OneConnection: a Node that sends each command to the shard of its key cannot promise it")
	}
	base := key(t)
	lockKinds(t, []redlock.Node{n}, []string{"{" + base + "}:a", base, base + "}x", "a{}" + base})
	t.Run("shard channels", func(t *testing.T) { k.shardChannels(t, rc) })
	t.Run("failover", k.failover)
}

// keySlot asks the cluster behind n for key's hash slot.
func keySlot(t *testing.T, n redlock.Node, key string) int {
	t.Helper()
	c := cmd(0, "cluster", "keyslot", key)
	exec(n, 5*time.Second, c)
	slot, ok := c.Reply.(int64)
	if c.Err != nil || !ok {
		t.Fatalf("CLUSTER KEYSLOT %s = %#v, %v", key, c.Reply, c.Err)
	}
	return int(slot)
}

// shardChannels: a cluster Node that declares Traits.ShardChannels
// delivers what a script SPUBLISHes on a [redlock.ShardChannel] (counted
// as one receiver, on the shard that runs the script), follows the
// channel's slot when it moves to another shard (Resubscribed, then
// delivering there), and a waiting Lock call is handed the key at once,
// on keys of every shard. A Node that does not declare it is skipped,
// saying so: its waiting calls take keys by their backoff.
func (k *kit) shardChannels(t *testing.T, rc *redistest.RedisCluster) {
	n := k.a.ClusterNode(t, rc.Addrs())
	if !n.Traits().ShardChannels {
		t.Skip("the cluster Node does not declare Traits.ShardChannels: no wake-ups on cluster masters, waiting calls take keys by their backoff")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ky := key(t)
	ch := redlock.ShardChannel("redlocktest:probe", ky)
	var mu sync.Mutex
	var got []string
	resubscribed := 0
	sub, err := n.Subscribe(ctx, ch, func(m redlock.Message) {
		mu.Lock()
		defer mu.Unlock()
		if m.Resubscribed {
			resubscribed++
			return
		}
		got = append(got, m.Payload)
	})
	if err != nil {
		t.Fatalf("Subscribe(%q) on a Node that declares ShardChannels: %v", ch, err)
	}
	defer sub.Close()
	await := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(end) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("after 5 s: %s; delivered %q, Resubscribed %d times", what, got, resubscribed)
			}
		}
	}
	spublish := func(payload string) {
		t.Helper()
		c := eval("return redis.call('spublish', ARGV[1], ARGV[2])", []string{ky}, ch, payload)
		exec(n, 5*time.Second, c)
		if c.Err != nil || c.Reply != int64(1) {
			t.Fatalf("SPUBLISH %q from a script on the key's shard = %#v, %v; want 1 receiver, the subscription", payload, c.Reply, c.Err)
		}
	}
	spublish("one")
	await("want the SPUBLISHed message delivered", func() bool { return len(got) == 1 && got[0] == "one" })
	slot := keySlot(t, n, ky)
	from, err := rc.ShardOfSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.MoveSlot(ctx, slot, from, (from+1)%len(rc.Shards)); err != nil {
		t.Fatal(err)
	}
	await("want Resubscribed once the channel's slot moved to another shard", func() bool { return resubscribed > 0 })
	spublish("two")
	await("want a message SPUBLISHed on the slot's new shard delivered", func() bool { return len(got) == 2 && got[1] == "two" })

	holder := newRedlock(t, []redlock.Node{n})
	waiter := newRedlock(t, []redlock.Node{k.a.ClusterNode(t, rc.Addrs())}, redlock.WithBackoff(5*time.Second, 5*time.Second))
	shards := map[int]bool{}
	for i := 0; len(shards) < len(rc.Shards) && i < 1000; i++ {
		ky := fmt.Sprintf("%s:%d", key(t), i)
		shard, err := rc.ShardOfSlot(ctx, keySlot(t, n, ky))
		if err != nil {
			t.Fatal(err)
		}
		if shards[shard] {
			continue
		}
		shards[shard] = true
		l, err := holder.Lock(ctx, ky)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan *redlock.Lock, 1)
		go func() {
			w, err := waiter.Lock(ctx, ky)
			if err != nil {
				t.Errorf("the waiting call for %q (shard %d): %v", ky, shard, err)
			}
			waited <- w
		}()
		time.Sleep(300 * time.Millisecond) // the waiter's first attempt failed and queued it
		released := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-waited
		if w == nil {
			t.FailNow()
		}
		took := time.Since(released)
		t.Logf("key on shard %d: the waiting call had it %v after the Unlock", shard, took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("key on shard %d: the waiting call had it %v after the Unlock; want a hand-off, far below its 5 s backoff", shard, took.Round(time.Millisecond))
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
