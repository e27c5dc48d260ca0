package redlock

// lockKind is what a [Lock] holds: the mutex on a key, a shared or an
// exclusive hold of an [RWMutex], or a permit of a [Semaphore]. Every kind
// goes through the same machinery — the lanes, the phases and their
// tallies, validity, the one release path (Unlock and every rollback),
// Extend and renewals, fencing, the restart gate, replica confirmation,
// wake-ups — and differs only in the scripts its requests run on the
// masters (kindArgs, kindDecode) and in the key it keeps there (base).
type lockKind uint8

const (
	kindMutex  lockKind = iota // Lock, TryLock, Do: one holder of a key
	kindReader                 // RWMutex.RLock, TryRLock: a shared hold
	kindWriter                 // RWMutex.Lock, TryLock: an exclusive hold
	kindPermit                 // Semaphore.Acquire, TryAcquire: one permit
)

var kindNames = [...]string{kindMutex: "mutex", kindReader: "reader", kindWriter: "writer", kindPermit: "permit"}

func (k lockKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "lockKind(?)"
}

// base is the key on the masters of the lock of kind k that its caller
// named name: name itself for a mutex; for an RWMutex, derivedKey(name,
// "rw"), and for a Semaphore, derivedKey(name, "sem"), so that a name used
// as a mutex, an RWMutex and a Semaphore names three locks that never meet.
// Every other key of the lock is derived from base (FenceKey(base),
// WaitKey(base), derivedKey(base, NAME) with NAME refused as a lock key by
// derivedFrom), so it is in name's hash slot, and its queue of waiting
// calls and this process's waiters are its own.
func (k lockKind) base(name string) string {
	switch k {
	case kindReader, kindWriter:
		return derivedKey(name, "rw")
	case kindPermit:
		return derivedKey(name, "sem")
	}
	return name
}

// kindConfig is the configuration of a call of kind k on the lock its
// caller named name (as callConfig checks name and opts), and its key on
// the masters.
func (r *Redlock) kindConfig(name string, k lockKind, opts []Option) (cfg config, key string, err error) {
	cfg, err = r.callConfig(name, opts)
	if err != nil {
		return cfg, "", err
	}
	cfg.kind = k
	return cfg, k.base(name), nil
}

// kindArgs appends to a the command of q, a request for a lock of a kind
// other than a mutex (q.Kind), behind the restart gate when q asks for it
// (gated): the kind's scripts, assembled as the mutex's are (see script).
// It appends nothing for a request it cannot encode, which is then failed
// unsent.
func kindArgs(a []any, q *request, key, value, ms any) []any {
	switch q.Kind {
	case kindReader, kindWriter:
		return rwArgs(a, q, key, value, ms)
	case kindPermit:
		return permitArgs(a, q, key, value, ms)
	}
	return a
}

// kindDecode reads the reply of q, a request for a lock of a kind other
// than a mutex, into q (OK, Fence, Woke, Err, and what the kind keeps).
func kindDecode(q *request, v any, err error) {
	switch {
	case q.Kind == kindPermit:
		permitDecode(q, v, err)
	case q.Op == reqRelease:
		q.OK, q.Woke, q.Err = released(v, err)
	case q.Op == reqAcquireFenced:
		q.Fence, q.Err = fence(q.Key, v, err)
		q.OK = q.Err == nil && q.Fence > 0
	default:
		q.OK, q.Err = flag(v, err)
	}
}
