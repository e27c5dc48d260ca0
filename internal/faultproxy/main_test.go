package faultproxy

import (
	"fmt"
	"os"
	"testing"

	"github.com/redlock/redlock/internal/redistest"
	"go.uber.org/goleak"
)

// redisAddr is the address of the real redis-server the tests proxy to.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := redistest.StartServer(redistest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	redisAddr = s.Addr()
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		// go-redis probes a target it could not dial (a partitioned one) from
		// a goroutine that notices its client was closed only after its next
		// 1s sleep.
		tryDial := goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
		if err := goleak.Find(tryDial); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
