package main

import (
	"context"
	"errors"
	"time"

	"github.com/redlock/redlock"
)

// The lock-keeping part of exec, in one place: what the acquire asks for and
// how the lock is kept while the command runs.
//
// TODO(watchdog): once the root package has WithAutoExtend and Lock.Done, make
// keepOptions return WithAutoExtend() and keepLock return l.Done() with a
// no-op stop (Unlock ends the renewal), and delete extendLoop.

// keepOptions are the acquire options that keeping the lock needs.
func keepOptions() []redlock.Option { return nil }

// keepLock keeps l extended until stop is called; lost is closed if the lock
// could not be kept.
func keepLock(l *redlock.Lock) (lost <-chan struct{}, stop func()) {
	return extendLoop(l)
}

// extendLoop extends l every TTL/3; after a failure it retries every TTL/10
// and gives up when less than that is left of the validity (or a quorum no
// longer holds the key), which closes lost.
func extendLoop(l *redlock.Lock) (lost <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ttl := l.TTL()
		retry := max(ttl/10, time.Millisecond)
		t := time.NewTimer(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := l.Extend(ctx, ttl)
			switch {
			case err == nil:
				t.Reset(ttl / 3)
			case ctx.Err() != nil:
				return
			case errors.Is(err, redlock.ErrNotHeld) || time.Until(l.Until()) <= retry:
				close(ch)
				return
			default:
				t.Reset(retry)
			}
		}
	}()
	return ch, func() { cancel(); <-done }
}
