package redlock

import (
	"context"
	_ "embed"
)

// RWMutex is a read-write lock over the Redlock's masters: any number of
// readers hold it together ([RWMutex.RLock]), or one writer alone
// ([RWMutex.Lock]). A writer that waits puts a claim on the masters that
// refused it, which keeps new readers out while those holding it drain,
// so no writer starves behind a stream of readers.
//
// Each hold is a [*Lock] with everything a mutex's has: Unlock, Extend,
// Until, Done, Context, auto-extend, the restart gate, replica
// confirmation, the observer, and [WithFencing] on writers (tokens strictly
// increase across the key's writers). [WithOwner] does not apply (a
// *ConfigError), nor does WithFencing on a reader's call; a Redlock's
// default WithFencing (given to [New]) applies to its writers alone.
//
// Its key on the masters is its own: a name used as a mutex
// ([Redlock.Lock]) and as an RWMutex names two locks that never meet.
//
// An RWMutex is a name and its Redlock: it keeps no state, costs nothing to
// make, and is safe for concurrent use.
type RWMutex struct {
	r    *Redlock
	name string
}

// The observer's names of the reader calls ([Call].Op); a writer's calls
// are [CallLock] and [CallTryLock].
const (
	CallRLock    CallOp = "RLock"
	CallTryRLock CallOp = "TryRLock"
)

// RWMutex returns the read-write lock named key. The key is checked, as
// Lock checks its key, by each call.
func (r *Redlock) RWMutex(key string) *RWMutex { return &RWMutex{r: r, name: key} }

// Lock takes the lock as its writer, waiting and retrying as
// [Redlock.Lock] does: while it waits, its claim keeps new readers out.
// Giving up (ctx ended, retries ran out) takes the claim away.
func (m *RWMutex) Lock(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, key, err := m.config(kindWriter, opts)
	if err != nil {
		return nil, err
	}
	return m.r.lock(ctx, CallLock, m.name, key, &cfg)
}

// TryLock makes one attempt to take the lock as its writer.
func (m *RWMutex) TryLock(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, key, err := m.config(kindWriter, opts)
	if err != nil {
		return nil, err
	}
	return m.r.tryLock(ctx, CallTryLock, m.name, key, &cfg)
}

// RLock takes a shared hold of the lock, waiting and retrying as
// [Redlock.Lock] does while a writer holds it or waits for it.
func (m *RWMutex) RLock(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, key, err := m.config(kindReader, opts)
	if err != nil {
		return nil, err
	}
	return m.r.lock(ctx, CallRLock, m.name, key, &cfg)
}

// TryRLock makes one attempt to take a shared hold of the lock.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, key, err := m.config(kindReader, opts)
	if err != nil {
		return nil, err
	}
	return m.r.tryLock(ctx, CallTryRLock, m.name, key, &cfg)
}

// config is the configuration of a call of kind k, and its key on the
// masters: the options that do not apply to k are refused.
func (m *RWMutex) config(k lockKind, opts []Option) (config, string, error) {
	if m == nil || m.r == nil {
		return config{}, "", configErr("RWMutex", "method called on a nil *RWMutex; make one with Redlock.RWMutex")
	}
	cfg, key, err := m.r.kindConfig(m.name, k, opts)
	switch {
	case err != nil:
		return cfg, "", err
	case cfg.owner != "":
		return cfg, "", configErr("WithOwner", "an RWMutex's holds have no owner: readers already share the lock, and a writer's hold does not nest")
	case k == kindReader && cfg.fencing && !m.r.cfg.fencing:
		return cfg, "", configErr("WithFencing", "readers take no fencing token: only an RWMutex's writers do (RWMutex.Lock, TryLock)")
	case k == kindReader:
		cfg.fencing = false // New's WithFencing is for the calls that take tokens
	}
	return cfg, key, nil
}

// The read-write lock's scripts (see script): a step of a hold each, and
// the queue work of its waiting calls, each behind the state's routines
// (rw_state.lua) and only the shared routines it calls: the fence
// counter's for a fenced writer's votes, the hand-off's where a step can
// wake a call, a claim's name where a step places or drops one.
var (
	//go:embed lua/rw_state.lua
	rwStateLua string
	//go:embed lua/rw_acquire.lua
	rwAcquireLua string
	//go:embed lua/rw_fence.lua
	rwFenceLua string
	//go:embed lua/rw_extend.lua
	rwExtendLua string
	//go:embed lua/rw_release.lua
	rwReleaseLua string
	//go:embed lua/rw_queue.lua
	rwQueueLua string
	//go:embed lua/rw_wake.lua
	rwWakeLua string
	//go:embed lua/rw_claim.lua
	rwClaimLua string

	rwAcquireSrc       any = script(rwStateLua, rwClaimLua, rwAcquireLua)
	rwAcquireFencedSrc any = script(fenceLua, rwStateLua, rwClaimLua, rwAcquireLua)
	rwFenceSrc         any = script(fenceLua, rwStateLua, rwFenceLua)
	rwExtendSrc        any = script(rwStateLua, rwExtendLua)
	// A reader's release wakes no readers (rw_release.lua calls wakeall
	// for a writer's alone): it goes without rw_wake.lua's routine.
	rwReleaseSrc  any = script(handonLua, rwStateLua, rwWakeLua, rwReleaseLua)
	rwRReleaseSrc any = script(handonLua, rwStateLua, rwReleaseLua)
	rwQueueSrc    any = script(handonLua, rwStateLua, rwClaimLua, rwWakeLua, withdrawLua, queueLua, rwQueueLua)

	// A vote behind the restart gate: the gate's check first (gated.lua).
	gatedRWAcquireSrc       any = script(gateLua, gatedLua, rwStateLua, rwClaimLua, rwAcquireLua)
	gatedRWAcquireFencedSrc any = script(gateLua, gatedLua, fenceLua, rwStateLua, rwClaimLua, rwAcquireLua)
	gatedRWFenceSrc         any = script(gateLua, gatedLua, fenceLua, rwStateLua, rwFenceLua)
	gatedRWExtendSrc        any = script(gateLua, gatedLua, rwStateLua, rwExtendLua)
)

// rwArgs appends the command of q, a request of a reader or a writer
// (lua/rw_*.lua); nothing for an unknown Op. Its only key is
// the lock's: the scripts name the keys derived from it (rw_state.lua),
// all in its hash slot.
func rwArgs(a []any, q *request, key, value, ms any) []any {
	role := "r"
	if q.Kind == kindWriter {
		role = "w"
	}
	g := gated(q)
	pick := func(plain, gatedSrc any) any {
		if g {
			return gatedSrc
		}
		return plain
	}
	switch q.Op {
	case reqAcquire, reqAcquireFenced:
		hand := any("")
		if q.Hand != "" {
			hand = q.Hand
		}
		src := pick(rwAcquireSrc, gatedRWAcquireSrc)
		if q.Op == reqAcquireFenced {
			src = pick(rwAcquireFencedSrc, gatedRWAcquireFencedSrc)
		}
		a = append(a, "eval", src, int64(1), key, "acquire", role, value, ms, hand, bit(q.Op == reqAcquireFenced), q.Queued)
	case reqRaiseFence:
		a = append(a, "eval", pick(rwFenceSrc, gatedRWFenceSrc), int64(1), key, "fence", role, value, int64(q.Token))
	case reqExtend:
		a = append(a, "eval", pick(rwExtendSrc, gatedRWExtendSrc), int64(1), key, "extend", role, value, ms, bit(q.Repair))
	case reqRelease:
		waiter := boxed(q.waiter, q.Waiter)
		if q.Hand == "" {
			src := rwReleaseSrc
			if q.Kind == kindReader {
				src = rwRReleaseSrc
			}
			return append(a, "eval", src, int64(1), key, "release", role, value, waiter, bit(q.rollback))
		}
		return append(a, "eval", rwQueueSrc, int64(1), key, role, waiter, q.Place, q.Hand, int64(q.Reg), q.Queued, bit(q.Yield))
	default:
		return a
	}
	if g {
		a = append(a, gateArg(q))
	}
	return a
}

// Name returns the lock's name, as given to [Redlock.RWMutex].
func (m *RWMutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// RWMutexKey is the key on each master of the [RWMutex] named name: a hash
// of its readers, its writer and its waiting writers' claims (what
// `redlock status` reads). It is named as [FenceKey] is, with "rw":
// "rw:{" + name + "}" for a name without braces, in name's hash slot; its
// fence counter is FenceKey(RWMutexKey(name)).
func RWMutexKey(name string) string { return kindReader.base(name) }
