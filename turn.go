package redlock

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// turn is one Lock call's place while it waits for a key, and everything
// that can end the wait: its place among this process's goroutines waiting
// for the key ([waiters]), its registration in the key's queues on the
// masters (a [handoff]), the hand-offs or wake-ups that brings, and its
// backoff timer. Lock asks it one thing at a time — wait (it returns
// the lock when the key was handed over, why to stop, or nothing: try now),
// attempt, and after a refused attempt, refused — and ends it with end, on
// every way the call ends.
//
// A waiting call's attempts are paced by its backoff whatever the masters
// tell it: a local Unlock, or a hand-off or wake-up by a quorum act at once;
// one from fewer masters (the others may still hold the key for someone
// else) cuts the call's first such wait short, and later ones only to the
// backoff's current step.
//
// A turn belongs to one Lock call's goroutine: it needs no lock.
type turn struct {
	r   *Redlock
	key string
	cfg *config

	w        *waiter  // its place in this process's queue for key; nil until it queues
	released uint64   // the count of local releases of key before the first attempt (see waiters.join)
	h        *handoff // its registration on the masters; nil until the first one
	ticket   int64    // its place in the masters' queues: when the call started, in µs
	listen   bool     // the Redlock listened for wake-ups at the last attempt

	backoff   time.Duration // the backoff's next step, before jitter
	pause     time.Duration // how long the next wait lasts at most; 0: try at once
	step      time.Duration // what a notice from fewer than a quorum cuts a wait to
	shortened bool          // such a notice cut a wait of the call short already
}

// handGrace is how long a call that some masters handed the key to (or
// woke) waits for a quorum of them before it makes an attempt, the first
// time.
const handGrace = 5 * time.Millisecond

// openTurn opens t, the place of a Lock call for key with cfg. Before its first
// attempt, the call waits when goroutines of this process already wait for
// the key (they go first), or when this Redlock's last Unlock of the key
// handed it on (see [mark]); then it queues behind them.
//
// t is the caller's (a Lock call keeps it in its own frame: an uncontended
// Lock allocates nothing for its turn).
func (r *Redlock) openTurn(t *turn, ctx context.Context, key string, cfg *config) {
	*t = turn{r: r, key: key, cfg: cfg, ticket: time.Now().UnixMicro(), backoff: cfg.minBackoff}
	queued, released := r.waiters.peek(key)
	t.released = released
	h, behind := r.wake.behind(key, cfg)
	switch {
	case h != nil:
		// The Unlock queued this call behind the next holder on the
		// masters already (see [wakeups.stay]).
		t.h, t.ticket = h, h.place
		t.w, _ = r.waiters.join(key, released)
		t.pause = r.jitter(cfg.maxBackoff)
	case queued && cfg.owner == "":
		// A call with an owner tries once before it queues: it may nest in
		// a hold of its owner, which the goroutines queued here wait for.
		var missed bool
		if t.w, missed = r.waiters.join(key, released); !missed {
			t.pause = r.waiters.pause(key, t.w, r.jitter(t.backoff), cfg.maxBackoff)
		}
	case behind:
		// Queue on the masters, and wait for the key (or a wake-up).
		r.wake.start(ctx, key, cfg.nodeTimeout) // a Redlock that never waited listens now
		channel, listening := r.wake.name()
		if !listening {
			break
		}
		deadline := time.Now().Add(cfg.nodeTimeout)
		t.h = r.wake.newHandoff(key, t.ticket, cfg)
		// A call the masters only wake (ttl 0) yields: where the key is
		// free, the Unlock woke a call that takes it with an attempt of its
		// own, and this one must not be woken first and race it. Where a
		// key that is handed is free, its call gave it back: take it.
		r.startPhase(context.WithoutCancel(ctx), deadline, false, request{Op: reqRelease, Kind: cfg.kind, Key: key,
			Waiter: channel, Hand: t.h.value, TTL: t.h.ttl, Place: t.ticket, Queued: t.ticket, Reg: t.h.register(deadline), Yield: t.h.ttl == 0})
		t.w, _ = r.waiters.join(key, released)
		t.pause = r.jitter(cfg.maxBackoff)
	}
}

// attempt makes one acquire attempt for the call, of the lock the caller
// named name. Once the Redlock listens for wake-ups, its rollback queues
// the call on the masters.
func (t *turn) attempt(ctx context.Context, name string) (*Lock, error) {
	if _, t.listen = t.r.wake.name(); t.listen && t.h == nil {
		t.h = t.r.wake.newHandoff(t.key, t.ticket, t.cfg)
	}
	if t.listen {
		t.r.wake.watch(t.key, t.cfg.nodeTimeout) // a cluster's shard channel of the key's slot
	}
	if t.h != nil {
		t.h.retried() // this attempt is the retry a poke or a rollback asked for
	}
	return t.r.acquire(ctx, name, t.key, t.cfg, t.h)
}

// refused readies the next wait after a refused attempt: none
// when the key was released locally while the attempt was out, or when the
// Redlock just started listening for wake-ups (a release may have come
// before anyone listened); else the backoff, which then grows.
func (t *turn) refused(ctx context.Context) {
	t.pause = 0
	if t.w == nil {
		var missed bool
		if t.w, missed = t.r.waiters.join(t.key, t.released); missed {
			return
		}
	}
	if !t.listen {
		t.r.wake.start(ctx, t.key, t.cfg.nodeTimeout)
		if _, t.listen = t.r.wake.name(); t.listen {
			return
		}
	}
	t.step = t.r.jitter(t.backoff)
	t.pause = t.r.waiters.pause(t.key, t.w, t.step, t.cfg.maxBackoff)
	if t.h.registered() && t.h.ttl > 0 {
		t.pause = t.r.jitter(t.cfg.maxBackoff) // the key comes by hand-off: the timer covers a lost one
	}
	t.backoff = max(min(t.backoff, t.cfg.maxBackoff/2)*2, t.cfg.minBackoff) // no overflow, whatever the bounds
}

// wait waits for the call's turn: up to its pause, for a local wake-up, or
// for the masters to hand it the key (or wake it). It returns the lock when a quorum of
// masters handed it the key, else why the call must stop (ctx's error, or
// ErrClosed), else nil: try now.
func (t *turn) wait(ctx context.Context) (*Lock, error) {
	if t.pause == 0 {
		return nil, nil
	}
	var wake, hand <-chan struct{}
	if t.w != nil {
		wake = t.w.wake
	}
	if t.h != nil {
		hand = t.h.wake
	}
	due := time.Now().Add(t.pause)
	timer := time.NewTimer(t.pause)
	defer timer.Stop()
	// cut cuts this wait short after a notice from fewer than a quorum of
	// masters: to first the first time in the call, else to the backoff's
	// step; it reports whether to try now.
	cut := false
	short := func(first time.Duration) bool {
		if cut {
			return false
		}
		cut = true
		d := t.step
		if !t.shortened {
			t.shortened, d = true, first
		}
		if d <= 0 {
			return true
		}
		if d < time.Until(due) {
			timer.Reset(d)
		}
		return false
	}
	for {
		select {
		case <-wake:
		case <-timer.C:
		case <-hand:
			l, partial, now := t.h.take(t.cfg)
			switch {
			case l != nil:
				t.r.started(ctx, nil, l, t.cfg, t.h.regStart)
				return l, nil
			case now, t.h.retried():
				// Woken by a quorum, handed under a registration too old to
				// leave the minimum validity, or hand-offs may never come
				// (see poke): the attempt's rollback registers again.
				t.hinted()
				return nil, nil
			case partial:
				// Fewer than a quorum: the others' word may come with the
				// same release, or another holder keeps them (a split
				// vote's loser freed only its own masters).
				short(handGrace)
			}
			continue
		case <-t.r.closing:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if t.r.closed.Load() {
			return nil, ErrClosed
		}
		if t.h != nil { // handed by a quorum while woken otherwise: take it
			if l, _, _ := t.h.take(t.cfg); l != nil {
				t.r.started(ctx, nil, l, t.cfg, t.h.regStart)
				return l, nil
			}
			t.hinted()
		}
		return nil, nil
	}
}

// hinted makes a permit's call ask first for the slot the masters that
// woke it said they freed, when it is one of the call's own limit: the
// registration may be an Unlock's under another limit (see
// [wakeups.behind]), and a vote for a slot at or above the limit would
// hold a permit the limit does not have.
func (t *turn) hinted() {
	if s, ok := t.h.hint(); ok && s < int(t.cfg.permits) {
		t.cfg.slot = uint8(s)
	}
}

// end closes the call's place, having taken held (nil: it gave up): off
// this process's queue, and off the masters' queues (with the key given
// back where it was handed) when it gave up.
func (t *turn) end(held *Lock) {
	if t.h != nil {
		t.r.wake.end(t.h, held)
		if held == nil && t.h.registered() {
			t.r.unhand(t.h, t.cfg.nodeTimeout)
		}
	}
	if t.w != nil {
		t.r.waiters.leave(t.key, t.w)
	}
}

// waiters is a per-key FIFO of this process's goroutines waiting in Lock.
// It is a hint that saves backoff sleeps and keeps one process's goroutines
// fair to each other: the masters' quorum stays the authority, every waiter
// still acquires through it and keeps its own backoff timer, so a lost
// wake-up costs at most one backoff.
//
// The head is woken when a local holder of the key unlocks, and stays the
// head until it acquires or gives up. Lock calls that find a queue join it
// before their first attempt, so a goroutine that just unlocked cannot take
// the key back from those already waiting. A release that comes while a
// call's first attempt is out finds no one to wake: releases are counted
// per key (peek before the attempt, join after it), and a call that missed
// one tries again at once.
type waiters struct {
	mu   sync.Mutex           // guards everything below
	keys map[string][]*waiter // FIFO per key; a key with no waiter has no entry
	// releases counts local releases by a hash of the key, so that it takes
	// no memory per key: a release of another key in the same slot only
	// costs one early retry, as a spurious wake-up would.
	releases [64]uint64
	seed     maphash.Seed
	seeded   bool
}

// waiter is one goroutine waiting for a key.
type waiter struct {
	wake chan struct{} // holds at most one pending wake-up: try now
}

// peek reports whether goroutines of this process wait for key, and the
// count of key's releases so far, for join.
func (ws *waiters) peek(key string) (queued bool, released uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.keys[key]) > 0, ws.releases[ws.slotLocked(key)]
}

// join appends a waiter for key at the tail of its queue. released is the
// count peek gave before the attempt that failed; missed reports that key
// was released since (a wake-up that found no one to wake) and w is the
// head, which should then try again without waiting.
func (ws *waiters) join(key string, released uint64) (w *waiter, missed bool) {
	w = &waiter{wake: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.keys == nil {
		ws.keys = make(map[string][]*waiter)
	}
	q := append(ws.keys[key], w)
	ws.keys[key] = q
	// Only the head retries at once: behind it, a release did find someone
	// to wake (or the head missed it too, and retries itself).
	return w, q[0] == w && ws.releases[ws.slotLocked(key)] != released
}

// slotLocked is key's counter in releases.
func (ws *waiters) slotLocked(key string) int {
	if !ws.seeded {
		ws.seed, ws.seeded = maphash.MakeSeed(), true
	}
	return int(maphash.String(ws.seed, key) % uint64(len(ws.releases)))
}

// leave removes w from key's queue. A wake-up w had not used is passed on
// to the new head, so that leaving (on success or when ctx ended) never
// swallows it.
func (ws *waiters) leave(key string, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.keys[key]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if len(q) == 0 {
			delete(ws.keys, key)
			return
		}
		ws.keys[key] = q
		select {
		case <-w.wake:
			if i == 0 {
				notify(q[0].wake)
			}
		default:
		}
		return
	}
}

// pause is how long w waits for a wake-up before it tries on its own: the
// backoff d at the head of the queue, and max behind it, where a holder in
// this process hands the key on in turn and trying early only loads the
// masters.
func (ws *waiters) pause(key string, w *waiter, d, max time.Duration) time.Duration {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.keys[key]; len(q) > 0 && q[0] != w {
		return max
	}
	return d
}

// wake wakes the head of key's queue, if any, and counts the release: a
// local holder released key.
func (ws *waiters) wake(key string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.releases[ws.slotLocked(key)]++
	if q := ws.keys[key]; len(q) > 0 {
		notify(q[0].wake)
	}
}

// notify leaves a notice in ch, a channel of capacity 1, unless one is
// pending already.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
