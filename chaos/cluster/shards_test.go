package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestShardsFaults: a master that is a Redis Cluster of three shards loses
// only the slots of a killed shard (cluster-require-full-coverage off), and
// the shard comes back in the cluster, empty.
func TestShardsFaults(t *testing.T) {
	s, err := NewShards(Options{N: 2}, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	addrs := s.Addrs()
	shards, ok := ShardAddrs(addrs[0])
	if !ok || len(shards) != 3 {
		t.Fatalf("ShardAddrs(%q) = %v, %v; want 3 shards", addrs[0], shards, ok)
	}
	if _, ok := ShardAddrs("127.0.0.1:6379"); ok {
		t.Error("ShardAddrs took a plain address")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: shards, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	// A key on each shard of master 0.
	keys := make([]string, 3)
	for n := 0; keys[0] == "" || keys[1] == "" || keys[2] == ""; n++ {
		k := fmt.Sprintf("k%d", n)
		sh, err := s.ShardOf(ctx, 0, k)
		if err != nil {
			t.Fatal(err)
		}
		if keys[sh] == "" {
			keys[sh] = k
		}
	}
	for _, k := range keys {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	if err := s.KillShard(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, keys[1]).Err(); err == nil {
		t.Errorf("GET %s on its killed shard succeeded", keys[1])
	}
	for _, k := range []string{keys[0], keys[2]} {
		if v, err := c.Get(ctx, k).Result(); err != nil || v != "v" {
			t.Errorf("GET %s on a live shard with shard 1 down = %q, %v; want v", k, v, err)
		}
	}
	if err := s.StartShard(0, 1); err != nil {
		t.Fatal(err)
	}
	var err1 error
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err1 = c.Get(ctx, keys[1]).Err(); errors.Is(err1, redis.Nil) {
			break
		}
	}
	if !errors.Is(err1, redis.Nil) {
		t.Errorf("GET %s on its restarted shard = %v; want it gone (redis.Nil)", keys[1], err1)
	}
	if err := s.Partition(0); !errors.Is(err, ErrNoPartition) {
		t.Errorf("Partition = %v; want ErrNoPartition", err)
	}
	if err := s.Heal(0); err != nil {
		t.Errorf("Heal = %v", err)
	}
	if err := errors.Join(s.Kill(0), s.Start(0)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keys[0], keys[2]} {
		if err := c.Get(ctx, k).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("GET %s after the whole master restarted = %v; want gone", k, err)
		}
	}
	if err := s.KillShard(1, 3); err == nil {
		t.Error("KillShard of shard 3 of 3: no error")
	}
}
