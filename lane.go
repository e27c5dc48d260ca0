package redlock

import (
	"sync"
	"time"
)

// maxBatch is the most requests one Exec call carries; more queued at once
// go in the next batch.
const maxBatch = 1024

// lane is the one way requests reach a master: a first-in first-out queue.
// Callers push requests and never wait on the lane; one runner, started when
// requests arrive and ended when none are left, takes what has queued,
// passes it to the Node's Exec as one batch, hands each reply back to its
// phase, and repeats. So a request reaches its master only after every
// request queued before it has returned or timed out — a release (or
// rollback, extend, renewal) never overtakes the acquire before it — and
// that is the only place this ordering is kept.
//
// The runner is a goroutine, or for one batch the caller that pushed it
// (pushRun): at one master a caller waits for its request's reply anyway,
// and running the batch itself saves two goroutine switches per request.
// Only a Node that returns by its context's deadline gets such a runner
// (callerRuns), so the caller still waits no longer than its phase's
// deadline.
//
// A request whose phase's deadline passed before its batch went out is not
// sent: its reply is the deadline's error. No goroutine outlives the
// requests.
type lane struct {
	node Node
	run  func() // l.drain, made once so that starting the runner allocates nothing
	// callerRuns: the Node's Exec returns by its context's deadline (see
	// pushRun).
	callerRuns bool

	mu      sync.Mutex // guards queue, spare and running
	queue   []*call
	spare   []*call // the previous batch's slice, for reuse
	running bool    // a runner is draining the queue

	reqs    []*request // the batch being sent; the runner's alone
	b       batch      // its commands, the runner's alone
	routing Routing    // the Node's Traits().Routing
}

func newLane(n Node) *lane {
	t := n.Traits()
	l := &lane{node: n, callerRuns: t.KeepsDeadlines, routing: t.Routing}
	l.run = l.drain
	return l
}

// push queues c and starts a runner goroutine if none runs.
func (l *lane) push(c *call) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if start {
		go l.run()
	}
}

// pushRun queues p's requests (to this lane, p's only master) for a caller
// that collects p. When no runner runs and the Node keeps deadlines, the
// caller is the runner for one batch, the one with p's requests (and
// whatever other callers queued meanwhile): it sends it, delivers its
// replies, leaves what queued after it to a runner goroutine, and reports
// true. Otherwise it gives p a channel for its replies and is push.
func (l *lane) pushRun(p *phase) bool {
	l.mu.Lock()
	run := !l.running && l.callerRuns
	if !run {
		p.replies = make(chan int, len(p.calls))
	}
	for i := range p.calls {
		l.queue = append(l.queue, &p.calls[i])
	}
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if !run {
		if start {
			go l.run()
		}
		return false
	}
	l.send(l.take())
	l.mu.Lock()
	more := len(l.queue) > 0
	l.running = more
	l.mu.Unlock()
	if more {
		go l.run()
	}
	return true
}

// drain sends batches until the queue is empty.
func (l *lane) drain() {
	for batch := l.take(); batch != nil; batch = l.take() {
		l.send(batch)
	}
}

// take returns the next batch, or nil (and the lane stops running) when the
// queue is empty.
func (l *lane) take() []*call {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.queue
	if len(batch) == 0 {
		l.running = false
		return nil
	}
	if len(batch) > maxBatch {
		l.queue = append(l.spare[:0], batch[maxBatch:]...)
		batch = batch[:maxBatch]
	} else {
		l.queue = l.spare[:0]
	}
	l.spare = nil
	return batch
}

// send runs the live requests of batch in one Exec, under the context of
// the phase with the latest deadline (its values, for tracing hooks, stand
// for the batch's), hands each reply to its phase, and keeps batch's slice
// for reuse.
func (l *lane) send(batch []*call) {
	l.reqs = l.reqs[:0]
	var ctx *phaseCtx
	now := time.Now()
	for _, c := range batch {
		if !now.Before(c.p.ctx.deadline) {
			c.Err = c.p.ctx.Err()
			continue
		}
		l.reqs = append(l.reqs, &c.request)
		if ctx == nil || c.p.ctx.deadline.After(ctx.deadline) {
			ctx = &c.p.ctx
		}
	}
	if len(l.reqs) > 0 {
		l.b.exchange(ctx, l.node, l.routing, l.reqs)
	}
	clear(l.reqs)
	for i, c := range batch {
		batch[i] = nil
		c.p.deliver(c)
	}
	l.mu.Lock()
	l.spare = batch[:0]
	l.mu.Unlock()
}
