package bench

import (
	"context"
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
			warmCluster(b, c)
			nodes[i] = redlock.NewNode(c)
		}
		b.Run(fmt.Sprintf("lib=redlock/nodes=3/master=cluster/shards=%d", shards), func(b *testing.B) {
			distinct(b, redlockOver(b, nodes, nil), shardAddrs)
		})
	}
}

// BenchmarkHandOffClusters is BenchmarkHandOff's redlocks=8/goroutines=1
// case on 5 masters that are each a Redis Cluster of 3 shards, next to the
// same on 5 redis-servers: cluster masters hand the key on by sharded
// pub/sub (SPUBLISH on a channel in the key's slot, SSUBSCRIBEd on its
// shard), single servers by PUBLISH.
func BenchmarkHandOffClusters(b *testing.B) {
	const name = "redlocks=8/goroutines=1/nodes=5"
	b.Run("master=redis/"+name, func(b *testing.B) {
		libs := make([]*redlockLib, 8)
		for i := range libs {
			libs[i] = newRedlock(b, countSets(newClients(b, addrs(5))))
		}
		handOff(b, libs, 1)
	})
	seeds := make([][]string, 5)
	for i := range seeds {
		rc := redistest.StartRedisClusterT(b, 3, redistest.Options{Args: []string{"--save", ""}})
		seeds[i] = rc.Addrs()
	}
	b.Run("master=cluster/shards=3/"+name, func(b *testing.B) {
		libs := make([]*redlockLib, 8)
		for i := range libs {
			nodes := make([]redlock.Node, len(seeds))
			for j, s := range seeds {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s, ContextTimeoutEnabled: true,
					MaxRetries: -1, DialerRetries: 1, MinRetryBackoff: -1, MaxRetryBackoff: -1})
				// On each shard's client: the Node sends a batch of more
				// than one command there, past the cluster client's hooks.
				c.OnNewNode(func(n *redis.Client) { n.AddHook(setHook{}) })
				b.Cleanup(func() { c.Close() })
				warmCluster(b, c)
				nodes[j] = redlock.NewNode(c)
			}
			libs[i] = redlockOver(b, nodes, nil)
		}
		handOff(b, libs, 1)
	})
}

// warmCluster readies c before the timer starts, as newClients readies a
// server's client with a PING. A go-redis ClusterClient's first command
// loads the slot map (CLUSTER SLOTS) and the command table (COMMAND, some
// 240 entries, parsed into about 4,000 allocations), and its first command
// on each shard dials it (HELLO, go-redis's maintenance-notification
// set-up): done inside the timer by 40 clients at once, that was a second's
// benchmark's first waits (its p99 on a b.N of 2,000) and a fixed 150,000
// allocations spread over its ops. A PING through c, then one on each master.
func warmCluster(b testing.TB, c *redis.ClusterClient) {
	b.Helper()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		b.Fatalf("PING cluster: %v", err)
	}
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		b.Fatalf("PING each master: %v", err)
	}
}
