package redlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

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
		if err := o.l.Unlock(ctx); err != nil {
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
