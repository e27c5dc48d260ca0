package redlock_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// TestRedisClusterHandOff: a waiting Lock call is handed the key, or woken
// (fenced), by the holder's Unlock when the masters are Redis Clusters of
// three shards, far sooner than its backoff, whichever shard the key is on,
// and then holds the key on a quorum of clusters (a hand-off counted
// without the key would be two holders). The scripts SPUBLISH on a channel
// in the key's slot and the waiter SSUBSCRIBEs it there (ShardChannel).
// Before, a cluster gave no wake-ups: a script's PUBLISH counted only its
// own shard's listeners, so the waiter waited its backoff (0.6-1.3 s).
func TestRedisClusterHandOff(t *testing.T) {
	cs := clusterMasters(t)
	ctx := context.Background()
	const backoff = 1500 * time.Millisecond
	holder := newRedlock(t, clusterNodes(cs))
	waiter := newRedlock(t, clusterNodes(cs), redlock.WithBackoff(backoff, backoff))
	other := newRedlock(t, clusterNodes(cs))
	var took []time.Duration
	for i := range 6 {
		key := testKey(t)
		for _, fenced := range []bool{false, true} {
			var opts []redlock.Option
			if fenced {
				opts = append(opts, redlock.WithFencing())
			}
			w, d := handOffAfter(t, holder, waiter, key, opts...)
			took = append(took, d)
			vs := clusterGets(t, cs, key)
			held := count(vs, w.Value())
			t.Logf("key %d fenced=%v: holder's Unlock to waiter's lock %v; clusters hold %q (ours %q: %d)", i, fenced, d.Round(time.Millisecond), vs, w.Value(), held)
			if held < 2 {
				stolen, err := other.TryLock(ctx, key)
				t.Errorf("the waiter holds the lock (until %v) on %d clusters only; another TryLock: %v, %v", time.Until(w.Until()).Round(time.Millisecond), held, stolen != nil, err)
			}
			if d > backoff/4 {
				t.Errorf("the waiter got the lock %v after the Unlock; want far below its backoff %v (a hand-off or wake-up)", d.Round(time.Millisecond), backoff)
			}
			if err := w.Unlock(ctx); err != nil && !errors.Is(err, redlock.ErrNotHeld) {
				t.Error(err)
			}
			settle(holder)
			settle(waiter)
		}
	}
	t.Logf("Unlock to waiter holding, over %d waits: %v", len(took), took)
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
	nodes := []redlock.Node{redlock.NewNode(ring)}
	ctx := context.Background()
	const backoff = 1500 * time.Millisecond
	holder := newRedlock(t, nodes)
	waiter := newRedlock(t, nodes, redlock.WithBackoff(backoff, backoff))
	var took []time.Duration
	for i, key := range keysOnShards(t, ring, shards, testKey(t)+":") {
		for _, fenced := range []bool{false, true} {
			var opts []redlock.Option
			if fenced {
				opts = append(opts, redlock.WithFencing())
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
			nodes := []redlock.Node{redlock.NewNode(ring)}
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

// TestSentinelMasters: two masters that are each a primary and a replica
// watched by a Sentinel, and one plain master, taken as URLs. New accepts
// them as three masters, a lock is taken on each primary and released, and
// once both primaries are down the errors name the Sentinel-managed masters
// by their names. It starts real servers and fails, never skips, when
// redis-server is missing.
func TestSentinelMasters(t *testing.T) {
	start := func(opts redistest.Options) *redistest.Server { return redistest.StartServerT(t, opts) }
	var urls, names []string
	var primaries []*redistest.Server
	for _, master := range []string{"m1", "m2"} {
		p := start(redistest.Options{})
		host, port, _ := net.SplitHostPort(p.Addr())
		start(redistest.Options{Args: []string{"--replicaof", host, port}})
		s := start(redistest.Options{Sentinel: map[string]string{master: p.Addr()}})
		primaries = append(primaries, p)
		urls = append(urls, "redis+sentinel://"+s.Addr()+"?master_name="+master)
		names = append(names, "sentinel:"+master+"@"+s.Addr()+"/0")
	}
	urls = append(urls, masters().Addrs()[0])
	names = append(names, masters().Addrs()[0]+"/0")

	r, err := redlock.NewFromURLs(urls, redlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatalf("NewFromURLs(two Sentinel-managed masters and a plain one): %v", err)
	}
	defer r.Close()
	for i, n := range r.Nodes() {
		if n.Name() != names[i] {
			t.Errorf("master %d is named %q; want %q", i, n.Name(), names[i])
		}
	}

	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	// The Sentinel-managed masters' lock is on their primaries (TryLock
	// returns at a quorum: the last SET may still be on its way).
	for i, p := range primaries {
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		var v string
		for end := time.Now().Add(2 * time.Second); v != l.Value() && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			v, err = c.Get(ctx, key).Result()
		}
		c.Close()
		if v != l.Value() {
			t.Errorf("primary of %s holds %q (%v); want the lock's value", names[i], v, err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	// Both primaries down: too few masters, and the errors say which.
	for _, p := range primaries {
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = r.TryLock(ctx, testKey(t))
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &qe) || qe.Failed != 2 {
		t.Fatalf("TryLock with both primaries down = %v; want ErrNotObtained with a QuorumError of 2 failed", err)
	}
	t.Logf("with both primaries down: %v", err)
	for _, name := range names[:2] {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("the error %q does not name %s", err, name)
		}
	}
	if strings.Contains(err.Error(), "FailoverClient") {
		t.Errorf("the error %q names a master by go-redis's label", err)
	}
}

// TestSentinelFailoverWhileHeld: three masters, each a primary and a
// replica under a Sentinel. A fenced lock is held with auto-extend while
// every master fails over (SENTINEL FAILOVER: the replica, which had the
// key by replication, is promoted and the old primary becomes its
// replica). The lock is kept: it is on every new primary with a TTL, its
// Done stays open, Extend and the renewals reach the new primaries, another
// Redlock cannot take it, and Unlock removes it from every new primary.
// What a failover to a replica that lacked the key does is in
// docs/masters.md ("Sentinel-managed masters").
func TestSentinelFailoverWhileHeld(t *testing.T) {
	start := func(opts redistest.Options) *redistest.Server { return redistest.StartServerT(t, opts) }
	var urls []string
	var sentinels []*redis.SentinelClient
	var sentinelAddrs []string
	for _, master := range []string{"m1", "m2", "m3"} {
		p := start(redistest.Options{})
		host, port, _ := net.SplitHostPort(p.Addr())
		start(redistest.Options{Args: []string{"--replicaof", host, port}})
		s := start(redistest.Options{Sentinel: map[string]string{master: p.Addr()}})
		urls = append(urls, "redis+sentinel://"+s.Addr()+"?master_name="+master)
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { sc.Close() })
		sentinels, sentinelAddrs = append(sentinels, sc), append(sentinelAddrs, s.Addr())
	}
	ctx := context.Background()
	primary := func(i int) string {
		t.Helper()
		a, err := sentinels[i].GetMasterAddrByName(ctx, fmt.Sprintf("m%d", i+1)).Result()
		if err != nil {
			t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME m%d: %v", i+1, err)
		}
		return net.JoinHostPort(a[0], a[1])
	}
	// A failover needs the Sentinel to have found the replica.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for i, a := range sentinelAddrs {
		if err := redistest.WaitReplicaKnown(wctx, a, fmt.Sprintf("m%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}

	const ttl = 3 * time.Second
	r, err := redlock.NewFromURLs(urls, redlock.WithTTL(ttl), redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other, err := redlock.NewFromURLs(urls, redlock.WithTTL(ttl), redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	key := testKey(t)
	l, err := r.Lock(ctx, key, redlock.WithFencing(), redlock.WithAutoExtend())
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}

	old := make([]string, len(sentinels))
	for i, sc := range sentinels {
		old[i] = primary(i)
		if err := sc.Failover(ctx, fmt.Sprintf("m%d", i+1)).Err(); err != nil {
			t.Fatalf("SENTINEL FAILOVER m%d: %v", i+1, err)
		}
	}
	for i := range sentinels {
		for end := time.Now().Add(20 * time.Second); primary(i) == old[i]; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("m%d did not fail over in 20 s", i+1)
			}
		}
	}
	// Two TTLs on the new primaries: only the renewals keep the key.
	time.Sleep(2 * ttl)
	select {
	case <-l.Done():
		t.Fatalf("the lock ended across the failover: %v", context.Cause(l.Context()))
	default:
	}
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend after the failover: %v", err)
	}
	for i := range sentinels {
		c := redis.NewClient(&redis.Options{Addr: primary(i)})
		v, err := c.Get(ctx, key).Result()
		pttl, _ := c.PTTL(ctx, key).Result()
		c.Close()
		if v != l.Value() || pttl <= 0 || pttl > ttl {
			t.Errorf("new primary of m%d holds %q with TTL %v (%v); want the lock's value with a TTL in (0, %v]", i+1, v, pttl, err, ttl)
		}
	}
	if s, err := other.TryLock(ctx, key, redlock.WithFencing()); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("another Redlock's TryLock after the failover = %v, %v; want ErrNotObtained", s, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
	next, err := other.TryLock(ctx, key, redlock.WithFencing())
	if err != nil {
		t.Fatalf("TryLock after the Unlock: %v", err)
	}
	if next.Fence() <= l.Fence() {
		t.Errorf("the next holder's token %d is not above %d", next.Fence(), l.Fence())
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSentinelReplicaConfirmAndHandOff: a Sentinel-managed master made
// with NewFailoverNode is one server to the library (a *redis.Client that
// follows Sentinel to the primary): WithReplicaConfirm is accepted in New,
// a vote is confirmed by the primary's replica (WAIT on the vote's
// connection), and a call waiting in another Redlock is handed the key
// when the holder unlocks, far sooner than its backoff.
func TestSentinelReplicaConfirmAndHandOff(t *testing.T) {
	p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
	host, port, _ := net.SplitHostPort(p.Addr())
	redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
	s := redistest.StartServerT(t, redistest.Options{Sentinel: map[string]string{"m1": p.Addr()}})
	opt := &redis.FailoverOptions{MasterName: "m1", SentinelAddrs: []string{s.Addr()},
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true}
	c := redis.NewFailoverClient(opt)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, err := c.Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
			break
		} else if time.Now().After(end) {
			t.Fatalf("the replica did not catch up: WAIT 1 = %d, %v", n, err)
		}
	}
	nodes := []redlock.Node{redlock.NewFailoverNode(c, opt)}
	const backoff = 1500 * time.Millisecond
	holder := newRedlock(t, nodes, redlock.WithReplicaConfirm(1))
	waiter := newRedlock(t, nodes, redlock.WithReplicaConfirm(1), redlock.WithBackoff(backoff, backoff))
	key := testKey(t)
	w, d := handOffAfter(t, holder, waiter, key, redlock.WithFencing())
	t.Logf("holder's Unlock to waiter's lock: %v", d.Round(time.Millisecond))
	if d > backoff/4 {
		t.Errorf("the waiter got the lock %v after the Unlock; want far below its backoff %v (a hand-off)", d, backoff)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// tlsMasters starts n TLS-only masters with throwaway certificates and
// returns them and a client configuration they accept.
func tlsMasters(t *testing.T, n int) (*redistest.Cluster, *tls.Config) {
	t.Helper()
	files, err := redistest.GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return redistest.StartT(t, n, redistest.Options{TLS: files}), conf
}

// tlsNodes returns a Node per address over TLS with conf.
func tlsNodes(t *testing.T, addrs []string, conf *tls.Config) []redlock.Node {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, TLSConfig: conf, MaxRetries: -1, DialerRetries: 1,
			DialTimeout: time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return nodesOf(t, cs)
}

// TestTLSMasters: lock, fence, extend and unlock through TLS; a client that
// does not trust the masters' CA gets a NodeError per master, naming it and
// the certificate problem, within the node timeout; so does a rediss:// URL
// (it trusts the system's CAs only), until its options get the CA.
func TestTLSMasters(t *testing.T) {
	c, conf := tlsMasters(t, 3)
	ctx := context.Background()

	// A TLS handshake on a loaded machine can take longer than the default
	// 100ms node timeout.
	r := newRedlock(t, tlsNodes(t, c.Addrs(), conf), redlock.WithFencing(), redlock.WithNodeTimeout(time.Second))
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock over TLS: %v", err)
	}
	if l.Fence() == 0 {
		t.Error("no fence token over TLS")
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend over TLS: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock over TLS: %v", err)
	}

	otherFiles, err := redistest.GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wrongCA, err := otherFiles.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	urls := make([]string, 3)
	for i, a := range c.Addrs() {
		urls[i] = "rediss://" + a
	}
	// A node timeout long enough for a TLS handshake that loads the system
	// roots on a loaded machine under -race (500 ms ran out there once:
	// "context deadline exceeded" instead of the certificate's error).
	fromURLs, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fromURLs.Close() })
	for name, r := range map[string]*redlock.Redlock{
		"wrong CA":            newRedlock(t, tlsNodes(t, c.Addrs(), wrongCA), redlock.WithNodeTimeout(2*time.Second)),
		"rediss:// system CA": fromURLs,
	} {
		start := time.Now()
		_, err := r.TryLock(ctx, testKey(t))
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s: TryLock took %v", name, took)
		}
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || qe.Failed < qe.Quorum-1 || qe.Succeeded != 0 {
			t.Fatalf("%s: err %v, want a QuorumError with the masters failed", name, err)
		}
		for _, e := range qe.Errs {
			var ne *redlock.NodeError
			if !errors.As(e, &ne) || !strings.Contains(c.Addrs()[0]+c.Addrs()[1]+c.Addrs()[2], strings.TrimSuffix(ne.Node, "/0")) ||
				!strings.Contains(e.Error(), "certificate") {
				t.Errorf("%s: per-master error %v: want a NodeError naming the master and the certificate problem", name, e)
			}
		}
	}

	// rediss:// with the CA added to its options works.
	nodes := make([]redlock.Node, 3)
	for i, u := range urls {
		o, err := redlock.ParseMasterURL(u)
		if err != nil {
			t.Fatal(err)
		}
		if o.TLSConfig == nil {
			t.Fatalf("ParseMasterURL(%s) has no TLS config", u)
		}
		o.TLSConfig.RootCAs, o.TLSConfig.Certificates = conf.RootCAs, conf.Certificates
		cl := redis.NewClient(o)
		t.Cleanup(func() { cl.Close() })
		nodes[i] = redlock.NewNode(cl)
	}
	l, err = newRedlock(t, nodes, redlock.WithNodeTimeout(time.Second)).TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock over rediss:// with the CA: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTLSWakeups: wake-ups reach a waiting Redlock over TLS masters too
// (its subscriptions use the client's TLS configuration).
func TestTLSWakeups(t *testing.T) {
	c, conf := tlsMasters(t, 3)
	ctx := context.Background()
	holder := newRedlock(t, tlsNodes(t, c.Addrs(), conf), redlock.WithNodeTimeout(time.Second))
	waiter := newRedlock(t, tlsNodes(t, c.Addrs(), conf), redlock.WithNodeTimeout(time.Second))
	l, err := holder.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := handOff(t, l, waiter, 200*time.Millisecond); d > 500*time.Millisecond {
		t.Errorf("the waiter took the key %v after the release over TLS; its backoff was at least 1s, a wake-up takes a round trip", d)
	}
}

// aclNeeds is what each kind of lock needs of aclCommands, and what its
// release needs (without it, a refused acquire's key waits for its TTL).
var aclNeeds = map[string]struct{ all, release []string }{
	"plain":  {[]string{"+set", "+get", "+del", "+pexpire", "+eval"}, []string{"+get", "+del", "+eval"}},
	"fenced": {[]string{"+set", "+get", "+del", "+pexpire", "+time", "+eval"}, []string{"+get", "+del", "+eval"}},
	"owned": { // the owned-hold script, fenced (lua/hold.lua)
		[]string{"+set", "+get", "+del", "+pexpire", "+time", "+eval", "+type", "+hget", "+hset", "+hdel", "+hgetall"},
		[]string{"+del", "+pexpire", "+time", "+eval", "+type", "+hget", "+hdel", "+hgetall"},
	},
}

// aclMasters starts three masters knowing the user "locker" with the minimal
// rule and, for each command, a user "no-CMD" lacking it.
func aclMasters(t *testing.T) *redistest.Cluster {
	args := aclUser("locker")
	for _, c := range aclCommands {
		args = append(args, aclUser("no-"+c[1:], c)...)
	}
	return redistest.StartT(t, 3, redistest.Options{Args: args})
}

// TestACLMinimalUser: a user allowed only docs/masters.md's commands can lock,
// fence, extend and unlock; a user lacking any one of them gets, from the
// call that needs it, a NodeError per master naming it and the NOPERM
// refusal — counted as failed, never as refused or succeeded.
func TestACLMinimalUser(t *testing.T) {
	c := aclMasters(t)
	ctx := context.Background()

	r := userRedlock(t, c.Addrs(), "locker", redlock.WithFencing())
	for range 2 { // the second round finds the scripts cached
		l, err := r.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatalf("TryLock as locker: %v", err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("Extend as locker: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock as locker: %v", err)
		}
	}

	// Scripts go as EVAL: after SCRIPT FLUSH they, renewals included, need
	// nothing the user may not run (SCRIPT LOAD, say).
	for _, cl := range clients(t, c.Addrs()) {
		if err := cl.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := r.TryLock(ctx, testKey(t), redlock.WithAutoExtend(), redlock.WithTTL(300*time.Millisecond), redlock.WithMinValidity(0))
	if err != nil {
		t.Fatalf("TryLock as locker after SCRIPT FLUSH: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatalf("auto-extend as locker lost the lock: %v", context.Cause(l.Context()))
	case <-time.After(700 * time.Millisecond):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock as locker after renewals: %v", err)
	}

	owned, err := r.TryLock(ctx, testKey(t), redlock.WithOwner("A"))
	if err == nil {
		err = errors.Join(owned.Extend(ctx, 5*time.Second), owned.Unlock(ctx))
	}
	if err != nil {
		t.Fatalf("owned lock as locker: %v", err)
	}

	cs := clients(t, c.Addrs())
	for _, kind := range []string{"fenced", "plain", "owned"} {
		for _, cmd := range aclNeeds[kind].all {
			user := "no-" + cmd[1:]
			t.Run(user+"/"+kind, func(t *testing.T) {
				var opts []redlock.Option
				switch kind {
				case "fenced":
					opts = append(opts, redlock.WithFencing())
				case "owned":
					opts = append(opts, redlock.WithFencing(), redlock.WithOwner("A"))
				}
				r := userRedlock(t, c.Addrs(), user)
				key := testKey(t)
				err := lockExtendUnlock(ctx, r, key, opts...)
				if err == nil {
					t.Fatal("lock, extend and unlock all succeeded")
				}
				var qe *redlock.QuorumError
				if !errors.As(err, &qe) || qe.Succeeded >= qe.Quorum || qe.Refused != 0 || len(qe.Errs) == 0 {
					t.Fatalf("err %v: want a QuorumError with failed masters only", err)
				}
				for _, e := range qe.Errs {
					var ne *redlock.NodeError
					if !errors.As(e, &ne) || !slices.Contains(c.Addrs(), strings.TrimSuffix(ne.Node, "/0")) ||
						!aclRefusal(e) {
						t.Errorf("per-master error %v: want a NodeError naming the master and the ACL refusal", e)
					}
				}
				// A refused acquire is rolled back, unless the release is
				// what the user cannot run: the key then waits for its TTL.
				settle(r)
				if !slices.Contains(aclNeeds[kind].release, cmd) {
					for i, c := range cs {
						if c.Exists(ctx, key).Val() != 0 {
							t.Errorf("master %d holds the key after the failure", i)
						}
					}
				}
			})
		}
	}
}

// lockExtendUnlock runs the three calls and returns the first error.
func lockExtendUnlock(ctx context.Context, r *redlock.Redlock, key string, opts ...redlock.Option) error {
	l, err := r.TryLock(ctx, key, opts...)
	if err != nil {
		return err
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		_ = l.Unlock(ctx)
		return err
	}
	return l.Unlock(ctx)
}

// TestNameOfClients: NewNode and NewFailoverNode name each kind of client by
// its addresses, never by a pointer, and in an order-independent way; the
// clients are made without servers (go-redis dials lazily).
func TestNameOfClients(t *testing.T) {
	closeLater := func(c interface{ Close() error }) { t.Cleanup(func() { c.Close() }) }
	failover := func(master string, db int, sentinels ...string) redlock.Node {
		o := &redis.FailoverOptions{MasterName: master, SentinelAddrs: sentinels, DB: db, Password: "topsecret"}
		c := redis.NewFailoverClient(o)
		closeLater(c)
		return redlock.NewFailoverNode(c, o)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"h2:7001", "h1:7000", "h2:7001"}, Password: "topsecret"})
	closeLater(cluster)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"b": "h2:6379", "a": "h1:6379"}, DB: 2, Password: "topsecret"})
	closeLater(ring)
	plain := redis.NewClient(&redis.Options{Addr: "h:6379", DB: 3, Password: "topsecret"})
	closeLater(plain)
	unnamed := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m1", SentinelAddrs: []string{"s1:26379"}})
	closeLater(unnamed)

	for _, tc := range []struct {
		node redlock.Node
		want string
	}{
		{redlock.NewNode(plain), "h:6379/3"},
		{redlock.NewNode(cluster), "cluster:h1:7000,h2:7001"},
		{redlock.NewNode(ring), "ring:a=h1:6379,b=h2:6379/2"},
		{failover("mymaster", 0, "s2:26379", "s1:26379"), "sentinel:mymaster@s1:26379,s2:26379/0"},
		{failover("other", 1, "s1:26379"), "sentinel:other@s1:26379/1"},
		{redlock.NewNode(unnamed), "sentinel:?/0"},
		// Not a failover client: named by what it talks to, not by opt.
		{redlock.NewFailoverNode(plain, &redis.FailoverOptions{MasterName: "m"}), "h:6379/3"},
	} {
		if got := tc.node.Name(); got != tc.want {
			t.Errorf("Name() = %q; want %q", got, tc.want)
		}
		if n := tc.node.Name(); strings.Contains(n, "topsecret") || strings.Contains(n, "0x") {
			t.Errorf("Name() = %q shows a password or a pointer", n)
		}
	}
	if redlock.NewFailoverNode(nil, &redis.FailoverOptions{}) != nil || redlock.NewFailoverNode(unnamed, nil) != nil {
		t.Error("NewFailoverNode with a nil client or options is not nil")
	}

	// Two Sentinel-managed masters and a plain one: three masters.
	a, b := failover("m1", 0, "s1:26379"), failover("m2", 0, "s1:26379")
	r, err := redlock.New([]redlock.Node{a, b, redlock.NewNode(plain)})
	if err != nil {
		t.Fatalf("New(two Sentinel-managed masters and a plain one): %v", err)
	}
	r.Close()
	// The same Sentinel-managed master twice, its Sentinels in another order.
	_, err = redlock.New([]redlock.Node{failover("m1", 0, "s1:26379", "s2:26379"), failover("m1", 0, "s2:26379", "s1:26379"), redlock.NewNode(plain)})
	if ce := (*redlock.ConfigError)(nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "same master sentinel:m1@s1:26379,s2:26379/0") {
		t.Errorf("New(the same Sentinel-managed master twice) = %v; want a *ConfigError naming it", err)
	}
	// Failover clients NewNode cannot name: New says what to do.
	unnamed2 := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m2", SentinelAddrs: []string{"s1:26379"}})
	closeLater(unnamed2)
	_, err = redlock.New([]redlock.Node{redlock.NewNode(unnamed), redlock.NewNode(unnamed2), redlock.NewNode(plain)})
	if err == nil || !strings.Contains(err.Error(), "NewFailoverNode") || strings.Contains(err.Error(), "same master") {
		t.Errorf("New(two failover clients through NewNode) = %v; want an error pointing to NewFailoverNode", err)
	}
}

// TestNewNamedNode: a cluster client without seed addresses does not tell
// which cluster it reaches; New says to name it with NewNamedNode, which
// keeps its routing by key (a NodeFunc, which the hint named before issue
// 39, made it look like one server: replica confirmation was accepted and
// its WAIT went to any shard). An empty name is refused.
func TestNewNamedNode(t *testing.T) {
	slots := func(context.Context) ([]redis.ClusterSlot, error) { return nil, nil }
	seedless := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: slots})
		t.Cleanup(func() { c.Close() })
		return c
	}
	_, err := redlock.New([]redlock.Node{redlock.NewNode(seedless()), redlock.NewNode(seedless())})
	if err == nil || !strings.Contains(err.Error(), "NewNamedNode") {
		t.Errorf("New(two cluster clients without seeds) = %v; want an error pointing to NewNamedNode", err)
	}
	a, b := redlock.NewNamedNode(seedless(), "east"), redlock.NewNamedNode(seedless(), "west")
	if a.Name() != "east" || a.Traits().Routing != redlock.RouteByKey || a.Traits().NameHint != "" {
		t.Errorf("NewNamedNode(cluster, east): name %q, traits %+v; want east, RouteByKey, no hint", a.Name(), a.Traits())
	}
	r, err := redlock.New([]redlock.Node{a, b})
	if err != nil {
		t.Fatalf("New(two named cluster Nodes): %v", err)
	}
	r.Close()
	_, err = redlock.New([]redlock.Node{a, b}, redlock.WithReplicaConfirm(1))
	wantReplicaRefusal(t, "New(named cluster Nodes, WithReplicaConfirm)", err, "east", "routes commands by key")
	_, err = redlock.New([]redlock.Node{redlock.NewNamedNode(seedless(), "")})
	if ce := (*redlock.ConfigError)(nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "empty name") {
		t.Errorf("New(a Node named \"\") = %v; want a *ConfigError on its empty name", err)
	}
	if redlock.NewNamedNode(nil, "x") != nil {
		t.Error("NewNamedNode(nil) is not nil")
	}
}

func TestParseMasterURL(t *testing.T) {
	for _, tc := range []struct {
		url, addr, user, pass string
		db                    int
		tls                   bool
	}{
		{"127.0.0.1:7000", "127.0.0.1:7000", "", "", 0, false},
		{" redis://h:1/2 ", "h:1", "", "", 2, false},
		{"redis://u:p%40ss@h:1/3", "h:1", "u", "p@ss", 3, false},
		{"redis://:secret@h:1", "h:1", "", "secret", 0, false},
		{"rediss://h:6380/0", "h:6380", "", "", 0, true},
		{"[::1]:7000", "[::1]:7000", "", "", 0, false},
	} {
		o, err := redlock.ParseMasterURL(tc.url)
		if err != nil {
			t.Errorf("ParseMasterURL(%q): %v", tc.url, err)
			continue
		}
		if o.Addr != tc.addr || o.Username != tc.user || o.Password != tc.pass || o.DB != tc.db || (o.TLSConfig != nil) != tc.tls {
			t.Errorf("ParseMasterURL(%q) = addr %q user %q pass %q db %d tls %v; want %q %q %q %d %v",
				tc.url, o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil, tc.addr, tc.user, tc.pass, tc.db, tc.tls)
		}
		if o.MaxRetries != -1 || o.DialerRetries != 1 || !o.ContextTimeoutEnabled {
			t.Errorf("ParseMasterURL(%q): MaxRetries %d, DialerRetries %d, ContextTimeoutEnabled %v; want -1, 1, true",
				tc.url, o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled)
		}
	}
	o, err := redlock.ParseMasterURL("redis://h:1?max_retries=2&dial_timeout=3s")
	if err != nil || o.MaxRetries != 2 || o.DialTimeout != 3*time.Second {
		t.Errorf("URL options: %+v, %v; want the URL's max_retries and dial_timeout kept", o, err)
	}
}

func TestParseMasterURLErrorsHidePassword(t *testing.T) {
	const secret = "s3cr#t/pw"
	for _, tc := range []struct{ url, says string }{
		{"", "empty"},
		{"http://h:1", "scheme"},
		{"redis://h:1/notadb", "database"},
		{"redis://h:1?bogus=1", "bogus"},
		{"redis://u:" + secret + "@h:1/0", "percent-encode"},
		{"redis://u:" + secret + "@h:1/x", "percent-encode"},
		{"redis://u:s3cret@h:1/x", "u:xxxxx@h:1/x"},
		{"rediss://:s3cret@h:1?nope=1", "nope"},
	} {
		_, err := redlock.ParseMasterURL(tc.url)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("ParseMasterURL(%q) = %v; want a *ConfigError", tc.url, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.says) {
			t.Errorf("ParseMasterURL(%q): %q does not say %q", tc.url, msg, tc.says)
		}
		for _, part := range []string{"s3cr", "cret", "#t/pw"} {
			if strings.Contains(msg, part) {
				t.Errorf("ParseMasterURL(%q): %q shows the password", tc.url, msg)
			}
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:p@h:1/0":     "redis://u:xxxxx@h:1/0",
		"redis://:p@ss@h:1":     "redis://:xxxxx@h:1",
		"redis://u@h:1":         "redis://u@h:1",
		"redis://h:1/0":         "redis://h:1/0",
		"u:p/w#x@h:1":           "u:xxxxx@h:1",
		"rediss://u:%40@h:6380": "rediss://u:xxxxx@h:6380",
	} {
		if got := redlock.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestNewFromURLs(t *testing.T) {
	addrs := masters().Addrs()[:3]
	urls := []string{addrs[0], "redis://" + addrs[1] + "/0", "redis://" + addrs[2] + "?max_retries=1"}
	r, err := redlock.NewFromURLs(urls, redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := r.TryLock(ctx, testKey(t)); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("TryLock after Close: %v; want ErrClosed", err)
	}
}

func TestNewFromURLsBadInput(t *testing.T) {
	addr := masters().Addrs()[0]
	for _, tc := range []struct {
		urls []string
		says []string
	}{
		{nil, []string{"at least one"}},
		{[]string{addr, "redis://u:topsecret@h:1/x", "ftp://h"}, []string{"u:xxxxx@h:1/x", "ftp://h"}},
		{[]string{addr, addr}, []string{"same master"}},
	} {
		r, err := redlock.NewFromURLs(tc.urls)
		if err == nil {
			r.Close()
			t.Errorf("NewFromURLs(%q) succeeded", tc.urls)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("NewFromURLs(%q): %q does not say %q", tc.urls, err, s)
			}
		}
		if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("NewFromURLs(%q): %q shows the password", tc.urls, err)
		}
	}
	if _, err := redlock.NewFromURLs([]string{addr}, redlock.WithTTL(-1)); err == nil {
		t.Error("NewFromURLs with a bad option succeeded")
	}
}

// TestParseMasterKinds: each scheme gives the options of its kind, read by
// go-redis's parser for it, with the defaults ParseMasterURL sets.
func TestParseMasterKinds(t *testing.T) {
	for _, tc := range []struct {
		url  string
		kind string // client, sentinel or cluster
		// want: "addr|user|pass|db|tls" for a client, "master|sentinels|user|pass|sentinel-pass|db|tls"
		// for a Sentinel URL, "addrs|user|pass|tls" for a cluster.
		want string
	}{
		{"h:1", "client", "h:1|||0|false"},
		{"redis://u:p%40ss@h:1/3", "client", "h:1|u|p@ss|3|false"},
		{"redis+sentinel://s1:26379?master_name=mymaster", "sentinel", "mymaster|s1:26379||||0|false"},
		{"redis+sentinel://s1:26379/2?master_name=m&addr=s2:26379&addr=s3:26379", "sentinel", "m|s1:26379,s2:26379,s3:26379||||2|false"},
		{"rediss+sentinel://:spw@s1:26379?master_name=m&username=locker&password=p%26w", "sentinel", "m|s1:26379|locker|p&w|spw|0|true"},
		{"REDIS+SENTINEL://s1:26379?master_name=m", "sentinel", "m|s1:26379||||0|false"},
		{"redis+cluster://h1:7000", "cluster", "h1:7000|||false"},
		{"redis+cluster://u:pw@h1:7000/?addr=h2:7001", "cluster", "h1:7000,h2:7001|u|pw|false"},
		{"rediss+cluster://h1:7000/0", "cluster", "h1:7000|||true"},
	} {
		m, err := redlock.ParseMaster(tc.url)
		if err != nil {
			t.Errorf("ParseMaster(%q): %v", tc.url, err)
			continue
		}
		var kind, got string
		var maxRetries, dialerRetries int
		var ctxTimeout bool
		switch {
		case m.Client != nil && m.Sentinel == nil && m.Cluster == nil:
			o := m.Client
			kind = "client"
			got = fmt.Sprintf("%s|%s|%s|%d|%v", o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil)
			maxRetries, dialerRetries, ctxTimeout = o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled
		case m.Sentinel != nil && m.Client == nil && m.Cluster == nil:
			o := m.Sentinel
			kind = "sentinel"
			got = fmt.Sprintf("%s|%s|%s|%s|%s|%d|%v", o.MasterName, strings.Join(o.SentinelAddrs, ","), o.Username, o.Password, o.SentinelPassword, o.DB, o.TLSConfig != nil)
			maxRetries, dialerRetries, ctxTimeout = o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled
		case m.Cluster != nil && m.Client == nil && m.Sentinel == nil:
			o := m.Cluster
			kind = "cluster"
			got = fmt.Sprintf("%s|%s|%s|%v", strings.Join(o.Addrs, ","), o.Username, o.Password, o.TLSConfig != nil)
			maxRetries, dialerRetries, ctxTimeout = o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled
			if o.MinRetryBackoff != -1 || o.MaxRetryBackoff != -1 {
				t.Errorf("ParseMaster(%q): MinRetryBackoff %v, MaxRetryBackoff %v; want -1, -1 (no sleep before a retry)", tc.url, o.MinRetryBackoff, o.MaxRetryBackoff)
			}
		default:
			t.Errorf("ParseMaster(%q) = %+v; want exactly one kind set", tc.url, m)
			continue
		}
		if kind != tc.kind || got != tc.want {
			t.Errorf("ParseMaster(%q) = %s %s; want %s %s", tc.url, kind, got, tc.kind, tc.want)
		}
		if maxRetries != -1 || dialerRetries != 1 || !ctxTimeout {
			t.Errorf("ParseMaster(%q): MaxRetries %d, DialerRetries %d, ContextTimeoutEnabled %v; want -1, 1, true",
				tc.url, maxRetries, dialerRetries, ctxTimeout)
		}
	}
	m, err := redlock.ParseMaster("redis+sentinel://s:1?master_name=m&max_retries=2&dial_timeout=3s")
	if err != nil || m.Sentinel.MaxRetries != 2 || m.Sentinel.DialTimeout != 3*time.Second {
		t.Errorf("Sentinel URL options: %+v, %v; want the URL's max_retries and dial_timeout kept", m.Sentinel, err)
	}
}

// TestParseMasterBadInput: a URL that names no master, or more than one, or
// is ambiguous, is a *ConfigError that says what was wrong and what would be
// right, without the password.
func TestParseMasterBadInput(t *testing.T) {
	const pw = "topsecret"
	for _, tc := range []struct{ url, says, right string }{
		{"redis://h:1?master_name=m", "master_name is a Sentinel parameter", "redis+sentinel://"},
		{"redis://:" + pw + "@h:1?addr=h:2", "addr names more servers", "redis+cluster://"},
		{"redis+sentinel://:" + pw + "@s:1", "no master_name", "?master_name=NAME"},
		{"redis+sentinel://s:1?master_name=m&password=" + pw + "&bogus=1", "bogus", "redis+sentinel://"},
		{"redis+sentinel://s:1?master_name=m&replica_only=true&password=" + pw, "replica_only", "primary"},
		{"redis+sentinel://s:1?master_name=m&route_randomly=true", "route_randomly", "primary"},
		{"redis+sentinel://s:1/x?master_name=m", "database", "redis+sentinel://"},
		{"redis+sentinel://s:1?master_name=m&addr=nope", "addr", "redis+sentinel://"},
		{"redis+cluster://u:" + pw + "@h:1/2", "database 0 only", "redis+cluster://"},
		{"redis+cluster://h:1?master_name=m", "master_name", "redis+cluster://"},
		{"redis+ring://h:1", "unknown scheme redis+ring", "redis+sentinel://"},
		{"unix+sentinel://h:1", "unknown scheme", "redis+cluster://"},
		{"redis+sentinel://u:" + pw + "/#@s:1?master_name=m", "percent-encode", "%40"},
		{"http://h:1", "scheme", "redis://"},
	} {
		_, err := redlock.ParseMaster(tc.url)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("ParseMaster(%q) = %v; want a *ConfigError", tc.url, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.says) || !strings.Contains(msg, tc.right) {
			t.Errorf("ParseMaster(%q): %q does not say %q and %q", tc.url, msg, tc.says, tc.right)
		}
		if strings.Contains(msg, pw) || strings.Contains(msg, "cret") {
			t.Errorf("ParseMaster(%q): %q shows the password", tc.url, msg)
		}
	}
	// ParseMasterURL keeps its type: it points to ParseMaster for the others.
	for _, u := range []string{"redis+sentinel://:" + pw + "@s:1?master_name=m", "redis+cluster://h:1"} {
		_, err := redlock.ParseMasterURL(u)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "use ParseMaster") || strings.Contains(err.Error(), pw) {
			t.Errorf("ParseMasterURL(%q) = %v; want a *ConfigError pointing to ParseMaster, without the password", u, err)
		}
	}
}

// TestRedactURLQueryPasswords: a Sentinel URL's master password is a query
// parameter; RedactURL hides it, also where it overlaps the user
// information.
func TestRedactURLQueryPasswords(t *testing.T) {
	for in, want := range map[string]string{
		"redis+sentinel://s:1?master_name=m&password=p":                 "redis+sentinel://s:1?master_name=m&password=xxxxx",
		"redis+sentinel://:sp@s:1?password=p&username=u":                "redis+sentinel://:xxxxx@s:1?password=xxxxx&username=u",
		"redis+sentinel://s:1?sentinel_password=p":                      "redis+sentinel://s:1?sentinel_password=xxxxx",
		"redis+sentinel://s:1?master_name=m&password=p@x":               "redis+sentinel://s:xxxxx",
		"redis://u:a?password=b@h:1":                                    "redis://u:xxxxx",
		"redis+sentinel://s:1?master_name=m&mypassword=p&client_name=c": "redis+sentinel://s:1?master_name=m&mypassword=p&client_name=c",
	} {
		if got := redlock.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestNewFromURLsNames: NewFromURLs names the masters of each kind by their
// addresses; no master needs to run (the clients dial lazily).
func TestNewFromURLsNames(t *testing.T) {
	urls := []string{
		"redis+sentinel://s1:26379?master_name=m1&addr=s2:26379&password=topsecret",
		"redis+sentinel://s2:26379?master_name=m2&addr=s1:26379",
		"redis+cluster://:topsecret@h2:7001?addr=h1:7000",
		"redis://:topsecret@h:6379/1",
		"h:6380",
	}
	r, err := redlock.NewFromURLs(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, n := range r.Nodes() {
		names = append(names, n.Name())
	}
	want := "sentinel:m1@s1:26379,s2:26379/0 sentinel:m2@s1:26379,s2:26379/0 cluster:h1:7000,h2:7001 h:6379/1 h:6380/0"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("names %s; want %s", got, want)
	}
	// The same Sentinel-managed master twice, its Sentinels in another order.
	_, err = redlock.NewFromURLs([]string{urls[0], "redis+sentinel://s2:26379?master_name=m1&addr=s1:26379", "h:6380"})
	if err == nil || !strings.Contains(err.Error(), "same master sentinel:m1@s1:26379,s2:26379/0") {
		t.Errorf("NewFromURLs(the same Sentinel-managed master twice) = %v; want it refused by name", err)
	}
}

// TestNewFromURLsQuietWhenMastersDown runs a program that locks and unlocks
// in a loop with NewFromURLs while 2 of its 5 masters are down, with
// go-redis's logger as a user's program has it (this test binary silences
// it in TestMain, so the program is the test binary run again), and counts
// the lines it writes on stderr: go-redis prints one per master that went
// down, and none with the README's line.
func TestNewFromURLsQuietWhenMastersDown(t *testing.T) {
	if urls := os.Getenv(quietChildEnv); urls != "" {
		if os.Getenv(quietLineEnv) != "" {
			redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial"}))
		}
		lockLoop(t, strings.Split(urls, ","), 2*time.Second)
		return
	}
	c := redistest.StartT(t, 5, redistest.Options{})
	down := c.Servers[3:]
	for _, s := range down {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		env       string
		wantLines int
	}{
		{"library", "", len(down)},
		{"README line", quietLineEnv + "=1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNewFromURLsQuietWhenMastersDown$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), quietChildEnv+"="+strings.Join(c.Addrs(), ","), tc.env)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("the locking program: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			t.Logf("the locking program:\n%s", stdout.String())
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if stderr.Len() == 0 {
				lines = nil
			}
			t.Logf("%d lines on stderr with %d of %d masters down", len(lines), len(down), len(c.Servers))
			if len(lines) > tc.wantLines {
				t.Errorf("%d lines on stderr; want at most %d (one per master down: go-redis's dial failure):\n%s",
					len(lines), tc.wantLines, strings.Join(lines[:min(len(lines), 10)], "\n"))
			}
			for _, l := range lines {
				if !strings.Contains(l, "failed to dial") {
					t.Errorf("a line on stderr that is not go-redis's dial failure: %s", l)
				}
			}
		})
	}
}

// lockLoop locks and unlocks one key over urls until d has passed, and
// fails unless nearly every attempt took the lock.
func lockLoop(t *testing.T, urls []string, d time.Duration) {
	r, err := redlock.NewFromURLs(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var taken, failed int
	for end := time.Now().Add(d); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		lock, err := r.Lock(ctx, "quiet")
		if err == nil {
			taken++
			err = lock.Unlock(ctx)
		}
		cancel()
		if err != nil {
			failed++
		}
	}
	t.Logf("%d locks taken and released, %d failed, in %v", taken, failed, d)
	if taken == 0 || failed > taken/10 {
		t.Errorf("%d locks taken, %d failed: want nearly all taken with 3 of 5 masters up", taken, failed)
	}
}

// logRecorder keeps go-redis's log lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Printf(_ context.Context, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// TestNoSecretsInErrors: with a wrong password, with the right one against a
// master that is down, and with a URL that does not parse, no error text
// (in any verb), node name or go-redis log line shows the password.
func TestNoSecretsInErrors(t *testing.T) {
	rec := &logRecorder{}
	redis.SetLogger(rec)
	t.Cleanup(func() { redis.SetLogger(quietLogger{}) })

	const wrong = "wrong-pw-Kx3m"
	up := aclMasters(t)
	dead := redistest.StartT(t, 1, redistest.Options{})
	deadAddr := dead.Addrs()[0]
	if err := dead.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var shown []string // everything a user could see
	check := func(what string, err error) {
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		shown = append(shown, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
	}

	var urls []string
	for _, a := range up.Addrs() {
		urls = append(urls, "redis://locker:"+wrong+"@"+a)
	}
	urls = append(urls[:2], "redis://locker:"+aclPassword+"@"+deadAddr)
	r, err := redlock.NewFromURLs(urls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for _, n := range r.Nodes() {
		shown = append(shown, n.Name())
	}
	_, err = r.TryLock(ctx, testKey(t))
	check("wrong password and a dead master", err)
	if err != nil && !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("error %q does not say the password was refused", err)
	}

	deadOnly, err := redlock.NewFromURLs(urls[2:])
	if err != nil {
		t.Fatal(err)
	}
	_, err = deadOnly.TryLock(ctx, testKey(t))
	check("a dead master", err)
	deadOnly.Close()

	_, err = redlock.NewFromURLs([]string{"redis://locker:" + aclPassword + "/#@" + up.Addrs()[0]})
	check("unparsable URL", err)
	_, err = redlock.NewFromURLs([]string{"redis://locker:" + aclPassword + "@" + up.Addrs()[0] + "/notadb"})
	check("bad database", err)

	r.Close()
	rec.mu.Lock()
	shown = append(shown, rec.lines...)
	rec.mu.Unlock()
	for _, s := range shown {
		for _, secret := range []string{wrong, aclPassword} {
			if strings.Contains(s, secret) {
				t.Errorf("a password shows in %q", s)
			}
		}
	}
}
