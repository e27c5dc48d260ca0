package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The simulated network between the simulation's clients (sim_test.go) and
// its masters (simmaster_test.go), in bubble time.
//
// Each client reaches each master through a simConn, the [Node] its
// Redlock gets for that master. A request's trip: Exec draws its delays and
// its fate from the connection's own generator (seeded from the run's seed,
// the client and the master, and drawn in the order the requests are sent);
// the request travels for its forward delay, first-in first-out on its
// connection (a request never lands before one sent before it on the same
// connection); at the master it is dropped (a partition, a lossy link),
// refused (the master is down), held (the master is paused: it lands when
// the master resumes), or applied; its reply travels back for the return
// delay (plus a slow master's extra), again in order, and is lost if the
// link is cut by then or the master restarted meanwhile. Exec returns when
// every reply is in, or — outcome unknown for the rest — when ctx ends (a
// client that honours contexts) or at the read timeout (one that does not,
// as a go-redis client without ContextTimeoutEnabled).
//
// A connection whose Exec gave up may be dropped (reconnects, as go-redis
// drops a connection that timed out): its requests still in flight land in
// their own time, and the requests sent next go on a new connection that
// may overtake them — the documented straggler case.
type simNet struct {
	params  simNetParams
	masters []*simMaster

	mu sync.Mutex
	// cutN[c][m] > 0: client c cannot reach master m, either way (a count
	// of the partitions in force).
	cutN [][]int
	// slow[m]: extra delay of master m's replies; loss[m]: the chance that
	// a reply of master m is lost.
	slow []time.Duration
	loss []float64

	inflight *sync.WaitGroup // requests not yet landed or answered

	trace *simTrace // nil unless tracing
}

// simNetParams is the delay distribution and the baseline faults of the
// links: a one-way delay is base + an exponential with mean spread; with
// chance tailP it is drawn instead uniformly from [0, tailMax] (a
// retransmission, a stall). dropP is the chance a request is lost on the
// way, loseP that its reply is.
type simNetParams struct {
	Base, Spread time.Duration
	TailP        float64
	TailMax      time.Duration
	DropP, LoseP float64
}

func (p simNetParams) String() string {
	return fmt.Sprintf("delay %v+exp(%v), tail %.3f up to %v, drop %.3f, lose reply %.3f",
		p.Base, p.Spread, p.TailP, p.TailMax, p.DropP, p.LoseP)
}

func newSimNet(p simNetParams, masters []*simMaster, clients int) *simNet {
	n := &simNet{
		params:   p,
		masters:  masters,
		cutN:     make([][]int, clients),
		slow:     make([]time.Duration, len(masters)),
		loss:     make([]float64, len(masters)),
		inflight: new(sync.WaitGroup),
	}
	for c := range n.cutN {
		n.cutN[c] = make([]int, len(masters))
	}
	return n
}

func (n *simNet) isCut(client, master int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cutN[client][master] > 0
}

func (n *simNet) slowOf(master int) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.slow[master]
}

func (n *simNet) lossOf(master int) float64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.loss[master]
}

// delay draws a one-way delay.
func (p simNetParams) delay(rng *rand.Rand) time.Duration {
	if p.TailP > 0 && rng.Float64() < p.TailP {
		return time.Duration(rng.Int64N(int64(p.TailMax) + 1))
	}
	return p.Base + time.Duration(rng.ExpFloat64()*float64(p.Spread))
}

var (
	errSimRefused     = errors.New("sim: connection refused (master down)")
	errSimReset       = errors.New("sim: connection reset (master restarted)")
	errSimReadTimeout = errors.New("sim: read timeout")
)

// simConn is one client's connection to one master: the Node its Redlock
// uses for that master.
type simConn struct {
	net    *simNet
	m      *simMaster
	client int

	ignoresCtx  bool          // waits for replies until readTimeout, whatever ctx says
	readTimeout time.Duration // ignoresCtx: when Exec gives up
	reconnects  bool          // an Exec that gave up drops the connection
	clean       bool          // the end-of-run client: no drops, losses or tails
	// minTimeout is the shortest node timeout the client may use: an Exec
	// that lasts longer may make the lane skip a request queued behind it.
	minTimeout time.Duration

	sent atomic.Int64 // requests sent

	mu  sync.Mutex
	rng *rand.Rand
	w   *simWire
	// troubled: some request of this connection failed, was dropped, lost
	// its reply or waited so long that the lane may have skipped a request
	// behind it; the end-of-run check excuses the keys it left on the master.
	troubled bool
}

func newSimConn(n *simNet, m *simMaster, client int, rng *rand.Rand) *simConn {
	c := &simConn{net: n, m: m, client: client, rng: rng}
	c.w = newSimWire(c)
	return c
}

func (c *simConn) Name() string { return c.m.name }

func (c *simConn) trouble() {
	c.mu.Lock()
	c.troubled = true
	c.mu.Unlock()
}

func (c *simConn) isTroubled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.troubled
}

// flight is one request on its way; its reply fields are written before
// done is closed.
type flight struct {
	op                 Op
	key, value, owner  string
	ttl                time.Duration
	token              uint64
	arrive             time.Time
	back               time.Duration
	drop, lose         bool
	ok                 bool
	fence              uint64
	err                error
	done               chan struct{}
	seq                int // for traces
	fromClient, master int
}

// simWire is one connection's path to the master, both ways first-in
// first-out. One runner goroutine, started when requests are sent and gone
// when nothing is left in flight, lands the requests at their arrival
// times and hands back the replies at theirs.
type simWire struct {
	c *simConn
	// guarded by c.mu
	queue      []*flight // sent, not landed yet, in arrival order
	running    bool
	lastArrive time.Time
	kick       chan struct{} // capacity 1: a request was queued
	// the runner's alone
	replies   []simReply // answered, on their way back, in order
	lastReply time.Time
	timer     *time.Timer
}

type simReply struct {
	f   *flight
	at  time.Time
	inc int // the master's incarnation when it answered
}

func newSimWire(c *simConn) *simWire {
	return &simWire{c: c, kick: make(chan struct{}, 1)}
}

func (c *simConn) Exec(ctx context.Context, reqs []*Request) {
	if err := ctx.Err(); err != nil && !c.ignoresCtx {
		for _, q := range reqs {
			q.OK, q.Fence, q.Err = false, 0, err
		}
		c.trouble()
		return
	}
	began := time.Now()
	c.sent.Add(int64(len(reqs)))
	p := c.net.params
	if c.clean {
		p = simNetParams{Base: p.Base, Spread: p.Spread}
	}
	fs := make([]*flight, len(reqs))
	c.mu.Lock()
	w := c.w
	for i, q := range reqs {
		f := &flight{
			op: q.Op, key: q.Key, value: q.Value, owner: q.Owner, ttl: q.TTL, token: q.Token,
			done: make(chan struct{}), fromClient: c.client, master: c.m.id,
		}
		f.arrive = began.Add(p.delay(c.rng))
		if !f.arrive.After(w.lastArrive) {
			f.arrive = w.lastArrive.Add(time.Nanosecond) // in order on the connection
		}
		w.lastArrive = f.arrive
		f.back = p.delay(c.rng)
		f.drop = p.DropP > 0 && c.rng.Float64() < p.DropP
		f.lose = p.LoseP > 0 && c.rng.Float64() < p.LoseP
		w.queue = append(w.queue, f)
		fs[i] = f
	}
	c.net.inflight.Add(len(fs))
	start := !w.running
	w.running = true
	c.mu.Unlock()
	if start {
		go w.run()
	} else {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	c.net.trace.sent(fs)

	var ctxDone <-chan struct{}
	var timeout <-chan time.Time
	if c.ignoresCtx {
		t := time.NewTimer(c.readTimeout)
		defer t.Stop()
		timeout = t.C
	} else {
		ctxDone = ctx.Done()
	}
	for i, f := range fs {
		var err error
		select {
		case <-f.done:
			// No pub/sub here: a release ignores Waiter and Place and
			// wakes no one (waiters fall back to their backoff).
			q := reqs[i]
			q.OK, q.Fence, q.Woke, q.Err = f.ok, f.fence, false, f.err
			if f.err != nil {
				c.trouble()
			}
			continue
		case <-ctxDone:
			err = ctx.Err()
		case <-timeout:
			err = errSimReadTimeout
		}
		for _, q := range reqs[i:] {
			q.OK, q.Fence, q.Err = false, 0, err
		}
		c.mu.Lock()
		c.troubled = true
		if c.reconnects && c.w == w {
			c.w = newSimWire(c)
		}
		c.mu.Unlock()
		return
	}
	if c.minTimeout > 0 && time.Since(began) >= c.minTimeout {
		c.trouble()
	}
}

// run lands requests and delivers replies, each at its time.
func (w *simWire) run() {
	c := w.c
	for {
		c.mu.Lock()
		var next *flight
		if len(w.queue) > 0 {
			next = w.queue[0]
		}
		if next == nil && len(w.replies) == 0 {
			// The timer is stopped before the next runner may use it.
			if w.timer != nil {
				w.timer.Stop()
			}
			w.running = false
			w.queue = nil
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		now := time.Now()
		if len(w.replies) > 0 && (next == nil || w.replies[0].at.Before(next.arrive)) {
			rp := w.replies[0]
			if rp.at.After(now) {
				w.sleep(rp.at.Sub(now), true)
				continue // a request may have been queued meanwhile
			}
			w.replies = w.replies[1:]
			w.reply(rp)
			continue
		}
		if next.arrive.After(now) {
			w.sleep(next.arrive.Sub(now), false)
			continue
		}
		c.mu.Lock()
		w.queue[0] = nil
		w.queue = w.queue[1:]
		c.mu.Unlock()
		w.land(next)
	}
}

// sleep waits for d or, when kickable, until a request is queued.
func (w *simWire) sleep(d time.Duration, kickable bool) {
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	var kick chan struct{}
	if kickable {
		kick = w.kick
	}
	select {
	case <-w.timer.C:
	case <-kick:
		w.timer.Stop()
	}
}

// land delivers f to its master and queues its reply.
func (w *simWire) land(f *flight) {
	c, n, m := w.c, w.c.net, w.c.m
	if f.drop || n.isCut(c.client, m.id) {
		n.trace.event(f, "dropped on the way")
		n.inflight.Done()
		return
	}
	m.mu.Lock()
	for m.state == masterPaused {
		// Requests wait at a frozen master; replies already on their way
		// still arrive.
		ch := m.changed
		m.mu.Unlock()
		w.waitChanged(ch)
		m.mu.Lock()
	}
	inc := m.incarnation
	if m.state == masterDown {
		m.mu.Unlock()
		f.err = errSimRefused
		n.trace.event(f, "refused: master down")
	} else {
		f.ok, f.fence, f.err = m.applyLocked(f.op, f.key, f.value, f.owner, f.ttl, f.token)
		if f.ok && (f.op == OpAcquire || f.op == OpAcquireFenced) {
			e := m.keys[f.key]
			if e.owner != "" {
				if h, ok := e.holds[f.value]; ok {
					h.setBy = c
					e.holds[f.value] = h
				}
			} else {
				e.setBy = c
			}
			m.keys[f.key] = e
		}
		at := m.clockLocked()
		m.mu.Unlock()
		n.trace.applied(f, at)
		if f.lose || (n.lossOf(m.id) > 0 && w.lossDraw() < n.lossOf(m.id)) {
			n.trace.event(f, "reply lost")
			n.inflight.Done()
			return
		}
	}
	at := time.Now().Add(f.back + n.slowOf(m.id))
	if !at.After(w.lastReply) {
		at = w.lastReply.Add(time.Nanosecond) // replies in order too
	}
	w.lastReply = at
	w.replies = append(w.replies, simReply{f, at, inc})
}

// waitChanged waits for the master's state to change, delivering the
// replies that come due meanwhile.
func (w *simWire) waitChanged(ch chan struct{}) {
	for len(w.replies) > 0 {
		rp := w.replies[0]
		if d := time.Until(rp.at); d > 0 {
			if w.timer == nil {
				w.timer = time.NewTimer(d)
			} else {
				w.timer.Reset(d)
			}
			select {
			case <-ch:
				w.timer.Stop()
				return
			case <-w.timer.C:
			}
		}
		w.replies = w.replies[1:]
		w.reply(rp)
	}
	<-ch
}

// lossDraw draws from the connection's generator for a lossy master.
func (w *simWire) lossDraw() float64 {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.rng.Float64()
}

// reply hands f's reply to its Exec, unless the link is cut now (the reply
// is lost) or the master restarted since it answered (the connection broke:
// outcome unknown).
func (w *simWire) reply(rp simReply) {
	c, n, m, f := w.c, w.c.net, w.c.m, rp.f
	defer n.inflight.Done()
	if n.isCut(c.client, m.id) {
		n.trace.event(f, "reply dropped: link cut")
		return
	}
	m.mu.Lock()
	if m.incarnation != rp.inc && f.err == nil {
		f.ok, f.fence, f.err = false, 0, errSimReset
	}
	m.mu.Unlock()
	n.trace.replied(f)
	close(f.done)
}

// simTrace records a run's requests for a failing seed's report (-sim.trace).
type simTrace struct {
	mu    sync.Mutex
	start time.Time
	b     strings.Builder
	seq   int
	lines int
}

const maxTraceLines = 20000

func (t *simTrace) logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lines++; t.lines > maxTraceLines {
		return
	}
	fmt.Fprintf(&t.b, "%12v ", time.Since(t.start))
	fmt.Fprintf(&t.b, format, args...)
	t.b.WriteByte('\n')
}

func (t *simTrace) sent(fs []*flight) {
	if t == nil {
		return
	}
	for _, f := range fs {
		t.mu.Lock()
		t.seq++
		f.seq = t.seq
		t.mu.Unlock()
		t.logf("c%d→m%d #%d send %v %s %.6s ttl=%v tok=%d (lands at +%v)", f.fromClient, f.master, f.seq, f.op, f.key, f.value, f.ttl, f.token, time.Until(f.arrive))
	}
}

func (t *simTrace) event(f *flight, what string) {
	if t == nil {
		return
	}
	t.logf("c%d→m%d #%d %s", f.fromClient, f.master, f.seq, what)
}

func (t *simTrace) applied(f *flight, masterClock int64) {
	if t == nil {
		return
	}
	t.logf("c%d→m%d #%d applied: ok=%v fence=%d err=%v (master clock %d)", f.fromClient, f.master, f.seq, f.ok, f.fence, f.err, masterClock)
}

func (t *simTrace) replied(f *flight) {
	if t == nil {
		return
	}
	t.logf("c%d←m%d #%d reply ok=%v fence=%d err=%v", f.fromClient, f.master, f.seq, f.ok, f.fence, f.err)
}

func (t *simTrace) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.b.String()
	if t.lines > maxTraceLines {
		s += fmt.Sprintf("... %d more lines\n", t.lines-maxTraceLines)
	}
	return s
}
