package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

// Process is a [Cluster] of local redis-server processes, each behind a
// fault-injecting TCP proxy: clients connect to the proxies ([Process.Addrs]),
// so a partition is the proxy dropping every byte (faultproxy Blackhole)
// while the master keeps running. Kill is SIGKILL, Pause SIGSTOP, Restart a
// new process on the same port, empty unless keepData and Persistence.
//
// What a client sees: a killed master's proxy accepts the connection and
// closes it at once (an error, not a timeout); a paused or partitioned
// master times out. Start-up takes a few milliseconds per master.
type Process struct {
	servers *redistest.Cluster
	proxies []*faultproxy.Proxy
	nodes   []*procNode

	closed  atomic.Bool
	closeMu sync.Mutex // serialises Close
}

// procNode is the fault state of one master.
type procNode struct {
	mu          sync.Mutex // serialises faults on this master; guards partitioned
	partitioned bool
}

var _ Cluster = (*Process)(nil)

// NewProcess starts opts.N redis-server processes and a proxy in front of
// each, and returns once every master answers PING. opts.Image is ignored.
// The caller must Close the cluster.
func NewProcess(opts Options) (*Process, error) {
	if opts.N < 1 {
		return nil, fmt.Errorf("cluster: Options.N is %d, want at least 1", opts.N)
	}
	servers, err := redistest.Start(opts.N, redistest.Options{AppendOnly: opts.Persistence})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	p := &Process{servers: servers}
	for i, s := range servers.Servers {
		px, err := faultproxy.New(s.Addr())
		if err != nil {
			return nil, errors.Join(fmt.Errorf("cluster: proxy for master %d: %w", i, err), p.Close())
		}
		p.proxies = append(p.proxies, px)
		p.nodes = append(p.nodes, &procNode{})
	}
	return p, nil
}

// Addrs returns the proxies' addresses, "127.0.0.1:PORT", in index order.
func (p *Process) Addrs() []string {
	addrs := make([]string, len(p.proxies))
	for i, px := range p.proxies {
		addrs[i] = px.Addr()
	}
	return addrs
}

// do runs op on master i under its lock.
func (p *Process) do(i int, what string, op func(s *redistest.Server, px *faultproxy.Proxy, n *procNode) error) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if i < 0 || i >= len(p.nodes) {
		return fmt.Errorf("cluster: %s: master %d out of range [0, %d)", what, i, len(p.nodes))
	}
	n := p.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if p.closed.Load() {
		return ErrClosed
	}
	s, px := p.servers.Servers[i], p.proxies[i]
	if err := op(s, px, n); err != nil {
		return fmt.Errorf("cluster: %s master %d (%s via %s): %w", what, i, s.Addr(), px.Addr(), err)
	}
	return nil
}

// Kill sends SIGKILL to master i; not running is fine.
func (p *Process) Kill(i int) error {
	return p.do(i, "kill", func(s *redistest.Server, _ *faultproxy.Proxy, _ *procNode) error {
		if err := s.Kill(); err != nil && !errors.Is(err, redistest.ErrNotRunning) {
			return err
		}
		return nil
	})
}

// Start starts a killed master i again with its data directory; a running
// master is left alone.
func (p *Process) Start(i int) error {
	return p.do(i, "start", func(s *redistest.Server, _ *faultproxy.Proxy, _ *procNode) error {
		if s.Running() {
			return nil
		}
		return s.Restart(true)
	})
}

// Restart kills master i and starts it again on the same port: empty unless
// keepData (and then with what persistence kept).
func (p *Process) Restart(i int, keepData bool) error {
	return p.do(i, "restart", func(s *redistest.Server, _ *faultproxy.Proxy, _ *procNode) error {
		return s.Restart(keepData)
	})
}

// Pause stops master i with SIGSTOP.
func (p *Process) Pause(i int) error {
	return p.do(i, "pause", func(s *redistest.Server, _ *faultproxy.Proxy, _ *procNode) error {
		return s.Pause()
	})
}

// Resume continues a paused master i; one that is not paused (or not
// running) is left alone.
func (p *Process) Resume(i int) error {
	return p.do(i, "resume", func(s *redistest.Server, _ *faultproxy.Proxy, _ *procNode) error {
		if !s.Paused() {
			return nil
		}
		return s.Resume()
	})
}

// Partition makes master i's proxy drop every byte: clients time out.
func (p *Process) Partition(i int) error {
	return p.do(i, "partition", func(_ *redistest.Server, px *faultproxy.Proxy, n *procNode) error {
		px.Blackhole()
		n.partitioned = true
		return nil
	})
}

// Heal makes master i's proxy forward again and, if the master runs and is
// not paused, waits until it answers PING through the proxy.
func (p *Process) Heal(i int) error {
	return p.do(i, "heal", func(s *redistest.Server, px *faultproxy.Proxy, n *procNode) error {
		if !n.partitioned {
			return nil
		}
		px.Heal()
		n.partitioned = false
		if !s.Running() || s.Paused() {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return waitReady(ctx, px.Addr())
	})
}

// Close stops every proxy and master. It is idempotent.
func (p *Process) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed.Swap(true) {
		return nil
	}
	for _, n := range p.nodes {
		n.mu.Lock()
		defer n.mu.Unlock()
	}
	var errs []error
	for _, px := range p.proxies {
		errs = append(errs, px.Close())
	}
	errs = append(errs, p.servers.Stop())
	return errors.Join(errs...)
}
