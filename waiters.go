package redlock

import (
	"hash/maphash"
	"sync"
	"time"
)

// waiters is a per-key FIFO of this process's goroutines waiting in Lock.
// It is a hint that saves backoff sleeps and keeps one process's goroutines
// fair to each other: the masters' quorum stays the authority, every waiter
// still acquires through it and keeps its own backoff timer, so a lost
// wake-up costs at most one backoff.
//
// The head is woken when a local holder of the key unlocks, and stays the
// head until it acquires or gives up. Lock calls that find a queue join it
// before their first attempt, so a goroutine that just unlocked cannot take
// the key back from those already waiting. A release that comes while a
// call's first attempt is out finds no one to wake: releases are counted
// per key (peek before the attempt, join after it), and a call that missed
// one tries again at once.
type waiters struct {
	mu   sync.Mutex           // guards everything below
	keys map[string][]*waiter // FIFO per key; a key with no waiter has no entry
	// freed marks, per key with waiters, the masters whose wake-ups came
	// since the waiters were last woken (see wakeFrom).
	freed map[string]*freed
	// releases counts local releases by a hash of the key, so that it takes
	// no memory per key: a release of another key in the same slot only
	// costs one early retry, as a spurious wake-up would.
	releases [64]uint64
	seed     maphash.Seed
	seeded   bool
}

// waiter is one goroutine waiting for a key.
type waiter struct {
	wake chan struct{} // holds at most one pending wake-up: try now
	// hint holds at most one pending hint: fewer than a quorum of masters
	// freed the key (see wakeFrom); the waiter's turn paces what it does.
	hint chan struct{}
}

// peek reports whether goroutines of this process wait for key, and the
// count of key's releases so far, for join.
func (ws *waiters) peek(key string) (queued bool, released uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.keys[key]) > 0, ws.releases[ws.slotLocked(key)]
}

// join appends a waiter for key at the tail of its queue. released is the
// count peek gave before the attempt that failed; missed reports that key
// was released since (a wake-up that found no one to wake) and w is the
// head, which should then try again without waiting.
func (ws *waiters) join(key string, released uint64) (w *waiter, missed bool) {
	w = &waiter{wake: make(chan struct{}, 1), hint: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.keys == nil {
		ws.keys = make(map[string][]*waiter)
	}
	q := append(ws.keys[key], w)
	ws.keys[key] = q
	// Only the head retries at once: behind it, a release did find someone
	// to wake (or the head missed it too, and retries itself).
	return w, q[0] == w && ws.releases[ws.slotLocked(key)] != released
}

// slotLocked is key's counter in releases.
func (ws *waiters) slotLocked(key string) int {
	if !ws.seeded {
		ws.seed, ws.seeded = maphash.MakeSeed(), true
	}
	return int(maphash.String(ws.seed, key) % uint64(len(ws.releases)))
}

// leave removes w from key's queue, and reports whether that emptied it. A
// wake-up or hint w had not used is passed on to the new head, so that
// leaving (on success or when ctx ended) never swallows it.
func (ws *waiters) leave(key string, w *waiter) (last bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.keys[key]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if len(q) == 0 {
			delete(ws.keys, key)
			if f := ws.freed[key]; f != nil {
				f.resetLocked()
				delete(ws.freed, key)
			}
			return true
		}
		ws.keys[key] = q
		select {
		case <-w.wake:
			if i == 0 {
				notify(q[0])
			}
		default:
		}
		select {
		case <-w.hint:
			if i == 0 {
				select {
				case q[0].hint <- struct{}{}:
				default:
				}
			}
		default:
		}
		return false
	}
	return false
}

// pause is how long w waits for a wake-up before it tries on its own: the
// backoff d at the head of the queue, and max behind it, where a holder in
// this process hands the key on in turn and trying early only loads the
// masters.
func (ws *waiters) pause(key string, w *waiter, d, max time.Duration) time.Duration {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.keys[key]; len(q) > 0 && q[0] != w {
		return max
	}
	return d
}

// wake wakes the head of key's queue, if any, and counts the release: a
// local holder released key.
func (ws *waiters) wake(key string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.releases[ws.slotLocked(key)]++
	if q := ws.keys[key]; len(q) > 0 {
		notify(q[0])
	}
}

// wakeFrom is wake for a wake-up from master i of n: another Redlock's
// release freed key there. The waiters are woken when a quorum (need) of
// masters did since the last time: their attempt can then succeed, where
// trying on the first could find the key still held on the slower masters.
// When fewer tell them within grace of the first (the key was freed on a
// minority only: rollbacks of a split vote, or another holder keeps the
// rest), the head gets a hint instead, which its turn paces (see [turn]).
func (ws *waiters) wakeFrom(key string, i, n, need int, grace time.Duration) {
	ws.mu.Lock()
	if len(ws.keys[key]) == 0 {
		ws.mu.Unlock()
		return
	}
	if ws.freed == nil {
		ws.freed = make(map[string]*freed)
	}
	f := ws.freed[key]
	if f == nil {
		f = &freed{seen: make([]bool, n)}
		ws.freed[key] = f
	}
	if f.count == 0 {
		gen := f.gen
		f.timer = time.AfterFunc(grace, func() { ws.wakeFreed(key, f, gen) })
	}
	if !f.seen[i] {
		f.seen[i] = true
		f.count++
	}
	full := f.count >= need
	if full {
		f.resetLocked()
	}
	ws.mu.Unlock()
	if full {
		ws.wake(key)
	}
}

// wakeFreed hints the head of key's queue when f still counts the
// wake-ups of generation gen: grace passed without a quorum of them.
func (ws *waiters) wakeFreed(key string, f *freed, gen uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.freed[key] != f || f.gen != gen || f.count == 0 {
		return
	}
	f.resetLocked()
	if q := ws.keys[key]; len(q) > 0 {
		select {
		case q[0].hint <- struct{}{}:
		default:
		}
	}
}

// freed counts, for a key, the masters whose wake-ups came since its
// waiters were last woken.
type freed struct {
	seen  []bool
	count int
	gen   uint64      // counts resets, so that a stale timer does nothing
	timer *time.Timer // wakes the waiters grace after the first wake-up
}

func (f *freed) resetLocked() {
	clear(f.seen)
	f.count = 0
	f.gen++
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
}

func notify(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // already has one pending
	}
}
