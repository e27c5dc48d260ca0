package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/sim"
)

// The simulated network between the simulation's clients (sim_test.go) and
// its masters (internal/sim), in bubble time.
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
	seed     uint64          // the run's, for the subscriptions' draws
	subsWG   sync.WaitGroup  // the subscriptions' goroutines (until Close and after)

	// Pub/sub: messages delivered to subscriptions and lost on the way,
	// (re)subscriptions confirmed.
	delivered, lost, resubscribed atomic.Int64
	dups                          atomic.Int64 // releases sent twice
	handsMu                       sync.Mutex
	hands                         map[string]bool // hand-off messages delivered, by master and payload

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
	// DupP is the chance that a release (a rollback that registers a
	// hand-off call, an Unlock, a give-up) of a client that drops timed-out
	// connections is sent twice: the copy goes on a connection of its own,
	// up to 50 ms later, and may land before or after the original and
	// the requests sent after it, as a go-redis retry on a new connection
	// would (a registration that lands twice or late).
	DupP float64
}

func (p simNetParams) String() string {
	s := fmt.Sprintf("delay %v+exp(%v), tail %.3f up to %v, drop %.3f, lose reply %.3f",
		p.Base, p.Spread, p.TailP, p.TailMax, p.DropP, p.LoseP)
	if p.DupP > 0 {
		s += fmt.Sprintf(", releases sent twice %.3f", p.DupP)
	}
	return s
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

	sent atomic.Int64  // requests sent
	subs atomic.Uint64 // subscriptions made

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

func (c *simConn) Name() string { return c.m.Name() }

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
	req                request // the request the command carries, for the checker and the trace
	args               []any   // the command as sent (the core reuses its own)
	reply              any     // the master's reply, or
	rerr               error   // its error reply, or the failure the client sees
	woke               bool
	op                 reqKind
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

func (c *simConn) Exec(ctx context.Context, cmds []*Command) {
	if err := ctx.Err(); err != nil && !c.ignoresCtx {
		for _, cmd := range cmds {
			cmd.Reply, cmd.Err = nil, err
		}
		c.trouble()
		return
	}
	began := time.Now()
	c.sent.Add(int64(len(cmds)))
	p := c.net.params
	if c.clean {
		p = simNetParams{Base: p.Base, Spread: p.Spread}
	}
	fs := make([]*flight, len(cmds))
	var dups []*flight
	c.mu.Lock()
	w := c.w
	for i, cmd := range cmds {
		q := cmd.req
		if q == nil {
			q = &request{} // a WAIT: the simulation has no replicas
		}
		f := &flight{
			req: request{Op: q.Op, Key: q.Key, Value: q.Value, TTL: q.TTL, Token: q.Token, Owner: q.Owner,
				Waiter: q.Waiter, Place: q.Place, Hand: q.Hand, Reg: q.Reg, Behind: q.Behind, Queued: q.Queued, Repair: q.Repair,
				Gate: q.Gate},
			args: slices.Clone(cmd.Args),
			op:   q.Op, key: q.Key, value: q.Value, owner: q.Owner, ttl: q.TTL, token: q.Token,
			done: make(chan struct{}), fromClient: c.client, master: c.m.ID(),
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
		if p.DupP > 0 && c.reconnects && q.Op == reqRelease && c.rng.Float64() < p.DupP {
			dup := *f
			dup.done = make(chan struct{})
			dup.arrive = began.Add(p.delay(c.rng) + time.Duration(c.rng.Int64N(int64(50*time.Millisecond))))
			c.troubled = true
			dups = append(dups, &dup)
		}
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
	for _, d := range dups {
		// Its own connection: nobody waits for its reply.
		sw := newSimWire(c)
		sw.queue, sw.running, sw.lastArrive = []*flight{d}, true, d.arrive
		c.net.inflight.Add(1)
		c.net.dups.Add(1)
		go sw.run()
	}

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
			cmds[i].Reply, cmds[i].Err = f.reply, f.rerr
			if f.err != nil {
				c.trouble()
			}
			continue
		case <-ctxDone:
			err = ctx.Err()
		case <-timeout:
			err = errSimReadTimeout
		}
		for _, cmd := range cmds[i:] {
			cmd.Reply, cmd.Err = nil, err
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
	if f.drop || n.isCut(c.client, m.ID()) {
		n.trace.event(f, "dropped on the way")
		n.inflight.Done()
		return
	}
	m.Lock()
	for m.StateLocked() == sim.Paused {
		// Requests wait at a frozen master; replies already on their way
		// still arrive.
		ch := m.ChangedLocked()
		m.Unlock()
		w.waitChanged(ch)
		m.Lock()
	}
	inc := m.IncarnationLocked()
	if m.StateLocked() == sim.Down {
		m.Unlock()
		f.err, f.rerr = errSimRefused, errSimRefused
		n.trace.event(f, "refused: master down")
	} else {
		q := f.req
		f.reply, f.rerr = m.applyLocked(&q, f.args, c)
		f.ok, f.fence, f.woke, f.err = q.OK, q.Fence, q.Woke, q.Err
		at := m.ClockLocked()
		m.Unlock()
		n.trace.applied(f, at)
		if f.lose || (n.lossOf(m.ID()) > 0 && w.lossDraw() < n.lossOf(m.ID())) {
			n.trace.event(f, "reply lost")
			n.inflight.Done()
			return
		}
	}
	at := time.Now().Add(f.back + n.slowOf(m.ID()))
	if !at.After(w.lastReply) {
		at = w.lastReply.Add(time.Nanosecond) // replies in order too
	}
	w.lastReply = at
	w.replies = append(w.replies, simReply{f, at, inc})
}

// waitChanged waits for the master's state to change, delivering the
// replies that come due meanwhile.
func (w *simWire) waitChanged(ch <-chan struct{}) {
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
	if n.isCut(c.client, m.ID()) {
		n.trace.event(f, "reply dropped: link cut")
		return
	}
	m.Lock()
	if m.IncarnationLocked() != rp.inc && f.err == nil {
		f.ok, f.fence, f.woke, f.err = false, 0, false, errSimReset
		f.reply, f.rerr = nil, errSimReset
	}
	m.Unlock()
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
		q := f.req
		wait := ""
		if q.Waiter != "" || q.Hand != "" {
			wait = fmt.Sprintf(" waiter=%s place=%d hand=%.6s reg=%d behind=%v", strings.TrimPrefix(q.Waiter, "redlock:wake:")[:min(len(q.Waiter), 4)], q.Place, q.Hand, q.Reg, q.Behind)
		}
		if q.Repair {
			wait += " repair"
		}
		t.logf("c%d→m%d #%d send %v %s %.6s ttl=%v tok=%d%s (lands at +%v)", f.fromClient, f.master, f.seq, f.op, f.key, f.value, f.ttl, f.token, wait, time.Until(f.arrive))
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
	t.logf("c%d→m%d #%d applied: ok=%v fence=%d woke=%v err=%v (master clock %d)", f.fromClient, f.master, f.seq, f.ok, f.fence, f.woke, f.err, masterClock)
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

// Pub/sub. A simulated Node is a subscriber (Node.Subscribe): the Redlock's
// channel is subscribed on each master through a simSub, which behaves as
// a go-redis PubSub does. Its SUBSCRIBE travels to the master with the
// link's delay (it waits at a paused master; it fails when the master is
// down or the link cut, and is tried again at once, then every 100 ms, as
// go-redis reconnects); the master then counts it for PUBLISH, and the
// *redis.Subscription confirmation travels back. Each message published
// travels back with the link's delay, in order, and is lost when the link
// is cut when it arrives, by the links' loss rate or a lossy master's, or
// when the master restarted meanwhile. A killed master forgets its
// subscribers (sim.Master.Kill): the client learns it one delay later and
// subscribes again, as go-redis does; a restarted master has none until
// then. Close unsubscribes one delay later (the connection's close
// travels), so a publish meanwhile counts a subscriber that drops the
// message: a hand-off nobody takes.

var errSimSubClosed = errors.New("sim: pubsub closed")

// Subscribe reads the simulated subscription as the go-redis Node reads a
// *redis.PubSub (listen).
func (c *simConn) Subscribe(ctx context.Context, channel string, deliver func(Message)) (Subscription, error) {
	return listen(ctx, c.subscribe(channel), deliver)
}

// Traits: one server; the simulation's lanes never run on their caller.
func (c *simConn) Traits() Traits { return Traits{} }

func (c *simConn) subscribe(channel string) pubsub {
	n := c.net
	s := &simSub{c: c, channel: channel, closeCh: make(chan struct{}), ready: make(chan struct{}, 1),
		kick: make(chan struct{}, 1), out: make(chan any, 100),
		rng: rand.New(rand.NewPCG(n.seed, uint64(1<<50+c.client*64+c.m.ID())+c.subs.Add(1)<<32))}
	s.inc = -1
	inc := s.first()
	n.subsWG.Add(1)
	go s.run(inc)
	return s
}

var _ Node = (*simConn)(nil)

// simSub is one subscription of a Redlock's channel on one master.
type simSub struct {
	c       *simConn
	channel string
	closeCh chan struct{}
	ready   chan struct{} // capacity 1: items or err changed
	kick    chan struct{} // capacity 1: a message is in flight
	out     chan any      // ChannelWithSubscriptions'

	mu       sync.Mutex
	rng      *rand.Rand
	closed   bool
	pumping  bool
	items    []any     // arrived, not read yet
	err      error     // the latest failure to subscribe, for Receive
	inflight []simPub  // published, on their way
	last     time.Time // the latest arrival time drawn
	inc      int       // the master's incarnation it is subscribed in; -1: none
}

type simPub struct {
	payload string
	at      time.Time
	lose    bool
	inc     int
}

// deliver is the master's PUBLISH to this subscription (m.mu held).
func (s *simSub) Deliver(channel, payload string) {
	p := s.c.net.params
	if s.c.clean {
		p = simNetParams{Base: p.Base, Spread: p.Spread}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	at := time.Now().Add(p.delay(s.rng) + s.c.net.slowOf(s.c.m.ID()))
	if !at.After(s.last) {
		at = s.last.Add(time.Nanosecond)
	}
	s.last = at
	lose := p.LoseP > 0 && s.rng.Float64() < p.LoseP
	if l := s.c.net.lossOf(s.c.m.ID()); l > 0 && s.rng.Float64() < l {
		lose = true
	}
	s.inflight = append(s.inflight, simPub{payload, at, lose, s.c.m.IncarnationLocked()})
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *simSub) push(x any, err error) {
	s.mu.Lock()
	if x != nil {
		s.items = append(s.items, x)
	} else {
		s.err = err
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *simSub) draw() time.Duration {
	p := s.c.net.params
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.Base + time.Duration(s.rng.ExpFloat64()*float64(p.Spread))
}

// sleep waits d, or until Close; it reports false on Close.
func (s *simSub) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.closeCh:
		return false
	}
}

// first is the first SUBSCRIBE, made at once: wakeups.start waits for
// its confirmation holding a mutex that the Redlock's other Lock calls
// wait for, and a bubble does not advance its clock while a goroutine waits
// for a mutex (not a durable block), so the confirmation may not take bubble
// time. It lands when the master is up and the link not cut, else it fails
// (a paused master too: go-redis would wait for the node timeout), and
// run tries again with the link's delays. It returns the master's
// incarnation subscribed in, or -1.
func (s *simSub) first() int {
	c, n, m := s.c, s.c.net, s.c.m
	m.Lock()
	defer m.Unlock()
	if m.StateLocked() != sim.Up || n.isCut(c.client, m.ID()) {
		s.push(nil, errSimRefused)
		return -1
	}
	s.mu.Lock()
	s.inc = m.IncarnationLocked()
	s.mu.Unlock()
	m.SubscribeLocked(s.channel, s)
	n.resubscribed.Add(1)
	s.push(&redis.Subscription{Kind: "subscribe", Channel: s.channel, Count: 1}, nil)
	return m.IncarnationLocked()
}

// run delivers the messages, and subscribes again after the master
// restarted (or after the first SUBSCRIBE failed), until Close.
func (s *simSub) run(inc int) {
	c, n, m := s.c, s.c.net, s.c.m
	defer n.subsWG.Done()
	fails := 0
	defer func() {
		// Close: the master forgets the subscription once the close
		// reaches it.
		time.Sleep(s.draw())
		m.Lock()
		s.mu.Lock()
		if s.inc == m.IncarnationLocked() {
			m.UnsubscribeLocked(s.channel, s)
		}
		s.inc = -1
		s.mu.Unlock()
		m.Unlock()
	}()
	if inc >= 0 {
		m.Lock()
		changed := m.ChangedLocked()
		restarted := m.IncarnationLocked() != inc
		m.Unlock()
		if !restarted && !s.pump(inc, changed) {
			return
		}
	}
	fails = 1
	for {
		if fails > 1 && !s.sleep(100*time.Millisecond) {
			return
		}
		if !s.sleep(s.draw()) { // SUBSCRIBE on its way
			return
		}
		m.Lock()
		for m.StateLocked() == sim.Paused {
			ch := m.ChangedLocked()
			m.Unlock()
			select {
			case <-ch:
			case <-s.closeCh:
				return
			}
			m.Lock()
		}
		if m.StateLocked() == sim.Down || n.isCut(c.client, m.ID()) {
			m.Unlock()
			fails++
			s.push(nil, errSimRefused)
			continue
		}
		inc := m.IncarnationLocked()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			m.Unlock()
			return
		}
		s.inc = inc
		s.mu.Unlock()
		m.SubscribeLocked(s.channel, s)
		changed := m.ChangedLocked()
		m.Unlock()
		fails = 0
		// The confirmation travels back like a message.
		s.mu.Lock()
		at := time.Now().Add(s.c.net.params.Base)
		if !at.After(s.last) {
			at = s.last.Add(time.Nanosecond)
		}
		s.last = at
		s.inflight = append(s.inflight, simPub{payload: "\x00subscribe", at: at, inc: inc})
		s.mu.Unlock()
		if !s.pump(inc, changed) {
			return
		}
		fails = 1 // the connection broke: reconnect at once, then every 100 ms
	}
}

// pump delivers the messages in flight at their times while the master
// stays in incarnation inc; it returns false on Close, true when the
// master restarted (the connection broke: the messages in flight are lost).
func (s *simSub) pump(inc int, changed <-chan struct{}) bool {
	c, n, m := s.c, s.c.net, s.c.m
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		var next *simPub
		if len(s.inflight) > 0 {
			next = &s.inflight[0]
		}
		s.mu.Unlock()
		var due <-chan time.Time
		if next != nil {
			if d := time.Until(next.at); d > 0 {
				t.Reset(d)
				due = t.C
			} else {
				s.mu.Lock()
				p := s.inflight[0]
				s.inflight = s.inflight[1:]
				s.mu.Unlock()
				switch {
				case p.payload == "\x00subscribe":
					n.resubscribed.Add(1)
					s.push(&redis.Subscription{Kind: "subscribe", Channel: s.channel, Count: 1}, nil)
				case p.lose || p.inc != inc || n.isCut(c.client, m.ID()):
					n.lost.Add(1)
				default:
					n.delivered.Add(1)
					if strings.HasPrefix(p.payload, "h") {
						n.handsMu.Lock()
						if n.hands == nil {
							n.hands = map[string]bool{}
						}
						n.hands[strconv.Itoa(m.ID())+" "+p.payload] = true
						n.handsMu.Unlock()
					}
					s.push(&redis.Message{Channel: s.channel, Payload: p.payload}, nil)
				}
				continue
			}
		}
		select {
		case <-due:
		case <-s.kick:
			t.Stop()
		case <-changed:
			t.Stop()
			m.Lock()
			restarted := m.IncarnationLocked() != inc
			changed = m.ChangedLocked()
			m.Unlock()
			if restarted {
				// The client learns it one delay later; what was in
				// flight is lost.
				if !s.sleep(s.draw()) {
					return false
				}
				s.mu.Lock()
				n.lost.Add(int64(len(s.inflight)))
				s.inflight = nil
				s.inc = -1
				s.mu.Unlock()
				return true
			}
		case <-s.closeCh:
			return false
		}
	}
}

// Receive returns the next message or subscription, or the latest failure
// to subscribe, as (*redis.PubSub).Receive does.
func (s *simSub) Receive(ctx context.Context) (any, error) {
	for {
		s.mu.Lock()
		if len(s.items) > 0 {
			x := s.items[0]
			s.items = s.items[1:]
			s.mu.Unlock()
			return x, nil
		}
		if err := s.err; err != nil {
			s.err = nil
			s.mu.Unlock()
			return nil, err
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errSimSubClosed
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closeCh:
		}
	}
}

// ChannelWithSubscriptions returns the channel of messages and
// (re)subscriptions, closed by Close.
func (s *simSub) ChannelWithSubscriptions(...redis.ChannelOption) <-chan any {
	s.mu.Lock()
	start := !s.pumping
	s.pumping = true
	s.mu.Unlock()
	if start {
		s.c.net.subsWG.Add(1)
		go func() {
			defer s.c.net.subsWG.Done()
			defer close(s.out)
			for {
				s.mu.Lock()
				s.err = nil // go-redis's channel logs failures, it does not deliver them
				if len(s.items) > 0 {
					x := s.items[0]
					s.items = s.items[1:]
					s.mu.Unlock()
					select {
					case s.out <- x:
					case <-s.closeCh:
						return
					}
					continue
				}
				s.mu.Unlock()
				select {
				case <-s.ready:
				case <-s.closeCh:
					return
				}
			}
		}()
	}
	return s.out
}

func (s *simSub) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errSimSubClosed
	}
	s.closed = true
	s.mu.Unlock()
	close(s.closeCh)
	return nil
}

// handDelivered reports whether master's hand-off message payload reached
// its subscriber.
func (n *simNet) handDelivered(master int, payload string) bool {
	n.handsMu.Lock()
	defer n.handsMu.Unlock()
	return n.hands[strconv.Itoa(master)+" "+payload]
}

// The simulated masters (internal/sim) as the simulation's clients reach
// them: each request the core built runs there as its command, its reply
// read as the core reads it (decode), and the master keeps, for the
// checker, which connection's acquire set a key or entered a hold, and
// counts what the requests did.

// simMaster is a sim.Master with what the simulation counts of the
// requests it ran; the Master's lock guards those too.
type simMaster struct {
	*sim.Master
	stats simWakeStats
	// gateEarly counts the gated votes the restart gate let count while the
	// master had been up less than the gate, by why (simGateEarly).
	gateEarly simGateEarly
	// shimErrs: what a request needed that internal/sim does not
	// simulate; luaErrs: scripts that raised an error (a bug in the script
	// when nobody changes keys by hand, as in the simulation). Both are
	// reported, never ignored; at most maxSimErrs of each are kept.
	shimErrs, luaErrs []error
}

const maxSimErrs = 10

func newSimMaster(id int, epoch time.Time, offset time.Duration, rate float64) *simMaster {
	return &simMaster{Master: sim.NewMaster(id, epoch, offset, rate)}
}

// simWakeStats counts what the release scripts did with the queues, as
// seen from the commands they ran.
type simWakeStats struct {
	sim.WakeStats     // the PUBLISHes: hand-offs, wake-ups, dropped
	registrations int // hand-off registrations that landed (Hand, Reg and Place set)
	behind        int // Unlocks (Behind) that queued their call again after a subscriber was told
	freeHand      int // registrations that freed nothing but handed the key
	ghosts        int // plain releases of exactly a hand-off value (hand#reg)
}

func (s *simWakeStats) add(o simWakeStats) {
	s.WakeStats.Add(o.WakeStats)
	s.registrations += o.registrations
	s.behind += o.behind
	s.freeHand += o.freeHand
	s.ghosts += o.ghosts
}

// wakeStats returns the master's counts.
func (m *simMaster) wakeStats() simWakeStats {
	m.Lock()
	st := m.stats
	m.Unlock()
	st.WakeStats = m.Master.Stats()
	return st
}

// holding returns the live lock keys and their entries at the end of a
// run (sim.Master.Holding), without the fence counters and the queues.
func (m *simMaster) holding() map[string]sim.Entry {
	return m.Holding(func(key string) bool {
		_, _, derived := derivedFrom(key)
		return derived
	})
}

// problems returns what the master could not simulate, and the scripts
// that raised errors.
func (m *simMaster) problems() []error {
	m.Lock()
	defer m.Unlock()
	return append(append([]error(nil), m.shimErrs...), m.luaErrs...)
}

// applyLocked runs args, the command of q, on the master (its lock held,
// master up), returns its reply, and keeps what the checker needs: which
// connection's acquire set a key or entered a hold.
func (m *simMaster) applyLocked(q *request, args []any, c *simConn) (reply any, err error) {
	reply, err = m.execLocked(q, args)
	if q.OK && q.Op == reqExtend && q.Repair {
		m.MarkLocked(q.Key, q.Value, c, true) // set by extend.lua's renew: released as an acquired key is
	}
	if q.OK && (q.Op == reqAcquire || q.Op == reqAcquireFenced) {
		m.MarkLocked(q.Key, q.Value, c, false)
	}
	return reply, err
}

// do runs q as a client of the master.
func (m *simMaster) do(q *request) {
	m.Lock()
	defer m.Unlock()
	m.execLocked(q, nil)
}

// execLocked runs q on the master as the production Node would have it
// run (its lock held, master up): args, the command the core built for q
// (nil: built here, as the core builds it), run on the keyspace (a script
// in Lua), its reply read as the core reads it (decode). It returns the
// reply the client gets.
func (m *simMaster) execLocked(q *request, args []any) (reply any, rerr error) {
	var cmd Command
	if args == nil {
		if !encode(q, &cmd) {
			return nil, q.Err // an unknown Op: encode failed q
		}
		args = cmd.Args
	}
	// A gated vote is one script, the gate's check in front.
	var cache *simGateCache // the gate's cache when the vote came
	if gated(q) {
		// The cache gates before issue 31 kept; none now.
		if v, born, ok := m.KeyLocked(derivedKey(q.Key, "epoch")); ok {
			cache = &simGateCache{v, born}
		}
	}
	x := m.ExecLocked(args)
	cmd.Reply, cmd.Err = x.Reply, x.Err
	decode(q, &cmd)
	if gated(q) {
		m.noteGateLocked(q, x.Now, cache)
	}
	if x.ShimErr != nil {
		if len(m.shimErrs) < maxSimErrs {
			m.shimErrs = append(m.shimErrs, fmt.Errorf("%v: %w", q.Op, x.ShimErr))
		}
		q.OK, q.Fence, q.Woke, q.Err = false, 0, false, x.ShimErr
		cmd.Reply, cmd.Err = nil, x.ShimErr
	}
	if x.LuaErr != nil && len(m.luaErrs) < maxSimErrs {
		m.luaErrs = append(m.luaErrs, fmt.Errorf("%v: %w", q.Op, x.LuaErr))
	}
	if q.Op == reqRelease {
		st := &m.stats
		if q.Hand != "" && q.Reg != 0 && q.Place != 0 {
			st.registrations++
		}
		if q.Hand != "" && q.Woke && !q.OK {
			st.freeHand++
		}
		if q.Behind && x.Requeued {
			st.behind++
		}
		if q.Hand == "" && q.Owner == "" && q.OK && strings.Contains(q.Value, "#") {
			st.ghosts++
		}
	}
	return cmd.Reply, cmd.Err
}

// simGateCache is the restart gate's cache (before issue 31) as a vote
// found it: the start it held, and the incarnation that wrote it.
type simGateCache struct {
	str  string
	born int
}

// simGateEarly counts the gated votes that a master's restart gate let
// count before the master had been up for the gate (by its own clock), by
// why the gate thought it had:
//   - snapshot: its cache (EpochKey) holds the start of an earlier
//     incarnation, loaded from the snapshot this one restarted from —
//     issue 31's hole (A): the lock keys written after the snapshot are
//     lost, and the gate trusts the old start;
//   - rounding: its cache was made in this incarnation, from an
//     uptime_in_seconds that read high (Redis counts it in whole seconds
//     of the clock, not of the time up) — hole (B);
//   - data: its cache holds an earlier incarnation's start, kept by a
//     restart with its data (AOF): no write was lost, so no hole.
type simGateEarly struct {
	snapshot, rounding, data int
	first                    []string // the first of each cause, described
}

func (g *simGateEarly) add(o simGateEarly) {
	g.snapshot += o.snapshot
	g.rounding += o.rounding
	g.data += o.data
	for _, f := range o.first {
		if len(g.first) < 6 {
			g.first = append(g.first, f)
		}
	}
}

// holes is how many early votes came through issue 31's holes.
func (g *simGateEarly) holes() int { return g.snapshot + g.rounding }

func (g simGateEarly) String() string {
	return fmt.Sprintf("%d through a cache from a snapshot (A), %d through an uptime that read high (B), %d through a cache kept by a restart with data (no loss)",
		g.snapshot, g.rounding, g.data)
}

// noteGateLocked counts q's vote in m.gateEarly when the restart gate (the
// gated vote's reply) let it run before the master had been up q.Gate
// at now (its clock, ns); cache was the gate's cache (nil: none) when the
// gate ran.
func (m *simMaster) noteGateLocked(q *request, now int64, cache *simGateCache) {
	startedAt, inc := m.StartedAtLocked(), m.IncarnationLocked()
	up := time.Duration(now - startedAt)
	// The gate counts in whole ms: a vote less than a ms early is its
	// arithmetic's, not a hole. A vote with an error did not get past the
	// gate (a refusal, or a script that failed before the vote).
	if q.Err != nil || up+time.Millisecond >= q.Gate {
		return
	}
	why, n := "rounding", &m.gateEarly.rounding
	if cache != nil && cache.born < inc {
		why, n = "data", &m.gateEarly.data
		if m.StartedFromLocked() == sim.RestartSnapshot {
			why, n = "snapshot", &m.gateEarly.snapshot
		}
	}
	if *n == 0 {
		what := "no cache: made now from INFO"
		if cache != nil {
			what = fmt.Sprintf("cached start %q, made in incarnation %d", cache.str, cache.born)
		}
		m.gateEarly.first = append(m.gateEarly.first, fmt.Sprintf("%s: +%v master %d (incarnation %d, restarted %v) let a %v of %s count %v after its restart, gate %v (%s; uptime_in_seconds now %d)",
			why, time.Since(m.Epoch()), m.ID(), inc, m.StartedFromLocked(), q.Op, q.Key, up, q.Gate, what, now/int64(time.Second)-startedAt/int64(time.Second)))
	}
	*n++
}
