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

// TestShardsMoveSlot: MoveSlot moves a key's slot on one master, with the
// key, its value and its expiry, to the shard asked for; ShardOf follows
// it, the other master is left alone, and a move to where the slot is
// already does nothing.
func TestShardsMoveSlot(t *testing.T) {
	s, err := NewShards(Options{N: 2}, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := t.Context()
	clients := make([]*redis.ClusterClient, 2)
	for i, addr := range s.Addrs() {
		shards, _ := ShardAddrs(addr)
		clients[i] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: shards})
		t.Cleanup(func() { clients[i].Close() })
	}
	const key = "moving"
	for _, c := range clients {
		if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.NumShards(); n != 3 {
		t.Fatalf("NumShards = %d, want 3", n)
	}
	first, err := s.ShardOf(ctx, 0, key)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		to := (first + round + 1) % 3
		from, err := s.MoveSlot(ctx, 0, key, to)
		if err != nil {
			t.Fatalf("round %d: MoveSlot to %d: %v", round, to, err)
		}
		if want := (first + round) % 3; from != want {
			t.Errorf("round %d: MoveSlot moved from shard %d, want %d", round, from, want)
		}
		if got, err := s.ShardOf(ctx, 0, key); err != nil || got != to {
			t.Errorf("round %d: ShardOf after the move = %d, %v; want %d", round, got, err, to)
		}
		if v, err := clients[0].Get(ctx, key).Result(); err != nil || v != "v" {
			t.Errorf("round %d: GET after the move = %q, %v; want v", round, v, err)
		}
		if ttl, err := clients[0].PTTL(ctx, key).Result(); err != nil || ttl <= 50*time.Second {
			t.Errorf("round %d: PTTL after the move = %v, %v; want the minute it was set for, less a little", round, ttl, err)
		}
	}
	if got, err := s.ShardOf(ctx, 1, key); err != nil || got != first {
		t.Errorf("ShardOf on the other master = %d, %v; want %d, unmoved", got, err, first)
	}
	at := (first + 4) % 3
	if from, err := s.MoveSlot(ctx, 0, key, at); err != nil || from != at {
		t.Errorf("MoveSlot to the shard it is on = %d, %v; want %d, nil", from, err, at)
	}
	if _, err := s.MoveSlot(ctx, 0, key, 3); err == nil {
		t.Error("MoveSlot to shard 3 of 3: no error")
	}
}
