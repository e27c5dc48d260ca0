package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// wakeups brings this Redlock's goroutines waiting for a key held by
// another process the key (a hand-off, see [handoff]) or a wake-up when
// that process releases it, instead of leaving them to sleep their backoff.
//
// The Redlock has a channel of its own on each master, subscribed over one
// connection per master, opened when a goroutine first waits and closed by
// Close. A waiting call queues in the key's queue on each master ([WaitKey])
// through the rollback of its failed attempt, at no extra request; a
// release that frees the key tells the first entry that someone listens on
// (handon.lua). Pub/sub is at most once, a master may be down, a
// subscription may break: every waiter keeps its backoff timer. A master
// whose user may not subscribe (ACL) gives no wake-ups; the scripts call
// the queue and publish commands through pcall. A Node that cannot
// subscribe ([NodeFunc]'s) gives none; a Redis Cluster
// (Traits.ShardChannels) is listened to on a shard channel per slot waited
// on (see slot); a Ring on every shard (see shardSubs). A Node that wraps another keeps its wake-ups by embedding it.
type wakeups struct {
	r       *Redlock
	channel string // this Redlock's channel: "redlock:wake:" and a UUID
	// chans[i] is the channel on master i: channel, "/" and i. Pub/sub
	// ignores the database number, so nodes that are databases of one
	// redis-server share their subscribers: with one name, a hand-off from
	// one would reach the subscriptions of all and count as a quorum.
	// boxes[i] is chans[i] boxed once, for the requests (see startPhase).
	chans []string
	boxes []any
	// sharded[i]: master i is a Redis Cluster (Traits.ShardChannels): it
	// is listened to on a ShardChannel of chans[i] per slot waited on.
	sharded    []bool
	anySharded bool

	mu      sync.Mutex // guards started, ended, subs, slots and err; held while subscribing
	started bool
	ended   bool           // closed: no more subscriptions
	subs    []Subscription // per master; nil where none
	// slots[i] is master i's subscriptions by slot (sharded masters only),
	// made when a call first waits for a key of the slot, kept until
	// Close: at most one per slot (16384), each a channel on the shard.
	slots []map[uint16]Subscription
	err   error       // the first master's refusal to subscribe
	live  atomic.Bool // a master confirmed the subscription

	slotMu sync.Mutex // guards the maps in slots while slotOn's goroutines add to them

	handsMu sync.Mutex          // guards hands, marks, and the handoffs' stale and expiry timers
	hands   map[string]*handoff // the calls hand-offs go to (waiting, or holding by hand-off), by hand-off value
	marks   map[string]mark     // keys this Redlock's Unlock handed on, for its next Lock of them (see mark)
}

func newWakeups(r *Redlock) *wakeups {
	w := &wakeups{r: r, channel: "redlock:wake:" + uuid.NewString(),
		hands: make(map[string]*handoff), marks: make(map[string]mark)}
	w.chans, w.boxes = make([]string, len(r.nodes)), make([]any, len(r.nodes))
	w.sharded, w.slots = make([]bool, len(r.nodes)), make([]map[uint16]Subscription, len(r.nodes))
	for i, n := range r.nodes {
		if w.sharded[i] = n.Traits().ShardChannels; w.sharded[i] {
			w.slots[i], w.anySharded = make(map[uint16]Subscription), true
		}
		w.chans[i] = w.channel + "/" + strconv.Itoa(i)
		w.boxes[i] = w.chans[i]
	}
	return w
}

// name returns the channel that names this Redlock on the masters, and
// whether a master listens on it for this Redlock (its failed attempts then
// queue it for wake-ups); "" and false before the first wait.
func (w *wakeups) name() (channel string, listening bool) {
	if !w.live.Load() {
		return "", false
	}
	return w.channel, true
}

// start subscribes on every master that can deliver wake-ups, the first
// time a goroutine waits (for key, in the call of ctx: the observer is told
// there), waiting up to timeout for the masters to confirm; later calls
// return at once, unless key is of a slot not waited on before and some
// masters are Redis Clusters: then it subscribes there (see slot).
func (w *wakeups) start(ctx context.Context, key string, timeout time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended || w.r.closed.Load() {
		return
	}
	if w.started {
		w.slot(key, timeout)
		return
	}
	w.started = true
	began := time.Now()
	w.subs = make([]Subscription, len(w.r.nodes))
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(w.r.nodes))
	for i, n := range w.r.nodes {
		// Each master's dial, handshake and confirmation run at once: a slow
		// master must not use up the others' time.
		if w.sharded[i] {
			continue // subscribed by slot, below
		}
		wg.Go(func() { w.subs[i], errs[i] = n.Subscribe(sctx, w.chans[i], w.deliverer(i)) })
	}
	for i := range w.r.nodes {
		if w.sharded[i] {
			wg.Go(func() { errs[i] = w.slotOn(sctx, i, key) })
		}
	}
	wg.Wait()
	took := time.Since(began)
	for i, err := range errs {
		switch {
		case err == nil:
			w.live.Store(true)
		case w.subs[i] == nil && !errors.Is(err, errors.ErrUnsupported) && w.err == nil:
			// The user may not subscribe: no wake-ups from this master.
			w.err = &NodeError{Node: w.r.nodes[i].Name(), Err: err}
		}
		// Otherwise not confirmed yet (a master down): the Node keeps
		// subscribing again until Close.
	}
	if w.r.obs != nil {
		w.report(ctx, key, errs, took)
	}
}

// deliverer returns the function that master i's subscriptions deliver to.
func (w *wakeups) deliverer(i int) func(Message) {
	return func(m Message) {
		if m.Resubscribed {
			w.live.Store(true) // a master that was down subscribed
			w.resubscribed()
			return
		}
		w.message(m.Payload, i)
	}
}

// watch makes the masters that are Redis Clusters listen on key's slot
// (see slot), once the Redlock listens; at once when it has no such master
// or they listen there already.
func (w *wakeups) watch(key string, timeout time.Duration) {
	if !w.anySharded {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started && !w.ended {
		w.slot(key, timeout)
	}
}

// slot subscribes, on every master that is a Redis Cluster, the shard
// channel of key's slot, unless it did before, waiting up to timeout for
// them to confirm. Called with mu held.
func (w *wakeups) slot(key string, timeout time.Duration) {
	s := keySlot(key)
	var todo []int
	for i, m := range w.slots {
		if m != nil {
			if _, ok := m[s]; !ok {
				todo = append(todo, i)
			}
		}
	}
	if len(todo) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, i := range todo {
		wg.Go(func() { _ = w.slotOn(sctx, i, key) })
	}
	wg.Wait()
}

// slotOn subscribes master i's shard channel of key's slot and keeps the
// subscription, unless the master refused it (then it is not asked again
// for that slot either: its nil entry stays). Called with mu held; safe
// for one goroutine per master at once.
func (w *wakeups) slotOn(ctx context.Context, i int, key string) error {
	sub, err := w.r.nodes[i].Subscribe(ctx, ShardChannel(w.chans[i], key), w.deliverer(i))
	if err == nil {
		w.live.Store(true)
	}
	w.slotMu.Lock()
	w.slots[i][keySlot(key)] = sub
	w.slotMu.Unlock()
	return err
}

// report tells the observer how the subscriptions went (once).
func (w *wakeups) report(ctx context.Context, key string, errs []error, took time.Duration) {
	e := &PhaseEvent{Op: PhaseSubscribe, Key: key, Quorum: w.r.quorum, Duration: took,
		Nodes: make([]NodeReply, len(w.r.nodes))}
	for i, n := range w.r.nodes {
		reply := &e.Nodes[i]
		reply.Node = n.Name()
		switch {
		case errors.Is(errs[i], errors.ErrUnsupported):
			reply.Outcome = Pending // a Node that cannot deliver wake-ups
		case errs[i] != nil:
			reply.Outcome, reply.Err = Failed, errs[i]
			e.Failed++
		default:
			reply.Outcome, reply.Latency = Succeeded, took
			e.Succeeded++
		}
	}
	if e.Succeeded == 0 {
		e.Err = errNoWakeups
	}
	w.r.obs.Phase(ctx, e)
}

var errNoWakeups = errors.New("redlock: no master delivers wake-ups; waiting goroutines retry with their backoff")

// refused reports whether err is a master's refusal (an ACL's NOPERM, an
// unknown command) rather than a network failure that a reconnect mends.
func refused(err error) bool {
	s := err.Error()
	return strings.Contains(s, "NOPERM") || strings.HasPrefix(s, "ERR ")
}

// close closes the subscriptions and waits for their readers.
func (w *wakeups) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true // none after Close
	w.handsMu.Lock()
	for _, m := range w.marks {
		if m.h != nil {
			w.dropLocked(m.h, true) // and the key back, where it was handed
		}
	}
	clear(w.marks)
	// No hand-off reaches this Redlock any more: the entries of waiting
	// calls (they end with ErrClosed) and of locks taken by hand-off go.
	for _, h := range w.hands {
		w.forgetLocked(h)
	}
	w.handsMu.Unlock()
	w.ended = true
	for _, s := range w.subs {
		if s != nil {
			_ = s.Close()
		}
	}
	for _, m := range w.slots {
		for _, s := range m {
			if s != nil {
				_ = s.Close()
			}
		}
		clear(m)
	}
}

// handoff is the registration of a waiting Lock call in the key's queues on
// the masters: its failed attempts' rollbacks register it with its hand-off
// value and TTL, and a release that frees the key there sets the key to
// value#reg in the same script and tells the call (handon.lua). With the
// key handed to it by a quorum under its latest registration, the call
// holds the lock without a request of its own, valid from when it sent that
// registration (regStart). Only the call deletes value#reg, and a
// registration deletes only hand-offs under earlier ones. docs/internals.md
// ("Wake-ups and hand-offs between processes") gives the argument.
//
// A fenced or owned lock's key cannot be handed over (a fenced lock needs
// its second round; an owned key is a hash): its call registers with TTL 0,
// and the masters only wake it.
type handoff struct {
	r     *Redlock
	kind  lockKind // the kind of lock the call takes (its registrations are that kind's requests)
	key   string
	value string        // the value the masters hand the key to
	place int64         // the call's place in the queues
	ttl   time.Duration // 0: the masters wake the call, not hand it the key
	wake  chan struct{} // holds at most one pending hand-off notice

	mu          sync.Mutex
	reg         uint64    // the latest registration sent; 0: none yet
	regStart    time.Time // when it was sent, on r.clock
	regDeadline time.Time // its phase's deadline, on the real clock
	counting    bool      // the masters' hand-offs under reg count: no attempt is out
	seen        []bool    // masters that handed the key under reg
	hints       []uint8   // a permit's call: per slot, the masters that woke it under reg saying they freed it
	count       int
	nudged      bool // a rollback's wake-up came under reg (see handed)
	// woke: the masters that woke the call (ttl 0; not a nudge) under
	// wokeReg, the registration its last attempt went out under, before
	// the attempt or since; wokeLate: one did since (see again).
	woke     []bool
	wokeReg  uint64
	wokeLate bool
	// back: the attempt out was made while fewer than a quorum had handed
	// the key to the call under reg (see attempting).
	back  bool
	held  *Lock // the lock the call took by hand-off, if it did
	retry bool  // the call should try now rather than wait (see poke)
	// stale withdraws a registration that an Unlock left behind the next
	// call (see [wakeups.stay]) when no Lock call took it over in time.
	stale *time.Timer
	// expiry drops the entry of a call that took its lock by hand-off once
	// that lock ended (see keep). Guarded by the wakeups' handsMu.
	expiry *time.Timer
}

// handTTL is the TTL the masters hand a key to a call with cfg for: 0 for
// the calls they only wake. Fenced and owned locks: their key cannot be
// handed (a second round; a hash); nor can the other kinds' (lockKind). Behind a restart gate or replica
// confirmation: a hand-off is a master's vote, and the masters hand keys on
// without asking the gate or the replicas
// (TestRestartGateNoHandOffFromGatedMaster); the attempt a wake-up starts
// asks them.
func handTTL(cfg *config) time.Duration {
	if cfg.kind != kindMutex || cfg.owner != "" || cfg.fencing || cfg.gate > 0 || cfg.replicas > 0 {
		return 0
	}
	return cfg.ttl
}

func (w *wakeups) newHandoff(key string, place int64, cfg *config) *handoff {
	n := len(w.r.nodes)
	h := &handoff{r: w.r, kind: cfg.kind, key: key, value: newValue(), place: place, ttl: handTTL(cfg),
		wake: make(chan struct{}, 1), seen: make([]bool, n), woke: make([]bool, n)}
	if cfg.kind == kindPermit {
		h.hints = make([]uint8, cfg.permits)
	}
	w.handsMu.Lock()
	defer w.handsMu.Unlock()
	w.hands[h.value] = h
	return h
}

// register readies h for a new registration, sent by the caller right
// after in a phase with deadline, and returns its number.
func (h *handoff) register(deadline time.Time) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wokeReg = 0 // not after a failed attempt: an Unlock's stays behind the next holder (see again)
	return h.registerLocked(deadline)
}

func (h *handoff) registerLocked(deadline time.Time) uint64 {
	h.reg++
	h.regStart, h.regDeadline = h.r.clock.Now(), deadline
	h.counting = true
	clear(h.seen)
	clear(h.hints)
	h.count, h.nudged = 0, false
	return h.reg
}

// again is register for the rollback of the call's failed attempt. When a
// quorum of masters woke the call under the registration the attempt went
// out under, some of them while it was out (handed drops those: the
// attempt may have raced the release that sent them), the call tries
// again at once, as a quorum's wake-up makes it: the rollback's
// registration may not tell it so, as a master where the attempt won
// frees the call's own key and says nothing, and one whose restart gate
// is closed only nudges (TestWakeDuringAttemptTriesAtOnce).
func (h *handoff) again(deadline time.Time) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	retry := h.wokeReg == h.reg && h.wokeLate && h.wokeQuorum()
	reg := h.registerLocked(deadline)
	if retry {
		h.retryLocked()
	}
	return reg
}

// wokeQuorum reports whether a quorum of masters woke the call under
// wokeReg (h.mu held).
func (h *handoff) wokeQuorum() bool {
	n := 0
	for _, w := range h.woke {
		if w {
			n++
		}
	}
	return n >= h.r.quorum
}

// retryLocked makes the call try at once, once, for the words under
// wokeReg (h.mu held).
func (h *handoff) retryLocked() {
	h.wokeReg = 0
	h.retry = true
	notify(h.wake)
}

// hint returns the permit slot that most masters which woke the call
// under its latest registration said they freed, if any said one.
func (h *handoff) hint() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	best := -1
	for s, n := range h.hints {
		if n > 0 && (best < 0 || n > h.hints[best]) {
			best = s
		}
	}
	return best, best >= 0
}

// attempting stops counting hand-offs: an attempt of the call goes out.
// When some masters, fewer than a quorum, had handed the key to the call,
// the attempt is refused there by those hand-offs, and its rollback hands
// the call back the keys the attempt set (back): otherwise, where the
// masters that are up make a bare quorum, the hand-offs and the attempt's
// free masters would never meet (TestHandOffWithBareQuorumUp). The
// wake-ups counted so far under the registration, fewer than a quorum,
// stay counted, in woke, for again. A retry pending stays: a permit's
// call tries its slots one attempt each before it waits (the turn's
// attempt takes the retry, see [turn.attempt]).
func (h *handoff) attempting() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.back = h.ttl > 0 && h.counting && h.count > 0
	h.wokeReg, h.wokeLate = 0, false
	if h.counting && h.count < h.r.quorum { // else the attempt answers a quorum's word already
		h.wokeReg = h.reg
		copy(h.woke, h.seen)
	}
	h.counting = false
	clear(h.seen)
	h.count, h.nudged = 0, false
}

// handBack reports whether the rollback of the call's attempt hands it
// back the keys the attempt set (see attempting).
func (h *handoff) handBack() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.back
}

// at returns the place h's registrations are queued at.
func (h *handoff) at() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.place
}

// registered reports whether a registration of h was sent.
func (h *handoff) registered() bool { return h != nil && h.current() > 0 }

// handed counts master i's hand-off (or wake-up) under registration reg,
// and reports false when nobody will use it. A nudge (a wake-up that a
// failed attempt's rollback sent) is not counted: it only cuts the call's
// wait as a word from fewer than a quorum does (see [turn.wait]). The call
// is alive (w.handsMu held: h is in the table, see [wakeups.end]).
func (h *handoff) handed(reg uint64, i int, nudge bool, slot int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.held != nil:
		// Part of the lock the call holds by hand-off, unless that ended
		// without an Unlock.
		return h.r.clock.Now().Before(h.held.Until())
	case reg != h.reg || !h.counting || h.seen[i]:
		// Under an older registration, or while an attempt is out: the
		// call's next rollback deletes it and queues the call again. A
		// wake-up under the registration the call's last attempt went out
		// under may make it try again at once after all (see again).
		if h.ttl == 0 && !nudge && reg != 0 && reg == h.wokeReg && !h.woke[i] {
			h.woke[i], h.wokeLate = true, true
			if h.counting && reg != h.reg && h.wokeQuorum() { // the rollback registered again already
				h.retryLocked()
			}
		}
		return true
	}
	if slot >= 0 && slot < len(h.hints) {
		h.hints[slot]++
	}
	if nudge {
		h.nudged = true
	} else {
		h.seen[i] = true
		h.count++
	}
	notify(h.wake)
	return true
}

// take returns the lock the call holds when a quorum of masters handed it
// the key under its latest registration with more than the minimum
// validity left; nil otherwise. partial reports that fewer than a quorum
// did, or that a rollback nudged the call; now that the call should try now: a quorum woke it (ttl 0), or
// handed it the key under a registration too old to leave the minimum
// validity (it must register again, which its next attempt's rollback
// does: the key is then handed to it afresh).
func (h *handoff) take(cfg *config) (l *Lock, partial, now bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.counting || h.count < h.r.quorum {
		return nil, h.counting && (h.count > 0 || h.nudged), false
	}
	until, _, valid := cfg.deadline(h.regStart, h.r.clock.Now())
	if !valid || h.ttl == 0 {
		return nil, false, true
	}
	// Only a mutex's key is handed over (see handTTL): its name is its key.
	l = &Lock{r: h.r, name: h.key, key: h.key, value: handValue(h.value, h.reg), cfg: *cfg, ttl: cfg.ttl,
		until: until, last: h.regDeadline, h: h}
	l.boxedKey, l.boxedValue = l.key, l.value
	h.held = l
	return l, false, false
}

// end is called when the call ends, having taken the lock l (nil: it gave
// up). Hand-offs that come later for a call that did not take the key by
// hand-off are released. One that did keeps its entry, for the masters
// that hand it the key late, until l ends (see keep).
func (w *wakeups) end(h *handoff, l *Lock) {
	w.handsMu.Lock()
	defer w.handsMu.Unlock()
	h.mu.Lock()
	byHand := h.held != nil && h.held == l
	h.mu.Unlock()
	if !byHand {
		w.forgetLocked(h) // in the same critical section as message's count
		return
	}
	w.keepLocked(h, l)
}

// keepLocked drops h, whose call took l by hand-off, from the table once
// l has ended: at its Until, or later if an Extend moved it. An Unlock of l
// that queues h again (stay) takes it over; one that does not drops it
// (w.handsMu held).
func (w *wakeups) keepLocked(h *handoff, l *Lock) {
	check := func() {
		h.mu.Lock()
		mine := h.held == l
		h.mu.Unlock()
		if !mine {
			return // queued again by the Unlock of l (stay)
		}
		l.mu.Lock()
		left := l.until.Sub(l.r.clock.Now())
		ended := l.released || l.end != nil
		l.mu.Unlock()
		w.handsMu.Lock()
		defer w.handsMu.Unlock()
		h.mu.Lock()
		mine = h.held == l
		h.mu.Unlock()
		if !mine {
			return // an Unlock's stay took h over since (and stopped h.expiry)
		}
		if !ended && left > 0 && w.hands[h.value] == h {
			h.expiry.Reset(left)
			return
		}
		w.forgetLocked(h)
	}
	h.expiry = time.AfterFunc(l.until.Sub(l.r.clock.Now()), check)
}

// forgetLocked drops h from the table: the call ended, and later
// hand-offs to it are released (w.handsMu held).
func (w *wakeups) forgetLocked(h *handoff) {
	if w.hands[h.value] == h {
		delete(w.hands, h.value)
	}
	stopTimer(&h.expiry)
}

// stopTimer stops *t, if any, and forgets it.
func stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// message is a word from master i on this Redlock's channel: "h" and a
// hand-off, "w" and a wake-up, or "r" and a rollback's wake-up (a nudge),
// each "hand|reg|key"; a permit's wake-up "hand|reg/slot|key".
func (w *wakeups) message(payload string, i int) {
	nudge := strings.HasPrefix(payload, "r")
	woke := nudge || strings.HasPrefix(payload, "w")
	if !woke && !strings.HasPrefix(payload, "h") {
		return
	}
	hand, rest, ok := strings.Cut(payload[1:], "|")
	if !ok {
		return
	}
	regs, key, ok := strings.Cut(rest, "|")
	regs, tag, tagged := strings.Cut(regs, "/")
	reg, err := strconv.ParseUint(regs, 10, 64)
	if !ok || err != nil {
		return
	}
	slot := -1 // a permit's wake-up names the slot freed (sem_release.lua)
	if tagged {
		if n, err := strconv.ParseUint(tag, 10, 8); err == nil {
			slot = int(n)
		}
	}
	w.handsMu.Lock()
	h := w.hands[hand]
	kept := h != nil && h.key == key && h.handed(reg, i, nudge, slot)
	w.handsMu.Unlock()
	if kept || woke {
		return
	}
	// Nobody takes it: release it at once (and hand it to the next call),
	// rather than let it block the key for a TTL. Only on master i, which
	// handed it: the other masters' keys may carry the same value for a
	// lock the call took by hand-off, held by a quorum until that lock's
	// Until (TestLateHandOffGivenBackWhereHanded); each master that hands
	// the key tells the call itself. Only this hand-off's value: a later
	// registration of the same call (an Unlock's, see stay) may hold the
	// key on this master under another.
	w.r.sendTo(i, time.Now().Add(w.nodeTimeout()),
		request{Op: reqRelease, Key: key, Value: handValue(hand, reg)})
	w.r.waiters.wake(key)
}

// handValue is the value the masters set the key to when they hand it to
// the call of hand-off value hand under its registration reg.
func handValue(hand string, reg uint64) string {
	return hand + "#" + strconv.FormatUint(reg, 10)
}

// mark says that this Redlock's last Unlock of a key handed it to another
// call, or woke another Redlock: until the mark lapses, its next Lock of
// the key waits its turn behind that call rather than trying at once, which
// would race it (split votes, both rolled back). h is the registration the
// Unlock queued behind the next holder in its own script (stay), for the
// next Lock to take over without a request of its own; nil when the Unlock
// queued nothing: the next Lock then registers (see openTurn).
type mark struct {
	h     *handoff
	until time.Time // the mark lapses then, a max backoff after the Unlock
}

// stay turns h, the registration of the call that took l, into one queued
// behind the call the Unlock of l hands the key to (see request.Behind), at
// place, sent in a phase with deadline; it returns its number. The mark it
// leaves lets a Lock call of this Redlock for the key take it over (a loop
// that locks a contended key again at once waits its turn without a
// registration of its own); unlocked settles it once the Unlock is answered.
func (w *wakeups) stay(h *handoff, place int64, deadline time.Time, maxBackoff time.Duration) uint64 {
	h.mu.Lock()
	h.held, h.place = nil, place
	h.mu.Unlock()
	reg := h.register(deadline)
	w.handsMu.Lock()
	defer w.handsMu.Unlock()
	w.hands[h.value] = h
	stopTimer(&h.expiry) // queued again: no longer the entry of a handed lock (keep)
	w.markLocked(h.key, mark{h: h, until: time.Now().Add(maxBackoff)})
	return reg
}

// markLocked sets key's mark, withdrawing a registration an earlier one
// held, and drops the marks that lapsed (w.handsMu held).
func (w *wakeups) markLocked(key string, m mark) {
	if old := w.marks[key].h; old != nil && old != m.h {
		w.dropLocked(old, true)
	}
	now := time.Now()
	for k, o := range w.marks {
		if o.h == nil && now.After(o.until) {
			delete(w.marks, k)
		}
	}
	w.marks[key] = m
}

// unlocked is told on how many masters the Unlock of l handed the key on
// (told), and leaves the mark for this Redlock's next Lock of the key.
//
// A registration the Unlock queued (stay) is kept only when a quorum of
// masters queued it: the next holder's release would hand it the key on
// too few. Then it is withdrawn unless a call takes it over within
// standWindow (it may be handed the key meanwhile, which then waits for
// that call); the mark stays, without it, until it lapses.
func (w *wakeups) unlocked(l *Lock, told int) {
	h := l.h
	if h == nil && told == 0 {
		return
	}
	w.handsMu.Lock()
	defer w.handsMu.Unlock()
	until := time.Now().Add(l.cfg.maxBackoff)
	switch {
	case h == nil || l.stayReg == 0:
		// The Unlock queued nothing: its lock's call was only ever woken
		// (a fenced, owned, gated or replica-confirmed lock), or there was
		// no call. The mark alone makes the next Lock wait its turn. An
		// owned lock's only when a quorum told someone: on fewer, the
		// owner may still hold the key by another hold, and its next Lock
		// nest in it at once.
		if told > 0 && (l.owner == "" || told >= w.r.quorum) {
			w.markLocked(l.key, mark{until: until})
		}
	case h.current() != l.stayReg:
		// A later Unlock made h stay again meanwhile (another goroutine
		// took it over, held the key and unlocked it): this one concerns a
		// registration gone.
	case w.marks[l.key].h != h:
		// Taken over already: if too few masters queued it, the call that
		// took it over would wait for hand-offs that cannot come.
		if told < w.r.quorum {
			h.poke()
		}
	case told < w.r.quorum:
		// Where it was queued, it is taken off; where the Unlock was not
		// answered yet and it was, it is released if ever handed the key.
		w.dropLocked(h, told > 0)
		if told > 0 {
			w.markLocked(l.key, mark{until: until})
		}
	default:
		reg := l.stayReg
		t := new(*time.Timer)
		*t = time.AfterFunc(standWindow, func() {
			w.handsMu.Lock()
			defer w.handsMu.Unlock()
			// Not taken over, and still this registration: a timer that
			// take could not stop any more must not drop a later one.
			if w.marks[h.key].h == h && h.stale == *t && h.current() == reg {
				w.dropLocked(h, true)
				w.markLocked(h.key, mark{until: until})
			}
		})
		h.stale = *t
	}
}

// current returns h's latest registration.
func (h *handoff) current() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reg
}

// poke makes the call waiting on h try at once (its rollback registers it
// again): hand-offs under its registration may never come.
func (h *handoff) poke() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.retry = true
	notify(h.wake)
}

// retried reports, once, that the call should try at once (see poke).
func (h *handoff) retried() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.retry
	h.retry = false
	return r
}

// dropLocked withdraws h, a registration an Unlock left queued that no
// call took over, and takes it off the masters' queues (and the key back
// where it was handed) when unqueue is true (w.handsMu held).
func (w *wakeups) dropLocked(h *handoff, unqueue bool) {
	if w.marks[h.key].h == h {
		delete(w.marks, h.key)
	}
	w.forgetLocked(h)
	stopTimer(&h.stale)
	if unqueue {
		w.r.unhand(h, w.nodeTimeout())
	}
}

// standWindow is how long a registration an Unlock left queued waits for a
// Lock call of its Redlock to take it over: a loop that locks the key again
// at once does it within microseconds.
const standWindow = 10 * time.Millisecond

// behind takes key's mark (see mark) for a Lock call with cfg: the
// registration the Unlock left queued, when this call can use it (a plain
// lock with the same TTL); else whether the call should queue and wait
// before its first attempt, whatever its options (an owned lock's Unlock
// leaves a mark only when it freed the key on a quorum: see unlocked).
func (w *wakeups) behind(key string, cfg *config) (h *handoff, wait bool) {
	w.handsMu.Lock()
	defer w.handsMu.Unlock()
	m, ok := w.marks[key]
	if !ok {
		return nil, false
	}
	delete(w.marks, key)
	if m.h != nil {
		stopTimer(&m.h.stale)
		if m.h.ttl == handTTL(cfg) {
			return m.h, true
		}
		w.dropLocked(m.h, true)
	}
	return nil, time.Now().Before(m.until)
}

// nodeTimeout is the Redlock's node timeout, for requests of no call.
func (w *wakeups) nodeTimeout() time.Duration {
	cfg, _ := w.r.cfg.resolved() // New checked it
	return cfg.nodeTimeout
}

// resubscribed is told that a master's subscription was made again (after
// its connection broke): hand-offs published meanwhile were lost, and the
// calls they were for hold the key there without knowing. Each waiting call
// tries at once: its rollback gives the key back and queues it again.
func (w *wakeups) resubscribed() {
	w.handsMu.Lock()
	defer w.handsMu.Unlock()
	for _, h := range w.hands {
		h.mu.Lock()
		waiting := h.held == nil
		h.mu.Unlock()
		if waiting {
			h.poke()
		}
	}
}
