package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// phase is one round of requests to every master under one deadline: an
// acquire, a fence confirmation, an extend, a release or rollback (one key
// each), or a round of renewals (one request per lock and master). Every
// request goes through its master's lane; the phase's context gives them the
// deadline, and the caller's values but not its cancellation (a release must
// not be cut short because the caller stopped waiting).
type phase struct {
	r     *Redlock
	ctx   phaseCtx
	n     int    // masters
	calls []call // key k's request to master i at k*n+i

	// replies carries the indexes of the calls whose reply is in, to
	// collect; nil when nobody collects (a rollback), or when the collector
	// sent the requests itself (ran: every reply is in).
	replies chan int
	ran     bool
	pending atomic.Int32  // calls not answered yet
	tallies []tally       // one per key; collect's alone
	one     [1]tally      // tallies' array for a single key
	oneCall [1]call       // calls' array for a single key and master
	start   time.Duration // when the requests were queued, after r.born; 0 without an Observer
}

// call is one master's request in a phase, queued in that master's lane.
type call struct {
	request
	p        *phase
	at       int           // index in p.calls
	answered bool          // collect took the reply (collect's alone)
	counted  bool          // in its key's tally: its reply, or its lack at the deadline (collect's alone)
	took     time.Duration // when the reply came, after r.born, when p.start is set
}

// startPhase sends one request per key in reqs to every master, all bounded
// by deadline, and returns the phase to collect (when collected) or to
// forget. Close waits for every request of it.
func (r *Redlock) startPhase(ctx context.Context, deadline time.Time, collected bool, reqs ...request) *phase {
	n := len(r.nodes)
	p := &phase{r: r, n: n}
	if p.calls = p.oneCall[:]; len(reqs)*n > 1 {
		p.calls = make([]call, len(reqs)*n)
	}
	// At one master a collector waits for that master's reply whatever
	// happens: it may send the requests itself (lane.pushRun), unless its
	// own context's deadline comes before the phase's. It then notices its
	// context's cancellation when they are back, by the phase's deadline.
	callerRuns := collected && n == 1
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		callerRuns = false
	}
	p.begin(ctx, deadline)
	if collected {
		if !callerRuns {
			p.replies = make(chan int, len(p.calls))
		}
		p.tallies = p.one[:]
		if len(reqs) > 1 {
			p.tallies = make([]tally, len(reqs))
		}
		for k := range p.tallies {
			p.tallies[k] = tally{n: n, quorum: r.quorum, p: p, k: k}
		}
	}
	p.pending.Store(int32(len(p.calls)))
	if r.obs != nil {
		p.start = time.Since(r.born) + 1 // never 0
	}
	for k := range reqs {
		q := &reqs[k]
		q.boxArgs()
		for i := range n {
			c := &p.calls[k*n+i]
			c.request, c.p, c.at = *q, p, k*n+i
			c.deadline = deadline
			if q.Waiter != "" && q.Waiter == r.wake.channel {
				c.Waiter, c.waiter = r.wake.chans[i], r.wake.boxes[i] // see wakeups.chans
				if r.wake.sharded[i] {
					ch := ShardChannel(c.Waiter, q.Key)
					c.Waiter, c.waiter = ch, ch
				}
			}
		}
	}
	if callerRuns {
		p.ran = r.lanes[0].pushRun(p)
		return p
	}
	for i, l := range r.lanes {
		for k := range reqs {
			l.push(&p.calls[k*n+i])
		}
	}
	return p
}

// begin gives p its context: ctx's values without its cancellation, and
// deadline. Close waits for p's requests from now on.
func (p *phase) begin(ctx context.Context, deadline time.Time) {
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	p.ctx.values, p.ctx.deadline, p.ctx.timers = ctx, deadline, &p.r.deadlines
	p.r.bg.Add(1)
}

// sendTo sends q to master i alone, bounded by deadline, and forgets it
// (Close waits for it): for a request that concerns that master only.
func (r *Redlock) sendTo(i int, deadline time.Time, q request) {
	p := &phase{r: r, n: len(r.nodes)}
	p.calls = p.oneCall[:]
	p.begin(context.Background(), deadline)
	p.pending.Store(1)
	q.boxArgs()
	c := &p.calls[0]
	c.request, c.p, c.deadline = q, p, deadline
	r.lanes[i].push(c)
}

// deliver takes c's reply from its lane.
func (p *phase) deliver(c *call) {
	checkReply(&c.request)
	if c.Err != nil && c.lock != nil {
		// Before the reply counts, and before the master's lane sends the
		// next request: see Lock.capTTL.
		c.lock.strayed(c.TTL)
	}
	if p.start != 0 {
		c.took = time.Since(p.r.born) + 1
	}
	if p.replies != nil {
		p.replies <- c.at
	}
	if p.pending.Add(-1) == 0 {
		p.ctx.end(ctxStopped) // nothing waits on it any more
		p.r.bg.Done()
	}
}

// collect reads replies until every key's quorum outcome is known, ctx ends
// (it then returns ctx's error), or the phase's deadline passes: the masters
// that have not answered by then count as failed. So the node timeout holds
// whatever a Node does with its context (a go-redis client without
// ContextTimeoutEnabled waits for its ReadTimeout).
func (p *phase) collect(ctx context.Context) error {
	return p.collectUntil(ctx, 0, 0)
}

// collectUntil is collect that also returns, with nil, grace after
// answers masters answered (a reply or a failure; for a phase of one key)
// if the key is still undecided then; answers 0: it does not. The caller
// may call collect after it for the rest.
func (p *phase) collectUntil(ctx context.Context, answers int, grace time.Duration) error {
	open := 0
	for k := range p.tallies {
		if !p.tallies[k].decided() {
			open++
		}
	}
	if p.ran { // every reply is in
		for j := range p.calls {
			p.count(j)
		}
		return nil
	}
	var timer, soft *time.Timer
	var softC <-chan time.Time // soft's, once answers masters answered
	defer func() {
		if timer != nil {
			p.r.putTimer(timer)
		}
		if soft != nil {
			p.r.putTimer(soft)
		}
	}()
	// Once the deadline passed, only the replies already in are counted.
	for passed := false; open > 0; {
		select {
		case j := <-p.replies:
			open -= p.count(j)
			continue
		default:
		}
		if passed {
			break
		}
		if answers > 0 && softC == nil && p.answered() >= answers {
			soft = p.r.newTimer(grace)
			softC = soft.C
		}
		if timer == nil {
			// A timer only when the replies are not all in yet: it is in
			// the runtime's timer heap only while collect waits on it.
			left := time.Until(p.ctx.deadline)
			if passed = left <= 0; passed {
				continue
			}
			timer = p.r.newTimer(left)
		}
		select {
		case j := <-p.replies:
			open -= p.count(j)
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			passed = true
		case <-softC:
			return nil
		}
	}
	if open == 0 {
		return nil
	}
	// The deadline passed: the masters that have not answered count as
	// failed.
	for k := range p.tallies {
		t := &p.tallies[k]
		if t.decided() {
			continue
		}
		for i := range p.n {
			if c := &p.calls[k*p.n+i]; !c.answered {
				c.counted = true
				t.add(i, &request{Err: errNoReply}, p.r.nodes[i])
			}
		}
	}
	return nil
}

// newTimer returns a timer that fires after d, one of r.timers when there
// is one: a phase's deadline costs no allocation, and no timer at all when
// its replies are in before collect first waits.
func (r *Redlock) newTimer(d time.Duration) *time.Timer {
	if t, ok := r.timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it for reuse: since Go 1.23 a stopped timer's
// channel holds no stale value.
func (r *Redlock) putTimer(t *time.Timer) {
	t.Stop()
	r.timers.Put(t)
}

// phaseCtx is a phase's context, the one every Node.Exec of the phase's
// requests gets: the phase's deadline, the caller's values, and not the
// caller's cancellation. It holds the deadline without a timer of its own:
// Deadline and Err read it (go-redis with ContextTimeoutEnabled puts
// Deadline on the socket), and a Done asked for borrows one of the
// Redlock's timers, given back once every request of the phase is back
// (end(ctxStopped), in phase.deliver), which also ends the context as
// context.Canceled.
type phaseCtx struct {
	values   context.Context // the caller's, without its cancellation
	deadline time.Time
	timers   *sync.Pool // the Redlock's *deadlineTimer

	state atomic.Int32 // live, expired or stopped
	mu    sync.Mutex   // guards done and timer
	done  chan struct{}
	timer *deadlineTimer
}

const (
	ctxLive int32 = iota
	ctxExpired
	ctxStopped
)

var _ context.Context = (*phaseCtx)(nil)

func (c *phaseCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *phaseCtx) Value(key any) any { return c.values.Value(key) }

// Err is context.DeadlineExceeded once the deadline passed. Once it says
// so, Done is closed (Context's contract).
func (c *phaseCtx) Err() error {
	s := c.state.Load()
	if s == ctxLive {
		if time.Now().Before(c.deadline) {
			return nil
		}
		c.end(ctxExpired)
		s = c.state.Load()
	}
	if s == ctxExpired {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

func (c *phaseCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.state.Load() != ctxLive {
			close(c.done)
		} else {
			c.timer = startDeadlineTimer(c)
		}
	}
	return c.done
}

// end ends c as state (expired or stopped), if it is still live, and gives
// its timer back.
func (c *phaseCtx) end(state int32) {
	c.mu.Lock()
	if !c.state.CompareAndSwap(ctxLive, state) {
		c.mu.Unlock()
		return
	}
	if c.done != nil {
		close(c.done)
	}
	t := c.timer
	c.timer = nil
	c.mu.Unlock()
	if t != nil {
		t.stop()
	}
}

// deadlineTimer closes the Done channel of the phaseCtx it was started
// for at that one's deadline. It is reused, so a firing that comes late for
// a phaseCtx it has been started for since is told apart by the deadline:
// it ends a phaseCtx only when its deadline has passed.
type deadlineTimer struct {
	t    *time.Timer
	pool *sync.Pool
	mu   sync.Mutex // guards c
	c    *phaseCtx
}

func startDeadlineTimer(c *phaseCtx) *deadlineTimer {
	d, _ := c.timers.Get().(*deadlineTimer)
	if d == nil {
		d = &deadlineTimer{pool: c.timers}
	}
	d.mu.Lock()
	d.c = c
	d.mu.Unlock()
	if d.t == nil {
		d.t = time.AfterFunc(time.Until(c.deadline), d.fire)
	} else {
		d.t.Reset(time.Until(c.deadline))
	}
	return d
}

func (d *deadlineTimer) fire() {
	d.mu.Lock()
	c := d.c
	d.mu.Unlock()
	if c != nil && !time.Now().Before(c.deadline) {
		c.end(ctxExpired)
	}
}

// stop stops d and keeps it for reuse.
func (d *deadlineTimer) stop() {
	d.t.Stop()
	d.mu.Lock()
	d.c = nil
	d.mu.Unlock()
	d.pool.Put(d)
}

// count adds call j's reply to its key's tally and returns 1 when that
// decided the key.
func (p *phase) count(j int) int {
	c := &p.calls[j]
	c.answered = true
	t := &p.tallies[j/p.n]
	if t.decided() {
		return 0 // decided already: later replies do not change the outcome
	}
	c.counted = true
	t.add(j%p.n, &c.request, p.r.nodes[j%p.n])
	if t.decided() {
		return 1
	}
	return 0
}

// answered reports how many of p's requests collect has read a reply or
// a failure of.
func (p *phase) answered() int {
	n := 0
	for i := range p.calls {
		if p.calls[i].answered {
			n++
		}
	}
	return n
}

// woke reports on how many masters (among those collect counted) a
// collected release woke a waiting call.
func (p *phase) woke() int {
	n := 0
	for i := range p.calls {
		if p.calls[i].answered && p.calls[i].Woke {
			n++
		}
	}
	return n
}

// tally counts the replies of one key in a phase towards a quorum decision.
type tally struct {
	n, quorum                  int
	succeeded, refused, failed int
	token                      uint64 // highest fence token among the successes
	errs                       []error
	free                       []uint64 // a permit's refusals: each master's free slots (see Semaphore)
	p                          *phase   // the phase, whose key k this is
	k                          int
}

func (t *tally) add(i int, q *request, node Node) {
	switch {
	case q.Err != nil:
		t.failed++
		t.errs = append(t.errs, &NodeError{Node: node.Name(), Err: q.Err})
	case q.OK:
		t.succeeded++
		t.token = max(t.token, q.Fence)
	default:
		t.refused++
		if q.Kind == kindPermit {
			t.free = append(t.free, q.Free)
		}
	}
}

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
		Errs: t.errs, Masters: t.p.masters(t.k), free: t.free,
	}
}

// masters is each master's part in key k's outcome, in the order of New's
// nodes, as collect counted it: a master it did not count (the outcome was
// decided without it, or the caller's ctx ended first) is Pending. Latency
// is measured only for an Observer (p.start set).
func (p *phase) masters(k int) []NodeReply {
	out := make([]NodeReply, p.n)
	for i := range out {
		c := &p.calls[k*p.n+i]
		nr := &out[i]
		nr.Node = p.r.nodes[i].Name()
		if c.counted && c.answered && p.start != 0 {
			nr.Latency = c.took - p.start
		}
		switch {
		case !c.counted:
		case !c.answered: // counted at the deadline; its reply may still come
			nr.Outcome, nr.Err = Failed, errNoReply
		case c.Err != nil:
			nr.Outcome, nr.Err = Failed, c.Err
		case c.OK:
			nr.Outcome = Succeeded
		default:
			nr.Outcome = Refused
		}
	}
	return out
}

// late is the error of a phase whose quorum came with only left of
// validity, no more than the minimum.
func (t *tally) late(op, key string, left time.Duration) *QuorumError {
	qe := t.error(op, key)
	qe.Late, qe.Validity = true, left
	return qe
}

// acquire makes one attempt: SET (or the fenced acquire script) on every
// master at once, decided at a quorum or when success became impossible
// (the node timeout, or the moment too little validity would be left); the
// validity check; with fencing, the second round. It returns a held Lock or
// an error that wraps ErrNotObtained. A failed attempt is rolled back on
// every master, also those that refused or did not answer: a go-redis client
// may retry a SET whose first try landed and see its retry refused by our
// own value, and a SET that timed out may have landed.
//
// With h not nil, the rollback also queues the call for the key's next
// release (see [handoff]).
func (r *Redlock) acquire(ctx context.Context, name, key string, cfg *config, h *handoff) (*Lock, error) {
	if cfg.kind == kindPermit {
		return r.acquirePermit(ctx, name, key, cfg, h) // a search over slots, each as here
	}
	return r.acquireOnce(ctx, name, key, cfg, h)
}

// acquireOnce is acquire's attempt on one key (for a permit: one slot).
func (r *Redlock) acquireOnce(ctx context.Context, name, key string, cfg *config, h *handoff) (*Lock, error) {
	h.attempting()
	start := r.clock.Now()
	op := reqAcquire
	if cfg.fencing {
		op = reqAcquireFenced
	}
	l := &Lock{r: r, name: name, key: key, value: newValue(), owner: cfg.owner, cfg: *cfg, ttl: cfg.ttl}
	if h.registered() {
		l.h = h // its release deletes hand-offs that came after all
	}
	// The requests must not be cut short by the caller's cancellation: the
	// common ctx, cancel := ...; Lock(ctx); cancel() would otherwise leave the
	// lock on a bare quorum. collect watches ctx for the caller.
	l.last = time.Now().Add(min(cfg.nodeTimeout, cfg.ttl-cfg.drift()-cfg.minValidity))
	l.boxedKey, l.boxedValue = key, l.value
	q := l.request(op, cfg.ttl, 0)
	if l.h != nil && cfg.kind != kindMutex {
		// A waiting call's attempt carries its hand-off value: a kind may
		// keep state for the call on the masters under it (an RWMutex
		// writer's claim, which its withdrawal takes away), and its place
		// in the queues (which orders the claims).
		q.Hand, q.Queued = h.value, h.at()
	}
	p := r.startPhase(ctx, l.last, true, q)
	ctxErr := p.collect(ctx)
	t := &p.tallies[0]
	fail := func(err error) (*Lock, error) {
		l.release(ctx, false, h)
		r.attempted(ctx, p, key, cfg, start, nil, err)
		return nil, err
	}
	if ctxErr != nil || !t.won() {
		return fail(joinCtx(t.error(opAcquire, key), ctxErr))
	}
	until, left, valid := cfg.deadline(start, r.clock.Now())
	if !valid {
		return fail(t.late(opAcquire, key, left))
	}
	l.until = until
	if cfg.fencing {
		if err := l.confirmFence(ctx, t.token); err != nil {
			return fail(err)
		}
	}
	r.started(ctx, p, l, cfg, start)
	return l, nil
}

// started starts the life of l, a lock taken by an attempt that started at
// start and was decided by p, or handed to a waiting call (p nil).
func (r *Redlock) started(ctx context.Context, p *phase, l *Lock, cfg *config, start time.Time) {
	if cfg.autoExtend {
		r.sched.place(l, time.Time{})
	}
	r.attempted(ctx, p, l.key, cfg, start, l, nil)
}

// confirmFence is the second round of a fenced acquire: raise the fence
// counter to at least the candidate token on every master where the key is
// still ours, and keep the token only if a quorum confirmed while more than
// the minimum validity was left.
func (l *Lock) confirmFence(ctx context.Context, token uint64) error {
	if token == 0 {
		// A quorum acquired but no master returned a token: a broken Node.
		return &QuorumError{Op: opFence, Key: l.key, Nodes: len(l.r.nodes), Quorum: l.r.quorum,
			Errs: []error{&NodeError{Node: "all", Err: errZeroToken}}}
	}
	deadline, ok := l.nextDeadline(l.until.Add(-l.cfg.minValidity))
	if !ok {
		return l.late(opFence)
	}
	p := l.r.startPhase(ctx, deadline, true, l.request(reqRaiseFence, 0, token))
	ctxErr := p.collect(ctx)
	t := &p.tallies[0]
	if ctxErr != nil || !t.won() {
		return joinCtx(t.error(opFence, l.key), ctxErr)
	}
	if left := l.until.Sub(l.r.clock.Now()); left <= l.cfg.minValidity {
		return t.late(opFence, l.key, left)
	}
	l.token = token
	return nil
}

// late is the error of a phase of l that could not start, or whose quorum
// came, with no more than the minimum validity left.
func (l *Lock) late(op string) error {
	return &QuorumError{Op: op, Key: l.key, Nodes: len(l.r.nodes), Quorum: l.r.quorum,
		Late: true, Validity: l.until.Sub(l.r.clock.Now())}
}

// nextDeadline is the deadline of the next phase of l: the node timeout,
// counted from when the lock's previous phase's deadline has passed (its
// requests may still be ahead in the lanes), and no later than by, a moment
// on r.clock (the zero Time: no bound). It reports false when by has passed.
// It becomes the lock's last deadline.
func (l *Lock) nextDeadline(by time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.deadlineLocked(time.Now(), by, l.cfg.nodeTimeout)
	if ok {
		l.last = later(l.last, d)
	}
	return d, ok
}

// deadlineLocked is nextDeadline's rule for a phase starting at now (on the
// real clock) with nodeTimeout, without recording it (l.mu held).
func (l *Lock) deadlineLocked(now, by time.Time, nodeTimeout time.Duration) (time.Time, bool) {
	d := later(now, l.last).Add(nodeTimeout)
	if !by.IsZero() {
		left := by.Sub(l.r.clock.Now())
		if left <= 0 {
			return time.Time{}, false
		}
		d = earlier(d, now.Add(left)) // by, on the real clock
	}
	return d, true
}

// release sends the compare-and-delete of l's key to every master, each
// after whatever l sent there before (the lanes keep the order): the one
// path of Unlock and of every rollback. For an Unlock it returns the phase to
// collect, and wakes this process's goroutines waiting for the key: their
// acquires queue behind the release on every lane, so they find every master
// released. A rollback is not collected: the keys expire anyway. A rollback
// with h not nil also registers the call h for the key's next release.
//
// A release that frees the key tells the next Lock call queued on the
// masters; one of a lock that came from a waiting call also takes that
// call's registrations off (see [handoff]).
func (l *Lock) release(ctx context.Context, unlock bool, h *handoff) *phase {
	deadline, _ := l.nextDeadline(time.Time{})
	q := l.request(reqRelease, 0, 0)
	q.Waiter, _ = l.r.wake.name()
	q.rollback = !unlock
	// The call's queue work rides on the release (handoff.lua), but for an
	// owned lock and every kind but a mutex: their release scripts keep
	// none, and it goes in a request of its own just before (handoff.lua,
	// for a kind other than a mutex as that kind assembles it: kindArgs).
	// A permit's release takes the call off the queue, and an Unlock's
	// queues it again (sem_release.lua), but a rollback's registration
	// goes on its own.
	reg := &q
	rides := l.owner == "" && (l.cfg.kind == kindMutex || l.cfg.kind == kindPermit && h == nil)
	if !rides && (h != nil || l.h != nil) { // else it carries nothing
		reg = &request{Op: reqRelease, Kind: l.cfg.kind, Key: l.key, Waiter: q.Waiter, Gate: q.Gate}
	}
	switch {
	case q.Waiter == "":
	case h != nil:
		reg.Hand, reg.TTL = h.value, h.ttl
		reg.Place = h.at()
		reg.Queued = reg.Place
		reg.Back = h.handBack()
		reg.Reg = h.again(deadline) // before any master can hand under it
	case unlock && l.h != nil && (l.h.ttl > 0 || l.cfg.kind == kindPermit):
		// Queue again behind the call the key is handed to, if it is (a
		// permit's: behind the call it wakes).
		q.Hand, q.TTL, q.Behind = l.h.value, l.h.ttl, true
		q.Queued, q.Place = l.h.at(), time.Now().UnixMicro()
		q.Reg = l.r.wake.stay(l.h, q.Place, deadline, l.cfg.maxBackoff)
		l.stayReg = q.Reg
	case l.h != nil:
		reg.Hand, reg.Queued = l.h.value, l.h.at()
		// An RWMutex's withdrawal goes on its own, ahead of the release,
		// and its release (rw_release.lua) wakes the next call wherever
		// it leaves the lock free, held there or not: the withdrawal wakes
		// none (a give-up's, unhand's, does). An owned mutex's release
		// (hold.lua) wakes none where the key is free: its withdrawal
		// (handoff.lua) still does.
		reg.Yield = l.cfg.kind == kindReader || l.cfg.kind == kindWriter
	}
	if reg != &q && reg.Hand != "" {
		l.r.startPhase(ctx, deadline, false, *reg)
	}
	p := l.r.startPhase(ctx, deadline, unlock, q)
	if unlock {
		l.r.waiters.wake(l.key)
	}
	return p
}

// errNoReply is the failure of a master that had not answered when its
// phase's deadline passed.
var errNoReply = fmt.Errorf("no reply within the node timeout: %w", context.DeadlineExceeded)

var errZeroToken = fmt.Errorf("a quorum set the key but no master returned a fence token")
