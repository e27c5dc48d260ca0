package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// mode is what the proxy does with new connections.
type mode int

const (
	modeForward   mode = iota // forward to the target
	modeBlackhole             // accept, forward nothing, answer nothing
	modeReset                 // close at once
)

const (
	dialTimeout = 5 * time.Second       // for the connection to the target
	acceptPause = 10 * time.Millisecond // after a failed Accept, such as EMFILE
)

// Proxy is a fault-injecting TCP proxy in front of one target address. Its
// methods are safe for concurrent use. Faults change what happens to bytes
// from the moment they are set; Close must be called to release the
// listener and the goroutines.
type Proxy struct {
	target  string
	ln      net.Listener
	latency atomic.Int64       // nanoseconds added to client->server chunks
	ctx     context.Context    // cancelled by Close, ends pending dials
	cancel  context.CancelFunc //
	wg      sync.WaitGroup     // every goroutine the proxy started

	mu     sync.Mutex         // guards mode, conns and closed
	mode   mode               // for new connections
	conns  map[*conn]struct{} // open connections
	closed bool               // Close was called
}

// New starts a proxy that listens on a free loopback port and forwards each
// accepted connection to target.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q is not host:port: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*conn]struct{}),
	}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Addr returns the address clients should dial, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of bytes forwarded from a client to the
// target by d after it was read, so each request/response round trip takes
// d longer. Each connection is delayed on its own and keeps its byte order;
// a pipelined burst read at once is delayed once, not once per command.
// It applies to bytes read from now on. Zero or less means no delay, the
// default.
func (p *Proxy) SetLatency(d time.Duration) {
	p.latency.Store(int64(max(d, 0)))
}

// Latency returns the delay set by SetLatency.
func (p *Proxy) Latency() time.Duration {
	return time.Duration(p.latency.Load())
}

// Blackhole partitions the target silently: from now on the bytes of every
// connection are dropped in both directions, and new connections are
// accepted but nothing is forwarded. Clients see timeouts, not errors.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = modeBlackhole
	for c := range p.conns {
		c.blackhole()
	}
}

// Reset partitions the target loudly: every open connection is reset and
// new ones are reset as soon as they are accepted. Clients see errors at
// once.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.mode = modeReset
	conns := p.snapshot(nil)
	p.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
}

// Heal ends a partition: new connections are forwarded again. Connections
// that were blackholed are closed, since bytes were lost from their
// streams; connections opened before the partition and never blackholed
// are left alone. The latency is kept.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.mode = modeForward
	conns := p.snapshot((*conn).blackholed)
	p.mu.Unlock()
	for _, c := range conns {
		c.close(false)
	}
}

// Close stops listening, closes every connection and waits until all the
// proxy's goroutines have returned. Calling it again returns nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.snapshot(nil)
	p.mu.Unlock()

	p.cancel()
	err := p.ln.Close()
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("faultproxy: %w", err)
	}
	return nil
}

// snapshot returns the open connections that match keep (all if keep is
// nil). p.mu must be held.
func (p *Proxy) snapshot(keep func(*conn) bool) []*conn {
	var out []*conn
	for c := range p.conns {
		if keep == nil || keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// acceptLoop accepts connections until the listener is closed and starts a
// goroutine for each, as the current mode says.
func (p *Proxy) acceptLoop() {
	for {
		nc, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(acceptPause)
			continue
		}
		c := newConn(nc)
		p.mu.Lock()
		if p.closed || p.mode == modeReset {
			p.mu.Unlock()
			c.close(true)
			continue
		}
		if p.mode == modeBlackhole {
			c.blackhole()
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1) // under mu and before closed is set, so never after Wait began
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.serve(c)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
	}
}
