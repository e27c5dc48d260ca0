package redlock

import (
	"sync"
	"time"
)

// waiters is a per-key FIFO of this process's goroutines waiting in Lock.
// It is only a hint that saves backoff sleeps and keeps one process's
// goroutines fair to each other: the masters' quorum stays the authority on
// who holds a key, every waiter still acquires through it, and every waiter
// also keeps its own backoff timer, so a lost wake-up (or a holder in
// another process) costs at most one backoff, never a deadlock.
//
// The head of a key's queue is woken when a local holder of the key unlocks;
// it stays the head until it acquires or gives up, so an attempt that loses
// to another process does not cost it its place. Lock calls that find a
// queue join it before their first attempt, so a goroutine that just
// unlocked cannot take the key straight back from those already waiting.
type waiters struct {
	mu   sync.Mutex           // guards keys and every queue in it
	keys map[string][]*waiter // FIFO per key; a key with no waiter has no entry
}

// waiter is one goroutine waiting for a key.
type waiter struct {
	wake chan struct{} // holds at most one pending wake-up
}

// queued reports whether goroutines of this process wait for key.
func (ws *waiters) queued(key string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.keys[key]) > 0
}

// join appends a waiter for key at the tail of its queue.
func (ws *waiters) join(key string) *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.keys == nil {
		ws.keys = make(map[string][]*waiter)
	}
	ws.keys[key] = append(ws.keys[key], w)
	return w
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
				notify(q[0])
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

// wake wakes the head of key's queue, if any: a local holder released key.
func (ws *waiters) wake(key string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.keys[key]; len(q) > 0 {
		notify(q[0])
	}
}

func notify(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // already has one pending
	}
}

// wait blocks until w is woken, d has passed, or done is closed; it returns
// false in the last case.
func (w *waiter) wait(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.wake:
		return true
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
