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
// subscription delivers, until Close.
//
// On a Redis Cluster (Traits.ShardChannels) channel is a
// [redlock.ShardChannel], in a slot: it is SSUBSCRIBEd on the shard that
// serves the slot, and subscribed again when that shard ends the
// subscription because the slot moved (rueidis follows the MOVED the old
// shard then answers) or when its connection breaks (a failover). A plain
// channel is refused there with an error wrapping errors.ErrUnsupported: a
// script's PUBLISH counts only the listeners of the shard that runs it.
//
// Close waits for a dial in progress, which opt.Dialer.Timeout bounds.
func (n *node) Subscribe(ctx context.Context, channel string, deliver func(redlock.Message)) (redlock.Subscription, error) {
	if n.cluster && !strings.HasSuffix(channel, "}") {
		return nil, fmt.Errorf("a Redis Cluster's PUBLISH from a script counts only the receivers on the node that runs it: wake-ups only on shard channels: %w", errors.ErrUnsupported)
	}
	s := &subscription{c: n.c, channel: channel, deliver: deliver, sharded: n.cluster,
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
	sharded bool // SSUBSCRIBE on a cluster (ssubscribe), not SUBSCRIBE
	// moved: the last sharded subscription was ended by its shard (the
	// slot moved away). Written by its Receive's goroutine before it
	// closes its channel, read by run's next attempt after.
	moved   bool
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
		stop, broken, err := s.subscribe()
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
		stop()
		for range broken { // closed once the hooks are not called again
		}
		if closed || !s.sleep(pause) {
			return
		}
	}
}

// subscribe makes one attempt, on a connection of its own: what closes
// it, the channel that reports its end (closed once the subscription
// delivers nothing more), and the master's answer.
func (s *subscription) subscribe() (func(), <-chan error, error) {
	if s.sharded {
		return s.ssubscribe()
	}
	dc, _ := s.c.Dedicate() // closed by run, not given back to the pool
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		select {
		case s.msgs <- m.Message:
		case <-s.ctx.Done():
		}
	}})
	_, err := result(dc.Do(s.ctx, dc.B().Subscribe().Channel(s.channel).Build()))
	return dc.Close, broken, err
}

// ssubscribe makes one attempt on a cluster: rueidis's Receive sends
// SSUBSCRIBE to the shard its slot map names for the channel's slot (and,
// answered MOVED, refreshes the map and sends it again where the slot went),
// and returns when the subscription ends: Close, a broken connection, or
// the shard's own SUNSUBSCRIBE when the slot moves away. The subscription
// is made when the shard confirms it (the subscription hook).
func (s *subscription) ssubscribe() (func(), <-chan error, error) {
	made := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(rueidis.WithOnSubscriptionHook(s.ctx, func(ps rueidis.PubSubSubscription) {
		if ps.Kind == "ssubscribe" {
			once.Do(func() { close(made) })
		}
	}))
	var on rueidis.Client = s.c
	if s.moved {
		s.moved = false
		if o := s.owner(ctx); o != nil {
			on = o
		}
	}
	ended := make(chan error, 1)
	go func() {
		defer close(ended)
		err := on.Receive(ctx, on.B().Ssubscribe().Channel(s.channel).Build(), func(m rueidis.PubSubMessage) {
			select {
			case s.msgs <- m.Message:
			case <-ctx.Done():
			}
		})
		if err == nil && ctx.Err() == nil {
			s.moved, err = true, errSlotMoved
		}
		ended <- err
	}()
	select {
	case <-made:
		return cancel, ended, nil
	case err := <-ended:
		cancel()
		if err == nil || errors.Is(err, errSlotMoved) {
			err = errors.New("the subscription ended before the shard confirmed it")
		}
		if re := (*rueidis.RedisError)(nil); errors.As(err, &re) {
			err = replyError(re.Error())
		}
		return cancel, closedErr(), err
	}
}

// owner returns the client of the cluster's node that serves the
// channel's slot, found by following MOVED replies to EXISTS of the
// channel (the shard that ended the subscription answers with the slot's
// new node), or nil when no node it knows tells (then the cluster client
// routes the SSUBSCRIBE by its slot map). After a slot moved, the cluster
// client's map is stale until its lazy refresh, which rueidis starts after
// a random delay of up to a second; its Receive, answered MOVED, waits for
// that refresh rather than following the redirect: 0.4-1.8 s without
// wake-ups on each move, where this takes a round trip or two.
func (s *subscription) owner(ctx context.Context) rueidis.Client {
	nodes := s.c.Nodes()
	for _, n := range nodes {
		for range 3 { // hops: a node that has not heard of the move yet points to the old shard
			err := n.Do(ctx, n.B().Exists().Key(s.channel).Build()).Error()
			if err == nil {
				return n
			}
			var re *rueidis.RedisError
			if !errors.As(err, &re) {
				break
			}
			addr, moved := re.IsMoved()
			next, known := nodes[addr]
			if !moved || !known {
				break
			}
			n = next
		}
	}
	return nil
}

// errSlotMoved: the shard ended the subscription without an error, which
// it does when the channel's slot moved to another shard.
var errSlotMoved = errors.New("the shard ended the subscription: its slot moved")

// closedErr returns a closed channel.
func closedErr() <-chan error {
	c := make(chan error)
	close(c)
	return c
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
