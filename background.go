package redlock

import (
	"sync"
	"sync/atomic"
)

// background counts the requests still running in the background (replies
// to collect, releases to slow masters, rollbacks, renewals) so that Close
// can wait for them. It is a sync.WaitGroup that may be added to while Wait
// runs: locks already held can still be released and extended after Close,
// and a shutdown need not wait for its workers before calling it, so an Add
// from zero can meet a Wait — which a WaitGroup forbids (it panics "reused
// before previous Wait has returned", or the race detector reports it).
// Wait returns once the count is zero; requests added while it waits are
// waited for too, those added after it returned are not.
type background struct {
	n    atomic.Int64
	mu   sync.Mutex
	idle chan struct{} // made by a Wait that found requests running; closed at zero
}

func (b *background) Add(d int) { b.n.Add(int64(d)) }

func (b *background) Done() {
	if b.n.Add(-1) != 0 {
		return
	}
	b.mu.Lock()
	if b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
}

func (b *background) Wait() {
	for {
		b.mu.Lock()
		if b.n.Load() == 0 {
			b.mu.Unlock()
			return
		}
		if b.idle == nil {
			b.idle = make(chan struct{})
		}
		idle := b.idle
		b.mu.Unlock()
		<-idle
	}
}
