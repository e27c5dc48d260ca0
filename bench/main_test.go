package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// maxNodes is the largest node count measured; TestMain starts that many
// masters and every benchmark uses a prefix of them.
const maxNodes = 9

// masters are the redis-server processes every benchmark shares. Each
// benchmark uses keys of its own.
var masters *redistest.Cluster

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(redistest.Main(m, maxNodes, redistest.Options{Args: []string{"--save", ""}},
		func(c *redistest.Cluster) { masters = c }))
}

var keySeq atomic.Int64

// newKey returns a key no other benchmark run uses.
func newKey(b testing.TB) string {
	return fmt.Sprintf("bench:%s:%d", b.Name(), keySeq.Add(1))
}

// newClients returns one go-redis client per address with go-redis's
// defaults plus ContextTimeoutEnabled (as the README recommends, so context
// deadlines reach the socket; the same for every library), closed at the end
// of the benchmark. Every library gets clients of
// its own, so no library warms or drains another's connection pool.
func newClients(b testing.TB, addrs []string) []*redis.Client {
	b.Helper()
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		if err := c.Ping(context.Background()).Err(); err != nil {
			b.Fatalf("PING %s: %v", a, err)
		}
		b.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

// ttl is the lock TTL in every benchmark: redsync's default expiry, so that
// every library sets the same PX.
const ttl = 8 * time.Second

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
