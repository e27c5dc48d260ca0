package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// The tests of a master that is a go-redis Ring: shards that know nothing
// of each other, each key on the shard go-redis's hash of its hash tag (or
// of the whole key) picks. docs/masters.md has the table these fill in.

// ringMaster starts shards redis-servers and returns a Ring over them,
// configured as the README recommends, closed at the end of the test, and
// the servers.
func ringMaster(t *testing.T, shards int, opt redis.RingOptions) (*redis.Ring, *redistest.Cluster) {
	t.Helper()
	c := redistest.StartT(t, shards, redistest.Options{})
	opt.Addrs = make(map[string]string, shards)
	for i, a := range c.Addrs() {
		opt.Addrs[fmt.Sprintf("shard%d", i)] = a
	}
	opt.MaxRetries, opt.DialerRetries, opt.ContextTimeoutEnabled = -1, 1, true
	ring := redis.NewRing(&opt)
	t.Cleanup(func() { ring.Close() })
	return ring, c
}

// shardOf returns the index in shards of the one go-redis sends key to.
func shardOf(t *testing.T, ring *redis.Ring, shards []*redis.Client, key string) int {
	t.Helper()
	c, err := ring.GetShardClientForKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range shards {
		if s == c {
			return i
		}
	}
	t.Fatalf("GetShardClientForKey(%q) is no shard of the ring", key)
	return -1
}

// keysOnShards returns, for each shard, a key of the form prefix+N that the
// ring sends there.
func keysOnShards(t *testing.T, ring *redis.Ring, shards []*redis.Client, prefix string) []string {
	t.Helper()
	keys := make([]string, len(shards))
	for n, left := 0, len(shards); left > 0; n++ {
		if n > 10000 {
			t.Fatalf("no key %sN for some shard", prefix)
		}
		key := prefix + fmt.Sprint(n)
		if i := shardOf(t, ring, shards, key); keys[i] == "" {
			keys[i] = key
			left--
		}
	}
	return keys
}

// TestRingReplicaConfirmRefused: WithReplicaConfirm on a Redlock that has a
// Ring master is refused, in New and per call (Lock, TryLock, Do), with a
// *ConfigError that names the option and says why; before, go-redis sent
// the keyless WAIT to the shard its hash of "wait" picks, and a vote on a
// shard whose replica was frozen counted as confirmed. The same Redlock
// without the option locks as usual.
func TestRingReplicaConfirmRefused(t *testing.T) {
	ring, _ := ringMaster(t, 2, redis.RingOptions{})
	nodes := append([]Node{NewNode(ring)}, nodesOf(t, clients(t, masters.Addrs()[:2]))...)
	checkReplicaRefusal(t, nodes, "Ring")
}

// checkReplicaRefusal checks that WithReplicaConfirm is refused on nodes,
// whose first master is of a kind that routes by key (what names it).
func checkReplicaRefusal(t *testing.T, nodes []Node, what string) {
	t.Helper()
	ctx := context.Background()
	refusal := func(err error) {
		t.Helper()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "WithReplicaConfirm" ||
			!strings.Contains(ce.Reason, what) || !strings.Contains(ce.Reason, "WAIT names no key") {
			t.Errorf("err = %v; want a *ConfigError on WithReplicaConfirm saying the master is a %s and WAIT names no key", err, what)
		}
	}
	r, err := New(nodes, WithReplicaConfirm(1))
	if r != nil {
		r.Close()
	}
	refusal(err)
	t.Logf("New: %v", err)

	r = newRedlock(t, nodes)
	key := testKey(t)
	_, err = r.TryLock(ctx, key, WithReplicaConfirm(1))
	refusal(err)
	_, err = r.Lock(ctx, key, WithReplicaConfirm(1))
	refusal(err)
	ran := false
	err = r.Do(ctx, key, func(context.Context) error { ran = true; return nil }, WithReplicaConfirm(1))
	refusal(err)
	if ran {
		t.Error("Do ran fn although it refused WithReplicaConfirm")
	}
	// Off (0) is no refusal, and the masters took no key from the refusals.
	l, err := r.TryLock(ctx, key, WithReplicaConfirm(0))
	if err != nil {
		t.Fatalf("TryLock without replica confirmation: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The Node on its own (no Redlock to refuse the option) fails such a
	// vote unsent, in a batch and alone.
	for _, n := range []int{1, 2} {
		reqs := make([]*request, n)
		for i := range reqs {
			reqs[i] = &request{Op: reqAcquire, Key: testKey(t), Value: "v", TTL: time.Second, Replicas: 1}
		}
		execRequests(ctx, nodes[0], reqs...)
		for _, q := range reqs {
			if q.OK || !errors.Is(q.Err, errKeyRoutedWait) {
				t.Errorf("%s Node's Exec of a vote with Replicas (batch of %d): OK %v, Err %v; want errKeyRoutedWait", what, n, q.OK, q.Err)
			}
		}
	}
}

// TestRingHandOffAcrossShards: a Lock call waiting for a key that another
// Redlock holds on a Ring master is handed the key when the holder unlocks,
// whichever shard holds the key, far sooner than its backoff. The Redlock
// listens on every shard (shardSubs); go-redis's Ring.Subscribe listened on
// the shard of its hash of the channel's name only, and a release on
// another shard saw nobody listening, gave the key back, and the waiter
// slept its backoff.
func TestRingHandOffAcrossShards(t *testing.T) {
	ring, _ := ringMaster(t, 3, redis.RingOptions{})
	shards := ring.GetShardClients()
	nodes := []Node{NewNode(ring)}
	ctx := context.Background()
	const backoff = 1500 * time.Millisecond
	holder := newRedlock(t, nodes)
	waiter := newRedlock(t, nodes, WithBackoff(backoff, backoff))
	var took []time.Duration
	for i, key := range keysOnShards(t, ring, shards, testKey(t)+":") {
		for _, fenced := range []bool{false, true} {
			var opts []Option
			if fenced {
				opts = append(opts, WithFencing())
			}
			w, d := handOffAfter(t, holder, waiter, key, opts...)
			took = append(took, d)
			v, err := shards[i].Get(ctx, key).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			t.Logf("shard %d, fenced=%v: holder's Unlock to waiter's lock %v; the shard holds %q (the waiter's: %v)",
				i, fenced, d.Round(time.Millisecond), v, v == w.Value())
			if v != w.Value() {
				t.Errorf("shard %d holds %q, not the waiter's value %q", i, v, w.Value())
			}
			if d > backoff/4 {
				t.Errorf("shard %d, fenced=%v: the waiter got the lock %v after the Unlock; want far below its backoff %v (a hand-off)",
					i, fenced, d.Round(time.Millisecond), backoff)
			}
			if err := w.Unlock(ctx); err != nil {
				t.Error(err)
			}
			settle(holder)
			settle(waiter)
		}
	}
	t.Logf("Unlock to waiter holding, over %d waits: %v", len(took), took)
}

// ringKeys are lock keys of every shape of derivedKey's rule, each several
// times (so that they spread over the shards), less those Lock refuses.
func ringKeys(t *testing.T) []string {
	var keys []string
	for _, tc := range keyCases {
		if _, _, derived := derivedFrom(tc.key + t.Name()); !derived && len(tc.key) < 1024 {
			keys = append(keys, tc.key+t.Name())
		}
	}
	for i := range 8 {
		for _, shape := range []string{"a}b%d", "{x%d}y", "{}z%d", "x{}y}%d", "k%d", "a{b%d", "}%d{"} {
			keys = append(keys, t.Name()+fmt.Sprintf(shape, i))
		}
	}
	return keys
}

// TestRingDerivedKeysOnKeyShard: on a Ring master, a lock key's fence
// counter (FenceKey) and queue of waiting calls (WaitKey) are on the key's
// shard and on no other, for keys of every shape — with a hash tag, without
// braces, and with a '}' but no tag ("a}b", "{}z"), whose derived names
// carry a tag of the key's Redis Cluster slot that a Ring hashes to another
// shard. They are all the same: go-redis sends a script to the shard of its
// first key, and every script the library sends names the lock key first,
// so the derived keys are made where the script runs. Plain and owned
// (WithOwner) fenced locks alike.
func TestRingDerivedKeysOnKeyShard(t *testing.T) {
	ring, _ := ringMaster(t, 3, redis.RingOptions{})
	shards := ring.GetShardClients()
	nodes := []Node{NewNode(ring)}
	ctx := context.Background()
	holder, waiter := newRedlock(t, nodes), newRedlock(t, nodes)
	keys := ringKeys(t)
	held := make([]*Lock, len(keys))
	for i, key := range keys {
		opts := []Option{WithFencing()}
		if i%2 == 1 {
			opts = append(opts, WithOwner("owner"))
		}
		l, err := holder.TryLock(ctx, key, opts...)
		if err != nil {
			t.Fatalf("TryLock(%.40q): %v", key, err)
		}
		held[i] = l
	}
	// A call waiting for each key queues on the key's shard, until it
	// gives up.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for _, key := range keys {
		wg.Go(func() {
			if l, err := waiter.Lock(wctx, key, WithFencing()); err == nil {
				t.Errorf("the waiter got %.40q, which is held", key)
				_ = l.Unlock(ctx)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	spread := make([]int, len(shards))
	for _, key := range keys {
		home := shardOf(t, ring, shards, key)
		spread[home]++
		for _, name := range []string{key, FenceKey(key), WaitKey(key)} {
			for i, s := range shards {
				n, err := s.Exists(ctx, name).Result()
				if err != nil {
					t.Fatal(err)
				}
				if (n == 1) != (i == home) {
					t.Errorf("key %.40q (on shard %d): %.60q exists on shard %d: %v", key, home, name, i, n == 1)
				}
			}
		}
	}
	t.Logf("%d keys on shards %v", len(keys), spread)
	for _, n := range spread {
		if n == 0 {
			t.Errorf("keys on shards %v: some shard has none, the test proves less than it says", spread)
		}
	}
	stop()
	wg.Wait()
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestRingRestartGateOnKeyShard: on a Ring master, the restart gate asks
// the shard that holds the key, whatever the key's shape: a shard that
// restarted empty gives no vote for gate, for a key with a hash tag and for
// one with a '}' but no tag alike.
//
// The gate's question was keyed by EpochKey(key), which for a key with a
// '}' but no tag carries a tag of the key's Redis Cluster slot: a Ring
// sends it to another shard than the key's, that shard answered for the
// restarted one, and the vote counted at once. This test passes only with
// the gate keyed by the lock key itself (issue 31, item 3 (b), changed on
// main).
func TestRingRestartGateOnKeyShard(t *testing.T) {
	const ttl, gate = 500 * time.Millisecond, time.Second
	ring, servers := ringMaster(t, 2, redis.RingOptions{})
	shards := ring.GetShardClients()
	addrOf := make(map[*redis.Client]*redistest.Server)
	for _, s := range servers.Servers {
		for _, c := range shards {
			if c.Options().Addr == s.Addr() {
				addrOf[c] = s
			}
		}
	}
	// A key of each shape on shard 0; for the untagged one, one whose
	// old gate cache (EpochKey, "epoch:{T}"+key) the ring sends to shard 1.
	var tagged, untagged string
	for n := 0; tagged == "" || untagged == ""; n++ {
		if k := fmt.Sprintf("{%s%d}x", t.Name(), n); tagged == "" && shardOf(t, ring, shards, k) == 0 {
			tagged = k
		}
		k := fmt.Sprintf("%s%d}x", t.Name(), n)
		if untagged == "" && shardOf(t, ring, shards, k) == 0 && shardOf(t, ring, shards, derivedKey(k, "epoch")) == 1 {
			untagged = k
		}
	}
	nodes := []Node{NewNode(ring)}
	r := newRedlock(t, nodes, WithTTL(ttl), WithRestartGate(gate))
	ctx := context.Background()
	time.Sleep(gate + time.Second) // the fresh shards' own gate (uptime counts in whole seconds)
	for _, key := range []string{tagged, untagged} {
		l, err := r.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("TryLock(%q) on shards up for %v: %v", key, gate+time.Second, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := addrOf[shards[0]].Restart(false); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{tagged, untagged} {
		// The first requests may meet the connections the restart broke.
		for try := 0; ; try++ {
			l, err := r.TryLock(ctx, key)
			if err == nil {
				_ = l.Unlock(ctx)
				t.Errorf("TryLock(%q) right after its shard restarted empty: the shard voted; want the gate's refusal", key)
				break
			}
			if gateRefusals(err) == 1 {
				t.Logf("TryLock(%q): %v", key, err)
				break
			}
			if try == 20 {
				t.Fatalf("TryLock(%q) after its shard restarted: %v; want the gate's refusal", key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestRingShardDownMovesKeys: a Ring that marks a shard down (its
// HeartbeatFn failed three times in a row) sends that shard's keys to the
// shards left, which never had them: for a lock, that master restarted
// empty, and its vote goes to whoever asks next, while the restart gate
// sees shards up all along. So a second Redlock takes a key the first still
// holds on a Ring of the default settings; with a HeartbeatFn that always
// reports up, keys never move, and the down shard's keys fail their votes
// instead (docs/masters.md).
func TestRingShardDownMovesKeys(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "never-down"}[fixed], func(t *testing.T) {
			opt := redis.RingOptions{HeartbeatFrequency: 50 * time.Millisecond}
			if fixed {
				opt.HeartbeatFn = func(context.Context, *redis.Client) bool { return true }
			}
			ring, servers := ringMaster(t, 2, opt)
			shards := ring.GetShardClients()
			key := keysOnShards(t, ring, shards, testKey(t)+":")[0]
			nodes := []Node{NewNode(ring)}
			a, b := newRedlock(t, nodes), newRedlock(t, nodes)
			ctx := context.Background()
			la, err := a.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range servers.Servers {
				if s.Addr() == shards[0].Options().Addr {
					if err := s.Kill(); err != nil {
						t.Fatal(err)
					}
				}
			}
			time.Sleep(500 * time.Millisecond) // ten heartbeats
			t.Logf("shards up: %d of 2", ring.Len())
			lb, err := b.TryLock(ctx, key)
			switch {
			case !fixed && err != nil:
				t.Fatalf("B's TryLock = %v; want the lock, from the shard the key moved to (the schedule did not play out)", err)
			case !fixed:
				t.Logf("A holds %q until %v, and B took it too (until %v): the shard the key moved to voted for B",
					key, time.Until(la.Until()).Round(time.Millisecond), time.Until(lb.Until()).Round(time.Millisecond))
			case err == nil:
				t.Fatalf("B took %q, which A holds, on a Ring that never marks shards down", key)
			default:
				t.Logf("B's TryLock: %v", err)
			}
		})
	}
}
