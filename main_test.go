package redlock

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// masters are five redis-server processes shared by the tests that need no
// faults; each test uses keys of its own.
var masters *redistest.Cluster

// quietLogger drops go-redis's log lines: the tests kill masters on purpose.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv(quietChildEnv) != "" {
		// The program TestNewFromURLsQuietWhenMastersDown watches: go-redis
		// logs as it does in a user's program, and it has masters of its own.
		os.Exit(m.Run())
	}
	redis.SetLogger(quietLogger{})
	os.Exit(redistest.Main(m, 5, redistest.Options{}, func(c *redistest.Cluster) {
		masters = c
		// The runnable examples read the masters from the same variable the
		// command-line tool reads.
		os.Setenv("REDLOCK_MASTERS", strings.Join(c.Addrs(), ","))
	}))
}

var keySeq atomic.Int64

// testKey returns a key no other test uses.
func testKey(t testing.TB) string {
	return fmt.Sprintf("%s:%d", t.Name(), keySeq.Add(1))
}

// clients returns one go-redis client per address, closed at the end of the
// test, configured as the README recommends: go-redis retries off, so a dead
// master fails at once, and context deadlines on the socket.
func clients(t testing.TB, addrs []string) []*redis.Client {
	t.Helper()
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
		c := cs[i]
		t.Cleanup(func() { c.Close() })
	}
	return cs
}

// nodesOf wraps clients as Nodes.
func nodesOf(t testing.TB, cs []*redis.Client) []Node {
	t.Helper()
	ns := make([]Node, len(cs))
	for i, c := range cs {
		ns[i] = NewNode(c)
	}
	return ns
}

// newRedlock returns a Redlock over nodes; its background work is waited for
// at the end of the test.
func newRedlock(t testing.TB, nodes []Node, opts ...Option) *Redlock {
	t.Helper()
	// A node timeout that a loaded CI machine does not exceed by accident
	// (the default is TTL/10: 20 ms for the 200 ms TTLs some tests use);
	// tests about timeouts set their own, which comes later and wins.
	opts = append([]Option{WithNodeTimeout(250 * time.Millisecond)}, opts...)
	r, err := New(nodes, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// settle waits for the requests a Redlock still runs in the background.
func settle(r *Redlock) { r.bg.Wait() }

// holders lists, per master, the value key holds there ("" when absent).
func holders(t testing.TB, cs []*redis.Client, key string) []string {
	t.Helper()
	vs := make([]string, len(cs))
	for i, c := range cs {
		v, err := c.Get(context.Background(), key).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("GET %s on master %d: %v", key, i, err)
		}
		vs[i] = v
	}
	return vs
}

// count returns how many entries of vs equal v.
func count(vs []string, v string) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}
