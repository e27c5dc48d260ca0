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

// collect reads replies until the quorum outcome is known, ctx ends (then it
// returns ctx's error), or the phase's deadline passes. At the deadline the
// masters that have not answered count as failed: the node timeout holds even
// for a Node whose client does not honour context deadlines (a go-redis client
// without ContextTimeoutEnabled waits for its ReadTimeout). Replies that
// arrive later stay in the channel, which is buffered for all of them.
func (r *Redlock) collect(ctx context.Context, replies <-chan reply, deadline <-chan struct{}) (tally, error) {
	t := newTally(len(r.nodes), r.quorum)
	for !t.decided() {
		select {
		case rep := <-replies:
			t.add(rep, r.nodes[rep.node])
		case <-ctx.Done():
			return t, ctx.Err()
		case <-deadline:
			// deadline also closes once every master answered: take what is
			// buffered before counting anyone as silent.
			for drained := false; !drained; {
				select {
				case rep := <-replies:
					t.add(rep, r.nodes[rep.node])
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

// errNoReply is the failure of a master that had not answered when its
// phase's deadline passed.
var errNoReply = fmt.Errorf("no reply within the node timeout: %w", context.DeadlineExceeded)

// nodeOp is one request to one master within a phase.
type nodeOp func(ctx context.Context, n Node) (bool, error)

// fanout is one phase after the acquire (fence, extend, release): op on
// every master concurrently, all bounded by one deadline. It returns as soon
// as the quorum outcome is known or ctx ends; stragglers finish in the
// background, under a context that the caller's cancellation does not reach
// (a release must not be cut short because the caller gave up waiting).
//
// When after is not nil, the request to master i is sent only once the
// acquire still in flight to it has returned (see [attempt.inflight]), so it
// cannot be overtaken by that acquire.
type fanout struct {
	r       *Redlock
	ctx     context.Context // detached from the caller's cancellation
	cancel  context.CancelFunc
	op      nodeOp
	after   *attempt
	done    func() // nil, or called once all masters answered
	replies chan reply
	running atomic.Int32
}

func (r *Redlock) fanout(ctx context.Context, deadline time.Time, after *attempt, op nodeOp) (tally, error) {
	return r.fanoutThen(ctx, deadline, after, op, nil)
}

// fanoutThen is fanout that also calls done, in the background, once every
// master has answered or timed out.
func (r *Redlock) fanoutThen(ctx context.Context, deadline time.Time, after *attempt, op nodeOp, done func()) (tally, error) {
	f := &fanout{r: r, op: op, after: after, done: done, replies: make(chan reply, len(r.nodes))}
	f.ctx, f.cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline)
	f.running.Store(int32(len(r.nodes)))
	r.bg.Add(len(r.nodes))
	for i := range r.nodes {
		go f.run(i)
	}
	return r.collect(ctx, f.replies, f.ctx.Done())
}

func (f *fanout) run(i int) {
	defer f.r.bg.Done()
	if f.after != nil {
		f.after.inflight[i].Wait()
	}
	ok, err := f.op(f.ctx, f.r.nodes[i])
	f.replies <- reply{node: i, ok: ok, err: err}
	if f.running.Add(-1) == 0 {
		f.cancel()
		if f.done != nil {
			f.done()
		}
	}
}

// attempt is one acquire attempt: SET (or the fenced acquire script) on every
// master concurrently, under one deadline. Each master's goroutine, once its
// request returned, waits for the decision and, if the attempt failed, rolls
// its own master back: so a rollback always follows the acquire to the same
// master, and every master is cleaned, including one whose request timed out
// (the SET may have landed).
type attempt struct {
	r     *Redlock
	key   string
	value string
	cfg   *config
	start time.Time

	ctx      context.Context // the acquire's deadline: start + node timeout; not the caller's cancellation
	cancel   context.CancelFunc
	deadline time.Time
	replies  chan reply
	running  atomic.Int32

	// inflight[i] is done once the acquire request to master i has returned.
	// Later requests to master i (release, extend) wait for it first.
	inflight []sync.WaitGroup

	// decided is closed once the attempt is decided; failed is written before
	// that and only read after it.
	decided chan struct{}
	failed  bool
}

// start sends the acquire to every master.
func (r *Redlock) startAttempt(ctx context.Context, key string, cfg *config) *attempt {
	a := &attempt{
		r:        r,
		key:      key,
		value:    newValue(),
		cfg:      cfg,
		start:    r.clock.Now(),
		replies:  make(chan reply, len(r.nodes)),
		inflight: make([]sync.WaitGroup, len(r.nodes)),
		decided:  make(chan struct{}),
	}
	// Never wait past the moment success became impossible.
	wait := min(cfg.nodeTimeout, cfg.ttl-cfg.drift()-cfg.minValidity)
	a.deadline = a.start.Add(wait)
	// The requests must not be cut short by the caller's cancellation: the
	// common ctx, cancel := ...; Lock(ctx); cancel() would otherwise leave the
	// lock on a bare quorum. collect watches ctx for the caller.
	a.ctx, a.cancel = context.WithTimeout(context.WithoutCancel(ctx), wait)
	a.running.Store(int32(len(r.nodes)))
	r.bg.Add(len(r.nodes))
	for i := range r.nodes {
		a.inflight[i].Add(1)
		go a.run(i)
	}
	return a
}

func (a *attempt) run(i int) {
	defer a.r.bg.Done()
	n := a.r.nodes[i]
	rep := reply{node: i}
	if a.cfg.fencing {
		rep.token, rep.err = n.AcquireFenced(a.ctx, a.key, a.value, a.cfg.ttl)
		rep.ok = rep.err == nil && rep.token > 0
	} else {
		rep.ok, rep.err = n.Acquire(a.ctx, a.key, a.value, a.cfg.ttl)
	}
	a.inflight[i].Done()
	a.replies <- rep
	if a.running.Add(-1) == 0 {
		a.cancel()
	}
	<-a.decided
	// Roll back on every master, also those that refused: a client that
	// retries a command (go-redis does, MaxRetries) can have its first SET land
	// and its retry refused by our own value.
	if a.failed {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.nodeTimeout)
		_, _ = n.Release(ctx, a.key, a.value) // best effort: the key expires anyway
		cancel()
	}
}

// decide ends the attempt. After a failure every master that set the key, or
// might have, is rolled back in the background.
func (a *attempt) decide(failed bool) {
	a.failed = failed
	close(a.decided)
}

// acquire makes one attempt: the quorum of SETs, the validity check and,
// with fencing, the second round. It returns a held Lock or an error that
// wraps ErrNotObtained.
func (r *Redlock) acquire(ctx context.Context, key string, cfg *config) (*Lock, error) {
	a := r.startAttempt(ctx, key, cfg)
	t, ctxErr := r.collect(ctx, a.replies, a.ctx.Done())
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
	l := &Lock{r: r, key: key, value: a.value, cfg: *cfg, acq: a, until: until, ttl: cfg.ttl}
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
	key, value := l.key, l.value
	t, ctxErr := r.fanout(ctx, deadline, nil, func(ctx context.Context, n Node) (bool, error) {
		return n.RaiseFence(ctx, key, value, token)
	})
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
