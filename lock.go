package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is a held lock: the handle that Lock and TryLock return. Its key,
// value and fence token never change; Until moves only when Extend or
// auto-extend ([WithAutoExtend]) succeeds. It is safe for concurrent use.
type Lock struct {
	r     *Redlock
	key   string
	value string
	token uint64
	cfg   config // the acquiring call's resolved options

	// extendMu is held by Extend for its whole run (Unlock waits for it), so
	// two extends of this lock never overlap and the one that finishes last
	// cannot set an Until the masters no longer agree with. Renewals are kept
	// out through held instead: the scheduler never waits for a Lock.
	extendMu sync.Mutex

	// mu guards the fields below it up to the scheduler's.
	mu       sync.Mutex
	acq      *attempt // the acquire while its requests may be in flight (see acquireLocked)
	until    time.Time
	ttl      time.Duration // the TTL of the last acquire or Extend; renewals use it
	released bool
	end      error                   // why the lock ended (ErrUnlocked, lost); nil while held
	ctx      context.Context         // made on the first Done or Context call
	cancel   context.CancelCauseFunc // cancels ctx with end

	// Guarded by r.sched.mu (see [scheduler]).
	pos   int       // 1 + index in the scheduler's queue; 0 when not queued
	due   time.Time // when the scheduler next looks at the lock
	batch *batch    // the renewal in flight, if any
	held  bool      // an Extend runs: the scheduler leaves the lock alone
}

// Key returns the locked key ("" for a nil *Lock, as every getter returns
// the zero value for a nil *Lock).
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Value returns the random value that marks this holder's keys on the masters.
func (l *Lock) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Fence returns the fencing token: a number that strictly increases from one
// holder of the key to the next, for a resource to reject writes from a stale
// holder (see [Fence]). It is 0 when the lock was taken without [WithFencing].
func (l *Lock) Fence() uint64 {
	if l == nil {
		return 0
	}
	return l.token
}

// Until returns the moment the lock stops being valid, on this process's
// monotonic clock: the acquire's (or last Extend's) start plus the TTL less
// the drift allowance. Past it, another client may hold the lock. It is a
// local deadline, never a network query.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// TTL returns the time the keys were set to live by the acquire or the last
// Extend.
func (l *Lock) TTL() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Unlock releases the lock on every master (compare-and-delete: a key that
// now holds another value is left alone). It returns when a quorum released
// or too many could not; requests to slow masters finish in the background
// (see [Redlock.Close]), each after the acquire still in flight to the same
// master, so that acquire cannot land after the release.
//
// Unlock first stops auto-extend and cancels [Lock.Context] (cause
// [ErrUnlocked], unless the lock was already lost); a renewal already in
// flight, or an Extend, is awaited (both are bounded by the node timeout)
// before the release is sent, so no extend ever follows the release.
//
// Unlock returns an error wrapping [ErrNotHeld] when the lock's validity had
// ended before Unlock was called — the critical section may have overlapped
// another holder's — or when the key was gone from a quorum, or when the lock
// was already released, or when it was lost (the error then wraps
// [ErrLockLost] too). A [*QuorumError] without ErrNotHeld means too many
// masters failed to answer; the keys then expire with their TTL.
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil {
		return notHeld("", "Unlock called on a nil *Lock")
	}
	now := l.r.clock.Now()
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return notHeld(l.key, "already unlocked")
	}
	l.released = true
	until, end := l.until, l.end
	l.endLocked(ErrUnlocked)
	l.mu.Unlock()
	if b := l.r.sched.remove(l, false); b != nil {
		<-b.done // never release before a renewal in flight returned
	}
	l.extendMu.Lock() // nor before an Extend in flight returned
	l.extendMu.Unlock()

	// The next local waiter may try once every master has answered, or,
	// when every master is pipelined, once the release is queued to each
	// (its acquire then follows the release there): then it can win all of
	// them, not just a quorum.
	t, ctxErr := l.fanout(ctx, l.r.clock.Now(), request{kind: reqRelease, key: l.key, value: l.value}, true)
	if !now.Before(until) {
		return notHeld(l.key, "validity ended %v before Unlock; the critical section may have overlapped another holder", now.Sub(until))
	}
	if end != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, end)
	}
	if ctxErr != nil || !t.won() {
		return joinCtx(t.error(opRelease, l.key), ctxErr)
	}
	return nil
}

// Extend resets the keys' TTL to ttl on every master that still holds this
// lock's value, and moves Until to this call's start plus ttl less the drift
// allowance. It needs a quorum within the current validity: an expired lock
// is not acquired again (take a new one with Lock). Auto-extend, when on,
// goes on with ttl as the lock's TTL; Extend waits for a renewal in flight
// and no renewal runs while it does.
//
// The error wraps [ErrNotHeld] when the lock was released, lost, its
// validity had ended, or the key is gone from a quorum; a [*QuorumError]
// without ErrNotHeld means too many masters failed to answer, and Until is
// unchanged.
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
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	if b := l.r.sched.remove(l, true); b != nil {
		select {
		case <-b.done:
		case <-ctx.Done():
			l.r.sched.unhold(l)
			return ctx.Err()
		}
	}
	defer l.r.sched.unhold(l)

	start := l.r.clock.Now()
	l.mu.Lock()
	released, end, until := l.released, l.end, l.until
	l.mu.Unlock()
	switch {
	case released:
		return notHeld(l.key, "already unlocked")
	case end != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, end)
	case !start.Before(until):
		return notHeld(l.key, "validity ended %v before Extend", start.Sub(until))
	}

	t, ctxErr := l.fanout(ctx, start, request{kind: reqExtend, key: l.key, value: l.value, ttl: ttl}, false)
	l.mu.Lock()
	defer l.mu.Unlock()
	newUntil, err := extended(&t, ctxErr, &cfg, l.key, start, l.r.clock.Now(), l.until)
	switch {
	case err != nil:
		return err
	case l.released:
		return notHeld(l.key, "unlocked while Extend ran")
	case l.end != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, l.end)
	}
	l.until, l.ttl = newUntil, ttl
	return nil
}

// extended decides an extend phase — one Extend, or one lock's renewal in
// a batch — that started at start and was decided at now, for a lock valid
// until until: it needs a quorum, reached within that validity and leaving
// more than the minimum validity. It returns the new Until.
func extended(t *tally, ctxErr error, cfg *config, key string, start, now, until time.Time) (time.Time, error) {
	if ctxErr != nil || !t.won() {
		return time.Time{}, joinCtx(t.error(opExtend, key), ctxErr)
	}
	if !now.Before(until) {
		return time.Time{}, notHeld(key, "validity ended %v before the extend reached a quorum", now.Sub(until))
	}
	newUntil, left, ok := cfg.deadline(start, now)
	if !ok {
		qe := t.error(opExtend, key)
		qe.Late, qe.Validity = true, left
		return time.Time{}, qe
	}
	return newUntil, nil
}

// cfgLocked is the lock's configuration for its current TTL (l.mu held).
func (l *Lock) cfgLocked() config {
	cfg := l.cfg
	if l.ttl != cfg.ttl {
		cfg.ttl = l.ttl
		cfg, _ = cfg.resolved() // Extend checked this TTL
	}
	return cfg
}

// fanout sends req to every master, each request after the acquire still in
// flight to that master, all bounded by the node timeout counted from when
// that acquire's own deadline has passed. With wake, the key's local waiters
// are woken once every master has answered (see [phase.wake]).
func (l *Lock) fanout(ctx context.Context, now time.Time, req request, wake bool) (tally, error) {
	l.mu.Lock()
	acq := l.acquireLocked()
	l.mu.Unlock()
	from := now
	if acq != nil && acq.deadline.After(from) {
		from = acq.deadline
	}
	return l.r.fanout(ctx, from.Add(l.cfg.nodeTimeout), acq, req, wake)
}

// acquireLocked returns the acquire attempt while later requests must
// still heed it — any of its requests may be in flight, or its deadline (from
// which fanout counts) is ahead — and nil after; it then drops it, so that a
// lock held for long does not keep it in memory (l.mu held).
func (l *Lock) acquireLocked() *attempt {
	if a := l.acq; a != nil && a.running.Load() == 0 && !l.r.clock.Now().Before(a.deadline) {
		l.acq = nil
	}
	return l.acq
}
