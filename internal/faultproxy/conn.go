package faultproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// bufSize is the largest chunk read in one go.
const bufSize = 32 << 10

// bufs recycles chunk buffers, so a proxy in a benchmark adds few
// allocations to the numbers measured.
var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// conn is one proxied connection: the client's and ours to the target.
type conn struct {
	client net.Conn
	held   atomic.Bool   // blackholed: drop bytes both ways until closed
	done   chan struct{} // closed by close

	mu     sync.Mutex // guards server and closed
	server net.Conn   // nil until the dial succeeds
	closed bool
}

func newConn(client net.Conn) *conn {
	return &conn{client: client, done: make(chan struct{})}
}

func (c *conn) blackhole()       { c.held.Store(true) }
func (c *conn) blackholed() bool { return c.held.Load() }

// attach records the connection to the target. It returns false, closing
// server, if c was closed meanwhile.
func (c *conn) attach(server net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		server.Close()
		return false
	}
	c.server = server
	return true
}

// close closes both sides once. With reset it makes the client's side send
// a TCP RST, so the client sees an error rather than an end of stream.
func (c *conn) close(reset bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	if tc, ok := c.client.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// serve forwards c until either side closes or the proxy closes c.
func (p *Proxy) serve(c *conn) {
	defer c.close(false)
	if c.blackholed() {
		io.Copy(io.Discard, c.client) // held until the client or Heal closes it
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil || !c.attach(server) {
		return // the client sees the end of its stream
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.clientToServer(c) })
	c.serverToClient()
	c.close(false)
	wg.Wait()
}

// serverToClient copies the target's replies to the client, dropping them
// while c is blackholed.
func (c *conn) serverToClient() {
	buf := bufs.Get().(*[]byte)
	defer bufs.Put(buf)
	for {
		n, err := c.server.Read(*buf)
		if n > 0 && !c.blackholed() {
			if _, werr := c.client.Write((*buf)[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// chunk is bytes read from the client, to be written at release.
type chunk struct {
	buf     *[]byte
	n       int
	release time.Time
}

// queueLen bounds the chunks read but not yet written on one connection;
// a full queue stops reading from the client.
const queueLen = 64

// clientToServer reads the client's requests and hands them, stamped with
// read time + latency, to a writer that releases them in order. Reading
// on while the writer waits is what makes a pipelined burst pay the
// latency once. When the client is done it flushes the queue, then closes c.
func (p *Proxy) clientToServer(c *conn) {
	queue := make(chan chunk, queueLen)
	var wg sync.WaitGroup
	wg.Go(func() { c.writeDelayed(queue) })
	defer func() {
		close(queue)
		wg.Wait()
		c.close(false)
	}()
	for {
		buf := bufs.Get().(*[]byte)
		n, err := c.client.Read(*buf)
		if n > 0 && !c.blackholed() {
			ch := chunk{buf: buf, n: n, release: time.Now().Add(p.Latency())}
			select {
			case queue <- ch:
			case <-c.done:
				bufs.Put(buf)
				return
			}
		} else {
			bufs.Put(buf)
		}
		if err != nil {
			return
		}
	}
}

// writeDelayed writes each queued chunk to the target at its release time,
// until the queue is closed or c is.
func (c *conn) writeDelayed(queue <-chan chunk) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ch := range queue {
		if wait := time.Until(ch.release); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.done:
				bufs.Put(ch.buf)
				return
			}
		}
		var err error
		if !c.blackholed() {
			_, err = c.server.Write((*ch.buf)[:ch.n])
		}
		bufs.Put(ch.buf)
		if err != nil {
			c.close(false)
			return
		}
	}
}
