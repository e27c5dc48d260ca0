package chaos

import (
	"sync"
	"time"

	"github.com/redlock/redlock"
)

// guard decides whether the resource accepts a write carrying a fencing
// token.
type guard interface {
	// admit reports whether a write to key with token is accepted, and
	// remembers the token when it is. Calls are serialised by the resource.
	admit(key string, token uint64) bool
}

// openGuard accepts every write: a resource that does not check tokens.
type openGuard struct{}

func (openGuard) admit(string, uint64) bool { return true }

// fenceGuard is what a user of the library puts in front of a resource: one
// [redlock.Fence] per key, which rejects a token lower than the highest it
// accepted (an equal token is the same holder writing again).
type fenceGuard struct {
	fences map[string]*redlock.Fence
}

func newFenceGuard() *fenceGuard { return &fenceGuard{fences: make(map[string]*redlock.Fence)} }

func (g *fenceGuard) admit(key string, token uint64) bool {
	f := g.fences[key]
	if f == nil {
		f = new(redlock.Fence)
		g.fences[key] = f
	}
	return f.Check(token) == nil
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
