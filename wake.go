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
// subscribe ([NodeFunc]'s) gives none, nor do Redis Clusters (see
// redisNode.Subscribe); a Ring is listened to on every shard (see
// shardSubs). A Node that wraps another keeps its wake-ups by embedding it.
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

	mu      sync.Mutex // guards started, subs and err; held while subscribing
	started bool
	subs    []Subscription // per master; nil where none
	err     error          // the first master's refusal to subscribe
	live    atomic.Bool    // a master confirmed the subscription

	handsMu sync.Mutex          // guards hands, marks, and the handoffs' stale and expiry timers
	hands   map[string]*handoff // the calls hand-offs go to (waiting, or holding by hand-off), by hand-off value
	marks   map[string]mark     // keys this Redlock's Unlock handed on, for its next Lock of them (see mark)
}

func newWakeups(r *Redlock) *wakeups {
	w := &wakeups{r: r, channel: "redlock:wake:" + uuid.NewString(),
		hands: make(map[string]*handoff), marks: make(map[string]mark)}
	w.chans, w.boxes = make([]string, len(r.nodes)), make([]any, len(r.nodes))
	for i := range r.nodes {
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
// return at once.
func (w *wakeups) start(ctx context.Context, key string, timeout time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.r.closed.Load() {
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
		wg.Go(func() {
			w.subs[i], errs[i] = n.Subscribe(sctx, w.chans[i], func(m Message) {
				if m.Resubscribed {
					w.live.Store(true) // a master that was down subscribed
					w.resubscribed()
					return
				}
				w.message(m.Payload, i)
			})
		})
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
	for _, s := range w.subs {
		if s != nil {
			_ = s.Close()
		}
	}
}
