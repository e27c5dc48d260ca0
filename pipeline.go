package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipelinedNode is the Node [NewNode] returns: a redisNode whose requests go
// through one batcher per master, so that requests from concurrent calls
// (many keys, many goroutines) travel as one go-redis pipeline: one write and
// one read per batch instead of one round trip each.
//
// A Redlock's phases (quorum.go) skip the Node methods: they queue their
// requests on the batcher directly, and the batcher hands each reply back to
// its phase, so a phase needs no goroutine per master.
type pipelinedNode struct {
	*redisNode
	b batcher
}

var _ Node = (*pipelinedNode)(nil)

func newPipelinedNode(n *redisNode, c redis.UniversalClient) *pipelinedNode {
	p := &pipelinedNode{redisNode: n, b: batcher{c: c, inline: honoursDeadlines(c)}}
	p.b.flusher = p.b.flush // made once: go b.flusher() allocates nothing
	return p
}

// Script hashes, boxed once for the argument lists.
var (
	acquireFencedHash any = acquireFencedScript.Hash()
	raiseFenceHash    any = raiseFenceScript.Hash()
	extendHash        any = extendScript.Hash()
	releaseHash       any = releaseScript.Hash()
)

// args returns the arguments of every master's command of the phase, one
// master's after another in a single slice: the key, the value and the
// others are boxed once for all masters, not once per master.
func (p *phase) args() []any {
	q := &p.req
	if p.key == nil {
		p.key, p.value = q.key, q.value
	}
	key, value := p.key, p.value
	var a []any
	switch q.kind {
	case reqAcquire:
		a = []any{"set", key, value, "px", q.ttl.Milliseconds(), "nx"}
	case reqAcquireFenced:
		a = []any{"evalsha", acquireFencedHash, 2, key, FenceKey(q.key), value, q.ttl.Milliseconds()}
	case reqRaiseFence:
		a = []any{"evalsha", raiseFenceHash, 2, key, FenceKey(q.key), value, q.token}
	case reqExtend:
		a = []any{"evalsha", extendHash, 1, key, value, q.ttl.Milliseconds()}
	case reqRelease:
		a = []any{"evalsha", releaseHash, 1, key, value}
	}
	n := len(p.r.nodes)
	buf := make([]any, len(a)*n)
	for i := range n {
		copy(buf[i*len(a):], a)
	}
	return buf
}

// cmd makes one master's command of the phase from the front of args (see
// [phase.args]) and returns the rest.
func (p *phase) cmd(args []any) (redis.Cmder, *redis.Script, []any) {
	k := 6 // set key value px ms nx, or evalsha sha 1 key value ms (extend): as args lays them out
	switch p.req.kind {
	case reqAcquireFenced, reqRaiseFence:
		k = 7 // evalsha sha 2 key fencekey value ms|token
	case reqRelease:
		k = 5 // evalsha sha 1 key value
	}
	mine := args[:k:k] // capped: appending to it never writes into the next master's
	if p.req.kind == reqAcquire {
		return redis.NewStatusCmd(p, mine...), nil, args[k:]
	}
	return redis.NewCmd(p, mine...), scriptOf(p.req.kind), args[k:]
}

// read reads a reply of the phase's command, as the Node method would.
func (q *request) read(cmd redis.Cmder) (ok bool, token uint64, err error) {
	switch q.kind {
	case reqAcquire:
		ok, err = setReply(cmd.(*redis.StatusCmd).Result())
	case reqAcquireFenced:
		v, rerr := cmd.(*redis.Cmd).Result()
		token, err = fence(q.key, v, rerr)
		ok = err == nil && token > 0
	default:
		ok, err = flag(cmd.(*redis.Cmd).Result())
	}
	return ok, token, err
}

func (n *pipelinedNode) Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	cmd := redis.NewStatusCmd(ctx, "set", key, value, "px", ttl.Milliseconds(), "nx")
	if err := n.b.do(ctx, cmd, nil); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	return setReply(cmd.Result())
}

func (n *pipelinedNode) AcquireFenced(ctx context.Context, key, value string, ttl time.Duration) (uint64, error) {
	cmd := evalsha(ctx, acquireFencedScript, 2, key, FenceKey(key), value, ttl.Milliseconds())
	v, err := n.run(ctx, cmd, acquireFencedScript)
	return fence(key, v, err)
}

func (n *pipelinedNode) RaiseFence(ctx context.Context, key, value string, token uint64) (bool, error) {
	cmd := evalsha(ctx, raiseFenceScript, 2, key, FenceKey(key), value, token)
	return flag(n.run(ctx, cmd, raiseFenceScript))
}

func (n *pipelinedNode) Extend(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	cmd := evalsha(ctx, extendScript, 1, key, value, ttl.Milliseconds())
	return flag(n.run(ctx, cmd, extendScript))
}

func (n *pipelinedNode) Release(ctx context.Context, key, value string) (bool, error) {
	cmd := evalsha(ctx, releaseScript, 1, key, value)
	return flag(n.run(ctx, cmd, releaseScript))
}

// run sends one script call through the batcher and returns its raw reply,
// for the strict readers in reply.go.
func (n *pipelinedNode) run(ctx context.Context, cmd *redis.Cmd, script *redis.Script) (any, error) {
	if err := n.b.do(ctx, cmd, script); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return cmd.Result()
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
// out, which keeps a release (or rollback, or extend) behind the acquire it
// follows, with no waiting by the phase that queues it. No goroutine
// outlives the requests.
type batcher struct {
	c       redis.UniversalClient
	flusher func() // flush
	inline  bool   // the client bounds a request by its context's deadline (see sendNow)

	mu      sync.Mutex // guards queue, spare and running
	queue   []*call    // waiting for the next batch
	spare   []*call    // the last batch's slice, for reuse
	running bool       // a flusher goroutine is running
}

// call is one request in a batch: from do, which waits on done, or from a
// phase (enqueue), which is handed the call back once cmd has its reply.
type call struct {
	ctx    context.Context
	cmd    redis.Cmder
	script *redis.Script // for EVALSHA: the script to load on NOSCRIPT
	done   chan struct{} // do's: closed when cmd has its reply or error

	p    *phase // enqueue's: the phase told through complete, and
	node int    // the master's index in it

	// For a DirectNode (wire.go): what to send, when its reply is due
	// (zero: no bound), whether it was sent as EVALSHA (so NOSCRIPT
	// sends it again, as EVAL) and whether its inline caller's context
	// ended (written under wire.mu).
	req      *request
	deadline time.Time
	evalsha  bool
	cut      bool // the caller reading the reply itself gave up (wire.interrupt)

	// The phase's reading of the reply (written by phase.deliver).
	ok    bool
	token uint64
	err   error
}

// finish hands a DirectNode's reply to c's phase, or to the caller waiting
// on c.done.
func (c *call) finish(ok bool, token uint64, err error) {
	if p := c.p; p != nil {
		p.deliver(c.node, ok, token, err)
		p.r.bg.Done()
		return
	}
	c.ok, c.token, c.err = ok, token, err
	close(c.done)
}

// enqueue queues c, a phase's request, without waiting: the flusher hands
// it back to c.p (complete) once c.cmd has its reply or error. A request
// whose ctx ended before its batch was sent is not sent.
func (b *batcher) enqueue(c *call) {
	b.mu.Lock()
	b.push(c)
}

// push queues c and starts a flusher if none runs; b.mu is held on entry and
// released.
func (b *batcher) push(c *call) {
	b.queue = append(b.queue, c)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.flusher()
	}
}

// claimIdle makes the calling goroutine the master's sender, if nothing is in
// flight to it, and reports whether it did; the caller then sends one request
// itself and calls handBack. b.mu is held on entry and released.
func (b *batcher) claimIdle() bool {
	if b.running {
		return false
	}
	b.running = true
	b.mu.Unlock()
	return true
}

// handBack ends a claimIdle: whatever queued meanwhile goes to a flusher.
func (b *batcher) handBack() {
	b.mu.Lock()
	more := len(b.queue) > 0
	b.running = more
	b.mu.Unlock()
	if more {
		go b.flusher()
	}
}

// sendNow sends c, the request of a phase whose caller waits for it, from
// the calling goroutine when nothing is in flight to the master, and reports
// whether it did; the caller enqueues it otherwise. With one master the
// caller would only block in collect anyway, and this saves two hand-offs
// between goroutines per request. Only for a client that honours context
// deadlines (b.inline), since collect cannot enforce the node timeout on a
// call its own goroutine is making; a caller that cancels its context then
// waits for at most that timeout.
func (b *batcher) sendNow(c *call) bool {
	if !b.inline {
		return false
	}
	b.mu.Lock()
	if !b.claimIdle() {
		b.mu.Unlock()
		return false
	}
	one := [1]*call{c}
	b.send(one[:])
	c.p.complete(c)
	b.handBack()
	return true
}

// honoursDeadlines reports whether c bounds each command by its context's
// deadline (go-redis does only with ContextTimeoutEnabled).
func honoursDeadlines(c redis.UniversalClient) bool {
	rc, ok := c.(*redis.Client)
	return ok && rc.Options().ContextTimeoutEnabled
}

// do queues cmd and waits for its reply or for ctx to end. A request whose
// ctx ended before its batch was sent is not sent; one already sent is not
// recalled (like any request whose caller stopped waiting, it may land).
func (b *batcher) do(ctx context.Context, cmd redis.Cmder, script *redis.Script) error {
	b.mu.Lock()
	if b.claimIdle() {
		// Nothing in flight to this master: send at once from this
		// goroutine, as a batch of one (no hand-off, no allocation).
		c := call{ctx: ctx, cmd: cmd, script: script}
		if err := ctx.Err(); err != nil {
			cmd.SetErr(err)
		} else {
			_ = b.c.Process(ctx, cmd)
			b.retryNoScript(ctx, []*call{&c})
		}
		b.handBack()
		return cmd.Err()
	}
	c := &call{ctx: ctx, cmd: cmd, script: script, done: make(chan struct{})}
	b.push(c)
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
			batch[i] = nil
			if c.p != nil {
				c.p.complete(c)
			} else {
				close(c.done)
			}
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

// retryNoScript runs again, as EVAL with the script's source, the requests
// whose master did not know the script (after a restart or SCRIPT FLUSH), as
// go-redis's Script.Run does. EVAL also caches the script for the next
// EVALSHA, and needs no permission beyond +eval (SCRIPT LOAD would).
func (b *batcher) retryNoScript(ctx context.Context, batch []*call) {
	for _, c := range batch {
		cmd, ok := c.cmd.(*redis.Cmd) // script calls are *redis.Cmd (evalsha)
		if c.script == nil || !ok || !isNoScript(cmd.Err()) {
			continue
		}
		args := cmd.Args() // evalsha, hash, numkeys, keys and arguments
		eval := redis.NewCmd(ctx, append([]any{"eval", scriptSource[c.script]}, args[2:]...)...)
		_ = b.c.Process(ctx, eval)
		cmd.SetVal(eval.Val())
		cmd.SetErr(eval.Err())
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
