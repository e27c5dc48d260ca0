package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipelinedNode is the Node [NewNode] returns: a redisNode whose requests go
// through one batcher per master, so that requests from concurrent calls
// (many keys, many goroutines) travel as one go-redis pipeline: one write and
// one read per batch instead of one round trip each.
type pipelinedNode struct {
	*redisNode
	b batcher
}

var _ Node = (*pipelinedNode)(nil)

func newPipelinedNode(n *redisNode, c redis.UniversalClient) *pipelinedNode {
	return &pipelinedNode{redisNode: n, b: batcher{c: c}}
}

func (n *pipelinedNode) Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	cmd := redis.NewStatusCmd(ctx, "set", key, value, "px", ttl.Milliseconds(), "nx")
	err := n.b.do(ctx, cmd, nil)
	if err == redis.Nil {
		return false, nil
	}
	return err == nil, err
}

func (n *pipelinedNode) AcquireFenced(ctx context.Context, key, value string, ttl time.Duration) (uint64, error) {
	cmd := evalsha(ctx, acquireFencedScript, 2, key, FenceKey(key), value, ttl.Milliseconds())
	if err := n.b.do(ctx, cmd, acquireFencedScript); err != nil {
		return 0, err
	}
	v, err := cmd.Int64()
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, fmt.Errorf("fence counter is negative (%d): %s was changed by hand", v, FenceKey(key))
	}
	return uint64(v), nil
}

func (n *pipelinedNode) RaiseFence(ctx context.Context, key, value string, token uint64) (bool, error) {
	cmd := evalsha(ctx, raiseFenceScript, 2, key, FenceKey(key), value, token)
	if err := n.b.do(ctx, cmd, raiseFenceScript); err != nil {
		return false, err
	}
	return flag(cmd.Int64())
}

func (n *pipelinedNode) Extend(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	cmd := evalsha(ctx, extendScript, 1, key, value, ttl.Milliseconds())
	if err := n.b.do(ctx, cmd, extendScript); err != nil {
		return false, err
	}
	return flag(cmd.Int64())
}

func (n *pipelinedNode) Release(ctx context.Context, key, value string) (bool, error) {
	cmd := evalsha(ctx, releaseScript, 1, key, value)
	if err := n.b.do(ctx, cmd, releaseScript); err != nil {
		return false, err
	}
	return flag(cmd.Int64())
}

// evalsha is EVALSHA of s with numKeys keys followed by the arguments.
func evalsha(ctx context.Context, s *redis.Script, numKeys int, keysAndArgs ...any) *redis.Cmd {
	args := make([]any, 0, 3+len(keysAndArgs))
	args = append(args, "evalsha", s.Hash(), numKeys)
	return redis.NewCmd(ctx, append(args, keysAndArgs...)...)
}

// batcher sends the requests to one master. Callers queue them; one flusher
// goroutine, started when requests arrive and ended when none are left,
// sends whatever has queued as one pipeline, waits for its replies, and
// repeats. So batches to a master go out one after another: a request is
// never sent before the batches queued ahead of it have returned or timed
// out, which keeps a release behind the acquire it follows (see
// [attempt.inflight]). No goroutine outlives the requests.
type batcher struct {
	c redis.UniversalClient

	mu      sync.Mutex // guards queue, spare and running
	queue   []*call    // waiting for the next batch
	spare   []*call    // the last batch's slice, for reuse
	running bool       // a flusher goroutine is running
}

// call is one request in a batch.
type call struct {
	ctx    context.Context
	cmd    redis.Cmder
	script *redis.Script // for EVALSHA: the script to load on NOSCRIPT
	done   chan struct{} // closed when cmd has its reply or error
}

// do queues cmd and waits for its reply or for ctx to end. A request whose
// ctx ended before its batch was sent is not sent; one already sent is not
// recalled (like any request whose caller stopped waiting, it may land).
func (b *batcher) do(ctx context.Context, cmd redis.Cmder, script *redis.Script) error {
	b.mu.Lock()
	if !b.running {
		// Nothing in flight to this master: send at once from this
		// goroutine, as a batch of one (no hand-off, no allocation), and
		// hand whatever queued meanwhile to a flusher.
		b.running = true
		b.mu.Unlock()
		c := call{ctx: ctx, cmd: cmd, script: script}
		if err := ctx.Err(); err != nil {
			cmd.SetErr(err)
		} else {
			_ = b.c.Process(ctx, cmd)
			b.retryNoScript(ctx, []*call{&c})
		}
		b.mu.Lock()
		more := len(b.queue) > 0
		b.running = more
		b.mu.Unlock()
		if more {
			go b.flush()
		}
		return cmd.Err()
	}
	c := &call{ctx: ctx, cmd: cmd, script: script, done: make(chan struct{})}
	b.queue = append(b.queue, c)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case <-c.done:
		return cmd.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush sends batches until the queue is empty.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		batch := b.queue
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.queue, b.spare = b.spare[:0], nil
		b.mu.Unlock()

		b.send(batch)
		for i, c := range batch {
			close(c.done)
			batch[i] = nil
		}
		b.mu.Lock()
		b.spare = batch[:0]
		b.mu.Unlock()
	}
}

// send runs the batch's live requests as one pipeline, bounded by the latest
// of their deadlines (each caller stops waiting at its own).
func (b *batcher) send(batch []*call) {
	live := 0
	var deadline time.Time
	bounded := true
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			continue
		}
		live++
		if d, ok := c.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(deadline) {
			deadline = d
		}
	}
	switch {
	case live == 0:
		return
	case live == 1:
		for _, c := range batch {
			if c.ctx.Err() == nil {
				_ = b.c.Process(c.ctx, c.cmd)
				b.retryNoScript(c.ctx, batch)
				return
			}
		}
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := b.c.Pipeline()
	for _, c := range batch {
		if c.cmd.Err() == nil {
			_ = pipe.Process(ctx, c.cmd)
		}
	}
	_, _ = pipe.Exec(ctx) // each cmd holds its own reply or error
	b.retryNoScript(ctx, batch)
}

// retryNoScript loads the scripts a master did not know (after a restart,
// say) and runs their requests again: EVALSHA with a fallback to EVAL, as
// go-redis's Script.Run does.
func (b *batcher) retryNoScript(ctx context.Context, batch []*call) {
	var again []*call
	for _, c := range batch {
		if c.script != nil && isNoScript(c.cmd.Err()) {
			again = append(again, c)
		}
	}
	if len(again) == 0 {
		return
	}
	loaded := map[*redis.Script]error{}
	for _, c := range again {
		err, ok := loaded[c.script]
		if !ok {
			err = c.script.Load(ctx, b.c).Err()
			loaded[c.script] = err
		}
		if err != nil {
			c.cmd.SetErr(err)
			continue
		}
		c.cmd.SetErr(nil)
		_ = b.c.Process(ctx, c.cmd)
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
