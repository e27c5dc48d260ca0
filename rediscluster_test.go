package redlock

import (
	"context"
	"errors"
	"sync"
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
			MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
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

// TestRedisClusterHandOff measures what a waiting Lock call gets from the
// holder's Unlock when the masters are Redis Clusters (see the README): a
// waiter with a long backoff, the time from the holder's Unlock to the
// waiter holding the lock, and that the waiter then holds the key on a
// quorum of clusters (a hand-off counted without the key would be two
// holders).
func TestRedisClusterHandOff(t *testing.T) {
	cs := clusterMasters(t)
	ctx := context.Background()
	const backoff = 1500 * time.Millisecond
	holder := newRedlock(t, clusterNodes(cs))
	waiter := newRedlock(t, clusterNodes(cs), WithBackoff(backoff, backoff))
	other := newRedlock(t, clusterNodes(cs))
	var took []time.Duration
	for i := range 6 {
		key := testKey(t)
		for _, fenced := range []bool{false, true} {
			var opts []Option
			if fenced {
				opts = append(opts, WithFencing())
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
			if d > backoff+time.Second {
				t.Errorf("the waiter got the lock %v after the Unlock, more than its backoff %v", d, backoff)
			}
			if err := w.Unlock(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
				t.Error(err)
			}
			holder.bg.Wait()
			waiter.bg.Wait()
		}
	}
	t.Logf("Unlock to waiter holding, over %d waits: %v", len(took), took)
}

// TestClusterReplicaConfirmRefused: WithReplicaConfirm on a Redlock that
// has a Redis Cluster master is refused, in New and per call, with a
// *ConfigError that names the option and says why, rather than failing
// every vote of that master at run time (errKeyRoutedWait).
func TestClusterReplicaConfirmRefused(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(),
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	nodes := append([]Node{NewNode(c)}, nodesOf(t, clients(t, masters.Addrs()[:2]))...)
	checkReplicaRefusal(t, nodes, "Redis Cluster")
}
