package redlock

import (
	"context"
	"sync/atomic"
	"time"
)

// faultNode wraps a real master's Node and injects the faults a real server
// cannot be made to produce on demand. The zero faults pass every call through.
type faultNode struct {
	Node
	// acquireDelay holds each acquire back (as a slow network would) before
	// it is sent; the context still bounds the wait.
	acquireDelay atomic.Int64
	// lateReply sends each acquire detached from the context, so it lands,
	// then withholds the reply until the context ends: a SET that landed
	// although the client saw a timeout.
	lateReply atomic.Bool
	// replyDelay holds each acquire's reply back after the master answered
	// (as a slow return path would); the context still bounds the wait.
	replyDelay atomic.Int64
	// acquired counts the Acquire calls that returned.
	acquired atomic.Int64
	// releases counts the releases sent to the master.
	releases atomic.Int64
	// extendDelay holds each Extend and ExtendBatch back before it is sent;
	// the context still bounds the wait.
	extendDelay atomic.Int64
	// extendsDone is when the last Extend or ExtendBatch returned, and
	// firstRelease when the first Release was sent (UnixNano; 0: never).
	extendsDone, firstRelease atomic.Int64
}

func wrap(n Node) *faultNode { return &faultNode{Node: n} }

func (f *faultNode) hold(ctx context.Context) error { return wait(ctx, &f.acquireDelay) }

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

func (f *faultNode) Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if err := f.hold(ctx); err != nil {
		return false, err
	}
	if f.lateReply.Load() {
		_, _ = f.Node.Acquire(context.WithoutCancel(ctx), key, value, ttl)
		<-ctx.Done()
		return false, ctx.Err()
	}
	defer f.acquired.Add(1)
	ok, err := f.Node.Acquire(ctx, key, value, ttl)
	if werr := wait(ctx, &f.replyDelay); werr != nil {
		return false, werr
	}
	return ok, err
}

func (f *faultNode) AcquireFenced(ctx context.Context, key, value string, ttl time.Duration) (uint64, error) {
	if err := f.hold(ctx); err != nil {
		return 0, err
	}
	if f.lateReply.Load() {
		_, _ = f.Node.AcquireFenced(context.WithoutCancel(ctx), key, value, ttl)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	ok, err := f.Node.AcquireFenced(ctx, key, value, ttl)
	if werr := wait(ctx, &f.replyDelay); werr != nil {
		return 0, werr
	}
	return ok, err
}

func (f *faultNode) Release(ctx context.Context, key, value string) (bool, error) {
	f.releases.Add(1)
	f.firstRelease.CompareAndSwap(0, time.Now().UnixNano())
	return f.Node.Release(ctx, key, value)
}

func (f *faultNode) Extend(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	defer func() { f.extendsDone.Store(time.Now().UnixNano()) }()
	if err := wait(ctx, &f.extendDelay); err != nil {
		return false, err
	}
	return f.Node.Extend(ctx, key, value, ttl)
}

// ExtendBatch delays the batch, then sends it as the wrapped Node would (in
// a pipeline when it is a BatchExtender).
func (f *faultNode) ExtendBatch(ctx context.Context, reqs []ExtendRequest) ([]bool, []error) {
	defer func() { f.extendsDone.Store(time.Now().UnixNano()) }()
	if err := wait(ctx, &f.extendDelay); err != nil {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = err
		}
		return make([]bool, len(reqs)), errs
	}
	return extendOn(ctx, f.Node, reqs)
}

// plainNode hides every method but the Node interface's: auto-extend then
// falls back to one Extend per lock.
type plainNode struct{ Node }
