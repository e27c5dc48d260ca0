package redlocktest_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/redlocktest"
)

// TestGoRedis runs the conformance kit on the go-redis Node: one server
// (a *redis.Client, as the README configures it, without retries: it
// declares Traits.OneConnection) and a Redis Cluster.
func TestGoRedis(t *testing.T) {
	redlocktest.Run(t, redlocktest.Adapter{
		Node: func(tb testing.TB, addr string) redlock.Node {
			c := redis.NewClient(goredisOptions(addr))
			tb.Cleanup(func() { c.Close() })
			return redlock.NewNode(c)
		},
		ClusterNode: func(tb testing.TB, addrs []string) redlock.Node {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
				MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
			tb.Cleanup(func() { c.Close() })
			return redlock.NewNode(c)
		},
	})
}

// TestGoRedisWithRetries runs the kit on the go-redis Node of a client
// with go-redis's default retries: it does not declare
// Traits.OneConnection (a pipeline that failed is sent again), so the
// kit skips those checks and says why.
func TestGoRedisWithRetries(t *testing.T) {
	redlocktest.Run(t, redlocktest.Adapter{
		Node: func(tb testing.TB, addr string) redlock.Node {
			o := goredisOptions(addr)
			o.MaxRetries = 0 // go-redis's default: 3
			c := redis.NewClient(o)
			tb.Cleanup(func() { c.Close() })
			n := redlock.NewNode(c)
			if n.Traits().OneConnection {
				tb.Fatalf("the Node of a client with retries declares Traits.OneConnection")
			}
			return n
		},
	})
}
