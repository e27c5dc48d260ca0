package redlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// wire is a [DirectNode]'s one connection to its master, pipelined. The
// goroutine that submits a request encodes it and writes it, together with
// whatever other goroutines queued meanwhile (one write per batch). Replies
// are read, in order, by whichever goroutine holds the connection's reading
// role: a caller that waits for nothing else reads its own reply (no hand-off
// between goroutines, see call), otherwise a reader goroutine that runs while
// replies are due and ends when none are.
//
// Requests go out in the order they were queued, on one connection, so a
// release (rollback, extend) queued behind an acquire reaches the master
// after it, as long as the connection lives. When it breaks (a timeout, a
// reset), the requests in flight fail and the next request dials again, from
// a goroutine of its own, so no caller waits for a dial.
type wire struct {
	name    string
	dial    func(ctx context.Context) (net.Conn, error)
	hello   func(ctx context.Context) ([][]string, error) // the handshake commands
	dialMax time.Duration                                 // a dial's bound
	stop    context.Context                               // ended by close: ends a dial
	cancel  context.CancelFunc

	mu      sync.Mutex
	link    *link // nil while down or dialing
	dialing bool
	closed  bool
	queue   []*call // not yet written
	flight  []*call // written, awaiting replies in order from head
	head    int
	loaded  uint8     // scripts sent on link with EVAL, so the master has them (scriptBit)
	idleAt  time.Time // when the last reply was read, for the liveness check
	wg      sync.WaitGroup
}

// link is one connection of a wire.
type link struct {
	net.Conn
	rd      *bufio.Reader
	greet   []string  // handshake commands whose replies are still to read
	writing bool      // a goroutine writes the queue to it (under wire.mu)
	buf     []byte    // its writer's buffer
	reading bool      // a goroutine holds the reading role (under wire.mu)
	yield   bool      // the reader goroutine ends when no reply is due, without lingering (under wire.mu)
	rdl     time.Time // the read deadline set (under wire.mu)
	// inline is the request whose caller holds the reading role itself
	// (call), and interrupted is set when that caller's context ended: its
	// read is cut short and a reader goroutine takes the role (under wire.mu).
	inline      *call
	interrupted bool
}

// longAgo is a read deadline in the past: it wakes a blocked read at once.
var longAgo = time.Unix(1, 0)

// errNodeClosed fails the requests to a DirectNode after its Close.
var errNodeClosed = errors.New("redlock: node closed")

// replyGrace is how long past a request's deadline its reply may still come
// before the connection is given up as stuck.
const replyGrace = deadlineGrain

// idleCheck is how long a connection may sit idle before the next request
// checks that the master has not closed it (a restart, a timeout).
const idleCheck = time.Second

func newWire(name string, dial func(context.Context) (net.Conn, error), hello func(context.Context) ([][]string, error), dialMax time.Duration) *wire {
	w := &wire{name: name, dial: dial, hello: hello, dialMax: dialMax}
	w.stop, w.cancel = context.WithCancel(context.Background())
	return w
}

// submit sends c, or queues it for the writer or the dial in progress. The
// reply (or failure) reaches c through finish, on another goroutine or on
// this one.
func (w *wire) submit(c *call) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		c.finish(false, 0, errNodeClosed)
		return
	}
	w.queue = append(w.queue, c)
	w.sendLocked()
}

// sendLocked writes the queue now if the connection is up, idle and nobody
// writes; otherwise it stays queued: for the dial in progress, for the
// writer, or, while a batch is in flight, for the reader, which sends it as
// the next batch once that one is answered. So under load each master has
// one batch in flight and the rest gather into the next one write, as
// go-redis pipelines would, instead of a write per request. w.mu is held on
// entry and released.
func (w *wire) sendLocked() {
	if w.link == nil || w.link.writing || w.head < len(w.flight) {
		w.kickLocked()
		w.mu.Unlock()
		return
	}
	w.link.writing = true
	w.flushLocked(nil)
}

// submitAll sends calls as submit does, in one write when the connection is
// up and idle.
func (w *wire) submitAll(calls []call) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		for i := range calls {
			calls[i].finish(false, 0, errNodeClosed)
		}
		return
	}
	for i := range calls {
		w.queue = append(w.queue, &calls[i])
	}
	w.sendLocked()
}

// call sends c and, when the connection is idle, reads the reply itself: the
// caller has nothing else to wait for, and a reply read on its own goroutine
// costs no wake-up of another. Otherwise it submits c. Either way c is
// finished when call returns or later; the caller waits as for submit. The
// read is bounded by c's deadline, not by its context's cancellation.
func (w *wire) call(c *call) {
	w.mu.Lock()
	l := w.link
	if w.closed || l == nil || l.writing || l.reading || len(w.queue) > 0 || !w.liveLocked() {
		if l != nil && l.reading && w.head == len(w.flight) {
			// A reader goroutine lingers for replies that callers like
			// this one would rather read themselves: it ends after this
			// reply.
			l.yield = true
		}
		w.mu.Unlock()
		w.submit(c)
		return
	}
	if c.ctx.Err() != nil {
		w.mu.Unlock()
		c.finish(false, 0, c.ctx.Err())
		return
	}
	l.writing, l.reading, l.inline = true, true, c
	var bit uint8
	buf := l.buf[:0]
	c.evalsha = w.loaded&scriptBit(c.req.kind) != 0
	buf, bit = appendRequest(buf, c.req, c.evalsha)
	w.loaded |= bit
	w.flight = append(w.flight, c)
	w.setDeadlineLocked(l, replyDeadline(c.deadline))
	if c.cut {
		l.interrupted = true
		w.setDeadlineLocked(l, longAgo)
	}
	w.mu.Unlock()

	err := l.SetWriteDeadline(c.deadline)
	if err == nil {
		_, err = l.Write(buf)
	}
	w.mu.Lock()
	l.buf = buf[:0]
	if err != nil {
		failed := w.breakLocked(l)
		l.writing = false
		w.kickLocked()
		w.mu.Unlock()
		finishAll(failed, fmt.Errorf("write: %w", err))
		return
	}
	w.flushLocked(nil) // what queued meanwhile; releases w.mu
	w.read(l, c)
}

// interrupt stops the caller reading c's reply itself (call), if it still
// is: its context ended. The reply is then read by a reader goroutine.
func (w *wire) interrupt(c *call) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.cut = true // for call, if it has not started reading yet
	if l := w.link; l != nil && l.inline == c {
		l.interrupted = true
		w.setDeadlineLocked(l, longAgo)
	}
}

// kickLocked starts a dial when requests wait and there is no connection.
func (w *wire) kickLocked() {
	if w.link == nil && !w.dialing && !w.closed && len(w.queue) > 0 {
		w.dialing = true
		w.wg.Add(1)
		go w.connect()
	}
}

// liveLocked checks, when the connection has been idle for a while and
// nobody reads it, that the master has not closed it (nor sent anything, see
// connAlive); if it has, it drops the connection (the next request dials
// again) and reports false.
func (w *wire) liveLocked() bool {
	l := w.link
	if l == nil || l.reading || w.head < len(w.flight) || time.Since(w.idleAt) < idleCheck {
		return l != nil
	}
	// Nobody reads l: its read deadline is ours to clear (a past one would
	// fail the check).
	w.setDeadlineLocked(l, time.Time{})
	if err := connAlive(l.Conn); err != nil {
		_ = w.breakLocked(l) // nothing in flight
		return false
	}
	w.idleAt = time.Now()
	return true
}

// flushLocked writes the queue, and what queues while it writes, to the
// connection, after pre (the handshake of a new connection), and makes sure
// someone reads the replies. w.mu is held and the link's writing set on
// entry; it returns with w.mu released and writing clear. Requests whose
// context ended before they were written are not written. A writer stays
// with its link: once that link is gone (broken, replaced by a new dial) it
// stops, and the new link's writer takes the queue.
func (w *wire) flushLocked(pre []byte) {
	l := w.link
	buf := append(l.buf[:0], pre...)
	for {
		if w.link != l || w.closed || (len(w.queue) == 0 && len(buf) == 0) || (len(buf) == 0 && !w.liveLocked()) {
			l.writing = false
			l.buf = buf[:0]
			w.kickLocked()
			w.mu.Unlock()
			return
		}
		idle := w.head == len(w.flight)
		var latest time.Time
		unbounded := false
		var room [4]*call
		expired := room[:0]
		for i, c := range w.queue {
			w.queue[i] = nil
			if c.ctx.Err() != nil {
				expired = append(expired, c)
				continue
			}
			var bit uint8
			c.evalsha = w.loaded&scriptBit(c.req.kind) != 0
			buf, bit = appendRequest(buf, c.req, c.evalsha)
			w.loaded |= bit
			w.flight = append(w.flight, c)
			if c.deadline.IsZero() {
				unbounded = true
			} else {
				latest = later(latest, c.deadline)
			}
		}
		w.queue = w.queue[:0]
		if idle && w.head < len(w.flight) {
			w.setDeadlineLocked(l, replyDeadline(w.flight[w.head].deadline))
		}
		if !l.reading && w.head < len(w.flight) {
			l.reading = true
			w.wg.Add(1)
			go w.read(l, nil)
		}
		w.mu.Unlock()

		for _, c := range expired {
			c.finish(false, 0, c.ctx.Err())
		}
		var err error
		if len(buf) > 0 {
			if unbounded {
				latest = time.Time{}
			}
			if err = l.SetWriteDeadline(latest); err == nil {
				_, err = l.Write(buf)
			}
		}
		w.mu.Lock()
		buf = buf[:0]
		if err != nil {
			failed := w.breakLocked(l)
			w.mu.Unlock()
			finishAll(failed, fmt.Errorf("write: %w", err))
			w.mu.Lock()
		}
	}
}

// replyDeadline is the read deadline for a request due by d (zero: none).
func replyDeadline(d time.Time) time.Time {
	if d.IsZero() {
		return d
	}
	return d.Add(replyGrace)
}

// breakLocked gives up l, if it is still the connection, and returns the
// requests that were in flight on it, for the caller to fail once w.mu is
// released. Requests still queued go on a new connection.
func (w *wire) breakLocked(l *link) []*call {
	if w.link != l {
		return nil
	}
	_ = l.Close()
	w.link = nil
	w.loaded = 0
	failed := w.flight[w.head:]
	w.flight, w.head = nil, 0
	w.kickLocked()
	return failed
}

// finishAll fails every request in calls with err.
func finishAll(calls []*call, err error) {
	for _, c := range calls {
		c.finish(false, 0, err)
	}
}

// connect dials the master and runs the handshake, bounded by the dial
// timeout and by the latest deadline among the requests waiting for it.
// On success it writes the handshake and the queue; on failure it fails the
// requests that waited.
func (w *wire) connect() {
	defer w.wg.Done()
	w.mu.Lock()
	deadline := time.Now().Add(w.dialMax)
	var latest time.Time
	for _, c := range w.queue {
		if c.deadline.IsZero() {
			latest = deadline
			break
		}
		latest = later(latest, c.deadline)
	}
	w.mu.Unlock()
	if !latest.IsZero() && latest.Before(deadline) {
		deadline = latest
	}
	ctx, cancel := context.WithDeadline(w.stop, deadline)
	defer cancel()

	conn, err := w.dial(ctx)
	var hello [][]string
	if err == nil {
		hello, err = w.hello(ctx)
		if err != nil {
			_ = conn.Close()
		}
	}
	w.mu.Lock()
	w.dialing = false
	if err == nil && w.closed {
		_ = conn.Close()
		err = errNodeClosed
	}
	if err != nil {
		failed := w.queue
		w.queue = nil
		w.mu.Unlock()
		finishAll(failed, fmt.Errorf("dial %s: %w", w.name, err))
		return
	}
	l := &link{Conn: conn, rd: bufio.NewReaderSize(conn, 4096)}
	var pre []byte
	for _, cmd := range hello {
		pre = appendCommand(pre, cmd...)
		l.greet = append(l.greet, cmd[0])
	}
	w.link, w.loaded, w.idleAt = l, 0, time.Now()
	if len(pre) > 0 {
		// The handshake's replies come first; its reader stays on for the
		// requests' replies.
		w.setDeadlineLocked(l, deadline.Add(replyGrace))
		l.reading = true
		w.wg.Add(1)
		go w.read(l, nil)
	}
	l.writing = true
	w.flushLocked(pre)
}

// linger is how long a reader goroutine waits on an idle connection for the
// next request before it ends: a master that is sent requests steadily keeps
// its reader, without a goroutine started per reply.
const linger = time.Second

// read holds l's reading role: it reads replies, first one per handshake
// command, then one per request in flight, in order, and hands each to its
// request. Without until it is a reader goroutine, which ends once no reply
// has been due for linger; with until (a caller reading its own reply) it
// returns once until has its reply, handing the role to a reader goroutine if
// more are due. It also returns when l breaks.
func (w *wire) read(l *link, until *call) {
	if until == nil {
		defer w.wg.Done()
	}
	for {
		if _, err := l.rd.Peek(1); err != nil {
			if w.readOn(l, until, err) {
				continue
			}
			return
		}
		v, rerr, err := readReply(l.rd)
		if err != nil {
			w.fail(l, fmt.Errorf("read: %w", err))
			return
		}
		if len(l.greet) > 0 {
			cmd := l.greet[0]
			l.greet = l.greet[1:]
			if rerr != nil {
				w.fail(l, fmt.Errorf("%s: %w", cmd, rerr))
				return
			}
			continue
		}
		w.mu.Lock()
		if w.link != l {
			w.mu.Unlock()
			return
		}
		if w.head == len(w.flight) {
			failed := w.breakLocked(l)
			w.mu.Unlock()
			finishAll(failed, fmt.Errorf("read: %w: a reply nobody asked for", errProtocol))
			return
		}
		c := w.popLocked()
		if isNoScript(rerr) && c.evalsha {
			// The master lost its scripts (SCRIPT FLUSH): send it again, as
			// EVAL. This goroutine keeps reading, so until still gets its reply.
			// An EVAL answered NOSCRIPT (no real master does that) is not
			// sent again: it would be, round trip after round trip, until
			// its deadline.
			w.loaded &^= scriptBit(c.req.kind)
			w.mu.Unlock()
			w.submit(c)
			continue
		}
		w.mu.Unlock()
		c.finish(c.req.parse(v, rerr))
		if !w.next(l, c == until) {
			return
		}
	}
}

// next runs after each reply, for the goroutine holding l's reading role:
// once the batch in flight is answered it sends, as the next batch, what
// queued meanwhile (see submit); then, if replies are still due, it keeps the
// role (a caller reading its own reply hands it to a reader goroutine)
// and reports whether to read on; if none are, an inline caller or a reader
// asked to yield gives the role up, and a reader goroutine lingers.
func (w *wire) next(l *link, inline bool) bool {
	w.mu.Lock()
	if w.link != l {
		w.mu.Unlock()
		return false
	}
	if w.head == len(w.flight) && len(w.queue) > 0 && !l.writing {
		l.writing = true
		w.flushLocked(nil)
		w.mu.Lock()
		if w.link != l {
			w.mu.Unlock()
			return false
		}
	}
	more := w.head < len(w.flight)
	if inline {
		l.inline, l.interrupted = nil, false
	}
	switch {
	case more && inline:
		w.setDeadlineLocked(l, replyDeadline(w.flight[w.head].deadline))
		w.wg.Add(1)
		go w.read(l, nil) // takes the role over: this one never gave it up
		w.mu.Unlock()
		return false
	case more:
		w.setDeadlineLocked(l, replyDeadline(w.flight[w.head].deadline))
	case inline || l.yield:
		w.flight, w.head = w.flight[:0], 0
		l.reading, l.yield = false, false
		w.idleAt = time.Now()
		w.mu.Unlock()
		return false
	default:
		w.flight, w.head = w.flight[:0], 0
		w.setDeadlineLocked(l, time.Now().Add(linger))
	}
	w.mu.Unlock()
	return true
}

// popLocked takes the request at the head of the flight. Under a load that
// never lets the flight empty, the answered prefix is dropped now and then,
// so the slice does not grow without bound.
func (w *wire) popLocked() *call {
	c := w.flight[w.head]
	w.flight[w.head] = nil
	w.head++
	if w.head >= 256 && 2*w.head >= len(w.flight) {
		n := copy(w.flight, w.flight[w.head:])
		clear(w.flight[n:])
		w.flight, w.head = w.flight[:n], 0
	}
	return c
}

// readOn decides, after a read of l failed with err before any byte of a
// reply, whether the reader goes on: the deadline was a request's that has
// been answered, or the linger of a reader whose wait has ended (then it
// gives up the role). Otherwise l breaks.
func (w *wire) readOn(l *link, until *call, err error) bool {
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout()
	w.mu.Lock()
	if w.link != l {
		w.mu.Unlock()
		return false
	}
	if timeout && len(l.greet) == 0 {
		if until != nil && l.interrupted && w.head < len(w.flight) {
			// The inline caller's context ended (interrupt): a reader
			// goroutine takes the role, and the reply, over.
			l.inline, l.interrupted = nil, false
			w.setDeadlineLocked(l, replyDeadline(w.flight[w.head].deadline))
			w.wg.Add(1)
			go w.read(l, nil)
			w.mu.Unlock()
			return false
		}
		if w.head == len(w.flight) && until == nil {
			l.reading = false
			w.idleAt = time.Now()
			w.mu.Unlock()
			return false
		}
		if w.head < len(w.flight) {
			due := replyDeadline(w.flight[w.head].deadline)
			if due.IsZero() || time.Now().Before(due) {
				w.setDeadlineLocked(l, due)
				w.mu.Unlock()
				return true
			}
		}
	}
	failed := w.breakLocked(l)
	w.mu.Unlock()
	finishAll(failed, fmt.Errorf("read: %w", err))
	return false
}

// setDeadlineLocked sets l's read deadline to d.
func (w *wire) setDeadlineLocked(l *link, d time.Time) {
	if !d.Equal(l.rdl) {
		l.rdl = d
		_ = l.SetReadDeadline(d)
	}
}

// fail gives up l after err and fails its requests in flight.
func (w *wire) fail(l *link, err error) {
	w.mu.Lock()
	failed := w.breakLocked(l)
	w.mu.Unlock()
	finishAll(failed, err)
}

// close closes the connection, fails every request not yet answered and
// waits for the wire's goroutines.
func (w *wire) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		w.wg.Wait()
		return
	}
	w.closed = true
	var failed []*call
	if w.link != nil {
		failed = w.breakLocked(w.link)
	}
	failed = append(failed, w.queue...)
	w.queue = nil
	w.mu.Unlock()
	w.cancel()
	finishAll(failed, errNodeClosed)
	w.wg.Wait()
}

// parse reads the reply to q as the Node method would.
func (q *request) parse(v any, rerr error) (ok bool, token uint64, err error) {
	switch q.kind {
	case reqAcquire:
		s, isString := v.(string)
		if rerr == nil && !isString {
			return false, 0, badReplyf("SET answered %s, want OK or nil", show(v))
		}
		ok, err = setReply(s, rerr)
	case reqAcquireFenced:
		token, err = fence(q.key, v, rerr)
		ok = err == nil && token > 0
	default:
		ok, err = flag(v, rerr)
	}
	return ok, token, err
}
