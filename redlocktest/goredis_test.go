package redlocktest_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/redlocktest"
)

// TestGoRedis runs the conformance kit on the go-redis Node: one server
// (a *redis.Client, as the README configures it) and a Redis Cluster.
func TestGoRedis(t *testing.T) {
	redlocktest.Run(t, redlocktest.Adapter{
		Node: func(tb testing.TB, addr string) redlock.Node {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
				MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
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
