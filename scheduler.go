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
	// maxRound is the most locks renewed in one round; more due at once make
	// several rounds.
	maxRound = 1000
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
// and renews them in rounds: one phase with a request per lock to every
// master, through the same lanes as every other request, collected by a
// goroutine of the round's own for the duration of one round trip.
//
// An auto-extended lock is in at most one of three places: the queue (pos >
// 0), a round in flight (round != nil), or held by an Extend (held). A
// watched lock stays queued while an Extend runs, so that it still ends at
// Until. The queue is a min-heap of the locks themselves, ordered by due, so
// queuing allocates nothing.
type scheduler struct {
	r *Redlock

	// mu guards the fields below and, in every Lock of this Redlock, the
	// fields pos, due, round and held. Lock order: mu before a Lock's mu,
	// never the other way round.
	mu      sync.Mutex
	queue   lockQueue
	running bool          // the loop goroutine is alive
	closed  bool          // Close was called: nothing is queued any more
	wake    chan struct{} // capacity 1: the head of the queue changed, or closed
}

// round is one set of renewals sent together.
type round struct {
	locks []*Lock
	done  chan struct{} // closed once the outcome is applied to every lock
}

// place queues l at due (or, when due is zero, at the time its state asks
// for), or moves it there when it is queued already, if it still needs the
// scheduler: an auto-extended or watched lock that has not ended, is not in
// a round in flight and not held by an Extend.
func (s *scheduler) place(l *Lock, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.placeLocked(l, due)
}

// placeLocked is place with s.mu held.
func (s *scheduler) placeLocked(l *Lock, due time.Time) {
	if l.round != nil || l.held {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next, ok := l.nextDueLocked()
	if !ok {
		if l.pos > 0 {
			heap.Remove(&s.queue, l.pos-1)
		}
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
	if l.pos > 0 {
		heap.Fix(&s.queue, l.pos-1)
	} else {
		heap.Push(&s.queue, l)
	}
	if l.pos == 1 {
		notify(s.wake)
	}
	if !s.running {
		s.running = true
		s.r.bg.Add(1)
		go s.loop()
	}
}

// remove takes l out of the queue for good (Unlock).
func (s *scheduler) remove(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.pos > 0 {
		heap.Remove(&s.queue, l.pos-1)
	}
}

// hold keeps the scheduler away from l, an auto-extended lock, until
// unhold, and waits for the renewal round in flight, if any, or for ctx to
// end (l is then given back and ctx's error returned).
func (s *scheduler) hold(ctx context.Context, l *Lock) error {
	s.mu.Lock()
	if l.pos > 0 {
		heap.Remove(&s.queue, l.pos-1)
	}
	l.held = true
	rd := l.round
	s.mu.Unlock()
	if rd == nil {
		return nil
	}
	select {
	case <-rd.done:
		return nil
	case <-ctx.Done():
		s.unhold(l)
		return ctx.Err()
	}
}

// unhold gives l back to the scheduler after an Extend.
func (s *scheduler) unhold(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.held = false
	s.placeLocked(l, time.Time{})
}

// close ends every queued lock (auto-extended ones are lost; watched ones
// fall back to a timer of their own) and stops the loop. Rounds in flight
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
	notify(s.wake)
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
		rounds, expiring := s.takeDueLocked(now)
		s.r.bg.Add(len(rounds))
		s.mu.Unlock()
		for _, rd := range rounds {
			go s.renew(rd)
		}
		for _, l := range expiring {
			s.expire(l, now)
		}
	}
}

// takeDueLocked pops the locks due at now: auto-extended ones (also those
// due within the coalescing window) into rounds, watched ones to expire.
func (s *scheduler) takeDueLocked(now time.Time) (rounds []*round, expiring []*Lock) {
	horizon := now.Add(min(maxCoalesce, s.queue[0].cfg.ttl/30))
	var rd *round
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
		if rd == nil || len(rd.locks) == maxRound {
			rd = &round{locks: make([]*Lock, 0, min(len(s.queue)+1, maxRound)), done: make(chan struct{})}
			rounds = append(rounds, rd)
		}
		rd.locks = append(rd.locks, l)
		l.round = rd
	}
	return rounds, expiring
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

// renew sends one round of renewals and applies the outcome to each lock: a
// new Until, a retry after a short pause, or the lock lost.
func (s *scheduler) renew(rd *round) {
	defer s.r.bg.Done()
	defer close(rd.done)
	r := s.r
	start, now := r.clock.Now(), time.Now()
	reqs := make([]request, 0, len(rd.locks))
	sent := make([]*Lock, 0, len(rd.locks))
	cfgs := make([]config, 0, len(rd.locks))
	// The round ends at the node timeout, or when the first of its locks'
	// validity does: a quorum after that is no use to it, and its loss must
	// be known by then.
	var deadline time.Time
	for _, l := range rd.locks {
		l.mu.Lock()
		switch {
		case l.released || l.end != nil:
		default:
			cfg := l.cfgLocked()
			end, ok := l.deadlineLocked(now, l.until, cfg.nodeTimeout)
			if !ok {
				l.endLocked(lost(l.key, errExpired))
				break
			}
			reqs = append(reqs, l.request(reqExtend, cfg.ttl, 0))
			sent = append(sent, l)
			cfgs = append(cfgs, cfg)
			if deadline.IsZero() || end.Before(deadline) {
				deadline = end
			}
		}
		l.mu.Unlock()
	}

	dues := make([]time.Time, len(sent))
	var spread []int // the renewed locks not confirmed by every master
	if len(reqs) > 0 {
		for _, l := range sent {
			l.mu.Lock()
			l.last = later(l.last, deadline)
			l.mu.Unlock()
		}
		p := r.startPhase(context.Background(), deadline, true, reqs...)
		_ = p.collect(context.Background()) // no caller to stop waiting
		for j, l := range sent {
			l.mu.Lock()
			var err error
			dues[j], err = l.renewedLocked(&p.tallies[j], &cfgs[j], start)
			if err == nil && p.tallies[j].succeeded < p.n {
				spread = append(spread, j)
			}
			l.observedLocked(context.Background(), PhaseRenew, p, j, start, err)
			l.mu.Unlock()
		}
		if len(spread) > 0 {
			r.bg.Add(1)
			go s.spreadAfter(p, sent, spread)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range rd.locks {
		l.round = nil
	}
	for j, l := range sent {
		if !dues[j].IsZero() {
			s.placeLocked(l, dues[j])
		}
	}
}

// renewedLocked applies one renewal's tally to l (l.mu held) and returns
// when to renew next, or the zero Time when the lock has ended, and the
// renewal's error.
func (l *Lock) renewedLocked(t *tally, cfg *config, start time.Time) (time.Time, error) {
	if l.released || l.end != nil {
		return time.Time{}, l.end
	}
	err := l.extendedLocked(t, nil, cfg, start)
	eff := l.effLocked(cfg) // the TTL Until was computed from
	if err == nil {
		return renewalDue(l.until, &eff), nil
	}
	if errors.Is(err, ErrNotHeld) { // gone from a quorum, or too late: retrying cannot help
		l.endLocked(lost(l.key, err))
		return time.Time{}, err
	}
	retry := l.r.clock.Now().Add(min(max(eff.ttl/30, cfg.minBackoff), cfg.maxBackoff))
	if !retry.Add(cfg.nodeTimeout).Before(l.until) {
		l.endLocked(lost(l.key, fmt.Errorf("%w: %w", errRenewFailed, err)))
		return time.Time{}, err
	}
	return retry, err
}

// spreadAfter waits for the replies of round p that came after its
// decision (bounded by its deadline), and spreads each renewed lock sent[j]
// for j in js that some master refused: see spreadLocked.
func (s *scheduler) spreadAfter(p *phase, sent []*Lock, js []int) {
	defer s.r.bg.Done()
	// collect has returned: the calls it did not count are still to come
	// on p.replies, each once (every call is delivered, by the deadline at
	// the latest).
	open := 0
	for i := range p.calls {
		if !p.calls[i].answered {
			open++
		}
	}
	for ; open > 0; open-- {
		<-p.replies
	}
	for _, j := range js {
		refused := false
		for i := range p.n {
			c := &p.calls[j*p.n+i]
			refused = refused || (c.Err == nil && !c.OK)
		}
		if !refused {
			continue
		}
		// Not while an Extend runs: the extend to TTL T it sends must not
		// be followed on a master by this one to another TTL (an Extend
		// that ended has set the TTL this one uses).
		l := sent[j]
		s.mu.Lock()
		if !l.held {
			l.mu.Lock()
			l.spreadLocked()
			l.mu.Unlock()
		}
		s.mu.Unlock()
	}
}

// spreadLocked follows a renewal of l that a quorum of masters holding its
// value confirmed while some master refused (l.mu held, and r.sched.mu, with
// no Extend of l running): it sets the key to l's value for l's TTL on the
// masters where the key is gone (restarted empty, or freed by a contender
// that won it in a split acquire and rolled back), and extends it again
// where it is l's (lua/extend.lua with its renew flag). Without it a lock
// taken on a bare quorum stays on those masters, and a fault on any one of
// them loses it while a majority is healthy.
//
// Nothing waits for it or counts it: a master it set counts at the next
// renewal, which finds l's value there. So a renewal still succeeds only
// where a quorum of masters kept l's value, and a lock whose value is gone
// from a quorum is still lost (it is only sent after a quorum confirmed
// l's value). It is queued under l.mu, after the check that l is neither
// released nor ended, so it goes into every lane ahead of the release of an
// Unlock (which marks l released under l.mu first). Owned locks do without.
func (l *Lock) spreadLocked() {
	if l.released || l.end != nil || l.owner != "" || l.r.closed.Load() {
		return
	}
	cfg := l.cfgLocked()
	d, ok := l.deadlineLocked(time.Now(), l.until, cfg.nodeTimeout)
	if !ok {
		return
	}
	l.last = later(l.last, d)
	q := l.request(reqExtend, cfg.ttl, 0)
	q.Repair = true
	l.r.startPhase(context.Background(), d, false, q)
}

// renewalDue is when to renew a lock valid until until: a third of the TTL
// after the start of the acquire or extend that set until. cfg's TTL must be
// the one until was computed from (capped: see Lock.effLocked).
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
