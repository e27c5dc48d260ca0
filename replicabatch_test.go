package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

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
