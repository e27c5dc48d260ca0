package redlock

import (
	"context"
	"sync"
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
	refusals                   uint64 // bit i: master i refused (likewise)
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
		if r.node < 64 {
			t.refusals |= 1 << r.node
		}
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
		for i := range r.nodes {
			if !r.queued(i) {
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
// the acquire's own deadline has passed. A DirectNode whose refusal is among
// refusals (bit i: master i refused) is left alone: it sends every request
// once, so a refusal means our SET did not land there. (A go-redis client
// may retry a SET whose first try landed, and see its retry refused by our
// own value, so its masters are rolled back whatever they answered.)
func (a *attempt) decide(failed bool, refusals uint64) {
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
	skip := func(i int) bool {
		return !a.r.queued(i) || (a.r.direct[i] != nil && i < 64 && refusals&(1<<i) != 0)
	}
	skipped := 0
	for i := range a.r.nodes {
		if skip(i) {
			skipped++
		}
	}
	if skipped == len(a.r.nodes) {
		return
	}
	rb.running.Add(-int32(skipped))
	rb.startPiped(skip)
}

// startPiped is start for the pipelined masters that skip does not name.
func (p *phase) startPiped(skip func(i int) bool) {
	r := p.r
	var args []any
	if r.batched {
		args = p.args()
	}
	for i, n := range r.pipes {
		if skip(i) {
			continue
		}
		if r.direct[i] != nil {
			r.bg.Add(1)
			p.submit(i, false)
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
		a.decide(true, t.refusals)
		return nil, joinCtx(t.error(opAcquire, key), ctxErr)
	}
	until, left, valid := cfg.deadline(a.start, r.clock.Now())
	if !valid {
		a.decide(true, t.refusals)
		qe := t.error(opAcquire, key)
		qe.Late, qe.Validity = true, left
		return nil, qe
	}
	l := &Lock{r: r, key: key, value: a.req.value, cfg: *cfg, acq: a, until: until, ttl: cfg.ttl}
	if cfg.fencing {
		if err := r.confirmFence(ctx, l, t.token); err != nil {
			a.decide(true, t.refusals)
			return nil, err
		}
	}
	a.decide(false, 0)
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
