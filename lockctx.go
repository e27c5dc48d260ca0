package redlock

import (
	"context"
	"time"
)

// Done returns a channel that is closed when the lock ends: it is lost
// (auto-extend could not renew it, or its validity ran out: see
// [ErrLockLost]), or it is unlocked. It is closed at the same moment as
// [Lock.Context] is cancelled; context.Cause of that context says why.
//
// For a lock without auto-extend the channel closes at [Lock.Until] (moved by
// Extend), or at Unlock if sooner. The channel and the watch are made on the
// first call of Done or Context, so a lock nobody watches costs nothing here.
// It is safe for concurrent use.
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Context returns a context that is cancelled when the lock ends, with a
// cause (context.Cause) that says why:
//
//   - an error wrapping [ErrLockLost]: auto-extend could not renew the lock
//     with a quorum before its validity was nearly spent, the masters no
//     longer hold its value, the Redlock was closed while renewing it
//     (wrapping [ErrClosed] too), or — for a lock without auto-extend — its
//     validity ran out at [Lock.Until];
//   - [ErrUnlocked]: Unlock was called.
//
// The context is not derived from any caller's context and has no deadline;
// derive work contexts from it, or stop work with context.AfterFunc. For a
// nil *Lock it is already cancelled, with a cause wrapping [ErrNotHeld].
func (l *Lock) Context() context.Context {
	if l == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(notHeld("", "Context called on a nil *Lock"))
		return ctx
	}
	l.mu.Lock()
	if l.ctx != nil {
		defer l.mu.Unlock()
		return l.ctx
	}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	ctx := l.ctx
	watch := false
	switch {
	case l.end != nil:
		l.cancel(l.end)
	case !l.cfg.autoExtend && !l.r.clock.Now().Before(l.until):
		l.endLocked(lost(l.key, errExpired))
	default:
		watch = !l.cfg.autoExtend
	}
	l.mu.Unlock()
	if watch {
		l.r.sched.place(l, time.Time{})
	}
	return ctx
}

// endLocked ends the lock with cause (l.mu held); the first cause stays.
func (l *Lock) endLocked(cause error) {
	if l.end != nil {
		return
	}
	l.end = cause
	if cause != ErrUnlocked && l.r.obs != nil {
		l.r.obs.Lost(l.key, cause)
	}
	if l.cancel != nil {
		l.cancel(cause)
	}
}

// nextDueLocked is when the scheduler should next look at l (l.mu held):
// its next renewal when auto-extended, its Until when only watched; false
// when it needs no scheduler.
func (l *Lock) nextDueLocked() (time.Time, bool) {
	switch {
	case l.released || l.end != nil:
		return time.Time{}, false
	case l.cfg.autoExtend:
		cfg := l.cfgLocked()
		eff := l.effLocked(&cfg)
		return renewalDue(l.until, &eff), true
	case l.ctx != nil:
		return l.until, true
	}
	return time.Time{}, false
}

// closedLocked handles a lock the scheduler can no longer take because the
// Redlock is closed (l.mu held): an auto-extended lock is lost; a watched
// one gets a timer of its own for its Until.
func (l *Lock) closedLocked() {
	if l.cfg.autoExtend {
		l.endLocked(lost(l.key, ErrClosed))
		return
	}
	time.AfterFunc(l.until.Sub(l.r.clock.Now()), l.expireAfterClose)
}

// expireAfterClose is closedLocked's timer: end the lock, or wait again for
// an Until that Extend moved.
func (l *Lock) expireAfterClose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.end != nil {
		return
	}
	if now := l.r.clock.Now(); now.Before(l.until) {
		time.AfterFunc(l.until.Sub(now), l.expireAfterClose)
		return
	}
	l.endLocked(lost(l.key, errExpired))
}
