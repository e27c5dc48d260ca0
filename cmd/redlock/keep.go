package main

import "github.com/redlock/redlock"

// The lock-keeping part of exec, in one place: what the acquire asks for and
// how the lock is kept while the command runs. The Redlock's watchdog
// (WithAutoExtend) renews the lock at TTL/3 and closes Done when it is lost;
// Unlock stops it.

// keepOptions are the acquire options that keeping the lock needs.
func keepOptions() []redlock.Option { return []redlock.Option{redlock.WithAutoExtend()} }

// keepLock returns a channel closed when l is lost, and a function that stops
// keeping it (Unlock does that already: nothing to do).
func keepLock(l *redlock.Lock) (lost <-chan struct{}, stop func()) {
	return l.Done(), func() {}
}
