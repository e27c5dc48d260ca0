package redlock

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// faultNode wraps a real master's Node and injects the faults a real server
// cannot be made to produce on demand. It passes the commands of a batch to
// the wrapped Node one at a time, in order, so that each can be held back or
// have its reply withheld on its own; the batch's context bounds every wait.
// The zero faults pass every request through.
type faultNode struct {
	Node
	// acquireDelay holds each acquire back (as a slow network would) before
	// it is sent.
	acquireDelay atomic.Int64
	// lateReply sends each acquire detached from the context, so it lands,
	// then withholds the reply until the context ends: a SET that landed
	// although the client saw a timeout.
	lateReply atomic.Bool
	// replyDelay holds each acquire's reply back after the master answered
	// (as a slow return path would).
	replyDelay atomic.Int64
	// acquired counts the acquires that returned.
	acquired atomic.Int64
	// releases counts the releases sent to the master.
	releases atomic.Int64
	// extendDelay holds each extend back before it is sent.
	extendDelay atomic.Int64
	// extends counts the extends sent; extendsDone is when the last one
	// returned, and firstRelease when the first release was sent
	// (UnixNano; 0: never).
	extends                   atomic.Int64
	extendsDone, firstRelease atomic.Int64
	// strayTTL, when set, makes each extend to that TTL (in ns) a straggler:
	// held back for strayDelay and then sent detached from the context,
	// while the caller sees the context's error when it ends — a request
	// that timed out and went on in the network after go-redis dropped its
	// connection, landing after the requests sent later. strayed counts the
	// stragglers that landed.
	strayTTL, strayDelay, strayed atomic.Int64
	// failTTL, when set, fails each extend to that TTL (in ns) without
	// sending it.
	failTTL atomic.Int64
	// during, when set, runs as each request of its Op is sent (a clock
	// that jumps while a request is in flight).
	during atomic.Pointer[func(*request)]
}

func wrap(n Node) *faultNode { return &faultNode{Node: n} }

// wait sleeps for the delay in d, or until ctx ends.
func wait(ctx context.Context, d0 *atomic.Int64) error {
	d := time.Duration(d0.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *faultNode) Exec(ctx context.Context, cmds []*Command) {
	for _, c := range cmds {
		if err := ctx.Err(); err != nil {
			c.Err = err
			continue
		}
		q := c.req
		if q == nil { // a WAIT
			f.Node.Exec(ctx, []*Command{c})
			continue
		}
		if during := f.during.Load(); during != nil {
			(*during)(q)
		}
		switch q.Op {
		case reqAcquire, reqAcquireFenced:
			f.acquire(ctx, c)
		case reqExtend:
			f.extends.Add(1)
			if f.extendFault(c) {
				continue
			}
			if c.Err = wait(ctx, &f.extendDelay); c.Err == nil {
				f.Node.Exec(ctx, []*Command{c})
			}
			f.extendsDone.Store(time.Now().UnixNano())
		case reqRelease:
			f.releases.Add(1)
			f.firstRelease.CompareAndSwap(0, time.Now().UnixNano())
			f.Node.Exec(ctx, []*Command{c})
		default:
			f.Node.Exec(ctx, []*Command{c})
		}
	}
}

// extendFault applies strayTTL and failTTL to the extend c and reports
// whether it did.
func (f *faultNode) extendFault(c *Command) bool {
	switch int64(c.req.TTL) {
	case f.failTTL.Load():
		c.Err = errReplyLost
		return true
	case f.strayTTL.Load():
		stray := &Command{Args: slices.Clone(c.Args), Key: c.Key, Keys: c.Keys}
		d := time.Duration(f.strayDelay.Load())
		go func() {
			time.Sleep(d)
			f.Node.Exec(context.Background(), []*Command{stray})
			f.strayed.Add(1)
		}()
		// The client sees the failure at once (a connection reset with the
		// request still on its way), not at the batch's deadline: that
		// deadline may be a later request's, queued in the same batch.
		c.Reply, c.Err = nil, errReplyLost
		return true
	}
	return false
}

func (f *faultNode) acquire(ctx context.Context, c *Command) {
	if c.Err = wait(ctx, &f.acquireDelay); c.Err != nil {
		return
	}
	if f.lateReply.Load() {
		f.Node.Exec(context.WithoutCancel(ctx), []*Command{c})
		<-ctx.Done()
		c.Reply, c.Err = nil, ctx.Err()
		return
	}
	defer f.acquired.Add(1)
	f.Node.Exec(ctx, []*Command{c})
	if err := wait(ctx, &f.replyDelay); err != nil {
		c.Reply, c.Err = nil, err
	}
}

// onSend makes f call fn as each request is sent.
func (f *faultNode) onSend(fn func(*request)) { f.during.Store(&fn) }
