package chaos

import (
	"slices"
	"sync"
	"time"
)

// Every time in a history is an offset from one base moment on this
// process's monotonic clock (time.Since(base)), so that times taken by
// different clients compare.

// Acquire is one acquire call (redlock.Lock, which retries until its
// deadline) and, when it succeeded, the holding that followed.
type Acquire struct {
	ID      int    // unique in the history; writes name their holder by it
	Client  int    // which workload client (or scripted holder) made it
	Adapter string `json:",omitempty"` // its masters' clients: AdapterGoRedis or AdapterRueidis; "" for a client process
	Key     string //
	// Read: a shared hold of the RWMutex Key (RLock, redlock exec --read);
	// two reads may overlap. A writer of the RWMutex is not Read.
	Read bool   `json:",omitempty"`
	OK   bool   // the lock was obtained
	Err  string `json:",omitempty"` // why not, when !OK

	Start    time.Duration // the call began
	Acquired time.Duration // the call returned the lock (OK only)
	Until    time.Duration // the lock's validity ended: Lock.Until, as last renewed (OK only)
	Released time.Duration // Unlock was called; -1 if it never was (OK only)
	Lost     time.Duration // Lock.Done closed before Unlock (the lock was lost); -1 if it never did (OK only)
	Extend   string        `json:",omitempty"` // "auto" (WithAutoExtend) or "manual" (Lock.Extend) for a holder that renewed its lock
	Renewals int           `json:",omitempty"` // times the holder saw its Until move later
	Token    uint64        // fencing token, 0 without fencing
	Value    string        `json:",omitempty"` // the lock's random value on the masters (OK only)
	Unlock   string        `json:",omitempty"` // Unlock's error, if it returned one
}

// end is the moment the holding stopped counting as held: the earliest of
// the end of validity (as renewed), the loss of the lock (Done) and the call
// to Unlock.
func (a Acquire) end() time.Duration {
	if a.Released >= 0 && a.Released < a.valid() {
		return a.Released
	}
	return a.valid()
}

// valid is the moment the holder's right to write ended: the end of its
// validity (as renewed), or the loss of the lock when that came first.
func (a Acquire) valid() time.Duration {
	if a.Lost >= 0 && a.Lost < a.Until {
		return a.Lost
	}
	return a.Until
}

// Write is one write to the shared resource, from inside a critical section.
type Write struct {
	Seq      int64         // the resource's order of writes
	Holder   int           // the Acquire.ID of the writer
	Key      string        //
	At       time.Duration // under the resource's lock
	Token    uint64        //
	Accepted bool          // false: rejected by the fencing check
}

// Fault is one injected fault and the window it was in force.
type Fault struct {
	Kind  string        // "kill", "pause", "partition", "restart-empty", "holder-pause", ...
	Nodes []int         `json:",omitempty"` // masters, by index; none for a client-side fault
	Note  string        `json:",omitempty"`
	Began time.Duration // injecting it began (Docker takes a while to kill a container)
	At    time.Duration // in force from (after the fault was injected)
	End   time.Duration // to (when undoing it began); -1 while in force
}

// History is what a run recorded.
type History struct {
	Acquires []Acquire
	Writes   []Write
	Faults   []Fault
}

// recorder collects a history from many goroutines.
type recorder struct {
	base time.Time

	mu       sync.Mutex // guards h, next and acquired
	h        History
	next     int // next Acquire.ID
	acquired int // Acquires with OK
}

func newRecorder() *recorder { return &recorder{base: time.Now()} }

// rebase starts the recorder's clock again, at 0 now: before anything
// was recorded, and before any goroutine that reads the clock (now reads
// base unlocked) was started.
func (r *recorder) rebase() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.base = time.Now()
}

// now is the offset of this moment from the base.
func (r *recorder) now() time.Duration { return time.Since(r.base) }

// at is the offset of t (which must carry a monotonic reading) from the base.
func (r *recorder) at(t time.Time) time.Duration { return t.Sub(r.base) }

// acquire records an acquire and returns its ID.
func (r *recorder) acquire(a Acquire) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	a.ID = r.next
	r.next++
	if a.OK {
		r.acquired++
	}
	r.h.Acquires = append(r.h.Acquires, a)
	return a.ID
}

// released records the moment holder id called Unlock.
func (r *recorder) released(id int, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Acquires[id].Released = at
}

// renewed records holder id's validity as it now is: moved later by a
// renewal, or earlier by a failed Extend.
func (r *recorder) renewed(id int, until time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if until > r.h.Acquires[id].Until {
		r.h.Acquires[id].Renewals++
	}
	r.h.Acquires[id].Until = until
}

// extending records that holder id renews its lock, and how.
func (r *recorder) extending(id int, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Acquires[id].Extend = kind
}

// lost records the moment holder id's lock was lost, unless it was already.
func (r *recorder) lost(id int, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h.Acquires[id].Lost < 0 {
		r.h.Acquires[id].Lost = at
	}
}

// unlockFailed records the error Unlock returned to holder id.
func (r *recorder) unlockFailed(id int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Acquires[id].Unlock = err.Error()
}

func (r *recorder) write(w Write) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Writes = append(r.h.Writes, w)
}

// faultBegin records a fault in force from now and returns its index.
func (r *recorder) faultBegin(kind string, nodes []int, note string) int {
	return r.faultInjected(kind, nodes, note, r.now())
}

// faultInjected records a fault whose injection began at began and which
// is in force from now, and returns its index.
func (r *recorder) faultInjected(kind string, nodes []int, note string, began time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Since(r.base)
	r.h.Faults = append(r.h.Faults, Fault{Kind: kind, Nodes: slices.Clone(nodes), Note: note, Began: min(began, now), At: now, End: -1})
	return len(r.h.Faults) - 1
}

// faultEnd records that undoing fault i begins now.
func (r *recorder) faultEnd(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h.Faults[i].End < 0 {
		r.h.Faults[i].End = time.Since(r.base)
	}
}

// acquisitions returns the locks acquired so far.
func (r *recorder) acquisitions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acquired
}

// acquiredAfter reports whether an acquire call got its lock after at.
func (r *recorder) acquiredAfter(at time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.h.Acquires {
		if a.OK && a.Acquired > at {
			return true
		}
	}
	return false
}

// counts returns the acquisitions so far and the faults injected, for
// progress lines.
func (r *recorder) counts() (acquired, attempts, faults int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.h.Acquires {
		if a.OK {
			acquired++
		}
	}
	return acquired, len(r.h.Acquires), len(r.h.Faults)
}

// history returns a copy of the history; faults still in force end now.
func (r *recorder) history() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{
		Acquires: slices.Clone(r.h.Acquires),
		Writes:   slices.Clone(r.h.Writes),
		Faults:   slices.Clone(r.h.Faults),
	}
	for i := range h.Faults {
		if h.Faults[i].End < 0 {
			h.Faults[i].End = time.Since(r.base)
		}
	}
	return h
}
