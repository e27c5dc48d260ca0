package chaos

import (
	"sync"
	"time"
)

// guard decides whether the resource accepts a write carrying a fencing
// token. It is an interface so that the harness can switch to the library's
// own fence checker once there is one.
type guard interface {
	// admit reports whether a write to key with token is accepted, and
	// remembers the token when it is. Calls are serialised by the resource.
	admit(key string, token uint64) bool
}

// openGuard accepts every write: a resource that does not check tokens.
type openGuard struct{}

func (openGuard) admit(string, uint64) bool { return true }

// fenceGuard rejects a write whose token is lower than the highest token
// already accepted for the key (an equal token is the same holder writing
// again).
type fenceGuard struct {
	highest map[string]uint64
}

func newFenceGuard() *fenceGuard { return &fenceGuard{highest: make(map[string]uint64)} }

func (g *fenceGuard) admit(key string, token uint64) bool {
	if token < g.highest[key] {
		return false
	}
	g.highest[key] = token
	return true
}

// resource is the shared thing the critical sections write to: in-process,
// so that every write has one order and one clock. It is safe for concurrent
// use.
type resource struct {
	rec   *recorder
	guard guard

	mu     sync.Mutex // serialises writes; guards the fields below and the guard
	seq    int64
	newest map[string]int // key -> the highest Acquire.ID that wrote to it
}

func newResource(rec *recorder, fencing bool) *resource {
	var g guard = openGuard{}
	if fencing {
		g = newFenceGuard()
	}
	return &resource{rec: rec, guard: g, newest: make(map[string]int)}
}

// write makes holder's write to key, through the guard, records it, and
// reports whether it was accepted.
func (r *resource) write(holder int, key string, token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	ok := r.guard.admit(key, token)
	if n, seen := r.newest[key]; !seen || holder > n {
		r.newest[key] = holder
	}
	r.rec.write(Write{Seq: r.seq, Holder: holder, Key: key, At: r.rec.now(), Token: token, Accepted: ok})
	return ok
}

// newerWrote reports whether a holder recorded after holder (Acquire IDs
// grow in the order acquisitions are recorded) has written to key.
func (r *resource) newerWrote(key string, holder int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.newest[key] > holder
}

// waitNewerWrote polls until a newer holder wrote to key, or d passed or
// done closed; it reports whether one wrote.
func (r *resource) waitNewerWrote(done <-chan struct{}, key string, holder int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !r.newerWrote(key, holder) {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-done:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}
