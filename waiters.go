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
	w = &waiter{wake: make(chan struct{}, 1)}
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

// leave removes w from key's queue. A wake-up w had not used is passed on
// to the new head, so that leaving (on success or when ctx ended) never
// swallows it.
func (ws *waiters) leave(key string, w *waiter) {
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
			return
		}
		ws.keys[key] = q
		select {
		case <-w.wake:
			if i == 0 {
				notify(q[0].wake)
			}
		default:
		}
		return
	}
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
		notify(q[0].wake)
	}
}

// notify leaves a notice in ch, a channel of capacity 1, unless one is
// pending already.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
