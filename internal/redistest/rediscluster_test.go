package redistest

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRedisClusterServesEverySlot: the three shards form one cluster that
// a ClusterClient writes keys of every shard to, each key on the shard
// that owns its slot; Stop ends every process.
func TestRedisClusterServesEverySlot(t *testing.T) {
	rc, err := StartRedisCluster(3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	seen := map[string]int{}
	for i := range 30 {
		k := fmt.Sprint("k", i)
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		n, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		seen[n.Options().Addr]++
	}
	if len(seen) != 3 {
		t.Errorf("30 keys landed on %v, want every one of 3 shards", seen)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	pids := []int{rc.Shards[0].Pid(), rc.Shards[1].Pid(), rc.Shards[2].Pid()}
	if err := rc.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !pidGone(pid) {
			t.Errorf("pid %d still exists after Stop", pid)
		}
	}
}
