package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// reply is one master's answer in a phase.
type reply struct {
	node  int
	ok    bool   // set, extended, released or confirmed
	token uint64 // fence token, when the phase makes one
	err   error  // nil, or the master's failure
}

// tally counts the replies of one phase towards a quorum decision.
type tally struct {
	n, quorum                  int
	succeeded, refused, failed int
	token                      uint64 // highest token among the successes
	errs                       []error
	seen                       uint64 // bit i: master i answered (masters past 64 are not tracked)
}

func newTally(n, quorum int) tally { return tally{n: n, quorum: quorum} }

func (t *tally) add(r reply, node Node) {
	if r.node < 64 {
		t.seen |= 1 << r.node
	}
	switch {
	case r.err != nil:
		t.failed++
		t.errs = append(t.errs, &NodeError{Node: node.Name(), Err: r.err})
	case r.ok:
		t.succeeded++
		t.token = max(t.token, r.token)
	default:
		t.refused++
	}
}

// answered reports whether master i's reply was counted. Past 64 masters it
// always says yes, so a silent master there is left out of the counts rather
// than counted twice.
func (t *tally) answered(i int) bool { return i >= 64 || t.seen&(1<<i) != 0 }

// won reports whether a quorum succeeded.
func (t *tally) won() bool { return t.succeeded >= t.quorum }

// lost reports whether so many masters refused or failed that a quorum can no
// longer succeed.
func (t *tally) lost() bool { return t.refused+t.failed > t.n-t.quorum }

func (t *tally) decided() bool { return t.won() || t.lost() }

func (t *tally) error(op, key string) *QuorumError {
	return &QuorumError{
		Op: op, Key: key, Nodes: t.n, Quorum: t.quorum,
		Succeeded: t.succeeded, Refused: t.refused, Failed: t.failed,
		Errs: t.errs,
	}
}

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
	args := p.args()
	for i, n := range r.pipes {
		switch {
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
		n.b.enqueue(c)
	}
	if p.wake && !r.goroutines {
		// Every master is pipelined: a waiter's acquire queues behind this
		// release on each master's batcher, so it may start now and still
		// find every master released.
		r.waiters.wake(p.req.key)
	}
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

// fanout is one phase after the acquire (fence, extend, release): req to
// every master, all bounded by deadline. It returns as soon as the quorum
// outcome is known or ctx ends; stragglers finish in the background. When
// wake is set, the key's local waiters are woken once every master answered.
//
// When after is not nil, the request to master i follows the acquire still
// in flight to it, so it cannot be overtaken by that acquire: a pipelined
// master's batcher sends requests in the order they were queued, and the
// goroutine of any other master waits for it (see [attempt.inflight]).
func (r *Redlock) fanout(ctx context.Context, deadline time.Time, after *attempt, req request, wake bool) (tally, error) {
	p := &phase{after: after, wake: wake}
	r.newPhase(p, ctx, deadline, req, true)
	if after != nil && after.req.key == req.key && after.req.value == req.value {
		p.key, p.value = after.key, after.value
	}
	p.start(nil)
	return r.collect(ctx, p)
}

// attempt is one acquire attempt: SET (or the fenced acquire script) on every
// master concurrently, under one deadline. After a failed attempt every
// master is rolled back, including one whose request timed out (the SET may
// have landed), each after its acquire returned: a pipelined master's
// rollback is queued behind the acquire at once, and any other master's
// goroutine, once its request returned, waits for the decision and rolls its
// own master back.
type attempt struct {
	phase
	nodeTimeout time.Duration
	start       time.Time
	deadline    time.Time // on r.clock: start + the wait

	// inflight[i] is done once the acquire request to master i has returned.
	// Later requests to master i (release, extend) that go through a
	// goroutine wait for it first. Nil when every master is pipelined.
	inflight []sync.WaitGroup

	// decided is closed once the attempt is decided; failed is written before
	// that and only read after it. The goroutine path alone waits for it.
	decided chan struct{}
	failed  bool
}

// wait waits until the acquire to master i has returned, for a request to
// master i that goes through a goroutine.
func (a *attempt) wait(i int) {
	if a.inflight != nil {
		a.inflight[i].Wait()
	}
}

// startAttempt sends the acquire to every master.
func (r *Redlock) startAttempt(ctx context.Context, key string, cfg *config) *attempt {
	a := &attempt{nodeTimeout: cfg.nodeTimeout, start: r.clock.Now()}
	// Never wait past the moment success became impossible.
	wait := min(cfg.nodeTimeout, cfg.ttl-cfg.drift()-cfg.minValidity)
	a.deadline = a.start.Add(wait)
	req := request{kind: reqAcquire, key: key, value: newValue(), ttl: cfg.ttl}
	if cfg.fencing {
		req.kind = reqAcquireFenced
	}
	// The requests must not be cut short by the caller's cancellation: the
	// common ctx, cancel := ...; Lock(ctx); cancel() would otherwise leave the
	// lock on a bare quorum. collect watches ctx for the caller.
	r.newPhase(&a.phase, ctx, time.Now().Add(wait), req, true)
	if r.goroutines {
		a.inflight = make([]sync.WaitGroup, len(r.nodes))
		a.decided = make(chan struct{})
		for i, n := range r.pipes {
			if n == nil {
				a.inflight[i].Add(1)
			}
		}
	}
	a.phase.start(a)
	return a
}

// run is the goroutine of master i when it is not pipelined.
func (a *attempt) run(i int) {
	defer a.r.bg.Done()
	n := a.r.nodes[i]
	ok, token, err := a.req.send(&a.phase, n)
	a.inflight[i].Done()
	a.deliver(i, ok, token, err)
	<-a.decided
	// Roll back on every master, also those that refused: a client that
	// retries a command (go-redis does, MaxRetries) can have its first SET land
	// and its retry refused by our own value.
	if a.failed {
		ctx, cancel := context.WithTimeout(context.Background(), a.nodeTimeout)
		_, _ = n.Release(ctx, a.req.key, a.req.value) // best effort: the key expires anyway
		cancel()
	}
}

// decide ends the attempt. After a failure every master that set the key, or
// might have, is rolled back in the background: the pipelined ones by a
// release queued behind the acquire, bounded by the node timeout from when
// the acquire's own deadline has passed.
func (a *attempt) decide(failed bool) {
	a.failed = failed
	if a.decided != nil {
		close(a.decided)
	}
	if !failed || !a.r.pipelined {
		return
	}
	from := later(time.Now(), a.expiry)
	rb := &phase{}
	a.r.newPhase(rb, context.Background(), from.Add(a.nodeTimeout),
		request{kind: reqRelease, key: a.req.key, value: a.req.value}, false)
	// Only the pipelined masters: the others roll back from their goroutines.
	skipped := 0
	for _, n := range a.r.pipes {
		if n == nil {
			skipped++
		}
	}
	rb.running.Add(-int32(skipped))
	rb.startPiped()
}

// startPiped is start for the pipelined masters only.
func (p *phase) startPiped() {
	r := p.r
	args := p.args()
	for i, n := range r.pipes {
		if n == nil {
			continue
		}
		r.bg.Add(1)
		c := &p.calls[i]
		c.ctx, c.p, c.node = p, p, i
		c.cmd, c.script, args = p.cmd(args)
		n.b.enqueue(c)
	}
}

// acquire makes one attempt: the quorum of SETs, the validity check and,
// with fencing, the second round. It returns a held Lock or an error that
// wraps ErrNotObtained.
func (r *Redlock) acquire(ctx context.Context, key string, cfg *config) (*Lock, error) {
	a := r.startAttempt(ctx, key, cfg)
	t, ctxErr := r.collect(ctx, &a.phase)
	if ctxErr != nil || !t.won() {
		a.decide(true)
		return nil, joinCtx(t.error(opAcquire, key), ctxErr)
	}
	until, left, valid := cfg.deadline(a.start, r.clock.Now())
	if !valid {
		a.decide(true)
		qe := t.error(opAcquire, key)
		qe.Late, qe.Validity = true, left
		return nil, qe
	}
	l := &Lock{r: r, key: key, value: a.req.value, cfg: *cfg, acq: a, until: until, ttl: cfg.ttl}
	if cfg.fencing {
		if err := r.confirmFence(ctx, l, t.token); err != nil {
			a.decide(true)
			return nil, err
		}
	}
	a.decide(false)
	if cfg.autoExtend {
		r.sched.place(l, renewalDue(until, cfg))
	}
	return l, nil
}

// confirmFence is the second round of a fenced acquire: raise the fence
// counter to at least the candidate token on every master where the key is
// still ours, and keep the token only if a quorum confirmed within the
// validity.
func (r *Redlock) confirmFence(ctx context.Context, l *Lock, token uint64) error {
	if token == 0 {
		// A quorum acquired but no master returned a token: a broken Node.
		return &QuorumError{Op: opFence, Key: l.key, Nodes: len(r.nodes), Quorum: r.quorum,
			Errs: []error{&NodeError{Node: "all", Err: errZeroToken}}}
	}
	deadline := r.clock.Now().Add(l.cfg.nodeTimeout)
	if last := l.until.Add(-l.cfg.minValidity); last.Before(deadline) {
		deadline = last // a confirmation after this could not be used
	}
	t, ctxErr := r.fanout(ctx, deadline, nil, request{kind: reqRaiseFence, key: l.key, value: l.value, token: token}, false)
	if ctxErr != nil || !t.won() {
		return joinCtx(t.error(opFence, l.key), ctxErr)
	}
	if left := l.until.Sub(r.clock.Now()); left <= l.cfg.minValidity {
		qe := t.error(opFence, l.key)
		qe.Late, qe.Validity = true, left
		return qe
	}
	l.token = token
	return nil
}
