package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

// replyFor makes c's reply what a master answers when q's reply is what q
// holds (OK, Fence, Woke, Err): the inverse of decode, for test Nodes that
// answer for a master or change what it answered.
func replyFor(q *request, c *Command) {
	c.Reply, c.Err = nil, q.Err
	if q.Err != nil {
		return
	}
	switch {
	case q.Op == reqAcquireFenced:
		if q.OK {
			c.Reply = int64(q.Fence)
		} else {
			c.Reply = int64(0)
		}
	case q.Op == reqRelease:
		n := int64(0)
		if q.OK {
			n |= 1
		}
		if q.Woke {
			n |= 2
		}
		c.Reply = n
	case q.Op == reqAcquire && q.Owner == "" && !gated(q):
		if q.OK {
			c.Reply = "OK"
		}
	default:
		c.Reply = bit(q.OK)
	}
}

// TestNodeSendsWhatTheCommandSays: a Node wrapper may change the commands
// it carries (here it puts every key under a tenant's prefix, using
// Command.Key and Keys): the go-redis Node sends each command as it now
// stands, and the lock works under the prefix. A request of an unknown Op
// is not sent.
func TestNodeSendsWhatTheCommandSays(t *testing.T) {
	cs := clients(t, masters.Addrs()[:1])
	inner := NewNode(cs[0])
	prefixed := NodeFunc(inner.Name(), func(ctx context.Context, c *Command) {
		for i := c.Key; i < c.Key+c.Keys; i++ {
			c.Args[i] = "tenant:" + c.Args[i].(string)
		}
		inner.Exec(ctx, []*Command{c})
	})
	r := newRedlock(t, []Node{prefixed})
	key := testKey(t)
	ctx := context.Background()
	for _, opts := range [][]Option{nil, {WithFencing()}} {
		l, err := r.TryLock(ctx, key, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if v := cs[0].Get(ctx, "tenant:"+key).Val(); v != l.Value() {
			t.Errorf("tenant:%s holds %q, want the lock's value %q", key, v, l.Value())
		}
		if n := cs[0].Exists(ctx, key).Val(); n != 0 {
			t.Errorf("the unprefixed key %s was set", key)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := cs[0].Exists(ctx, "tenant:"+key).Val(); n != 0 {
			t.Errorf("Unlock left tenant:%s", key)
		}
	}
	if n := cs[0].Exists(ctx, "tenant:"+FenceKey(key)).Val(); n != 1 {
		t.Errorf("the fenced lock's counter is not under the prefix")
	}

	before := cs[0].Info(ctx, "stats").Val()
	q := &request{Op: reqKind(99), Key: key}
	execRequests(ctx, inner, q)
	if q.Err == nil || q.OK || !strings.Contains(q.Err.Error(), "unknown request") {
		t.Errorf("unknown Op: OK %v, err %v; want an error saying so", q.OK, q.Err)
	}
	if after := cs[0].Info(ctx, "stats").Val(); statLine(after, "total_commands_processed") != statLine(before, "total_commands_processed")+1 {
		t.Errorf("the unknown request reached the master (commands before %d, after %d; one is the INFO)",
			statLine(before, "total_commands_processed"), statLine(after, "total_commands_processed"))
	}
}

// statLine reads an integer field of an INFO reply.
func statLine(info, field string) int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n := 0
			for _, c := range v {
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return -1
}

// wrappedNode is a Node that wraps another as the Node doc tells a wrapper
// to: it embeds the inner Node and overrides Exec alone, here to count the
// commands it carries.
type wrappedNode struct {
	Node
	reqs atomic.Int64
}

func (n *wrappedNode) Exec(ctx context.Context, cmds []*Command) {
	n.reqs.Add(int64(len(cmds)))
	n.Node.Exec(ctx, cmds)
}

func wrapCounting(nodes []Node) []Node {
	out := make([]Node, len(nodes))
	for i, n := range nodes {
		out[i] = &wrappedNode{Node: n}
	}
	return out
}

// TestWrappedNodeKeepsFeatures: a Node that wraps NewNode's keeps every
// feature (issue 33, item 2): hand-offs reach a waiting call through it,
// its lane runs on the caller, the restart gate and replica confirmation
// hold through it, a wrapped Ring is refused replica confirmation as an
// unwrapped one is, and two wrapped Sentinel clients are told apart by the
// same hint. Before the Node contract declared Traits and Subscribe, the
// core found these by type assertions on NewNode's concrete type, and a
// wrapper lost them without an error.
func TestWrappedNodeKeepsFeatures(t *testing.T) {
	ctx := context.Background()
	t.Run("hand-off", func(t *testing.T) {
		admin := clients(t, masters.Addrs())
		holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
		wrapped := wrapCounting(nodesOf(t, clients(t, masters.Addrs())))
		// A long backoff: only a hand-off gets the waiter the key soon.
		waiter := newRedlock(t, wrapped, WithBackoff(10*time.Second, 10*time.Second))
		key := testKey(t)
		l := mustLock(t, holder, key)
		settle(holder)
		got := lockAsync(t, ctx, waiter, key)
		waitRegistered(t, admin, key, 1)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		o := obtainedWithin(t, admin, key, got, 3*time.Second, "the waiter behind wrapped Nodes was not handed the key within 3 s of the release (its backoff is 10 s)")
		if err := o.Lock.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := wrapped[0].(*wrappedNode).reqs.Load(); n == 0 {
			t.Error("the wrapper carried no request")
		}
	})
	t.Run("lane", func(t *testing.T) {
		n := &wrappedNode{Node: NewNode(clients(t, masters.Addrs()[:1])[0])}
		if !newLane(n).callerRuns {
			t.Error("the lane of a wrapped Node whose client keeps deadlines does not run on its caller")
		}
	})
	t.Run("gate", func(t *testing.T) {
		const gate = 2 * time.Second
		c := redistest.StartT(t, 1, redistest.Options{})
		r := newRedlock(t, wrapCounting([]Node{NewNode(gateClients(t, c)[0])}), WithTTL(time.Second), WithRestartGate(gate))
		if _, err := r.TryLock(ctx, testKey(t)); gateRefusals(err) != 1 {
			t.Errorf("TryLock through a wrapper on a master started just now = %v; want the restart gate's refusal", err)
		}
	})
	t.Run("replicas", func(t *testing.T) {
		m := startReplicated(t, 1)[0]
		r := newRedlock(t, wrapCounting(nodesOf(t, []*redis.Client{m.client})), WithReplicaConfirm(1))
		m.link.Blackhole()
		defer m.link.Heal()
		if _, err := r.TryLock(ctx, testKey(t)); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("TryLock through a wrapper with the replication link cut = %v; want ErrNotReplicated", err)
		}
	})
	t.Run("ring", func(t *testing.T) {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": masters.Addrs()[0], "b": masters.Addrs()[1]}})
		defer ring.Close()
		_, err := New(wrapCounting([]Node{NewNode(ring)}), WithReplicaConfirm(1))
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("New over a wrapped Ring with WithReplicaConfirm = %v; want a ConfigError", err)
		}
	})
	t.Run("name hint", func(t *testing.T) {
		var nodes []Node
		for range 2 {
			c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
			defer c.Close()
			nodes = append(nodes, NewNode(c))
		}
		_, err := New(wrapCounting(nodes))
		if err == nil || !strings.Contains(err.Error(), "NewFailoverNode") {
			t.Errorf("New over two wrapped Sentinel clients = %v; want the hint to use NewFailoverNode", err)
		}
	})
}

// gateRefusals counts the masters whose vote err says the restart gate
// refused.
func gateRefusals(err error) int {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return 0
	}
	n := 0
	for _, e := range qe.Errs {
		if errors.Is(e, ErrRestartGate) {
			n++
		}
	}
	return n
}

// gateClients returns a go-redis client per server of c, closed at the end.
func gateClients(t *testing.T, c *redistest.Cluster) []*redis.Client {
	cs := make([]*redis.Client, len(c.Servers))
	for i, s := range c.Servers {
		cs[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { cs[i].Close() })
	}
	return cs
}

// TestRestartGateKeepsOneHolder is the unsafe schedule of the chaos scenario
// restart-no-persistence-immediate, on three real masters: A holds the key
// on a bare majority (masters 0 and 1), master 0 restarts empty at once,
// and B asks masters 0 and 2. Without the gate B gets a quorum while A's
// lock is valid: two holders. With the gate master 0's vote does not count,
// for plain, fenced and owned attempts alike, until it has been up for the
// gate; then B gets the lock.
func TestRestartGateKeepsOneHolder(t *testing.T) {
	const ttl, gate = 2 * time.Second, 3 * time.Second
	for _, gated := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[gated], func(t *testing.T) {
			c := redistest.StartT(t, 3, redistest.Options{})
			cs := gateClients(t, c)
			nodes := []Node{NewNode(cs[0]), NewNode(cs[1]), NewNode(cs[2])}
			opts := []Option{WithTTL(ttl)}
			if gated {
				opts = append(opts, WithRestartGate(gate))
				time.Sleep(gate + time.Second) // the fresh masters' own gate (uptime counts in whole seconds)
			}
			a, b := newRedlock(t, nodes, opts...), newRedlock(t, nodes, opts...)
			ctx := context.Background()
			key := testKey(t)
			la := onBareMajority(t, a, cs, key)
			if err := c.Servers[0].Restart(false); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			lb, err := b.TryLock(ctx, key)
			if !gated {
				if err != nil {
					t.Fatalf("without the gate B's TryLock = %v; want the lock (the unsafe schedule did not play out)", err)
				}
				if time.Now().Before(la.Until()) {
					t.Logf("two holders without the gate: A until %v, B until %v", la.Until().Format(time.StampMilli), lb.Until().Format(time.StampMilli))
				} else {
					t.Fatalf("A's lock had ended before B's: the schedule shows nothing")
				}
				return
			}
			if !errors.Is(err, ErrNotObtained) || gateRefusals(err) != 1 {
				t.Fatalf("B's TryLock right after master 0 restarted = %v, %v; want ErrNotObtained with master 0 refused by the restart gate", lb, err)
			}
			if !strings.Contains(err.Error(), "restart gate") || !strings.Contains(err.Error(), "votes count in") {
				t.Errorf("the error does not say why: %v", err)
			}
			for _, o := range [][]Option{{WithFencing()}, {WithOwner("job")}} {
				if l, err := b.TryLock(ctx, key, o...); gateRefusals(err) != 1 {
					t.Errorf("B's TryLock %v right after the restart = %v, %v; want master 0 refused by the restart gate", o, l, err)
				}
			}
			// Nothing is left of B's attempts: the gated vote's SET was rolled back.
			settle(b)
			if n, err := cs[0].Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("master 0 keeps B's gated key: EXISTS = %d, %v", n, err)
			}
			// Once master 0 has been up for the gate (and A's lock expired), B gets it.
			l, err := b.Lock(ctx, key)
			if err != nil {
				t.Fatalf("B's Lock after the gate: %v", err)
			}
			if !time.Now().After(la.Until()) {
				t.Errorf("B got the lock %v after master 0 restarted, before A's lock ended", time.Since(restarted))
			}
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRestartGateCases pins down what the gate does in each case
// docs/internals.md lists: a master up for less than the gate refuses
// every vote (acquire, Extend) with an error that says when its votes
// count; one up for longer votes; a restart with its data (AOF) is a
// restart like any other; FLUSHALL does not close the gate of a master up for
// longer (it is not a restart); a TTL longer than the gate is refused.
func TestRestartGateCases(t *testing.T) {
	const gate = 2 * time.Second
	c := redistest.StartT(t, 1, redistest.Options{AppendOnly: true})
	cs := gateClients(t, c)
	r := newRedlock(t, []Node{NewNode(cs[0])}, WithTTL(time.Second), WithRestartGate(gate))
	ctx := context.Background()

	if _, err := r.TryLock(ctx, testKey(t)); gateRefusals(err) != 1 {
		t.Fatalf("TryLock on a master started just now = %v; want the restart gate's refusal", err)
	}
	time.Sleep(gate + time.Second)
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock on a master up longer than the gate: %v", err)
	}
	if err := l.Extend(ctx, 3*time.Second); err == nil || !strings.Contains(err.Error(), "WithRestartGate") {
		t.Errorf("Extend to a TTL longer than the gate = %v; want a ConfigError", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := New([]Node{NewNode(cs[0])}, WithRestartGate(-time.Second)); err == nil {
		t.Error("New with a negative gate: no error")
	}

	// A restart with its data (appendfsync always) closes the gate as one
	// without: the process is new, whatever it restored (an AOF may lose
	// the last second, an RDB snapshot everything after it).
	key := testKey(t)
	l, err = r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Servers[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); gateRefusals(err) != 1 {
		t.Errorf("Extend right after a restart with the data = %v; want the restart gate's refusal", err)
	}
	if _, err := r.TryLock(ctx, testKey(t)); gateRefusals(err) != 1 {
		t.Errorf("TryLock of a new key right after the restart = %v; want the restart gate's refusal", err)
	}
	time.Sleep(gate + time.Second)
	if err := cs[0].FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := r.TryLock(ctx, key); err != nil {
		t.Errorf("TryLock after FLUSHALL on a master up longer than the gate = %v; want the lock (FLUSHALL is not a restart)", err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestRestartGateClusterShard: on a master that is a Redis Cluster, the
// gate is each shard's: a shard that restarted refuses votes on its keys,
// and the other shards' keys vote.
func TestRestartGateClusterShard(t *testing.T) {
	const gate = 5 * time.Second // longer than a restarted shard is CLUSTERDOWN (about 2 s)
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{Args: []string{"--cluster-require-full-coverage", "no"}})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	r := newRedlock(t, []Node{NewNode(cc)}, WithTTL(time.Second), WithRestartGate(gate), WithNodeTimeout(time.Second))
	ctx := context.Background()
	time.Sleep(gate + time.Second)
	// A key on shard 0 and one on shard 2 (shard k has slots [k*16384/3, (k+1)*16384/3)).
	var on0, on2 string
	for i := 0; on0 == "" || on2 == ""; i++ {
		k := testKey(t)
		switch s := int(keySlot(k)) * 3 / 16384; {
		case s == 0 && on0 == "":
			on0 = k
		case s == 2 && on2 == "":
			on2 = k
		}
	}
	// Without persistence the shard comes back empty, its cluster
	// configuration (nodes.conf) kept: wait until it answers for its keys.
	if err := rc.Shards[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err = r.TryLock(ctx, on0); gateRefusals(err) == 1 {
			break
		}
	}
	if gateRefusals(err) != 1 {
		t.Fatalf("TryLock of a key on the restarted shard = %v; want the restart gate's refusal", err)
	}
	l, err := r.TryLock(ctx, on2)
	if err != nil {
		t.Fatalf("TryLock of a key on a shard that did not restart: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestRestartGateNoHandOffFromGatedMaster: a hand-off is a vote too. Five
// masters; A holds the key on masters 0, 1 and 2; master 0 restarts empty.
// Two waiting calls with the restart gate on contend: the rollback of one
// frees its own value on masters 0, 3 and 4, and where the masters hand the
// key on, the other would count three hand-offs, master 0's among them,
// while A's lock is valid. With the gate on no call holds the key until A's
// lock has ended.
func TestRestartGateNoHandOffFromGatedMaster(t *testing.T) {
	const ttl = 3 * time.Second
	c := redistest.StartT(t, 5, redistest.Options{})
	cs := gateClients(t, c)
	nodes := make([]Node, len(cs))
	for i, rc := range cs {
		nodes[i] = NewNode(rc)
	}
	time.Sleep(ttl + time.Second) // the fresh masters' own gate
	opts := []Option{WithTTL(ttl), WithRestartGate(ttl), WithBackoff(time.Millisecond, 20*time.Millisecond)}
	a := newRedlock(t, nodes, opts...)
	ctx := context.Background()
	key := testKey(t)
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	settle(a)
	for _, i := range []int{3, 4} {
		if err := cs[i].Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 2)
	wctx, cancel := context.WithDeadline(ctx, la.Until())
	defer cancel()
	for range 2 {
		w := newRedlock(t, nodes, opts...)
		go func() {
			if l, err := w.Lock(wctx, key); err == nil {
				got <- time.Now()
				_ = l.Unlock(ctx)
			} else {
				got <- time.Time{}
			}
		}()
	}
	for range 2 {
		if at := <-got; !at.IsZero() && at.Before(la.Until()) {
			t.Errorf("a waiting call got the lock %v before A's lock ended", la.Until().Sub(at))
		}
	}
}

// TestRestartGatePersistence is the review's schedule, under each
// persistence mode a master can restart with: three masters, gate = TTL.
// Every master has counted gated votes before (a gate that cached the
// start next to the key, as the first one did, has that cache in the
// snapshot), master 0 saved a snapshot (RDB) or logs every
// write (AOF), A then holds the key on a bare majority (masters 0 and 1),
// and master 0 is SIGKILLed and restarts with what it persisted. Whatever
// it restored, its process started less than the gate ago: its vote must
// not count, so B cannot take the key while A's lock is valid.
func TestRestartGatePersistence(t *testing.T) {
	const gate = 4 * time.Second // A's lock must outlive a restart on a loaded machine
	for _, mode := range []string{"none", "rdb", "aof"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartT(t, 3, redistest.Options{AppendOnly: mode == "aof"})
			cs := gateClients(t, c)
			nodes := []Node{NewNode(cs[0]), NewNode(cs[1]), NewNode(cs[2])}
			opts := []Option{WithTTL(gate), WithRestartGate(gate)}
			a, b := newRedlock(t, nodes, opts...), newRedlock(t, nodes, opts...)
			ctx := context.Background()
			key := testKey(t)
			// The fresh masters' own gate (uptime counts in whole seconds,
			// read up to a second high).
			time.Sleep(gate + 2*time.Second)
			lb, err := b.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("B before the restart: %v", err)
			}
			if err := lb.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			settle(b) // every master's release is in before the snapshot
			if mode == "rdb" {
				if err := cs[0].Save(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			la := onBareMajority(t, a, cs, key)
			if err := c.Servers[0].Restart(true); err != nil {
				t.Fatal(err)
			}
			if mode != "aof" {
				if n, err := cs[0].Exists(ctx, key).Result(); err != nil || n != 0 {
					t.Fatalf("master 0 came back with A's key (EXISTS = %d, %v): the schedule does not lose it", n, err)
				}
			}
			_, err = b.TryLock(ctx, key)
			if err == nil && time.Now().Before(la.Until()) {
				t.Fatalf("B took the key %v before A's lock ends: two holders (master 0 restarted from %s counted)",
					time.Until(la.Until()).Round(time.Millisecond), mode)
			}
			if err == nil {
				t.Fatalf("A's lock ended before B's TryLock: the schedule did not play out (a restart slower than %v)", gate)
			}
			if n := gateRefusals(err); n != 1 {
				t.Errorf("B's TryLock = %v; want master 0 refused by the restart gate (refusals: %d)", err, n)
			}
		})
	}
}

// TestRestartGateRounding: INFO's uptime_in_seconds is the difference of
// two whole seconds, so it reads up to a second high. A master started
// just before a second turns reads 1 s of uptime within milliseconds; the
// gate must still not open before the process has been up the gate.
func TestRestartGateRounding(t *testing.T) {
	const gate = 2 * time.Second
	// Start the master 30 ms before a second turns, by the wall clock (Redis
	// counts its uptime in wall-clock seconds).
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second - 30*time.Millisecond).Sub(now))
	launched := time.Now()
	s := redistest.StartServerT(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	gateOpensAfter(t, c, launched, gate)
}

// gateOpensAfter locks through c with the restart gate every 10 ms until
// the lock comes, and fails when it comes before the master launched at
// launched has been up gate, when a refusal is not the gate's, or when
// none came 3 s after the gate.
func gateOpensAfter(t *testing.T, c *redis.Client, launched time.Time, gate time.Duration) {
	t.Helper()
	r := newRedlock(t, []Node{NewNode(c)}, WithTTL(time.Second), WithRestartGate(gate))
	ctx := context.Background()
	for end := launched.Add(gate + 3*time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		l, err := r.TryLock(ctx, testKey(t))
		if err == nil {
			if up := time.Since(launched); up < gate {
				t.Fatalf("the gate opened %v after the master was launched; want no earlier than %v", up.Round(time.Millisecond), gate)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			return
		}
		if gateRefusals(err) != 1 {
			t.Fatalf("TryLock = %v; want the restart gate's refusal or the lock", err)
		}
	}
	t.Fatalf("the gate did not open within %v", gate+3*time.Second)
}

// onBareMajority has a take key on three masters and lose it on master 2
// (its acquire there lost): a holds masters 0 and 1, a bare majority.
func onBareMajority(t *testing.T, a *Redlock, cs []*redis.Client, key string) *Lock {
	t.Helper()
	ctx := context.Background()
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	settle(a)
	if err := cs[2].Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestGatedVoteIsOneCommand: a gated vote is one script on the master, the
// gate's check and the vote together (issue 33, item 3), for every kind of
// vote: a closed gate answers for the vote and writes nothing (no lock key,
// no fence counter, no hold), and an open one lets the vote run in the
// same script. Counted on the client (the master's commandstats count the
// commands the scripts call too): each attempt sends the master one command
// for its vote and one for its release (a rollback when the vote failed).
func TestGatedVoteIsOneCommand(t *testing.T) {
	const gate = time.Second
	c := redistest.StartT(t, 1, redistest.Options{})
	cs := gateClients(t, c)
	rc := gateClients(t, c)[0]
	sent := []*sentCounter{{Name: "set"}, {Name: "eval"}, {Name: "evalsha"}}
	for _, h := range sent {
		rc.AddHook(h)
	}
	r := newRedlock(t, []Node{NewNode(rc)}, WithTTL(gate), WithRestartGate(gate))
	ctx := context.Background()
	calls := func() int64 {
		var n int64
		for _, h := range sent {
			n += h.N.Load()
		}
		return n
	}
	kinds := []struct {
		name string
		opts []Option
	}{
		{"plain", nil},
		{"fenced", []Option{WithFencing()}},
		{"owned", []Option{WithOwner("job")}},
	}
	for _, k := range kinds {
		key := testKey(t)
		before := calls()
		if _, err := r.TryLock(ctx, key, k.opts...); gateRefusals(err) != 1 {
			t.Fatalf("%s: TryLock behind a closed gate = %v; want the gate's refusal", k.name, err)
		}
		settle(r) // the rollback
		if n := calls() - before; n != 2 {
			t.Errorf("%s, gate closed: the master saw %d commands for the vote and its rollback; want 2 (one script for the gated vote)", k.name, n)
		}
		if n, err := cs[0].Exists(ctx, key, FenceKey(key)).Result(); err != nil || n != 0 {
			t.Errorf("%s, gate closed: %d of the lock key and its fence counter exist (%v); want none: a closed gate writes nothing", k.name, n, err)
		}
	}
	time.Sleep(2*gate + 100*time.Millisecond) // uptime_in_seconds reads up to 1 s high, and the gate counts 1 s less
	for _, k := range kinds {
		before := calls()
		l, err := r.TryLock(ctx, testKey(t), k.opts...)
		if err != nil {
			t.Fatalf("%s: TryLock behind an open gate: %v", k.name, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		settle(r)
		want := int64(2)
		if k.name == "fenced" {
			want = 3 // round 2 raises the counter on the quorum
		}
		if n := calls() - before; n != want {
			t.Errorf("%s, gate open: the master saw %d commands for Lock and Unlock; want %d", k.name, n, want)
		}
	}
}

// TestReplicaConfirm: three masters, each a primary with one replica. With
// WithReplicaConfirm(1) a vote counts only once the master's replica
// confirmed it: with the replicas of two masters frozen (SIGSTOP) the
// acquire fails within the node timeout, both masters failed with
// ErrNotReplicated, and nothing is left on the primaries; without the
// option the same acquire succeeds on the primaries' word alone. With the
// replicas running, locks, Extend and fenced locks are confirmed.
func TestReplicaConfirm(t *testing.T) {
	var nodes []Node
	var primaries []*redis.Client
	var replicas []*redistest.Server
	for range 3 {
		// hz 100: the master ends a WAIT whose timeout passed within 10 ms
		// (100 ms at the default hz 10), inside the node timeout.
		p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
		host, port, _ := net.SplitHostPort(p.Addr())
		r := redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		primaries, replicas, nodes = append(primaries, c), append(replicas, r), append(nodes, NewNode(c))
	}
	ctx := context.Background()
	// The replicas are in sync: WAIT 1 answers 1 on every primary.
	for i, c := range primaries {
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if n, err := c.Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the replica of master %d is not in sync after 10 s", i)
			}
		}
	}
	const nodeTimeout = 2 * time.Second // WAIT gets half: slack for a loaded machine
	confirm := newRedlock(t, nodes, WithTTL(5*time.Second), WithReplicaConfirm(1), WithNodeTimeout(nodeTimeout))
	plain := newRedlock(t, nodes, WithTTL(5*time.Second), WithNodeTimeout(nodeTimeout))

	for _, opts := range [][]Option{nil, {WithFencing()}, {WithOwner("job")}} {
		l, err := confirm.TryLock(ctx, testKey(t), opts...)
		if err != nil {
			t.Fatalf("TryLock %v with every replica confirming: %v", opts, err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Errorf("Extend %v with every replica confirming: %v", opts, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}

	for _, r := range replicas[:2] {
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		defer r.Resume()
	}
	key := testKey(t)
	start := time.Now()
	_, err := confirm.TryLock(ctx, key)
	took := time.Since(start)
	// Both masters fail: unconfirmed, or (rarely, on a loaded machine: about
	// 1 run in 6 here with load 6-8) no reply by the node timeout.
	var qe *QuorumError
	n := 0
	if errors.As(err, &qe) {
		for _, e := range qe.Errs {
			if errors.Is(e, ErrNotReplicated) {
				n++
			}
		}
	}
	if !errors.Is(err, ErrNotObtained) || qe == nil || qe.Failed != 2 || n < 1 {
		t.Fatalf("TryLock with two masters' replicas frozen = %v; want ErrNotObtained with 2 masters failed, not confirmed", err)
	}
	if took > nodeTimeout+500*time.Millisecond {
		t.Errorf("TryLock took %v with the node timeout %v: WAIT's timeout did not keep to it", took, nodeTimeout)
	}
	t.Logf("with two replicas frozen: %v (after %v)", err, took.Round(time.Millisecond))
	settle(confirm)
	for i, c := range primaries {
		if ex, err := c.Exists(ctx, key).Result(); err != nil || ex != 0 {
			t.Errorf("primary %d keeps the failed acquire's key: EXISTS = %d, %v", i, ex, err)
		}
	}
	l, err := plain.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("without WithReplicaConfirm the same TryLock = %v; want the lock on the primaries' word", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
	if _, err := New(nodes, WithReplicaConfirm(-1)); err == nil {
		t.Error("New with WithReplicaConfirm(-1): no error")
	}
}

// replicatedMaster is a primary with one replica that replicates through a
// fault proxy (replica → link → primary). The link's latency delays what
// the replica sends its primary — its REPLCONF ACKs — so every WAIT on the
// primary takes that much longer; Blackhole cuts the replication link.
type replicatedMaster struct {
	primary *redistest.Server
	replica *redistest.Server
	link    *faultproxy.Proxy
	client  *redis.Client // to the primary, as clients() makes them
}

// startReplicated starts n replicated masters and waits until each replica
// is in sync (WAIT 1 answers 1).
func startReplicated(t *testing.T, n int) []*replicatedMaster {
	t.Helper()
	ms := make([]*replicatedMaster, n)
	for i := range ms {
		// hz 100: a WAIT whose timeout passed ends within 10 ms (100 ms at
		// the default hz 10), inside the node timeout.
		p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
		link, err := faultproxy.New(p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Close() })
		host, port, _ := net.SplitHostPort(link.Addr())
		r := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--replicaof", host, port}})
		ms[i] = &replicatedMaster{primary: p, replica: r, link: link, client: clients(t, []string{p.Addr()})[0]}
	}
	for i, m := range ms {
		m.waitSynced(t, fmt.Sprintf("master %d", i))
	}
	return ms
}

// waitSynced waits until m's replica acknowledges writes: a write, then
// WAIT 1 on the same connection, until the WAIT answers 1. A WAIT on a
// connection that wrote nothing waits for no offset, and counts a replica
// the primary has put online after a diskless transfer while the replica
// is still loading the snapshot (and fsyncing it, on a slow disk): it
// acknowledges nothing until it has loaded, which took over 650 ms once in
// CI, and the WAITs of the test that followed answered 0.
func (m *replicatedMaster) waitSynced(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	conn := m.client.Conn()
	defer conn.Close()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := conn.Set(ctx, "redlock-test:synced", name, time.Minute).Err(); err == nil {
			if n, err := conn.Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
				return
			}
		}
		if time.Now().After(end) {
			t.Fatalf("the replica of %s does not acknowledge writes after 20 s", name)
		}
	}
}

// replOffset is m's primary's master_repl_offset: it advances with every
// write the primary sends its replicas.
func (m *replicatedMaster) replOffset(t *testing.T) int64 {
	t.Helper()
	info, err := m.client.InfoMap(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(info["Replication"]["master_repl_offset"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func replicatedNodes(t *testing.T, ms []*replicatedMaster) []Node {
	t.Helper()
	cs := make([]*redis.Client, len(ms))
	for i, m := range ms {
		cs[i] = m.client
	}
	return nodesOf(t, cs)
}

func setReplicationDelay(ms []*replicatedMaster, d time.Duration) {
	for _, m := range ms {
		m.link.SetLatency(d)
	}
}

// TestReplicaConfirmConcurrent: 200 TryLocks at once on distinct keys, with
// WithReplicaConfirm(1) and a node timeout of 250 ms, over 3 masters whose
// replication links add 0.5–2 ms. The lane batches the requests that queue
// at a master into one pipeline, so the batch's votes must be confirmed
// together, not one replica round trip after another (issue 31, item 4:
// 199 of 200 failed with a WAIT after each vote).
func TestReplicaConfirmConcurrent(t *testing.T) {
	ms := startReplicated(t, 3)
	nodes := replicatedNodes(t, ms)
	const n = 200
	for _, delay := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond} {
		t.Run(fmt.Sprintf("delay=%v", delay), func(t *testing.T) {
			setReplicationDelay(ms, delay)
			defer setReplicationDelay(ms, 0)
			r := newRedlock(t, nodes, WithTTL(10*time.Second), WithReplicaConfirm(1), WithNodeTimeout(250*time.Millisecond))
			locks := make([]*Lock, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				key := testKey(t)
				wg.Go(func() {
					<-start
					locks[i], errs[i] = r.TryLock(context.Background(), key)
				})
			}
			begin := time.Now()
			close(start)
			wg.Wait()
			took := time.Since(begin)
			ok, notReplicated := 0, 0
			var first error
			for _, err := range errs {
				if err == nil {
					ok++
					continue
				}
				if first == nil {
					first = err
				}
				if errors.Is(err, ErrNotReplicated) {
					notReplicated++
				}
			}
			t.Logf("replication delay %v: %d of %d TryLocks succeeded (%d%%), %d failed with ErrNotReplicated among their masters' errors, in %v",
				delay, ok, n, ok*100/n, notReplicated, took.Round(time.Millisecond))
			if ok*100 < 95*n {
				t.Errorf("%d of %d TryLocks succeeded; want at least 95%%; the first failure: %v", ok, n, first)
			}
			for _, l := range locks {
				if l != nil {
					if err := l.Unlock(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
}

// TestReplicaConfirmRenewals: 1,000 auto-extended locks (TTL 1.5 s, renewed
// about every third of it) with WithReplicaConfirm(1) keep being renewed
// while the replication links add 2 ms: a renewal round sends up to 1,000
// extends to each master in one batch, confirmed together. None is lost.
//
// The node timeout is 500 ms: a round of 1,000 takes 120–140 ms here under
// -race on a loaded 2-core machine (the pipeline of 1,000 scripts; the WAIT
// is a few ms of it), and 250 ms lost every lock once when the machine was
// busier still. A WAIT per vote needs at least 1,000 × 2 ms per round.
func TestReplicaConfirmRenewals(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	ms := startReplicated(t, 3)
	r := newRedlock(t, replicatedNodes(t, ms), WithTTL(1500*time.Millisecond), WithReplicaConfirm(1), WithNodeTimeout(500*time.Millisecond))
	locks := holdMany(t, r, n) // without delay: the renewals are what is tested
	for _, l := range locks {
		l.Done()
	}
	const delay, hold = 2 * time.Millisecond, 3500 * time.Millisecond
	setReplicationDelay(ms, delay)
	time.Sleep(hold) // about ten renewal rounds
	round := forceRound(r)
	setReplicationDelay(ms, 0)
	var held []*Lock
	var first error
	for _, l := range locks {
		select {
		case <-l.Done():
			if first == nil {
				first = context.Cause(l.Context())
			}
		default:
			held = append(held, l)
		}
	}
	lost := n - len(held)
	t.Logf("replication delay %v for %v: %d of %d auto-extended locks lost; a renewal round of those held took %v", delay, hold, lost, n, round.Round(time.Millisecond))
	if lost > 0 {
		t.Errorf("%d of %d locks lost; want none; the first: %v", lost, n, first)
	}
	unlockAll(t, held)
}

// TestReplicaWaitPerBatch: the go-redis Node confirms a batch's votes with
// one WAIT after them: for the most replicas any vote asks for, with a
// timeout from the earliest vote deadline; each vote counts when the
// acknowledgements reach its own Replicas, a refused vote stays refused,
// and a release in the middle is not a vote. A single vote gets its WAIT
// too, and with the replication link cut every vote fails with
// ErrNotReplicated while the release still counts.
func TestReplicaWaitPerBatch(t *testing.T) {
	m := startReplicated(t, 1)[0]
	c := m.client
	node := NewNode(c)
	ctx := context.Background()
	waits := func() int64 {
		t.Helper()
		n, err := redistest.Calls(ctx, []*redis.Client{c}, "wait")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	key := func() string { return testKey(t) }
	taken := key()
	if err := c.Set(ctx, taken, "someone", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	mine := key()
	if err := c.Set(ctx, mine, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	exec := func(reqs []*request, soonest, latest time.Duration) time.Duration {
		t.Helper()
		now := time.Now()
		for _, q := range reqs {
			q.deadline = now.Add(latest)
		}
		reqs[0].deadline = now.Add(soonest)
		bctx, cancel := context.WithDeadline(ctx, now.Add(latest))
		defer cancel()
		before := waits()
		execRequests(bctx, node, reqs...)
		took := time.Since(now)
		if n := waits() - before; n != 1 {
			t.Errorf("a batch of %d requests sent %d WAITs; want 1", len(reqs), n)
		}
		return took
	}
	check := func(name string, q *request, ok bool, notReplicated bool) {
		t.Helper()
		if q.OK != ok || errors.Is(q.Err, ErrNotReplicated) != notReplicated || (!notReplicated && q.Err != nil) {
			t.Errorf("%s: OK %v, Err %v; want OK %v, ErrNotReplicated %v", name, q.OK, q.Err, ok, notReplicated)
		}
	}

	// One replica: the votes asking for 1 count, the one asking for 2 does
	// not; the WAIT 2 ends at half of the soonest deadline (300 ms), not of
	// the batch's (5 s).
	acquire := &request{Op: reqAcquire, Key: key(), Value: "a", TTL: time.Minute, Replicas: 1}
	release := &request{Op: reqRelease, Key: mine, Value: "v"}
	refused := &request{Op: reqAcquire, Key: taken, Value: "b", TTL: time.Minute, Replicas: 1}
	extend := &request{Op: reqExtend, Key: acquire.Key, Value: "a", TTL: time.Minute, Replicas: 2}
	fenced := &request{Op: reqAcquireFenced, Key: key(), Value: "c", TTL: time.Minute, Replicas: 1}
	took := exec([]*request{acquire, release, refused, extend, fenced}, 300*time.Millisecond, 5*time.Second)
	check("acquire, 1 replica", acquire, true, false)
	check("release", release, true, false)
	check("refused acquire", refused, false, false)
	check("extend, 2 replicas", extend, false, true)
	check("fenced acquire, 1 replica", fenced, true, false)
	if fenced.Fence == 0 {
		t.Error("fenced acquire: no token")
	}
	if took < 100*time.Millisecond || took > 2*time.Second {
		t.Errorf("the batch took %v; want about 150 ms, half of the soonest deadline", took)
	}

	// A single vote.
	single := &request{Op: reqAcquire, Key: key(), Value: "d", TTL: time.Minute, Replicas: 1}
	exec([]*request{single}, time.Second, time.Second)
	check("single acquire", single, true, false)

	// The link cut: no vote counts, the release does.
	m.link.Blackhole()
	defer m.link.Heal()
	a := &request{Op: reqAcquire, Key: key(), Value: "e", TTL: time.Minute, Replicas: 1}
	rel := &request{Op: reqRelease, Key: single.Key, Value: "d"}
	b := &request{Op: reqExtend, Key: fenced.Key, Value: "c", TTL: time.Minute, Replicas: 1}
	exec([]*request{a, rel, b}, 200*time.Millisecond, 200*time.Millisecond)
	check("acquire, link cut", a, false, true)
	check("release, link cut", rel, true, false)
	check("extend, link cut", b, false, true)
}

// TestReplicaConfirmFenceRound2: fence round 2 under replica confirmation
// counts only once the replica has round 1's write (issue 31, item 6). On a
// master whose replication link is cut, round 1 (the fenced acquire) lands
// on the primary alone; the connection is dropped; round 2, on a new
// connection, finds the counter already at the token. Its WAIT confirms
// only that connection's writes: a round 2 that wrote nothing would count,
// with the key and counter on the primary alone. Round 2 always writes the
// counter, so its WAIT waits for round 1's write too (one replication
// stream) and fails while the link is cut; once it is back, it counts. The
// same for an owned lock's fence step (hold.lua).
//
// The WAIT part needs Redis 7.2 or later (REDIS_SERVER=…): 7.0 stamps a
// connection's WAIT offset after every command, written or not, so there a
// round 2 that writes nothing is confirmed correctly too. What every version
// checks is that round 2 writes: master_repl_offset advances.
func TestReplicaConfirmFenceRound2(t *testing.T) {
	m := startReplicated(t, 1)[0]
	ctx := context.Background()
	exec := func(q *request) {
		t.Helper()
		// A connection of its own, closed after: the next round comes on
		// another one, as after a dropped connection.
		c := clients(t, []string{m.primary.Addr()})[0]
		defer c.Close()
		bctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		q.deadline, _ = bctx.Deadline()
		execRequests(bctx, NewNode(c), q)
	}
	for _, owner := range []string{"", "job"} {
		t.Run("owner="+owner, func(t *testing.T) {
			key := testKey(t)
			m.link.Blackhole()
			round1 := &request{Op: reqAcquireFenced, Key: key, Value: "v", TTL: time.Minute, Owner: owner}
			exec(round1)
			if !round1.OK || round1.Err != nil || round1.Fence == 0 {
				t.Fatalf("round 1: OK %v, Fence %d, Err %v", round1.OK, round1.Fence, round1.Err)
			}
			// Round 2 writes, though the counter is already at the token:
			// the master's replication offset advances (no WAIT here, whose
			// REPLCONF GETACK would advance it too).
			before := m.replOffset(t)
			plain := &request{Op: reqRaiseFence, Key: key, Value: "v", Token: round1.Fence, Owner: owner}
			exec(plain)
			if !plain.OK || plain.Err != nil {
				t.Fatalf("round 2 without confirmation: OK %v, Err %v", plain.OK, plain.Err)
			}
			if after := m.replOffset(t); after <= before {
				t.Errorf("round 2 with the counter at the token left master_repl_offset at %d: it wrote nothing, and a WAIT after it would not cover round 1's write", after)
			}
			round2 := &request{Op: reqRaiseFence, Key: key, Value: "v", Token: round1.Fence, Owner: owner, Replicas: 1}
			exec(round2)
			if round2.OK || !errors.Is(round2.Err, ErrNotReplicated) {
				t.Errorf("round 2 with the replica lacking round 1's write: OK %v, Err %v; want ErrNotReplicated", round2.OK, round2.Err)
			}
			m.link.Heal()
			m.waitSynced(t, "the master")
			round2 = &request{Op: reqRaiseFence, Key: key, Value: "v", Token: round1.Fence, Owner: owner, Replicas: 1}
			exec(round2)
			if !round2.OK || round2.Err != nil {
				t.Errorf("round 2 once the replica caught up: OK %v, Err %v; want OK", round2.OK, round2.Err)
			}
		})
	}
}

// TestScriptFlushKeepsOrder: after SCRIPT FLUSH a master knows none of the
// scripts until someone runs them again. A fenced acquire queued behind a
// slow request, and rolled back (its caller gave up) before it was sent,
// goes to the master in one batch with its rollback: the rollback must run
// after the acquire, or the key stays behind for its TTL, blocking everyone.
func TestScriptFlushKeepsOrder(t *testing.T) {
	px, err := faultproxy.New(masters.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	admin := clients(t, masters.Addrs()[:1])[0]
	r := newRedlock(t, nodesOf(t, clients(t, []string{px.Addr()})), WithNodeTimeout(time.Second), WithTTL(time.Minute))
	ctx := context.Background()
	if l, err := r.TryLock(ctx, testKey(t), WithFencing()); err != nil { // connected, scripts known
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// The master forgets the scripts; another client runs the release
	// script (a plain Unlock elsewhere), so only that one is known again.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Eval(ctx, releaseSrc.(string), []string{testKey(t), WaitKey(testKey(t))}, "x", "", 0).Err(); err != nil {
		t.Fatal(err)
	}
	px.SetLatency(150 * time.Millisecond)

	slow := make(chan error, 1)
	go func() { // a request in flight to the master for 150 ms
		l, err := r.TryLock(ctx, testKey(t))
		if err == nil {
			err = l.Unlock(ctx)
		}
		slow <- err
	}()
	time.Sleep(30 * time.Millisecond)
	key := testKey(t)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = r.TryLock(tctx, key, WithFencing()) // queued behind it; gives up
	cancel()
	if err == nil {
		t.Fatal("TryLock succeeded; the test needs its caller to give up")
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	settle(r)
	if v, pttl := admin.Get(ctx, key).Val(), admin.PTTL(ctx, key).Val(); v != "" {
		t.Fatalf("after the rolled-back fenced acquire the master holds %s=%q for %v more", key, v, pttl)
	}
}

// outcome is what one Node call returned, in words: "true", "false", "token
// N", "bad" (an error wrapping ErrBadReply) or "error" (any other error).
func outcome(ok bool, token uint64, isFence bool, err error) string {
	switch {
	case errors.Is(err, ErrBadReply):
		return "bad"
	case err != nil:
		return "error"
	case isFence:
		return fmt.Sprint("token ", token)
	}
	return fmt.Sprint(ok)
}

// nodeOutcomes sends one request of every kind, each on a Node of its own
// from newNode (so each starts on a fresh connection), and describes each
// reply. A failed request must not also report success.
func nodeOutcomes(t *testing.T, newNode func() Node, timeout time.Duration) (acq, fenced, flags string) {
	t.Helper()
	call := func(q request) string {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		q.Key, q.Value = "k", "v"
		execRequests(ctx, newNode(), &q)
		if q.Err != nil && (q.OK || q.Fence != 0) {
			t.Errorf("%v returned success (%v, %d) together with the error %v", q.Op, q.OK, q.Fence, q.Err)
		}
		return outcome(q.OK, q.Fence, q.Op == reqAcquireFenced, q.Err)
	}
	acq = call(request{Op: reqAcquire, TTL: time.Second})
	fenced = call(request{Op: reqAcquireFenced, TTL: time.Second})
	fl := []string{
		call(request{Op: reqRaiseFence, Token: 5}),
		call(request{Op: reqExtend, TTL: time.Second}),
		call(request{Op: reqRelease}),
	}
	// The 0/1 scripts read their reply the same way; so does release,
	// except that it also takes 2 and 3 (bit 2: it woke a waiting Redlock).
	if fl[0] != fl[1] || (fl[1] != fl[2] && !(fl[1] == "bad" && (fl[2] == "true" || fl[2] == "false"))) {
		t.Errorf("raise-fence, extend, release disagree on one reply: %q", fl)
	}
	return acq, fenced, fl[0]
}

// outcomes are nodeOutcomes' three results.
type outcomes struct{ acq, fenced, flags string }

// TestHostileReplies: whatever a master answers, each request's reply is a
// clean result or an error — a wrong type or an out-of-range value is
// ErrBadReply, never a success.
func TestHostileReplies(t *testing.T) {
	bad := outcomes{"bad", "bad", "bad"}
	for _, tc := range []struct {
		name, reply string
		hangUp      bool
		want        outcomes
		says        string // in every error, when set
	}{
		{"integer 1", ":1\r\n", false, outcomes{"bad", "token 1", "true"}, ""},
		{"integer 0", ":0\r\n", false, outcomes{"bad", "token 0", "false"}, ""},
		{"integer 7", ":7\r\n", false, outcomes{"bad", "token 7", "bad"}, ""},
		{"bulk string 1", "$1\r\n1\r\n", false, bad, ""},
		{"bulk string OK", "$2\r\nOK\r\n", false, outcomes{"true", "bad", "bad"}, ""},
		{"status OK", "+OK\r\n", false, outcomes{"true", "bad", "bad"}, ""},
		{"status QUEUED", "+QUEUED\r\n", false, bad, ""},
		{"nil", "$-1\r\n", false, outcomes{"false", "bad", "bad"}, ""},
		{"nil array", "*-1\r\n", false, outcomes{"false", "bad", "bad"}, ""},
		{"error reply", "-ERR boom\r\n", false, outcomes{"error", "error", "error"}, "boom"},
		{"NOPERM", "-NOPERM this user has no permissions\r\n", false, outcomes{"error", "error", "error"}, "NOPERM"},
		// A real master answers NOSCRIPT to EVALSHA only, which we never
		// send: such a reply is an error like any other.
		{"NOSCRIPT to every command", "-NOSCRIPT No matching script\r\n", false, outcomes{"error", "error", "error"}, "NOSCRIPT"},
		{"negative token", ":-5\r\n", false, bad, ""},
		{"token above 2^53", ":1152921504606846976\r\n", false, bad, ""},
		// go-redis cannot read the integer: an error for every command.
		{"integer overflow", ":99999999999999999999999\r\n", false, outcomes{"error", "error", "error"}, ""},
		{"array", "*2\r\n:1\r\n:1\r\n", false, bad, ""},
		{"not RESP", "garbage\r\n", false, outcomes{"error", "error", "error"}, ""},
		{"truncated, hang up", "$10\r\nabc", true, outcomes{"error", "error", "error"}, ""},
		{"truncated, stay silent", "$10\r\nabc", false, outcomes{"error", "error", "error"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the silent rows wait for their deadlines
			const timeout = 200 * time.Millisecond
			f := startFake(t, []byte(tc.reply), tc.hangUp)
			start := time.Now()
			acq, fenced, flags := nodeOutcomes(t, f.node(t), timeout)
			if got := (outcomes{acq, fenced, flags}); got != tc.want {
				t.Errorf("acquire %s, fenced acquire %s, 0/1 scripts %s; want %s, %s, %s",
					acq, fenced, flags, tc.want.acq, tc.want.fenced, tc.want.flags)
			}
			if tc.says != "" {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				q := &request{Op: reqRelease, Key: "k", Value: "v"}
				execRequests(ctx, f.node(t)(), q)
				if q.Err == nil || !strings.Contains(q.Err.Error(), tc.says) {
					t.Errorf("release: err %v, want the master's error saying %q", q.Err, tc.says)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("six requests took %v; each should end by its %v deadline", took, timeout)
			}
		})
	}
}

// TestHostileMasterCountsAsFailed: masters that answer garbage count as
// failed in the quorum, by name, never as successes.
func TestHostileMasterCountsAsFailed(t *testing.T) {
	node := func(t *testing.T, addr string) Node {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
			DialTimeout: time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return NewNode(c)
	}
	ctx := context.Background()
	real0, real1 := node(t, masters.Addrs()[0]), node(t, masters.Addrs()[1])

	// One garbage master of three: the two real ones still make a quorum.
	bad := startFake(t, []byte("$1\r\n1\r\n"), false)
	r := newRedlock(t, []Node{real0, node(t, bad.Addr()), real1})
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with one garbage master: %v", err)
	}

	// Two garbage masters of three: no quorum, and the counts say why.
	for _, opts := range [][]Option{nil, {WithFencing()}} {
		bad2 := startFake(t, []byte(":1152921504606846976\r\n"), false)
		r := newRedlock(t, []Node{real0, node(t, bad.Addr()), node(t, bad2.Addr())}, opts...)
		_, err := r.TryLock(ctx, testKey(t))
		var qe *QuorumError
		if !errors.As(err, &qe) || !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrBadReply) {
			t.Fatalf("err %v: want a QuorumError wrapping ErrNotObtained and ErrBadReply", err)
		}
		// The real master's success may still be in flight at the decision.
		if qe.Succeeded > 1 || qe.Failed != 2 || qe.Refused != 0 {
			t.Errorf("counts %d succeeded, %d refused, %d failed; want at most 1, 0, 2", qe.Succeeded, qe.Refused, qe.Failed)
		}
		for _, addr := range []string{bad.Addr(), bad2.Addr()} {
			if !strings.Contains(err.Error(), addr) {
				t.Errorf("error %q does not name the garbage master %s", err, addr)
			}
		}
	}
}

// lengthHeader is a RESP header that declares a length: bulk strings and
// every aggregate type of RESP2 and RESP3.
var lengthHeader = regexp.MustCompile(`[$*%~>|=!](\d+)`)

// declaresHugeLength reports whether reply declares a length over 1<<20
// anywhere.
func declaresHugeLength(reply []byte) bool {
	for _, m := range lengthHeader.FindAllSubmatch(reply, -1) {
		if n, err := strconv.ParseUint(string(m[1]), 10, 64); err != nil || n > 1<<20 {
			return true
		}
	}
	return false
}

// hostileSeeds are replies a real master never gives to our commands.
var hostileSeeds = []string{
	":1\r\n", ":0\r\n", ":7\r\n", ":-5\r\n", ":9007199254740993\r\n",
	":99999999999999999999999\r\n", "$1\r\n1\r\n", "+OK\r\n", "$2\r\nOK\r\n",
	"+QUEUED\r\n", "$-1\r\n", "*-1\r\n", "_\r\n", "-ERR boom\r\n",
	"*2\r\n:1\r\n:1\r\n", "%1\r\n:1\r\n:1\r\n", ",1.5\r\n", "#t\r\n",
	"(12345678901234567890\r\n", "garbage\r\n", "$10\r\nabc", "$-7\r\n", "",
	"$2\r\nOKxx", "$99999999\r\n", "*99999999\r\n", "-NOSCRIPT No matching script\r\n",
	"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
}

// FuzzNodeReply feeds arbitrary bytes, as the reply to every command, from a
// fake master to a go-redis Node: no request panics or hangs, an error never
// comes with a success, and a success needs a well-formed reply of the right
// type.
func FuzzNodeReply(f *testing.F) {
	for _, s := range hostileSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, reply []byte) {
		if declaresHugeLength(reply) {
			// go-redis sizes maps and slices by the length a reply declares
			// (a "%123456780" map header allocates gigabytes before any
			// element arrives). That is go-redis's, not ours to fix here;
			// the README says so. Skip such inputs so the fuzzer explores
			// the rest instead of running out of memory.
			t.Skip("declares an aggregate or bulk length over 1<<20")
		}
		fake := pipeFake(t, reply, true)
		acq, fenced, flags := nodeOutcomes(t, fake.pipeNode(t), time.Second)
		// go-redis does not check the CRLF after a bulk string's payload.
		checkReplyOutcomes(t, "go-redis", reply, acq, fenced, flags, "$2\r\nOK")
		// A release's success or wake-up needs an integer reply (0 to 3).
		q := request{Op: reqRelease, Key: "k", Value: "v"}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		execRequests(ctx, fake.pipeNode(t)(), &q)
		if (q.OK || q.Woke) && (q.Err != nil || !bytes.HasPrefix(reply, []byte(":"))) {
			t.Errorf("release reported OK %v, Woke %v (Err %v) on the reply %q", q.OK, q.Woke, q.Err, reply)
		}
	})
}

// checkReplyOutcomes fails t if a Node reported a success that reply does
// not support: an acquire needs +OK or the bulk string okBulk starts with,
// a 0/1 script and a fence token an integer reply (a token of at most 16
// digits, under 2^53).
func checkReplyOutcomes(t *testing.T, node string, reply []byte, acq, fenced, flags, okBulk string) {
	t.Helper()
	if acq == "true" && !bytes.HasPrefix(reply, []byte("+OK\r\n")) && !bytes.HasPrefix(reply, []byte(okBulk)) {
		t.Errorf("%s: Acquire succeeded on the reply %q", node, reply)
	}
	if (flags == "true" || flags == "false") && !bytes.HasPrefix(reply, []byte(":")) {
		t.Errorf("%s: a 0/1 script reported %s on the non-integer reply %q", node, flags, reply)
	}
	if tok, ok := strings.CutPrefix(fenced, "token "); ok {
		if !bytes.HasPrefix(reply, []byte(":")) || len(tok) > 16 {
			t.Errorf("%s: AcquireFenced returned %s on the reply %q", node, fenced, reply)
		}
	}
}

// TestLaneDropsExpiredRequests: a request whose phase's deadline passed
// while it waited in its lane is not sent: the master never sees an acquire
// its caller had already counted as failed.
func TestLaneDropsExpiredRequests(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	slow := wrapAll(nodes)[0]
	slow.acquireDelay.Store(int64(300 * time.Millisecond))
	r := newRedlock(t, nodes)
	ctx := context.Background()
	var wg sync.WaitGroup
	// Master 0's lane: a slow acquire, then k2's with a 50 ms deadline
	// (decided on masters 1 and 2), then another slow one.
	wg.Go(func() { r.TryLock(ctx, testKey(t), WithNodeTimeout(2*time.Second)) })
	time.Sleep(20 * time.Millisecond)
	k2 := testKey(t)
	l2, err := r.TryLock(ctx, k2, WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { r.TryLock(ctx, testKey(t), WithNodeTimeout(2*time.Second)) })
	wg.Wait()
	settle(r)
	if vs := holders(t, cs, k2); vs[0] == l2.Value() {
		t.Fatalf("master 0 got an acquire whose deadline had passed while it waited in the lane: masters hold %q", vs)
	}
}

// TestLaneCallerRunsWithinDeadline: at one master the caller sends its own
// request (lane.pushRun) only through a client that keeps context
// deadlines; either way it returns by the node timeout when the master does
// not answer, and the lane keeps working once it answers again.
func TestLaneCallerRunsWithinDeadline(t *testing.T) {
	for _, keeps := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", keeps), func(t *testing.T) {
			px, err := faultproxy.New(masters.Addrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, DialerRetries: 1,
				DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: keeps})
			t.Cleanup(func() { c.Close() })
			r := newRedlock(t, []Node{NewNode(c)}, WithNodeTimeout(50*time.Millisecond))
			if got := r.lanes[0].callerRuns; got != keeps {
				t.Fatalf("callerRuns = %v, want %v", got, keeps)
			}
			ctx := context.Background()
			l, err := r.Lock(ctx, testKey(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			px.Blackhole()
			start := time.Now()
			if _, err := r.TryLock(ctx, testKey(t)); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("TryLock on a silent master: %v, want ErrNotObtained", err)
			}
			if d := time.Since(start); d > 300*time.Millisecond {
				t.Fatalf("TryLock on a silent master returned after %v, node timeout 50ms", d)
			}
			px.Heal()
			settle(r)
			l, err = r.Lock(ctx, testKey(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The restart gate reads LASTSAVE first (lua/gate.lua): a master that has
// not saved within the gate has been up that long. After a save, or for
// a user whose ACL lacks +lastsave, INFO's uptime decides. These tests put
// a master in each case; TestRestartGateRounding covers the bound's lost
// second on a master that never saved.

// TestRestartGateAfterSave: a master up longer than the gate that has just
// saved (LASTSAVE is now) still votes: its uptime says so. And one that
// restarted from that snapshot does not, though the snapshot is as old as
// the save.
func TestRestartGateAfterSave(t *testing.T) {
	const gate = 2 * time.Second
	c := redistest.StartT(t, 1, redistest.Options{})
	cs := gateClients(t, c)
	r := newRedlock(t, []Node{NewNode(cs[0])}, WithTTL(time.Second), WithRestartGate(gate))
	ctx := context.Background()
	time.Sleep(gate + time.Second)
	if err := cs[0].Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	saved := cs[0].LastSave(ctx).Val()
	if now := time.Now().Unix(); now-saved > 1 {
		t.Fatalf("LASTSAVE %d right after SAVE at %d: want now", saved, now)
	}
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock on a master up longer than the gate that just saved = %v; want the lock (INFO's uptime)", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gate + time.Second) // the snapshot is now older than the gate
	if err := c.Servers[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryLock(ctx, testKey(t)); gateRefusals(err) != 1 {
		t.Fatalf("TryLock right after a restart from a snapshot older than the gate = %v; want the restart gate's refusal", err)
	}
}

// TestRestartGateWithoutLastsave: for a user whose ACL lacks +lastsave,
// the gate still closes after a start and opens once the master has been
// up the gate (INFO decides every time).
func TestRestartGateWithoutLastsave(t *testing.T) {
	const gate = 2 * time.Second
	args := append(aclUser("gater"), "+info")
	launched := time.Now()
	s := redistest.StartServerT(t, redistest.Options{Args: args})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "gater", Password: aclPassword,
		MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.LastSave(ctx).Err(); err == nil || !aclRefusal(err) {
		t.Fatalf("LASTSAVE as gater = %v; want the ACL's refusal", err)
	}
	gateOpensAfter(t, c, launched, gate)
}

// TestRestartGateLastsaveRounding: LASTSAVE is the second the process
// started in, truncated, and TIME's seconds are truncated too, so their
// difference reads up to a second high, as INFO's uptime does. A master
// that started (and answered) just before a second turned, and never
// saved, must still not vote before it has been up the gate.
func TestRestartGateLastsaveRounding(t *testing.T) {
	const gate = 2 * time.Second
	var launched time.Time
	var s *redistest.Server
	for try := 0; ; try++ {
		// Launch 400 ms before a second turns, by the wall clock (LASTSAVE
		// is time(NULL)); keep a server that answered before it turned.
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second - 400*time.Millisecond).Sub(now))
		launched = time.Now()
		s = redistest.StartServerT(t, redistest.Options{})
		if time.Now().Truncate(time.Second).Equal(launched.Truncate(time.Second)) {
			break
		}
		if try == 5 {
			t.Skip("redis-server took more than 400 ms to start, 6 times: no master started just before a second turned")
		}
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	if ls := c.LastSave(context.Background()).Val(); ls != launched.Unix() {
		t.Fatalf("LASTSAVE %d; want the second the master started in, %d", ls, launched.Unix())
	}
	gateOpensAfter(t, c, launched, gate)
}
