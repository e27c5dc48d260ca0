package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
)

// clusterMasters starts three Redis Clusters of three shards each (nine
// processes), stopped at the end of the test, and returns a ClusterClient
// per cluster, configured as the README recommends. A cluster that does not
// form fails the test: it never skips (CI installs redis-server 7.0).
func clusterMasters(t *testing.T) []*redis.ClusterClient {
	t.Helper()
	rcs := make([]*redistest.RedisCluster, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range rcs {
		wg.Go(func() { rcs[i], errs[i] = redistest.StartRedisCluster(3, redistest.Options{}) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, rc := range rcs {
			if rc != nil {
				if err := rc.Stop(); err != nil {
					t.Error(err)
				}
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("starting 3 Redis Clusters of 3 shards: %v", err)
	}
	cs := make([]*redis.ClusterClient, len(rcs))
	for i, rc := range rcs {
		cs[i] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(),
			MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, MinRetryBackoff: -1, MaxRetryBackoff: -1})
		c := cs[i]
		t.Cleanup(func() { c.Close() })
	}
	return cs
}

func clusterNodes(cs []*redis.ClusterClient) []Node {
	ns := make([]Node, len(cs))
	for i, c := range cs {
		ns[i] = NewNode(c)
	}
	return ns
}

// clusterGets returns key's value on each cluster ("" where it is absent).
func clusterGets(t *testing.T, cs []*redis.ClusterClient, key string) []string {
	t.Helper()
	vs := make([]string, len(cs))
	for i, c := range cs {
		v, err := c.Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %q on cluster %d: %v", key, i, err)
		}
		vs[i] = v
	}
	return vs
}

// clusterGone fails t unless key is gone from every cluster.
func clusterGone(t *testing.T, cs []*redis.ClusterClient, key string) {
	t.Helper()
	for i, c := range cs {
		if n, err := c.Exists(context.Background(), key).Result(); err != nil || n != 0 {
			t.Errorf("cluster %d: EXISTS %q = %d, %v; want gone", i, key, n, err)
		}
	}
}

// TestRedisClusterMasters: a Redlock whose three masters are each a Redis
// Cluster of three shards takes, fences, nests, extends and renews locks,
// and a released key is gone from every cluster. The keys are spread over
// slots (no hash tags, and tagged ones), so that the lock key and its
// derived keys are on a shard other than the first one's.
func TestRedisClusterMasters(t *testing.T) {
	cs := clusterMasters(t)
	nodes := clusterNodes(cs)
	ctx := context.Background()

	t.Run("keyslot", func(t *testing.T) {
		// CLUSTER KEYSLOT is the oracle: every case of the naming rule.
		c := cs[0]
		for _, tc := range keyCases {
			want, err := c.ClusterKeySlot(ctx, tc.key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int64(keySlot(tc.key)) != want {
				t.Errorf("keySlot(%.40q) = %d, CLUSTER KEYSLOT %d", tc.key, keySlot(tc.key), want)
			}
			for _, d := range []string{FenceKey(tc.key), WaitKey(tc.key)} {
				if got := c.ClusterKeySlot(ctx, d).Val(); got != want {
					t.Errorf("derived %.60q in slot %d, key %.40q in %d", d, got, tc.key, want)
				}
			}
		}
	})

	r := newRedlock(t, nodes)
	for _, key := range []string{"plain", "order:42", "{user:7}:cart", "a}b", "x{}y"} {
		t.Run("plain/"+key, func(t *testing.T) {
			key := testKey(t) + key
			for range 3 {
				l, err := r.Lock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				settle(r)
				if vs := clusterGets(t, cs, key); count(vs, l.Value()) != len(cs) {
					t.Fatalf("clusters hold %q, want our value on all", vs)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatalf("Unlock: %v", err)
				}
				settle(r)
				clusterGone(t, cs, key)
			}
		})
	}

	t.Run("fenced", func(t *testing.T) {
		key := testKey(t)
		var last uint64
		for i := range 4 {
			l, err := r.Lock(ctx, key, WithFencing())
			if err != nil {
				t.Fatalf("fenced Lock %d: %v", i, err)
			}
			if l.Fence() <= last {
				t.Fatalf("token %d after %d", l.Fence(), last)
			}
			last = l.Fence()
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		}
		settle(r)
		clusterGone(t, cs, key)
		for i, c := range cs {
			if v, err := c.Get(ctx, FenceKey(key)).Uint64(); err != nil || v < last {
				t.Errorf("cluster %d: counter %s = %d (%v), want >= %d", i, FenceKey(key), v, err, last)
			}
		}
	})

	t.Run("owned", func(t *testing.T) {
		key := testKey(t)
		outer, err := r.Lock(ctx, key, WithOwner("job-1"), WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		inner, err := r.Lock(tctx, key, WithOwner("job-1"), WithFencing())
		if err != nil {
			t.Fatalf("nested Lock: %v", err)
		}
		if inner.Fence() < outer.Fence() {
			t.Errorf("nested token %d below its owner's %d", inner.Fence(), outer.Fence())
		}
		if _, err := r.TryLock(ctx, key, WithOwner("job-2")); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another owner: %v, want ErrNotObtained", err)
		}
		if err := outer.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		settle(r)
		for i, c := range cs {
			if n := c.Exists(ctx, key).Val(); n != 1 {
				t.Errorf("cluster %d: key gone while the nested hold is live", i)
			}
		}
		if err := inner.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		settle(r)
		clusterGone(t, cs, key)
	})

	t.Run("extend", func(t *testing.T) {
		key := testKey(t)
		l, err := r.Lock(ctx, key, WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 20*time.Second); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		settle(r)
		for i, c := range cs {
			if ttl := c.PTTL(ctx, key).Val(); ttl <= 10*time.Second {
				t.Errorf("cluster %d: PTTL %v after Extend(20s)", i, ttl)
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		settle(r)
		clusterGone(t, cs, key)
	})

	t.Run("auto-extend", func(t *testing.T) {
		key := testKey(t)
		l, err := r.Lock(ctx, key, WithTTL(300*time.Millisecond), WithAutoExtend(), WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Fatalf("lost: %v", context.Cause(l.Context()))
		case <-time.After(time.Second): // more than three TTLs
		}
		if vs := clusterGets(t, cs, key); count(vs, l.Value()) < 2 {
			t.Fatalf("after three TTLs clusters hold %q", vs)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		settle(r)
		clusterGone(t, cs, key)
	})
}

// TestClusterReplicaConfirmRefused: WithReplicaConfirm on a Redlock that
// has a Redis Cluster master is refused, in New and per call, with a
// *ConfigError that names the option and says why, rather than failing
// every vote of that master at run time (errWaitElsewhere).
func TestClusterReplicaConfirmRefused(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(),
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	nodes := append([]Node{NewNode(c)}, nodesOf(t, clients(t, masters.Addrs()[:2]))...)
	checkReplicaRefusal(t, nodes, "Redis Cluster")
}

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
			if q.OK || !errors.Is(q.Err, errWaitElsewhere) {
				t.Errorf("%s Node's Exec of a vote with Replicas (batch of %d): OK %v, Err %v; want errWaitElsewhere", what, n, q.OK, q.Err)
			}
		}
	}
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
	t.Parallel() // waits out masters' restart gates, mostly asleep: alongside the other gate tests
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
	time.Sleep(gate + 2*time.Second) // the fresh shards' own gate (gate.lua counts two seconds less than their uptime)
	for _, key := range []string{tagged, untagged} {
		l, err := r.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("TryLock(%q) on shards up for %v: %v", key, gate+2*time.Second, err)
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

// aclCommands is everything the library sends, as in docs/masters.md's rule:
// SET (acquire), EVAL (the scripts), and what the scripts call, which ACLs
// check too: GET, SET, DEL, PEXPIRE, TIME.
// The handshake needs nothing: HELLO with AUTH is open to every user, and
// go-redis ignores the refusal of CLIENT SETINFO.
var aclCommands = []string{"+set", "+get", "+del", "+pexpire", "+time", "+eval", "+type", "+hget", "+hset", "+hdel", "+hgetall"}

const aclPassword = "acl-pw-Zq8v" // appears in no error; see TestNoSecretsInErrors

// aclUser returns redis-server arguments declaring user with the minimal
// rule less the commands in without.
func aclUser(user string, without ...string) []string {
	args := []string{"--user", user, "on", ">" + aclPassword, "~*"}
	for _, c := range aclCommands {
		if !slices.Contains(without, c) {
			args = append(args, c)
		}
	}
	return args
}

// userRedlock returns a Redlock over addrs logged in as user.
func userRedlock(t *testing.T, addrs []string, user string, opts ...Option) *Redlock {
	nodes := make([]Node, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Username: user, Password: aclPassword,
			MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		nodes[i] = NewNode(c)
	}
	return newRedlock(t, nodes, append([]Option{WithNodeTimeout(time.Second)}, opts...)...)
}

// aclRefusal reports whether err is an ACL refusal: NOPERM for a command
// sent, or, for one a script calls, Redis 7.0's "can't run this command".
func aclRefusal(err error) bool {
	s := err.Error()
	return strings.Contains(s, "NOPERM") || strings.Contains(s, "user executing the script can't run this command")
}

// TestACLWakeups: a user without the wake-up commands still locks, waits
// and releases without an error (waiters fall back to their backoff, and the
// refusal to subscribe is kept to report); a user with them, as the README
// lists, gets wake-ups.
func TestACLWakeups(t *testing.T) {
	args := aclUser("locker")
	args = append(args, aclUser("waker")...)
	args = append(args, "+exists", "+zadd", "+zrange", "+zrem", "+publish", "+subscribe", "+ping", "&redlock:wake:*")
	c := redistest.StartT(t, 3, redistest.Options{Args: args})
	ctx := context.Background()
	for _, user := range []string{"locker", "waker"} {
		t.Run(user, func(t *testing.T) {
			holder := userRedlock(t, c.Addrs(), user)
			rec := &recorder{}
			waiter := userRedlock(t, c.Addrs(), user, WithObserver(rec))
			key := testKey(t)
			l := mustLock(t, holder, key)
			got := lockAsync(t, ctx, waiter, key, WithBackoff(time.Second, time.Second))
			waitQueued(t, waiter, key)
			time.Sleep(100 * time.Millisecond)
			released := time.Now()
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock as %s: %v", user, err)
			}
			o := <-got
			if o.Err != nil {
				t.Fatalf("Lock as %s: %v", user, o.Err)
			}
			if err := o.Lock.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			woken := o.At.Sub(released) < 300*time.Millisecond
			waiter.wake.mu.Lock()
			refusal := waiter.wake.err
			waiter.wake.mu.Unlock()
			switch {
			case user == "waker" && (!woken || refusal != nil):
				t.Errorf("waker: took the key %v after the release (refusal %v); want a wake-up", o.At.Sub(released), refusal)
			case user == "locker" && (refusal == nil || !aclRefusal(refusal)):
				t.Errorf("locker: subscription refusal %v, want the ACL's, kept to report", refusal)
			}
			// The observer is told once how subscribing went.
			var subscribes []string
			for _, e := range rec.Take() {
				if strings.HasPrefix(e, "subscribe") {
					subscribes = append(subscribes, e)
				}
			}
			want := "subscribe depth=1 3/0/0 q=2 [succeeded succeeded succeeded] ok=true"
			if user == "locker" {
				want = "subscribe depth=1 0/0/3 q=2 [failed failed failed] ok=false"
			}
			if len(subscribes) != 1 || subscribes[0] != want {
				t.Errorf("%s: subscribe events %q, want one: %q", user, subscribes, want)
			}
		})
	}
}

// quietChildEnv holds the master URLs when the test binary is the program
// that TestNewFromURLsQuietWhenMastersDown watches; quietLineEnv, when set,
// makes that program run the README's line that drops go-redis's dial
// failures.
const (
	quietChildEnv = "REDLOCK_TEST_QUIET_CHILD"
	quietLineEnv  = "REDLOCK_TEST_QUIET_LINE"
)

// FuzzMasterURL builds master URLs around a password that starts with a
// marker: ParseMasterURL and ParseMaster never panic, return options or a
// *ConfigError, and neither their errors, RedactURL nor the master's
// addresses (the Node's name) show the password.
func FuzzMasterURL(f *testing.F) {
	for _, s := range [][4]string{
		{"redis", "locker", "pw", "127.0.0.1:6379/0"},
		{"rediss", "", "p@ss/w#rd", "h:1"},
		{"redis", "u:v", "x", "[::1]:6379/3?dial_timeout=1s"},
		{"redis", "u", "%zz", "h:1/notadb"},
		{"", "u", "", "@h:1"},
		{"unix", "u", "x", "/tmp/redis.sock?db=1"},
		{"redis", "u", "pw:more", "h:99999"},
		{"redis+sentinel", "", "x", "s:26379/1?master_name=m&addr=s2:26379&password=p"},
		{"rediss+sentinel", "u", "p@?x", "s:1?master_name=m"},
		{"redis+cluster", "u", "x", "h:7000?addr=h2:7001"},
		{"redis+cluster", "u", "x#y", "h:7000/1"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, scheme, user, pwTail, rest string) {
		const marker = "SeCrEt"
		if strings.Contains(scheme+user+rest, marker[:3]) {
			t.Skip("the marker must appear in the password only")
		}
		password := marker + pwTail
		raw := user + ":" + password + "@" + rest
		if scheme != "" {
			raw = scheme + "://" + raw
		}
		if red := RedactURL(raw); strings.Contains(red, marker) {
			t.Fatalf("RedactURL(%q) = %q", raw, red)
		}
		checkParseMaster(t, raw, marker)
		o, err := ParseMasterURL(raw)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseMasterURL(%q): %v (%T), want a *ConfigError", raw, err, err)
			}
			if strings.Contains(err.Error(), marker) {
				t.Fatalf("ParseMasterURL(%q): the error shows the password: %v", raw, err)
			}
			return
		}
		if strings.Contains(o.Addr, marker) || strings.Contains(o.Username, marker) {
			t.Fatalf("ParseMasterURL(%q): the password went into addr %q or user %q", raw, o.Addr, o.Username)
		}
	})
}

// checkParseMaster checks ParseMaster(raw) as FuzzMasterURL checks
// ParseMasterURL: no password in its error or in the names it gives.
func checkParseMaster(t *testing.T, raw, marker string) {
	m, err := ParseMaster(raw)
	if err != nil {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("ParseMaster(%q): %v (%T), want a *ConfigError", raw, err, err)
		}
		if strings.Contains(err.Error(), marker) {
			t.Fatalf("ParseMaster(%q): the error shows the password: %v", raw, err)
		}
		return
	}
	var name string
	switch {
	case m.Sentinel != nil:
		name = failoverName(m.Sentinel.MasterName, m.Sentinel.SentinelAddrs, m.Sentinel.DB) + " " + m.Sentinel.SentinelUsername
	case m.Cluster != nil:
		name = strings.Join(m.Cluster.Addrs, ",") + " " + m.Cluster.Username
	default:
		name = m.Client.Addr + " " + m.Client.Username
	}
	if strings.Contains(name, marker) {
		t.Fatalf("ParseMaster(%q): the password went into the name or user: %q", raw, name)
	}
}

// TestClusterShardDownFailsFast: on a cluster master made by NewFromURLs, a
// key whose shard is down fails its vote at once (the shard refuses the
// connection), as a dead plain master does, and never stalls until the node
// timeout. go-redis's cluster client sleeps its retry backoff (10 ms to 1 s,
// doubling) before each retry of a failed request, up to MaxRedirects times:
// 30-170 ms per request to the dead shard, past the 100 ms default node
// timeout about half the time. Every contended acquire that needs that
// master's answer then waits for the timeout, and with two of five such
// masters the chaos scenario shard-kill saw 67-94% of acquires in the fault
// succeed, with gaps of up to 1.5 s (issue 42).
func TestClusterShardDownFailsFast(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{})
	a := rc.Addrs()
	const nodeTimeout = 100 * time.Millisecond
	r, err := NewFromURLs([]string{"redis+cluster://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2]}, WithNodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key) // the client learns the slots
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	shard := int(keySlot(key)) * len(rc.Shards) / 16384
	if err := rc.Shards[shard].Kill(); err != nil {
		t.Fatal(err)
	}
	slow := 0
	for i := range 20 {
		start := time.Now()
		l, err := r.TryLock(ctx, key)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("try %d: TryLock got %q with the key's shard down", i, l.Value())
		}
		if took > nodeTimeout/2 || errors.Is(err, context.DeadlineExceeded) {
			slow++
			t.Logf("try %d: failed after %v: %v", i, took.Round(time.Millisecond), err)
		}
	}
	if slow > 0 {
		t.Errorf("%d of 20 votes on a dead shard took more than %v, or ended at the node timeout %v; want each refused at once", slow, nodeTimeout/2, nodeTimeout)
	}
}

// TestClusterHandOffAcrossSlotMove: a waiter subscribed on the shard
// channel of its key's slot is still handed the key after the slot moved
// to another shard while the key was held (CLUSTER SETSLOT MIGRATING and
// IMPORTING, MIGRATE, SETSLOT NODE): the old shard ends the subscription
// (sunsubscribe), the go-redis listener subscribes again on the new one
// (Resubscribed, and the waiter queues again there), and the holder's
// Unlock, redirected by MOVED, hands the key on. The key and its queue
// move with the slot. Before, the subscription would have stayed on the
// old shard, where no script publishes any more: the waiter slept its
// backoff.
func TestClusterHandOffAcrossSlotMove(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{})
	a := rc.Addrs()
	url := "redis+cluster://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2]
	const backoff = 1500 * time.Millisecond
	holder, err := NewFromURLs([]string{url}, WithNodeTimeout(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	waiter, err := NewFromURLs([]string{url}, WithNodeTimeout(250*time.Millisecond), WithBackoff(backoff, backoff))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiter.Close() })
	ctx := context.Background()
	key := testKey(t)
	slot := int(keySlot(key))
	for round := range 3 {
		l, err := holder.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *Lock, 1)
		go func() {
			w, err := waiter.Lock(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		time.Sleep(200 * time.Millisecond) // the waiter tried, subscribed and queued
		from, err := rc.ShardOfSlot(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		to := (from + 1) % len(rc.Shards)
		if err := rc.MoveSlot(ctx, slot, from, to); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // subscribed again on the new shard, queued there
		start := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("round %d: Unlock after the slot moved: %v", round, err)
		}
		w := <-got
		if w == nil {
			t.FailNow()
		}
		d := time.Since(start)
		t.Logf("round %d: slot %d moved from shard %d to %d; Unlock to waiter holding %v", round, slot, from, to, d.Round(time.Millisecond))
		if d > backoff/4 {
			t.Errorf("round %d: the waiter got the lock %v after the Unlock; want far below its backoff %v (a hand-off on the slot's new shard)", round, d.Round(time.Millisecond), backoff)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterReloadPacing: a cluster Node asks go-redis to reload the
// cluster's map only for an error that says a shard did not answer, and at
// most once per reloadEvery, also from many goroutines at once (go-redis
// starts a failed reload again at once: a cluster out of reach would
// otherwise be asked for its map after every failed batch).
func TestClusterReloadPacing(t *testing.T) {
	reply := clients(t, masters.Addrs()[:1])[0].Do(context.Background(), "nosuchcommand").Err()
	var dial net.OpError
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"none", nil, false},
		{"an error reply", reply, false},
		{"the caller's cancel", fmt.Errorf("exec: %w", context.Canceled), false},
		{"a closed client", redis.ErrClosed, false},
		{"the client's own pool", redis.ErrPoolTimeout, false},
		{"a refused dial", &dial, true},
		{"a deadline", context.DeadlineExceeded, true},
	} {
		if got := unanswered(c.err); got != c.want {
			t.Errorf("unanswered(%s: %v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if reply == nil {
		t.Fatal("the master answered an unknown command without an error")
	}

	var th throttle
	t0 := time.Now()
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {reloadEvery / 2, false}, {reloadEvery, true}, {reloadEvery + 1, false}, {3 * reloadEvery, true}} {
		if got := th.ok(t0.Add(c.at)); got != c.want {
			t.Errorf("ok at +%v = %v, want %v", c.at, got, c.want)
		}
	}
	var let atomic.Int32
	var wg sync.WaitGroup
	at := t0.Add(10 * reloadEvery)
	for range 8 {
		wg.Go(func() {
			if th.ok(at) {
				let.Add(1)
			}
		})
	}
	wg.Wait()
	if n := let.Load(); n != 1 {
		t.Errorf("8 goroutines at once: %d let through, want 1", n)
	}
}
