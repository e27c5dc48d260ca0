package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is a held lock: the handle that Lock and TryLock return. Its key,
// value and fence token never change; Until moves later when Extend or
// auto-extend ([WithAutoExtend]) succeeds, and earlier only by an Extend to
// a TTL shorter than the lock's, whatever that Extend's outcome. It is safe
// for concurrent use.
type Lock struct {
	r *Redlock
	// name is the lock's name as its caller gave it; key its key on the
	// masters: the same for a mutex, the synchronizer's key for the other
	// kinds (see lockKind).
	name, key string
	value     string
	token     uint64
	owner     string // WithOwner; "": a plain lock
	cfg       config // the acquiring call's resolved options
	// h is the acquiring call's registration for hand-offs when it queued
	// for them (see [handoff]): the release takes it off the queues and
	// deletes the key where it was handed to the call after all, and an
	// Unlock that hands the key on queues it behind (see [wakeups.stay]).
	h       *handoff
	stayReg uint64 // the registration its Unlock queued behind the next holder

	// key and value boxed once for all the lock's requests (see request.boxArgs)
	boxedKey, boxedValue any

	// extendMu is held by Extend for its whole run, so two Extends of this
	// lock never overlap (an auto-extended lock's renewals are kept out
	// through held instead: the scheduler never waits for a Lock).
	extendMu sync.Mutex

	// mu guards the fields below it up to the scheduler's.
	mu       sync.Mutex
	until    time.Time     // on r.clock
	ttl      time.Duration // the TTL of the acquire or the last Extend; renewals use it
	last     time.Time     // the deadline of the lock's latest phase, on the real clock (see nextDeadline)
	released bool
	// capTTL is the shortest TTL of this lock's extend requests (Extend or
	// renewal) that failed on some master, 0 when none did: a request that
	// timed out may still be in the network, and land on that master after
	// a later extend there (go-redis drops the connection of a request that
	// timed out, and the next goes out on a new one, so the lane's order no
	// longer holds). It then sets the key to live capTTL from a moment after
	// that later extend's start, so an extend computes its Until from such
	// a start plus capTTL (see effLocked). It never grows back: a straggler
	// can land arbitrarily late. phase.deliver records a failure before the
	// reply counts and before that master's lane sends anything else, so
	// every extend that counts a master in its quorum sees the failures on
	// it of the requests before it. A failure recorded after an extend was
	// decided concerns a master outside its quorum: it never moves back an
	// Until given out already (see extendedLocked).
	capTTL time.Duration
	end    error                   // why the lock ended (ErrUnlocked, lost); nil while held
	ctx    context.Context         // made on the first Done or Context call
	cancel context.CancelCauseFunc // cancels ctx with end

	// Guarded by r.sched.mu (see [scheduler]).
	pos   int       // 1 + index in the scheduler's queue; 0 when not queued
	due   time.Time // when the scheduler next looks at the lock
	round *round    // the renewal in flight, if any
	held  bool      // an Extend of an auto-extended lock runs: no renewal starts
}

// Key returns the locked key, as the caller named it: the key given to
// Lock, TryLock or Do, or to [Redlock.RWMutex] or [Redlock.Semaphore] for
// their locks ("" for a nil *Lock, as every getter returns the zero value
// for a nil *Lock).
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Value returns the random value that marks this holder's keys on the masters.
func (l *Lock) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Owner returns the owner the lock was taken as ([WithOwner]), or "" for a
// plain lock.
func (l *Lock) Owner() string {
	if l == nil {
		return ""
	}
	return l.owner
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
// monotonic clock: the acquire's (or an Extend's, or a renewal's) start plus
// the TTL less the drift allowance (a shorter TTL after an extend to it
// failed somewhere: see [Lock.Extend]). Past it, another client may hold the
// lock. It is a local deadline, never a network query.
//
// Until never moves earlier except by an Extend to a TTL shorter than the
// lock's: a renewal, or an Extend to the lock's TTL or longer, leaves it
// where it was or moves it later, whether it succeeds or fails.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// TTL returns the time the keys were set to live by the acquire or the last
// Extend, in whole milliseconds.
func (l *Lock) TTL() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Unlock releases the lock on every master (compare-and-delete: a key that
// now holds another value is left alone). It returns when a quorum released,
// too many could not, or ctx ended; requests to slow masters finish in the
// background (see [Redlock.Close]). Each master gets the release after every
// request this lock sent it before (the acquire, a renewal), so none of them
// can land after it.
//
// Unlock first stops auto-extend and cancels [Lock.Context] (cause
// [ErrUnlocked], unless the lock was already lost).
//
// Unlock returns an error wrapping [ErrNotHeld] when the lock's validity had
// ended before Unlock was called — the critical section may have overlapped
// another holder's — or when the key was gone from a quorum, or when the lock
// was already released, or when it was lost (the error then wraps
// [ErrLockLost] too). A [*QuorumError] without ErrNotHeld means too many
// masters failed to answer; the keys then expire with their TTL.
func (l *Lock) Unlock(ctx context.Context) (err error) {
	if l == nil {
		return notHeld("", "Unlock called on a nil *Lock")
	}
	if l.r.obs != nil {
		var c *Call
		ctx, c = l.r.startCall(ctx, CallUnlock, l.key)
		defer func() { l.r.endCall(ctx, c, 0, nil, err) }()
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
	l.r.sched.remove(l)

	p := l.release(ctx, true, nil)
	// The place the release queued behind the next holder (see
	// wakeups.unlocked) is settled once the release is decided, or
	// standWindow after a quorum answered without deciding it: while this
	// goroutine waits here for slow masters no call can take the place
	// over, and a release that hands it the key meanwhile would keep the
	// key from everyone until the wait ends.
	ctxErr := p.collectUntil(ctx, l.r.quorum, standWindow)
	l.r.wake.unlocked(l, p.woke())
	if ctxErr == nil {
		ctxErr = p.collect(ctx)
	}
	var qerr error // the release phase's own outcome
	if t := &p.tallies[0]; ctxErr != nil || !t.won() {
		qerr = joinCtx(t.error(opRelease, l.key), ctxErr)
	}
	l.observedRelease(ctx, p, now, qerr)
	if !now.Before(until) {
		return notHeld(l.key, "validity ended %v before Unlock; the critical section may have overlapped another holder", now.Sub(until))
	}
	if end != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, end)
	}
	return qerr
}

// Extend resets the keys' TTL to ttl on every master that still holds this
// lock's value, and moves Until to this call's start plus ttl less the drift
// allowance. It needs a quorum within the current validity, with more than
// the minimum validity left: an expired lock is not acquired again (take a
// new one with Lock). Auto-extend, when on, goes on with ttl as the lock's
// TTL; Extend waits for a renewal in flight and no renewal runs while it
// does.
//
// When Extend to a TTL shorter than the lock's fails, its requests may still
// have landed on some masters, so Until becomes the earlier of its old value
// and what ttl would give: it shortens the lock all the same. An Extend to
// the lock's TTL or longer never moves Until earlier, whatever its outcome:
// where it lands, it leaves the keys no shorter than they were.
//
// A request that timed out on a master (or failed there otherwise) may land
// there later, after a later Extend or renewal, when the client dropped the
// connection it was sent on (go-redis does). So once an extend request of
// this lock to some TTL has failed on any master, Until is never moved
// further than that TTL past an extend's start: after Extend(ctx, time.Second)
// timed out somewhere, a later Extend(ctx, time.Minute) succeeds with the
// keys set to a minute but Until one second (less drift) after its start
// (or where it was, if that is later), and auto-extend renews by that Until.
// It stays so for the life of the lock; a lock kept at one TTL loses
// nothing.
//
// The error wraps [ErrNotHeld] when the lock was released, lost, its
// validity had ended, or the key is gone from a quorum; a [*QuorumError]
// without ErrNotHeld means too many masters failed to answer in time.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) (err error) {
	if l == nil {
		return notHeld("", "Extend called on a nil *Lock")
	}
	if l.r.obs != nil {
		var c *Call
		ctx, c = l.r.startCall(ctx, CallExtend, l.key)
		defer func() { l.r.endCall(ctx, c, 0, nil, err) }()
	}
	cfg := l.cfg
	WithTTL(ttl)(&cfg)
	cfg, err = cfg.resolved()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // nothing sent: Until stays
	}
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	if l.cfg.autoExtend {
		if err := l.r.sched.hold(ctx, l); err != nil {
			return err
		}
		defer l.r.sched.unhold(l)
	} else {
		defer l.r.sched.place(l, time.Time{}) // a watched lock ends at the new Until
	}

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
	deadline, ok := l.nextDeadline(until)
	if !ok {
		return notHeld(l.key, "validity ended before Extend")
	}
	p := l.r.startPhase(ctx, deadline, true, l.request(reqExtend, cfg.ttl, 0))
	ctxErr := p.collect(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	err = l.extendedLocked(&p.tallies[0], ctxErr, &cfg, start)
	l.observedLocked(ctx, PhaseExtend, p, 0, start, err)
	switch {
	case err != nil:
		return err
	case l.released:
		return notHeld(l.key, "unlocked while Extend ran")
	case l.end != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, l.end)
	}
	l.ttl = cfg.ttl
	return nil
}

// extendedLocked applies to l (l.mu held) the outcome of an extend to
// cfg.ttl that started at start — one Extend, or one lock's renewal in a
// round: it needs a quorum, reached within the validity and leaving more
// than the minimum validity. It computes start + eff − drift, where eff is
// the smaller of ttl and capTTL (an earlier extend's request to capTTL may
// land after this one on a master of its quorum), and checks the minimum
// validity against eff too.
//
// Only an extend to a TTL shorter than the lock's (l.ttl) may move Until
// earlier: on success Until becomes that value, and on failure the earlier
// of Until and that value, since its requests may have landed on some
// masters or all of them. An extend to the lock's TTL or longer never
// moves Until back, whatever its outcome: where its requests land they
// leave the key no shorter than before, so the quorum that Until rests on
// still holds the key until then. That quorum answered after every earlier
// request to its masters (a lane sends in order, and phase.deliver records
// a failure before the next request goes), so a capTTL recorded since
// concerns only masters outside it.
func (l *Lock) extendedLocked(t *tally, ctxErr error, cfg *config, start time.Time) error {
	now := l.r.clock.Now()
	eff := l.effLocked(cfg)
	newUntil, left, ok := eff.deadline(start, now)
	shorter := cfg.ttl < l.ttl
	var err error
	switch {
	case ctxErr != nil || !t.won():
		err = joinCtx(t.error(opExtend, l.key), ctxErr)
	case !now.Before(l.until):
		err = notHeld(l.key, "validity ended %v before the extend reached a quorum", now.Sub(l.until))
	case !ok:
		err = t.late(opExtend, l.key, left)
	}
	switch {
	case err != nil && shorter:
		l.until = earlier(l.until, newUntil)
	case err != nil:
	case shorter:
		l.until = newUntil
	default:
		l.until = later(l.until, newUntil)
	}
	return err
}

// strayed records that an extend request of l to ttl failed on some master:
// its outcome there is unknown (see capTTL).
func (l *Lock) strayed(ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.capTTL == 0 || ttl < l.capTTL {
		l.capTTL = ttl
	}
}

// effLocked is cfg with its TTL cut to capTTL (l.mu held): the TTL that
// Until is computed from, and renewals are timed by.
func (l *Lock) effLocked(cfg *config) config {
	eff := *cfg
	if l.capTTL > 0 && l.capTTL < eff.ttl {
		eff.ttl = l.capTTL
		if eff.minValidityOpt < 0 {
			eff.minValidity = eff.ttl / 10 // as resolved derives it
		}
	}
	return eff
}

// request is a request of op for l's key and value.
func (l *Lock) request(op reqKind, ttl time.Duration, token uint64) request {
	q := request{Op: op, Kind: l.cfg.kind, Key: l.key, Value: l.value, TTL: ttl, Token: token, Owner: l.owner, key: l.boxedKey, value: l.boxedValue}
	if ttl != 0 && ttl == l.r.cfg.ttl {
		q.ms = l.r.ttlMS
	}
	if op == reqExtend {
		q.lock = l
	}
	q.Gate = l.cfg.gate // on a release, for a waiting call's rollback (handoff.lua)
	q.Slot, q.Permits = l.cfg.slot, l.cfg.permits
	if op != reqRelease {
		q.Replicas = l.cfg.replicas
	}
	return q
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
