package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// MaxPermits is the most permits a [Semaphore] has.
const MaxPermits = 64

// The observer's names of a Semaphore's calls.
const (
	CallAcquire    CallOp = "Acquire"
	CallTryAcquire CallOp = "TryAcquire"
)

// Semaphore is a counting semaphore over the quorum: at most its limit of
// [Lock]s, permits, are held at once, whatever part of the masters each
// client reaches. Make one with [Redlock.Semaphore]; it is safe for
// concurrent use and holds no state on the masters of its own.
//
// A permit is one of L slot mutexes, each taken on a quorum of masters like
// the mutex, the same slot on every master: two holders of one slot would
// need two quorums that share no master. So at most L hold, and each permit
// keeps the mutex's fault tolerance ((N-1)/2 of N masters may fail). A semaphore
// kept as one set of holders per master, taken on a quorum, would not be
// safe: with 3 masters and 2 permits, holders on masters {1,2}, {2,3} and
// {1,3} each see 2 holders per master (see "Semaphore" in
// docs/internals.md).
//
// The limit is stored with the permits on every master: a call with
// another limit while permits of the stored one are held gets a
// [*PermitsError], never a permit.
type Semaphore struct {
	r         *Redlock
	name, key string
	permits   int
	err       error // the construction's: every call returns it
	// slot is where this Semaphore's next call starts its search: the
	// slot its last call won, or that the masters last said was free.
	slot atomic.Uint32
}

// Semaphore returns the semaphore of permits permits named key. A name
// used as a mutex, an RWMutex and a Semaphore names three locks that never
// meet. A permits below 1 or above [MaxPermits] makes every call fail with
// a [*ConfigError].
func (r *Redlock) Semaphore(key string, permits int) *Semaphore {
	s := &Semaphore{r: r, name: key, key: kindPermit.base(key), permits: permits}
	if permits < 1 || permits > MaxPermits {
		s.err = configErr("permits", "a Semaphore has 1 to %d permits, got %d", MaxPermits, permits)
	}
	return s
}

// Acquire takes one permit, waiting and retrying as [Redlock.Lock] does
// while all are held: a permit given back, in this process or another,
// wakes the call that waited longest. The Lock it returns is the permit: Unlock gives it
// back; Extend, Until, Done, Context and the options work as for a mutex,
// but for [WithOwner], which does not apply (a *ConfigError). With
// [WithFencing], a permit's token is larger than that of every earlier
// holder of its slot (a permit is one of the semaphore's slots; see
// "Semaphore" in docs/internals.md).
//
// The error wraps [ErrNotObtained] as Lock's does, or is a [*PermitsError]
// when the masters hold permits given under another limit.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, err := s.config(opts)
	if err != nil {
		return nil, err
	}
	l, err := s.r.lock(ctx, CallAcquire, s.name, s.key, &cfg)
	s.slot.Store(uint32(cfg.slot))
	return l, err
}

// TryAcquire makes one attempt to take a permit: the error wraps
// [ErrNotObtained] when every permit is held (or too few masters
// answered). One attempt may ask the masters for a few slots in turn,
// each a slot that masters which refused the previous one said is free.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, err := s.config(opts)
	if err != nil {
		return nil, err
	}
	l, err := s.r.tryLock(ctx, CallTryAcquire, s.name, s.key, &cfg)
	s.slot.Store(uint32(cfg.slot))
	return l, err
}

// config is a call's configuration.
func (s *Semaphore) config(opts []Option) (config, error) {
	if s == nil {
		return config{}, configErr("Semaphore", "method called on a nil *Semaphore; make one with Redlock.Semaphore")
	}
	if s.err != nil {
		return config{}, s.err
	}
	cfg, _, err := s.r.kindConfig(s.name, kindPermit, opts)
	if err != nil {
		return cfg, err
	}
	if cfg.owner != "" {
		return cfg, configErr("WithOwner", "a Semaphore's permit cannot nest: an owner applies to Lock, TryLock and Do only")
	}
	cfg.permits = uint8(s.permits)
	cfg.slot = uint8(s.slot.Load() % uint32(s.permits))
	return cfg, nil
}

// acquirePermit is one attempt of a permit's call (cfg.kind kindPermit): a
// mutex's attempt (acquireOnce) on slot cfg.slot, and while the masters
// that refused it said other slots were free there, on the slot most of
// them said so of, each slot once. Each round that fails is rolled back
// as a mutex's attempt is, by the one release path, before the next
// (the lanes keep the order). cfg.slot is left at the slot the next
// attempt starts with: the one that won, or the best hint.
func (r *Redlock) acquirePermit(ctx context.Context, name, key string, cfg *config, h *handoff) (*Lock, error) {
	var tried uint64
	for {
		tried |= 1 << cfg.slot
		l, err := r.acquireOnce(ctx, name, key, cfg, h)
		if err == nil {
			return l, nil
		}
		var qe *QuorumError
		if !errors.As(err, &qe) {
			return nil, err
		}
		var pe *PermitsError
		if errors.As(err, &pe) {
			pe.Key = name
			return nil, pe
		}
		next, again := nextSlot(qe.free, int(cfg.permits), tried, int(cfg.slot))
		cfg.slot = uint8(next)
		if !again || ctx.Err() != nil {
			return nil, err
		}
	}
}

// nextSlot picks the next slot of permits to ask for: of those not in
// tried, the one that most of free (each refusing master's free slots, one
// bit each) name, and reports true: worth a round at once. When free names
// none of them, it reports false and the slot most of free name (else
// last): where the next attempt starts.
func nextSlot(free []uint64, permits int, tried uint64, last int) (int, bool) {
	best, votes, any, anyVotes := -1, 0, last, 0
	for s := range permits {
		n := 0
		for _, f := range free {
			n += int(f >> s & 1)
		}
		if n > anyVotes {
			any, anyVotes = s, n
		}
		if tried>>s&1 == 0 && n > votes {
			best, votes = s, n
		}
	}
	if best >= 0 {
		return best, true
	}
	return any, false
}

// PermitsError is the error of a Semaphore call whose limit differs from
// the one the masters hold permits under: the semaphore's name was used
// with two limits. No permit is given under the other limit while one of
// the stored limit is held; once they are all released (or expired) the
// next call's limit is stored.
type PermitsError struct {
	Key     string // the semaphore's name
	Permits int    // the call's limit
	Stored  int    // the limit a master holds permits under
}

func (e *PermitsError) Error() string {
	return fmt.Sprintf("redlock: semaphore %q has permits held under a limit of %d; this call's limit is %d: one name, one limit",
		e.Key, e.Stored, e.Permits)
}

// The permit scripts (see script): sem.lua in front of each.
var (
	//go:embed lua/sem.lua
	semLua string
	//go:embed lua/sem_acquire.lua
	semAcquireLua string
	//go:embed lua/sem_extend.lua
	semExtendLua string
	//go:embed lua/sem_release.lua
	semReleaseLua string
	//go:embed lua/sem_fence.lua
	semFenceLua string
	//go:embed lua/sem_free.lua
	semFreeLua string
	//go:embed lua/sem_hold.lua
	semHoldLua string

	// The fence counter's steps only where a token is taken.
	semAcquireSrc        any = script(semLua, semHoldLua, semAcquireLua)
	semAcquireFencedSrc  any = script(fenceLua, semLua, semHoldLua, semAcquireLua)
	semExtendSrc         any = script(semLua, semHoldLua, semExtendLua)
	semReleaseSrc        any = script(handonLua, semReleaseLua)
	semFenceSrc          any = script(semLua, raisetoLua, semFenceLua)
	gatedSemAcquireSrc   any = script(gateLua, gatedLua, semLua, semHoldLua, semAcquireLua)
	gatedSemAcqFencedSrc any = script(gateLua, gatedLua, fenceLua, semLua, semHoldLua, semAcquireLua)
	gatedSemExtendSrc    any = script(gateLua, gatedLua, semLua, semHoldLua, semExtendLua)
	gatedSemFenceSrc     any = script(gateLua, gatedLua, semLua, raisetoLua, semFenceLua)
	// A waiting call's registrations go through handoff.lua, the one
	// script that queues calls, with sem_free.lua's v: is a permit free.
	semHandoffSrc any = script(handonLua, gateLua, semLua, semFreeLua, withdrawLua, handoffLua)
	// The Unlock of a permit whose call waited also takes the call's
	// registrations off the queue, and queues it again behind the call
	// the release wakes, in the release (sem_release.lua).
	semReleaseWithdrawSrc any = script(handonLua, withdrawLua, queueLua, semReleaseLua)
)

// permitArgs appends the command of q, a permit's request; nothing for
// one it cannot encode.
func permitArgs(a []any, q *request, key, value, ms any) []any {
	slot, permits := int64(q.Slot), strconv.Itoa(int(q.Permits))
	gate := gated(q)
	pick := func(plain, behind any) any {
		if gate {
			return behind
		}
		return plain
	}
	switch q.Op {
	case reqAcquire:
		a = append(a, "eval", pick(semAcquireSrc, gatedSemAcquireSrc), int64(2), key, FenceKey(q.Key), value, slot, ms, permits, int64(0))
	case reqAcquireFenced:
		a = append(a, "eval", pick(semAcquireFencedSrc, gatedSemAcqFencedSrc), int64(2), key, FenceKey(q.Key), value, slot, ms, permits, int64(1))
	case reqRaiseFence:
		a = append(a, "eval", pick(semFenceSrc, gatedSemFenceSrc), int64(2), key, FenceKey(q.Key), value, slot, int64(q.Token))
	case reqExtend:
		a = append(a, "eval", pick(semExtendSrc, gatedSemExtendSrc), int64(1), key, value, slot, ms, bit(q.Repair), permits)
	case reqRelease:
		wk, waiter := q.releaseArgs()
		switch {
		case q.Hand != "" && q.Value == "": // a waiting call's (un)registration
			return append(a, "eval", semHandoffSrc, int64(2), key, wk, value, waiter, q.Place, q.Hand, int64(q.Reg), int64(0), bit(q.Behind), q.Queued, gateArg(q), bit(q.Back), bit(q.Yield))
		case q.Hand == "" && q.Value != "":
			return append(a, "eval", semReleaseSrc, int64(2), key, wk, value, slot, waiter, bit(q.rollback))
		case q.Reg == 0 && q.Place == 0, q.Behind: // an Unlock's release that withdraws the call (see Lock.release)
			a = append(a, "eval", semReleaseWithdrawSrc, int64(2), key, wk, value, slot, waiter, bit(q.rollback), q.Hand, q.Queued)
			if q.Behind { // and queues it again behind the call it wakes (wakeups.stay)
				a = append(a, q.Place, int64(q.Reg))
			}
			return a
		}
		return a
	default:
		return a
	}
	if gate {
		a = append(a, gateArg(q))
	}
	return a
}

// permitsRefusal is the error a permit's vote answers when the master
// holds permits under another limit: "PERMITS" and that limit.
const permitsRefusal = "PERMITS "

// permitDecode reads the reply of q, a permit's request: a vote's integer
// (granted: 1 or the fence token), its array (refused: the free slots),
// its PERMITS error; the other scripts' 0 or 1.
func permitDecode(q *request, v any, err error) {
	q.OK, q.Fence, q.Free, q.Err = false, 0, 0, nil
	if err != nil {
		if msg, ok := strings.CutPrefix(err.Error(), permitsRefusal); ok && (q.Op == reqAcquire || q.Op == reqAcquireFenced) {
			if n, perr := strconv.Atoi(msg); perr == nil {
				q.Err = &PermitsError{Key: q.Key, Permits: int(q.Permits), Stored: n}
				return
			}
		}
		q.Err = err
		return
	}
	switch q.Op {
	case reqAcquire, reqAcquireFenced:
		if free, ok := v.([]any); ok {
			q.Free, q.Err = freeSlots(free, int(q.Permits))
			return
		}
		n, err := fence(q.Key, v, nil)
		switch {
		case err != nil:
			q.Err = err
		case n == 0:
			q.Err = badReplyf("permit vote answered 0, want 1, a fence token or the free slots")
		default:
			q.OK = true
			if q.Op == reqAcquireFenced {
				q.Fence = n
			}
		}
	case reqRelease:
		q.OK, q.Woke, q.Err = released(v, nil)
	default:
		q.OK, q.Err = flag(v, nil)
	}
}

// freeSlots reads a refused vote's free slots, each below permits.
func freeSlots(free []any, permits int) (uint64, error) {
	var m uint64
	for _, f := range free {
		n, ok := f.(int64)
		if !ok || n < 0 || n >= int64(permits) {
			return 0, badReplyf("permit vote answered free slot %s, want one below %d", show(f), permits)
		}
		m |= 1 << n
	}
	return m, nil
}

// SemaphoreKey is the key on each master of the [Semaphore] named name: a
// hash of its stored limit (field L) and of each held slot s's holder
// (v<s>) and end in ms of the master's clock (e<s>), in name's hash slot.
// For tools that inspect the masters, such as redlock status.
func SemaphoreKey(name string) string { return kindPermit.base(name) }
