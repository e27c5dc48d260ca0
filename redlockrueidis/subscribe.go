package redlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
)

// Subscribe subscribes channel on the master over a connection of its own,
// and subscribes again, on a new connection, each time that one breaks:
// deliver then gets a Message with Resubscribed set. One goroutine per
// subscription delivers, until Close. On a Redis Cluster it returns an
// error wrapping errors.ErrUnsupported (see [NewNode]).
//
// Close waits for a dial in progress, which opt.Dialer.Timeout bounds.
func (n *node) Subscribe(ctx context.Context, channel string, deliver func(redlock.Message)) (redlock.Subscription, error) {
	if n.cluster {
		return nil, fmt.Errorf("a Redis Cluster's PUBLISH from a script counts only the receivers on the node that runs it: no wake-ups: %w", errors.ErrUnsupported)
	}
	s := &subscription{c: n.c, channel: channel, deliver: deliver,
		done: make(chan struct{}), msgs: make(chan string), waiting: true, first: make(chan error, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.run()
	select {
	case err := <-s.first:
		return s.outcome(err)
	case <-ctx.Done():
		s.mu.Lock()
		if s.waiting { // the first attempt goes on, and tells deliver when it is made
			s.waiting = false
			s.mu.Unlock()
			return s, ctx.Err()
		}
		s.mu.Unlock()
		return s.outcome(<-s.first)
	}
}

// outcome is what Subscribe returns when the first attempt ended with err:
// the subscription, and no Subscription when the master refused it.
func (s *subscription) outcome(err error) (redlock.Subscription, error) {
	if err != nil && refused(err) {
		_ = s.Close()
		return nil, err
	}
	return s, err
}

// refused reports whether err is the master's refusal to subscribe (an
// ACL's NOPERM, an unknown command), which subscribing again does not mend.
func refused(err error) bool {
	var re replyError
	return errors.As(err, &re) && (strings.Contains(string(re), "NOPERM") || strings.HasPrefix(string(re), "ERR "))
}

// retryMin and retryMax bound the pause after a failed attempt to
// subscribe (doubling from one to the next): a master that is down costs an
// attempt a second. After a break of a subscription that was made, the next
// attempt is at once: the master is likely up (it dropped the connection,
// or restarted), and waiters listen again sooner.
const (
	retryMin = 50 * time.Millisecond
	retryMax = time.Second
)

// subscription is the [redlock.Subscription] Subscribe returns. Its
// goroutine (run) makes the subscription, again after each break, and is
// the only one that calls deliver.
type subscription struct {
	c       rueidis.Client
	channel string
	deliver func(redlock.Message)
	ctx     context.Context // ends with Close
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returned
	msgs    chan string   // the hooks' messages, which run delivers

	mu      sync.Mutex // guards waiting
	waiting bool       // Subscribe waits for the first attempt's outcome
	first   chan error // that outcome, once
}

// Close ends the subscription and waits for its goroutine: deliver is not
// called once it returned.
func (s *subscription) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// run subscribes, delivers, and subscribes again after a break, until
// Close (or a refusal that Subscribe reports).
func (s *subscription) run() {
	defer close(s.done)
	var pause time.Duration
	for {
		dc, broken, err := s.subscribe()
		told := s.tell(err)
		closed := false
		switch {
		case err == nil:
			if !told { // Subscribe returned without it: made again
				s.deliver(redlock.Message{Resubscribed: true})
			}
			pause = 0 // a break of a subscription that was made: again at once
			closed = s.listen(broken)
		case told && refused(err):
			closed = true // Subscribe closes it
		default:
			pause = min(max(2*pause, retryMin), retryMax)
		}
		dc.Close()
		for range broken { // closed once the hooks are not called again
		}
		if closed || !s.sleep(pause) {
			return
		}
	}
}

// subscribe makes one attempt, on a connection of its own: the
// connection, the channel its hooks report its end on, and the master's
// answer.
func (s *subscription) subscribe() (rueidis.DedicatedClient, <-chan error, error) {
	dc, _ := s.c.Dedicate() // closed by run, not given back to the pool
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		select {
		case s.msgs <- m.Message:
		case <-s.ctx.Done():
		}
	}})
	_, err := result(dc.Do(s.ctx, dc.B().Subscribe().Channel(s.channel).Build()))
	return dc, broken, err
}

// tell hands err, the outcome of an attempt, to Subscribe when it still
// waits for one, and reports whether it did.
func (s *subscription) tell(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waiting {
		return false
	}
	s.waiting = false
	s.first <- err
	return true
}

// listen delivers the subscription's messages until it breaks (false) or
// Close (true).
func (s *subscription) listen(broken <-chan error) (closed bool) {
	for {
		select {
		case m := <-s.msgs:
			s.deliver(redlock.Message{Payload: m})
		case <-broken:
			return false
		case <-s.ctx.Done():
			return true
		}
	}
}

// sleep waits d, or until Close (false).
func (s *subscription) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}
