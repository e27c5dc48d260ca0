package faultproxy

import (
	"os"
	"testing"

	"github.com/redlock/redlock/internal/redistest"
)

// redisAddr is the address of the real redis-server the tests proxy to.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(redistest.Main(m, 1, redistest.Options{}, func(c *redistest.Cluster) { redisAddr = c.Addrs()[0] }))
}
