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
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
