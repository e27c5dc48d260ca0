package faultproxy

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newProxy starts a proxy to the test server, closed at the end of the test.
func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// newClient returns a go-redis client with one connection that does not
// retry and gives up reading after 200ms, closed at the end of the test.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:       addr,
		PoolSize:   1,
		MaxRetries: -1,
		// One dial attempt: go-redis otherwise retries a failed dial
		// (handshake included) five times, 100ms apart.
		DialerRetries: 1,
		DialTimeout:   time.Second,
		ReadTimeout:   200 * time.Millisecond,
		WriteTimeout:  200 * time.Millisecond,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// timePing returns how long one PING took, failing the test on an error.
func timePing(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	begin := time.Now()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING through %s: %v", c.Options().Addr, err)
	}
	return time.Since(begin)
}

// minPing returns the fastest of n PINGs.
func minPing(t *testing.T, c *redis.Client, n int) time.Duration {
	t.Helper()
	best := time.Hour
	for range n {
		best = min(best, timePing(t, c))
	}
	return best
}

// waitHeld waits until the proxy has accepted client's connection and
// holds it blackholed, since a connection still in the listen backlog when
// the partition heals is forwarded like a new one.
func waitHeld(t *testing.T, p *Proxy, client net.Conn) {
	t.Helper()
	want := client.LocalAddr().String()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.mu.Lock()
		for c := range p.conns {
			if c.client.RemoteAddr().String() == want && c.blackholed() {
				p.mu.Unlock()
				return
			}
		}
		p.mu.Unlock()
	}
	t.Fatalf("proxy did not accept and hold %s within 1s", want)
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
