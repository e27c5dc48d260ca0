package redistest

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newClient returns a go-redis client for addr that does not retry and
// times out quickly, closed at the end of the test.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		MaxRetries:   -1,
		DialTimeout:  time.Second,
		ReadTimeout:  200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// startServer starts one server, stopped at the end of the test.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// pidGone reports whether no process has the id pid.
func pidGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func mustSet(t *testing.T, c *redis.Client, key, value string) {
	t.Helper()
	if err := c.Set(context.Background(), key, value, 0).Err(); err != nil {
		t.Fatalf("SET %s on %s: %v", key, c.Options().Addr, err)
	}
}

func mustGet(t *testing.T, c *redis.Client, key, want string) {
	t.Helper()
	got, err := c.Get(context.Background(), key).Result()
	if err != nil || got != want {
		t.Fatalf("GET %s on %s = %q, %v; want %q", key, c.Options().Addr, got, err, want)
	}
}

func mustMissing(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	got, err := c.Get(context.Background(), key).Result()
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s on %s = %q, %v; want redis.Nil", key, c.Options().Addr, got, err)
	}
}
