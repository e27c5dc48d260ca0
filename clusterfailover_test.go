package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// TestClusterFailoverFound: a master that is a Redis Cluster serves a
// shard's keys again as soon as the shard's replica took over from its
// dead master, not when go-redis reloads the cluster's map on its own
// (every 60 s by default; a dead master answers no MOVED that would make
// it reload sooner). Shard 0's master is killed while a Redlock keeps
// trying a key of shard 0; its replica is promoted (cluster-node-timeout
// 1 s, then an election) and the Redlock must get the key within 2 s of
// the promotion (57 s without the Node's reload; 30-50 ms with it here).
func TestClusterFailoverFound(t *testing.T) {
	t.Parallel() // mostly waits for the cluster's failure detection
	opts := redistest.Options{Args: []string{"--cluster-node-timeout", "1000"}}
	rc := redistest.StartRedisClusterT(t, 3, opts)
	replica, err := rc.AddReplica(0, opts)
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	r := newRedlock(t, []redlock.Node{redlock.NewNode(cc)}, redlock.WithTTL(time.Second))
	ctx := context.Background()
	key := testKey(t)
	for i := 0; cc.ClusterKeySlot(ctx, key).Val() >= 16384/3; i++ { // a key of shard 0
		key = testKey(t)
	}
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("before the failover: %v", err)
	}
	unlock(t, l)

	if err := rc.Shards[0].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	rs := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rs.Close() })
	var promoted time.Time
	for deadline := killed.Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no lock 20 s after shard 0's master was killed (replica promoted: %v)", !promoted.IsZero())
		}
		if promoted.IsZero() {
			if role, _ := rs.Do(ctx, "role").Slice(); len(role) > 0 && role[0] == "master" {
				promoted = time.Now()
				t.Logf("replica promoted %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
			}
		}
		l, err := r.TryLock(ctx, key)
		if err != nil {
			if !promoted.IsZero() && time.Since(promoted) > 2*time.Second {
				t.Fatalf("%v after the replica's promotion: %v; want the key", time.Since(promoted).Round(time.Millisecond), err)
			}
			continue
		}
		unlock(t, l)
		if promoted.IsZero() {
			t.Fatal("got the key with shard 0's master dead and its replica not promoted")
		}
		t.Logf("the key %v after the promotion", time.Since(promoted).Round(time.Millisecond))
		return
	}
}
