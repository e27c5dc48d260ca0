package redistest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Cluster is a set of independent redis-server masters (not a Redis
// Cluster), as the Redlock algorithm uses them.
type Cluster struct {
	Servers []*Server
}

// Start starts n servers concurrently. If any fails it stops the ones that
// started and returns the joined errors.
func Start(n int, opts Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("redistest: Start needs at least one server, got n=%d", n)
	}
	c := &Cluster{Servers: make([]*Server, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c.Servers[i], errs[i] = StartServer(opts)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range c.Servers {
			if s != nil {
				err = errors.Join(err, s.Stop())
			}
		}
		return nil, err
	}
	return c, nil
}

// StartT starts n servers like [Start], registers Stop with tb.Cleanup, and
// fails tb if they do not start.
func StartT(tb testing.TB, n int, opts Options) *Cluster {
	tb.Helper()
	c, err := Start(n, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// Addrs returns the servers' addresses, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Stop stops every server, concurrently, and returns their joined errors.
func (c *Cluster) Stop() error {
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
