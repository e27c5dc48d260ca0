package redlocktest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// failover: a cluster Node serves a shard's keys again as soon as the
// shard's replica took over from its dead master, not when its client
// reloads the cluster's map on its own (go-redis: on a MOVED, which a dead
// master never sends, or once a minute). Shard 0's master is killed while
// a Redlock keeps trying a key of shard 0; its replica is promoted
// (cluster-node-timeout 1 s, then an election) and the Redlock must get
// the key within 5 s of the promotion (go-redis without the Node's reload:
// 57 s; with it 30-310 ms here; rueidis, which refreshes on its own,
// 105-974 ms).
func (k *kit) failover(t *testing.T) {
	opts := redistest.Options{Args: []string{"--cluster-node-timeout", "1000"}}
	rc := redistest.StartRedisClusterT(t, 3, opts)
	replica, err := rc.AddReplica(0, opts)
	if err != nil {
		t.Fatal(err)
	}
	n := k.a.ClusterNode(t, rc.Addrs())
	r := newRedlock(t, []redlock.Node{n}, redlock.WithTTL(time.Second), redlock.WithNodeTimeout(250*time.Millisecond))
	ctx := context.Background()
	ky := key(t)
	for keySlot(t, n, ky) >= 16384/3 { // a key of shard 0
		ky = key(t)
	}
	l, err := r.TryLock(ctx, ky)
	if err != nil {
		t.Fatalf("before the failover: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	if err := rc.Shards[0].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The replica's role, asked of it alone: not through the adapter, whose
	// client may find the cluster behind the address (rueidis does) and
	// send a keyless ROLE to another of its nodes.
	rc0 := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { rc0.Close() })
	var promoted time.Time
	checkPromoted := func() {
		role, _ := rc0.Do(ctx, "role").Slice()
		if len(role) > 0 && role[0] == "master" && promoted.IsZero() {
			promoted = time.Now()
			t.Logf("replica promoted %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
		}
	}
	for deadline := killed.Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			// What the cluster made of the kill, for the next failure to say.
			view := redis.NewClient(&redis.Options{Addr: rc.Shards[1].Addr(), MaxRetries: -1})
			nodes, err := view.ClusterNodes(ctx).Result()
			_ = view.Close()
			repl, _ := rc0.Info(ctx, "replication").Result()
			t.Fatalf("no lock 20 s after shard 0's master was killed (replica promoted: %v)\nshard 1's CLUSTER NODES (%v):\n%s\nthe replica's INFO replication:\n%s",
				!promoted.IsZero(), err, nodes, repl)
		}
		checkPromoted()
		l, err := r.TryLock(ctx, ky)
		if err != nil {
			if !promoted.IsZero() && time.Since(promoted) > 5*time.Second {
				t.Fatalf("%v after the replica's promotion: %v; want the key", time.Since(promoted).Round(time.Millisecond), err)
			}
			continue
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
		if checkPromoted(); promoted.IsZero() { // promoted since the last look?
			t.Fatal("got the key with shard 0's master dead and its replica not promoted")
		}
		t.Logf("the key %v after the promotion", time.Since(promoted).Round(time.Millisecond))
		return
	}
}
