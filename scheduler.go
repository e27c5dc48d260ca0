package redlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	// maxBatch is the most renewals sent to one master in one request
	// (pipeline); more locks due at once make several batches.
	maxBatch = 1000
	// maxCoalesce is how much earlier than due a renewal may be sent, to join
	// the renewals due just before it; for short TTLs it is TTL/30 instead.
	maxCoalesce = 50 * time.Millisecond
)

var (
	errExpired     = errors.New("validity ran out")
	errRenewFailed = errors.New("renewals failed until the validity was nearly spent")
)

// scheduler is the one renewal scheduler of a Redlock. It renews the
// auto-extended locks ([WithAutoExtend]) and ends, at their Until, the locks
// without auto-extend whose Done or Context someone asked for. No goroutine
// or timer per lock: one goroutine (loop) runs while any lock is queued — it
// starts with the first and exits when the queue is empty or the Redlock is
// closed — sleeps until the earliest due time, takes every lock due by then,
// and sends their renewals in batches, one request per master per batch
// ([BatchExtender]), each batch in a goroutine of its own for the duration of
// one round trip.
//
// A lock is in at most one of three places: the queue (pos > 0), a batch in
// flight (batch != nil), or held by an Extend (held). The queue is a min-heap
// of the locks themselves, ordered by due, so queuing allocates nothing.
type scheduler struct {
	r *Redlock

	// mu guards the fields below and, in every Lock of this Redlock, the
	// fields pos, due, batch and held. Lock order: mu before a Lock's mu,
	// never the other way round.
	mu      sync.Mutex
	queue   lockQueue
	running bool          // the loop goroutine is alive
	closed  bool          // Close was called: nothing is queued any more
	wake    chan struct{} // capacity 1: the head of the queue changed, or closed
}

// batch is one round of renewals sent together.
type batch struct {
	start time.Time
	locks []*Lock
	done  chan struct{} // closed once every master answered or timed out
}

// place queues l at due (or, when due is zero, at the time its state asks
// for) if it still needs the scheduler: an auto-extended or watched lock that
// is neither ended nor already queued, in flight or held by an Extend.
func (s *scheduler) place(l *Lock, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.placeLocked(l, due)
}

// placeLocked is place with s.mu held.
func (s *scheduler) placeLocked(l *Lock, due time.Time) {
	if l.pos > 0 || l.batch != nil || l.held {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next, ok := l.nextDueLocked()
	if !ok {
		return
	}
	if s.closed {
		l.closedLocked()
		return
	}
	if !due.IsZero() {
		next = due
	}
	l.due = next
	heap.Push(&s.queue, l)
	if l.pos == 1 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	if !s.running {
		s.running = true
		s.r.bg.Add(1)
		go s.loop()
	}
}

// remove takes l out of the queue and returns the batch it is in flight in,
// if any. With hold, l stays out of the scheduler's hands until unhold.
func (s *scheduler) remove(l *Lock, hold bool) *batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.pos > 0 {
		heap.Remove(&s.queue, l.pos-1)
	}
	if hold {
		l.held = true
	}
	return l.batch
}

// unhold gives l back to the scheduler after an Extend.
func (s *scheduler) unhold(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.held = false
	s.placeLocked(l, time.Time{})
}

// close ends every queued lock (auto-extended ones are lost; watched ones
// fall back to a timer of their own) and stops the loop. Batches in flight
// end theirs when they return.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, l := range s.queue {
		l.pos = 0
		l.mu.Lock()
		l.closedLocked()
		l.mu.Unlock()
	}
	s.queue = nil
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop sleeps until the earliest due time and dispatches what is due.
func (s *scheduler) loop() {
	defer s.r.bg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		if s.closed || len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		now := s.r.clock.Now()
		if wait := s.queue[0].due.Sub(now); wait > 0 {
			s.mu.Unlock()
			t.Reset(wait)
			select {
			case <-t.C:
			case <-s.wake:
			}
			continue
		}
		batches, expiring := s.takeDueLocked(now)
		s.mu.Unlock()
		for _, b := range batches {
			s.r.bg.Add(1)
			go s.renew(b)
		}
		for _, l := range expiring {
			s.expire(l, now)
		}
	}
}

// takeDueLocked pops the locks due at now: auto-extended ones (also those
// due within the coalescing window) into batches, watched ones to expire.
func (s *scheduler) takeDueLocked(now time.Time) (batches []*batch, expiring []*Lock) {
	horizon := now.Add(min(maxCoalesce, s.queue[0].cfg.ttl/30))
	var b *batch
	for len(s.queue) > 0 {
		l := s.queue[0]
		if l.due.After(now) && (!l.cfg.autoExtend || l.due.After(horizon)) {
			break
		}
		heap.Pop(&s.queue)
		if !l.cfg.autoExtend {
			expiring = append(expiring, l)
			continue
		}
		if b == nil || len(b.locks) == maxBatch {
			b = &batch{start: now, locks: make([]*Lock, 0, min(len(s.queue)+1, maxBatch)), done: make(chan struct{})}
			batches = append(batches, b)
		}
		b.locks = append(b.locks, l)
		l.batch = b
	}
	return batches, expiring
}

// expire ends a watched lock whose Until has passed, or queues it again at
// its Until (an Extend moved it).
func (s *scheduler) expire(l *Lock, now time.Time) {
	l.mu.Lock()
	if !l.released && l.end == nil && !now.Before(l.until) {
		l.endLocked(lost(l.key, errExpired))
	}
	l.mu.Unlock()
	s.place(l, time.Time{})
}

// renew sends one batch of renewals to every master and applies the outcome
// to each lock: a new Until, a retry after a short pause, or the lock lost.
func (s *scheduler) renew(b *batch) {
	defer s.r.bg.Done()
	defer close(b.done)
	r := s.r
	reqs := make([]ExtendRequest, 0, len(b.locks))
	sent := make([]*Lock, 0, len(b.locks))
	cfgs := make([]config, 0, len(b.locks))
	// The batch ends at the node timeout, or when the first of its locks'
	// validity does: a quorum after that is no use to it, and its loss must
	// be known by then.
	var deadline time.Time
	var postponed []*Lock
	for _, l := range b.locks {
		l.mu.Lock()
		switch {
		case l.released || l.end != nil:
		case l.acquireLocked() != nil && l.acq.running.Load() > 0:
			// An acquire request is still in flight: renew after it, so
			// each master sees the SET before the extend.
			postponed = append(postponed, l)
		case !b.start.Before(l.until):
			l.endLocked(lost(l.key, errExpired))
		default:
			cfg := l.cfgLocked()
			reqs = append(reqs, ExtendRequest{Key: l.key, Value: l.value, TTL: cfg.ttl})
			sent = append(sent, l)
			cfgs = append(cfgs, cfg)
			if end := earlier(b.start.Add(cfg.nodeTimeout), l.until); deadline.IsZero() || end.Before(deadline) {
				deadline = end
			}
		}
		l.mu.Unlock()
	}

	oks := make([][]bool, len(r.nodes))
	errs := make([][]error, len(r.nodes))
	if len(reqs) > 0 {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var wg sync.WaitGroup
		for i, n := range r.nodes {
			wg.Go(func() { oks[i], errs[i] = extendOn(ctx, n, reqs) })
		}
		wg.Wait()
		cancel()
	}

	now := r.clock.Now()
	dues := make([]time.Time, len(sent))
	for j, l := range sent {
		t := newTally(len(r.nodes), r.quorum)
		for i, n := range r.nodes {
			t.add(reply{node: i, ok: oks[i][j], err: errs[i][j]}, n)
		}
		l.mu.Lock()
		dues[j] = l.renewedLocked(&t, &cfgs[j], b.start, now)
		l.mu.Unlock()
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range b.locks {
		l.batch = nil
	}
	for j, l := range sent {
		if !dues[j].IsZero() {
			s.placeLocked(l, dues[j])
		}
	}
	for _, l := range postponed {
		s.placeLocked(l, now.Add(l.cfg.minBackoff))
	}
}

// renewedLocked applies one renewal's tally to l (l.mu held) and returns
// when to renew next, or the zero Time when the lock has ended.
func (l *Lock) renewedLocked(t *tally, cfg *config, start, now time.Time) time.Time {
	if l.released || l.end != nil {
		return time.Time{}
	}
	until, err := extended(t, nil, cfg, l.key, start, now, l.until)
	if err == nil {
		l.until = until
		return renewalDue(until, cfg)
	}
	if errors.Is(err, ErrNotHeld) { // gone from a quorum, or too late: retrying cannot help
		l.endLocked(lost(l.key, err))
		return time.Time{}
	}
	retry := now.Add(min(max(cfg.ttl/30, cfg.minBackoff), cfg.maxBackoff))
	if !retry.Add(cfg.nodeTimeout).Before(l.until) {
		l.endLocked(lost(l.key, fmt.Errorf("%w: %w", errRenewFailed, err)))
		return time.Time{}
	}
	return retry
}

// renewalDue is when to renew a lock valid until until: a third of the TTL
// after the start of the acquire or extend that set until.
func renewalDue(until time.Time, cfg *config) time.Time {
	start := until.Add(-(cfg.ttl - cfg.drift()))
	return start.Add(cfg.ttl / 3)
}

// lockQueue is a min-heap of locks on their due time; each lock keeps its
// position (1-based; 0 when not queued) so it can be removed.
type lockQueue []*Lock

func (q lockQueue) Len() int           { return len(q) }
func (q lockQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q lockQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].pos, q[j].pos = i+1, j+1
}

func (q *lockQueue) Push(x any) {
	l := x.(*Lock)
	*q = append(*q, l)
	l.pos = len(*q)
}

func (q *lockQueue) Pop() any {
	old := *q
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	l.pos = 0
	return l
}
