package redlock

import (
	"context"
	"sync"
	"time"
)

// Lock is a held lock: the handle that Lock and TryLock return. Its key,
// value and fence token never change; Until moves only when Extend succeeds.
// It is safe for concurrent use.
type Lock struct {
	r     *Redlock
	key   string
	value string
	token uint64
	cfg   config   // the acquiring call's resolved options
	acq   *attempt // the acquire, for ordering later requests after its stragglers

	mu       sync.Mutex // guards until and released
	until    time.Time
	released bool
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.key }

// Value returns the random value that marks this holder's keys on the masters.
func (l *Lock) Value() string { return l.value }

// Fence returns the fencing token: a number that strictly increases from one
// holder of the key to the next, for a resource to reject writes from a stale
// holder. It is 0 when the lock was taken without [WithFencing].
func (l *Lock) Fence() uint64 { return l.token }

// Until returns the moment the lock stops being valid, on this process's
// monotonic clock: the acquire's (or last Extend's) start plus the TTL less
// the drift allowance. Past it, another client may hold the lock. It is a
// local deadline, never a network query.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// TTL returns the time the keys were set to live.
func (l *Lock) TTL() time.Duration { return l.cfg.ttl }

// Unlock releases the lock on every master (compare-and-delete: a key that
// now holds another value is left alone). It returns when a quorum released
// or too many could not; requests to slow masters finish in the background
// (see [Redlock.Close]), each after the acquire still in flight to the same
// master, so that acquire cannot land after the release.
//
// Unlock returns an error wrapping [ErrNotHeld] when the lock's validity had
// ended before Unlock was called — the critical section may have overlapped
// another holder's — or when the key was gone from a quorum, or when the lock
// was already released. A [*QuorumError] without ErrNotHeld means too many
// masters failed to answer; the keys then expire with their TTL.
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil {
		return notHeld("", "Unlock called on a nil *Lock")
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return notHeld(l.key, "already unlocked")
	}
	l.released = true
	until := l.until
	l.mu.Unlock()

	now := l.r.clock.Now()
	// The next local waiter may try once every master has answered: then
	// it can win all of them, not just a quorum.
	wake := func() { l.r.waiters.wake(l.key) }
	t, ctxErr := l.fanout(ctx, now, wake, func(ctx context.Context, n Node) (bool, error) {
		return n.Release(ctx, l.key, l.value)
	})
	if !now.Before(until) {
		return notHeld(l.key, "validity ended %v before Unlock; the critical section may have overlapped another holder", now.Sub(until))
	}
	if ctxErr != nil || !t.won() {
		return joinCtx(t.error(opRelease, l.key), ctxErr)
	}
	return nil
}

// Extend resets the keys' TTL to ttl on every master that still holds this
// lock's value, and moves Until to this call's start plus ttl less the drift
// allowance. It needs a quorum within the current validity: an expired lock
// is not acquired again (take a new one with Lock).
//
// The error wraps [ErrNotHeld] when the lock was released, its validity had
// ended, or the key is gone from a quorum; a [*QuorumError] without
// ErrNotHeld means too many masters failed to answer, and Until is unchanged.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return notHeld("", "Extend called on a nil *Lock")
	}
	cfg := l.cfg
	WithTTL(ttl)(&cfg)
	cfg, err := cfg.resolved()
	if err != nil {
		return err
	}
	start := l.r.clock.Now()
	l.mu.Lock()
	released, until := l.released, l.until
	l.mu.Unlock()
	if released {
		return notHeld(l.key, "already unlocked")
	}
	if !start.Before(until) {
		return notHeld(l.key, "validity ended %v before Extend", start.Sub(until))
	}

	t, ctxErr := l.fanout(ctx, start, nil, func(ctx context.Context, n Node) (bool, error) {
		return n.Extend(ctx, l.key, l.value, ttl)
	})
	if ctxErr != nil || !t.won() {
		return joinCtx(t.error(opExtend, l.key), ctxErr)
	}
	newUntil, left, ok := cfg.deadline(start, l.r.clock.Now())
	if !ok {
		qe := t.error(opExtend, l.key)
		qe.Late, qe.Validity = true, left
		return qe
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return notHeld(l.key, "unlocked while Extend ran")
	}
	l.until = newUntil
	return nil
}

// fanout sends op to every master, each request after the acquire still in
// flight to that master, all bounded by the node timeout counted from when
// that acquire's own deadline has passed. done, when not nil, is called once
// every master has answered.
func (l *Lock) fanout(ctx context.Context, now time.Time, done func(), op nodeOp) (tally, error) {
	from := now
	if l.acq.deadline.After(from) {
		from = l.acq.deadline
	}
	return l.r.fanoutThen(ctx, from.Add(l.cfg.nodeTimeout), l.acq, op, done)
}
