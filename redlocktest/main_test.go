package redlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
	"go.uber.org/goleak"
)

// quietLogger drops go-redis's log lines: the kit dials a master that is
// down on purpose.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	// The failover check kills a shard: go-redis then probes its address
	// from a goroutine that sleeps a second before it sees the client closed.
	goleak.VerifyTestMain(m, redistest.IgnoreDialProbe)
}

// goredisOptions are the options of the kit's go-redis clients for the one
// server at addr: without retries, as the README configures them.
func goredisOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second}
}
