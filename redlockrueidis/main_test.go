package redlockrueidis_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quietLogger drops go-redis's log lines: the mixed tests' go-redis
// clients dial masters that are down on purpose.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	// A rueidis cluster client runs two timers of its own that outlive its
	// Close: after a MOVED (a slot moved), a lazy refresh of its slot map
	// sleeps up to a second first (singleflight.go, DelayDo), and a refresh
	// closes the connections it replaced 5 s later (cluster.go, _refresh).
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}
