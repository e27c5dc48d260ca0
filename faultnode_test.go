package redlock

import (
	"context"
	"sync/atomic"
	"time"
)

// faultNode wraps a real master's Node and injects the faults a real server
// cannot be made to produce on demand. It passes the requests of a batch to
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
	during atomic.Pointer[func(*Request)]
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

func (f *faultNode) Exec(ctx context.Context, reqs []*Request) {
	for _, q := range reqs {
		if err := ctx.Err(); err != nil {
			q.Err = err
			continue
		}
		if during := f.during.Load(); during != nil {
			(*during)(q)
		}
		switch q.Op {
		case OpAcquire, OpAcquireFenced:
			f.acquire(ctx, q)
		case OpExtend:
			f.extends.Add(1)
			if f.extendFault(ctx, q) {
				continue
			}
			if q.Err = wait(ctx, &f.extendDelay); q.Err == nil {
				f.Node.Exec(ctx, []*Request{q})
			}
			f.extendsDone.Store(time.Now().UnixNano())
		case OpRelease:
			f.releases.Add(1)
			f.firstRelease.CompareAndSwap(0, time.Now().UnixNano())
			f.Node.Exec(ctx, []*Request{q})
		default:
			f.Node.Exec(ctx, []*Request{q})
		}
	}
}

// extendFault applies strayTTL and failTTL to the extend q and reports
// whether it did.
func (f *faultNode) extendFault(ctx context.Context, q *Request) bool {
	switch int64(q.TTL) {
	case f.failTTL.Load():
		q.Err = errReplyLost
		return true
	case f.strayTTL.Load():
		stray := *q
		d := time.Duration(f.strayDelay.Load())
		go func() {
			time.Sleep(d)
			f.Node.Exec(context.Background(), []*Request{&stray})
			f.strayed.Add(1)
		}()
		// The client sees the failure at once (a connection reset with the
		// request still on its way), not at the batch's deadline: that
		// deadline may be a later request's, queued in the same batch.
		q.OK, q.Err = false, errReplyLost
		return true
	}
	return false
}

func (f *faultNode) acquire(ctx context.Context, q *Request) {
	if q.Err = wait(ctx, &f.acquireDelay); q.Err != nil {
		return
	}
	if f.lateReply.Load() {
		f.Node.Exec(context.WithoutCancel(ctx), []*Request{q})
		<-ctx.Done()
		q.OK, q.Fence, q.Err = false, 0, ctx.Err()
		return
	}
	defer f.acquired.Add(1)
	f.Node.Exec(ctx, []*Request{q})
	if err := wait(ctx, &f.replyDelay); err != nil {
		q.OK, q.Fence, q.Err = false, 0, err
	}
}

// onSend makes f call fn as each request is sent.
func (f *faultNode) onSend(fn func(*Request)) { f.during.Store(&fn) }
