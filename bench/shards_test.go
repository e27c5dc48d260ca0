package bench

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// BenchmarkDistinctKeysShards is BenchmarkDistinctKeys over 3 masters: plain
// redis-servers (for reference), then Redis Clusters of one shard, then of
// three (the keys spread over the shards by slot). It reports locks per
// second. It starts the clusters itself (3 and 9 redis-server processes).
//
// On this repository's 2-core machine the client and every shard share the
// same two cores, so three shards cannot give the masters more CPU than
// one: the benchmark measures what the shards cost (more connections, a
// client routing by slot), not what they gain on machines where each shard
// has a core of its own.
func BenchmarkDistinctKeysShards(b *testing.B) {
	b.Run("lib=redlock/nodes=3/master=redis", func(b *testing.B) {
		distinct(b, newRedlock(b, newClients(b, addrs(3))), addrs(3))
	})
	for _, shards := range []int{1, 3} {
		nodes := make([]redlock.Node, 3)
		var shardAddrs []string
		for i := range nodes {
			rc := redistest.StartRedisClusterT(b, shards, redistest.Options{Args: []string{"--save", ""}})
			shardAddrs = append(shardAddrs, rc.Addrs()...)
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			nodes[i] = redlock.NewNode(c)
		}
		b.Run(fmt.Sprintf("lib=redlock/nodes=3/master=cluster/shards=%d", shards), func(b *testing.B) {
			distinct(b, redlockOver(b, nodes, nil), shardAddrs)
		})
	}
}
