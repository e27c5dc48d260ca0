package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// reqKind is what a phase asks of every master.
type reqKind uint8

const (
	reqAcquire       reqKind = iota // Node.Acquire: SET NX PX
	reqAcquireFenced                // Node.AcquireFenced
	reqRaiseFence                   // Node.RaiseFence
	reqExtend                       // Node.Extend
	reqRelease                      // Node.Release
)

// request is the request a phase sends to every master.
type request struct {
	kind       reqKind
	key, value string
	ttl        time.Duration
	token      uint64
}

// send makes the request to n through the Node interface: the path of the
// masters that are not a [pipelinedNode] (fault-injecting wrappers, other
// clients).
func (q *request) send(ctx context.Context, n Node) (ok bool, token uint64, err error) {
	switch q.kind {
	case reqAcquire:
		ok, err = n.Acquire(ctx, q.key, q.value, q.ttl)
	case reqAcquireFenced:
		token, err = n.AcquireFenced(ctx, q.key, q.value, q.ttl)
		ok = err == nil && token > 0
	case reqRaiseFence:
		ok, err = n.RaiseFence(ctx, q.key, q.value, q.token)
	case reqExtend:
		ok, err = n.Extend(ctx, q.key, q.value, q.ttl)
	case reqRelease:
		ok, err = n.Release(ctx, q.key, q.value)
	}
	return ok, token, err
}

// phase is one round of a request to every master (an acquire, a fence
// confirmation, an extend, a release, a rollback), all bounded by one
// deadline. A master behind a [pipelinedNode] gets the request through its
// batcher, which hands the reply back to the phase (complete) without a
// goroutine of the phase's own; any other Node gets a goroutine that calls it.
//
// The phase is also the context of its requests: the caller's values but not
// its cancellation (a release must not be cut short because the caller gave
// up waiting), and the phase's deadline rounded up to the next millisecond,
// whose Done channel is shared by every phase ending in that millisecond (see
// [deadlineAt]): a timer per millisecond of deadlines, not one per phase.
// collect still decides at the exact deadline, with a pooled timer.
type phase struct {
	r       *Redlock
	req     request
	parent  context.Context // values only
	expiry  time.Time       // the exact deadline, on the real clock (as context.WithDeadline's)
	bucket  *deadlineBucket // the context's deadline and Done channel
	replies chan int        // master indexes whose calls[i] result is in; nil when nobody collects
	calls   []call          // one per master: the request and its result
	one     [1]call         // calls' array with a single master
	running atomic.Int32    // masters that have not answered
	after   *attempt        // nil, or the acquire that goroutine-path requests wait for
	wake    bool            // wake the key's local waiters once every master answered (or, all pipelined, was sent the request)

	// The key and value boxed for the commands' argument lists (see
	// [phase.args]); a release reuses its acquire's.
	key, value any
}

var _ context.Context = (*phase)(nil)

// newPhase sets p up for req to every master until deadline, collected when
// collected is set.
func (r *Redlock) newPhase(p *phase, ctx context.Context, deadline time.Time, req request, collected bool) {
	p.r, p.req, p.parent, p.expiry = r, req, ctx, deadline
	p.bucket = deadlineAt(deadline)
	if len(r.nodes) == 1 {
		p.calls = p.one[:]
	} else {
		p.calls = make([]call, len(r.nodes))
	}
	if collected {
		p.replies = make(chan int, len(r.nodes))
	}
	p.running.Store(int32(len(r.nodes)))
}

// start sends the request to every master: to the pipelined ones through
// their batchers (one shared argument slice for all their commands), to the
// others each on a goroutine of its own (a.run for an acquire, else p.run).
func (p *phase) start(a *attempt) {
	r := p.r
	r.bg.Add(len(r.nodes))
	var args []any
	if r.batched {
		args = p.args()
	}
	for i, n := range r.pipes {
		switch {
		case r.direct[i] != nil:
			p.submit(i, len(r.nodes) == 1 && p.replies != nil)
			continue
		case n == nil && a != nil:
			go a.run(i)
			continue
		case n == nil:
			go p.run(i)
			continue
		}
		c := &p.calls[i]
		c.ctx, c.p, c.node = p, p, i
		c.cmd, c.script, args = p.cmd(args)
		if len(r.pipes) == 1 && p.replies != nil && n.b.sendNow(c) {
			continue
		}
		n.b.enqueue(c)
	}
	if p.wake && !r.goroutines {
		// Every master is pipelined: a waiter's acquire queues behind this
		// release on each master's batcher, so it may start now and still
		// find every master released.
		r.waiters.wake(p.req.key)
	}
}

// submit sends the request to master i, a DirectNode. With inline set (one
// master, and a caller that would only wait for its reply) the calling
// goroutine reads the reply itself when nothing else is in flight to the
// master. If the caller's context ends meanwhile, it stops reading and a
// reader goroutine takes the reply over, so the caller returns at once.
func (p *phase) submit(i int, inline bool) {
	c := &p.calls[i]
	c.ctx, c.p, c.node, c.req, c.deadline = p, p, i, &p.req, p.bucket.at
	if inline {
		w := p.r.direct[i].w
		if p.parent.Done() != nil {
			stop := context.AfterFunc(p.parent, func() { w.interrupt(c) })
			defer stop()
		}
		w.call(c)
		return
	}
	p.r.direct[i].w.submit(c)
}

// run is start's goroutine for a master that is not pipelined: it waits for
// the acquire still in flight to that master, if any, then calls it.
func (p *phase) run(i int) {
	defer p.r.bg.Done()
	if p.after != nil {
		p.after.wait(i)
	}
	ok, token, err := p.req.send(p, p.r.nodes[i])
	p.deliver(i, ok, token, err)
}

// complete takes the reply of the batcher's call c (a pipelined master).
func (p *phase) complete(c *call) {
	ok, token, err := p.req.read(c.cmd)
	p.deliver(c.node, ok, token, err)
	p.r.bg.Done()
}

// deliver records master i's answer and tells collect. Once every master
// answered, the key's waiters are woken if the phase was asked to and some
// master is not pipelined (else start woke them).
func (p *phase) deliver(i int, ok bool, token uint64, err error) {
	c := &p.calls[i]
	c.ok, c.token, c.err = ok, token, err
	if p.replies != nil {
		p.replies <- i
	}
	if p.running.Add(-1) == 0 && p.wake && p.r.goroutines {
		p.r.waiters.wake(p.req.key)
	}
}

func (p *phase) Deadline() (time.Time, bool) { return p.bucket.at, true }

func (p *phase) Done() <-chan struct{} { return p.bucket.done }

func (p *phase) Err() error {
	select {
	case <-p.bucket.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (p *phase) Value(key any) any { return p.parent.Value(key) }

func (p *phase) String() string { return "redlock phase context" }

// deadlineBucket is the Done channel of the phase contexts whose deadline falls
// in one millisecond, closed at its end (at).
type deadlineBucket struct {
	at   time.Time
	done chan struct{}
}

// deadlineGrain is the width of a deadline's bucket: a request may run on
// its socket up to this much past its phase's exact deadline.
const deadlineGrain = time.Millisecond

// deadlines are the buckets whose timers have not fired, by
// UnixNano/deadlineGrain of their end.
var deadlines struct {
	mu sync.Mutex // guards m
	m  map[int64]*deadlineBucket
}

// deadlineAt returns the bucket of deadline d: it ends at d rounded up to
// the next deadlineGrain.
func deadlineAt(d time.Time) *deadlineBucket {
	ns := d.UnixNano()
	k := ns/int64(deadlineGrain) + 1
	deadlines.mu.Lock()
	defer deadlines.mu.Unlock()
	if b := deadlines.m[k]; b != nil {
		return b
	}
	if deadlines.m == nil {
		deadlines.m = make(map[int64]*deadlineBucket)
	}
	// d plus the rest of its millisecond keeps d's monotonic reading.
	b := &deadlineBucket{at: d.Add(time.Duration(k*int64(deadlineGrain) - ns)), done: make(chan struct{})}
	deadlines.m[k] = b
	time.AfterFunc(time.Until(b.at), func() {
		deadlines.mu.Lock()
		delete(deadlines.m, k)
		deadlines.mu.Unlock()
		close(b.done)
	})
	return b
}

// timers are the pooled timers of collect. Since Go 1.23 a stopped timer
// delivers no stale value, so a timer can be reset and reused at once.
var timers sync.Pool

// collect reads replies until the quorum outcome is known, ctx ends (then it
// returns ctx's error), or the phase's deadline passes. At the deadline the
// masters that have not answered count as failed: the node timeout holds even
// for a Node whose client does not honour context deadlines (a go-redis client
// without ContextTimeoutEnabled waits for its ReadTimeout). Replies that
// arrive later stay in the channel, which is buffered for all of them.
func (r *Redlock) collect(ctx context.Context, p *phase) (tally, error) {
	t := newTally(len(r.nodes), r.quorum)
	// The replies already in may decide the phase without a timer.
buffered:
	for !t.decided() {
		select {
		case i := <-p.replies:
			t.add(p.reply(i), r.nodes[i])
		default:
			break buffered
		}
	}
	if t.decided() {
		return t, nil
	}
	tm, _ := timers.Get().(*time.Timer)
	if tm == nil {
		tm = time.NewTimer(time.Until(p.expiry))
	} else {
		tm.Reset(time.Until(p.expiry))
	}
	t, err := r.collectUntil(ctx, p, t, tm.C)
	tm.Stop()
	timers.Put(tm)
	return t, err
}

// collectUntil is collect's wait once a timer is needed: deadline fires at
// the phase's exact deadline.
func (r *Redlock) collectUntil(ctx context.Context, p *phase, t tally, deadline <-chan time.Time) (tally, error) {
	for !t.decided() {
		select {
		case i := <-p.replies:
			t.add(p.reply(i), r.nodes[i])
		case <-ctx.Done():
			return t, ctx.Err()
		case <-deadline:
			// Take what is buffered before counting anyone as silent.
			for drained := false; !drained; {
				select {
				case i := <-p.replies:
					t.add(p.reply(i), r.nodes[i])
				default:
					drained = true
				}
			}
			for i, n := range r.nodes {
				if !t.decided() && !t.answered(i) {
					t.add(reply{node: i, err: errNoReply}, n)
				}
			}
			return t, nil
		}
	}
	return t, nil
}

// reply is master i's answer, once its index came through p.replies.
func (p *phase) reply(i int) reply {
	c := &p.calls[i]
	return reply{node: i, ok: c.ok, token: c.token, err: c.err}
}

// errNoReply is the failure of a master that had not answered when its
// phase's deadline passed.
var errNoReply = fmt.Errorf("no reply within the node timeout: %w", context.DeadlineExceeded)
