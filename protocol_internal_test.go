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

// TestRestartGateClusterShard: on a master that is a Redis Cluster, the
// gate is each shard's: a shard that restarted refuses votes on its keys,
// and the other shards' keys vote.
func TestRestartGateClusterShard(t *testing.T) {
	t.Parallel()                 // waits out masters' restart gates, mostly asleep: alongside the other gate tests
	const gate = 5 * time.Second // longer than a restarted shard is CLUSTERDOWN (about 2 s)
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{Args: []string{"--cluster-require-full-coverage", "no"}})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	r := newRedlock(t, []Node{NewNode(cc)}, WithTTL(time.Second), WithRestartGate(gate), WithNodeTimeout(time.Second))
	ctx := context.Background()
	time.Sleep(gate + 2*time.Second) // the fresh master's own gate (gate.lua counts two seconds less than its uptime)
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
// WAIT 1 on the same connection, until the WAIT answers 1 twice in a row.
//
// A WAIT on a connection that wrote nothing waits for no offset, and counts
// a replica the primary has put online after a diskless transfer while the
// replica is still loading the snapshot (and fsyncing it, on a slow disk):
// it acknowledges nothing until it has loaded, which took over 650 ms once
// in CI, and the WAITs of the test that followed answered 0.
//
// One WAIT answering 1 is not enough either. Redis 7.0 starts a replica's
// command stream after a diskless sync on the replica's first ACK once it
// is online; an ACK that came before the primary had seen the transfer end
// (under load) leaves the stream stopped until the replica's next periodic
// ACK, up to a second later. That early ACK confirms a write the snapshot
// held, so the first WAIT answers 1 while the next writes wait in the
// primary's output buffer. A write made after a replica was counted online
// is past the snapshot: its WAIT answers 1 only once the stream runs.
func (m *replicatedMaster) waitSynced(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	conn := m.client.Conn()
	defer conn.Close()
	for end, acked := time.Now().Add(20*time.Second), 0; acked < 2; time.Sleep(20 * time.Millisecond) {
		if err := conn.Set(ctx, "redlock-test:synced", name, time.Minute).Err(); err == nil {
			if n, err := conn.Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
				acked++
				continue
			}
		}
		acked = 0
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
		if (q.OK || q.Woke) && (q.Err != nil || !bytes.HasPrefix(afterPushes(reply), []byte(":"))) {
			t.Errorf("release reported OK %v, Woke %v (Err %v) on the reply %q", q.OK, q.Woke, q.Err, reply)
		}
	})
}

// checkReplyOutcomes fails t if a Node reported a success that reply does
// not support, after any push frames it starts with (afterPushes): an
// acquire needs +OK or the bulk string okBulk starts with, a 0/1 script
// and a fence token an integer reply (a token of at most 16 digits, under
// 2^53).
func checkReplyOutcomes(t *testing.T, node string, reply []byte, acq, fenced, flags, okBulk string) {
	t.Helper()
	reply = afterPushes(reply)
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

// afterPushes returns reply without the RESP3 push frames ('>' and a
// count, then that many values) it starts with: out-of-band messages that
// go-redis reads past to the command's reply. A line go-redis cannot read
// (no CRLF, no valid count) ends the frame there, as in go-redis; a frame
// cut short leaves reply as it is, so the checks stay strict.
func afterPushes(reply []byte) []byte {
	rest := reply
	for len(rest) > 0 && rest[0] == '>' {
		after, ok, past := skipRESP(rest, 0)
		if !ok {
			if past == nil {
				return reply // truncated: go-redis waits, and fails
			}
			// A line that is not a well-formed RESP line (">\n", ">1\n",
			// ">x\r\n"): go-redis read it and gave up on the frame; the
			// command's reply is read from the next line on (the fuzzer's
			// ">\n:0\r\n" and ">1\n:0\r\n" were the integer 0).
			return past
		}
		rest = after
	}
	return rest
}

// skipRESP skips one RESP value at the start of b (nested at most depth
// 8) and returns what follows it. Every line must end in CRLF, as go-redis
// reads them. When it cannot, past is what follows the line go-redis
// stopped at (a line without CRLF, or a header with no valid count), or
// nil when b ends first.
func skipRESP(b []byte, depth int) (rest []byte, ok bool, past []byte) {
	nl := bytes.IndexByte(b, '\n')
	if depth > 8 || nl < 0 {
		return nil, false, nil
	}
	if nl < 2 || b[nl-1] != '\r' {
		return nil, false, b[nl+1:]
	}
	line, rest := b[1:nl-1], b[nl+1:]
	count := func(per int) (int, bool) {
		n, err := strconv.Atoi(string(line))
		return n * per, err == nil && n >= 0 && n <= 1<<10
	}
	switch b[0] {
	case '+', '-', ':', ',', '#', '_', '(':
		return rest, true, nil
	case '$', '!', '=':
		n, ok := count(1)
		if !ok {
			return nil, false, rest
		}
		if len(rest) < n+2 {
			return nil, false, nil
		}
		return rest[n+2:], true, nil
	case '*', '~', '>', '%', '|':
		per := 1
		if b[0] == '%' || b[0] == '|' {
			per = 2
		}
		n, ok := count(per)
		if !ok {
			return nil, false, rest
		}
		for i := 0; i < n; i++ {
			if rest, ok, past = skipRESP(rest, depth+1); !ok {
				return nil, false, past
			}
		}
		return rest, true, nil
	}
	return nil, false, rest
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

// TestHandOffCarriesGateOnlyWhenGated: handoff.lua asks the restart gate
// only for a call that has one (ARGV[9] not '0'), so a waiting call
// without a gate sends it without gate.lua's routine: the master reads
// every EVAL's bytes, on every release and registration of every waiting
// call. A gated call's carries the routine.
func TestHandOffCarriesGateOnlyWhenGated(t *testing.T) {
	for _, gate := range []time.Duration{0, time.Minute} {
		q := request{Op: reqRelease, Key: "k", Value: "v", Hand: "h", Waiter: "ch", Reg: 1, Gate: gate}
		var c Command
		if !encode(&q, &c) || c.Args[0] != "eval" {
			t.Fatalf("gate %v: the waiting call's release encoded as %v; want an EVAL", gate, c.Args)
		}
		src, _ := c.Args[1].(string)
		if has := strings.Contains(src, "local function gate("); has != (gate > 0) {
			t.Errorf("gate %v: handoff.lua carries gate.lua's routine: %v; want %v (%d bytes)", gate, has, gate > 0, len(src))
		}
	}
}
