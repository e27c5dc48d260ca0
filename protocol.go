package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// reqKind is what a [request] asks of a master.
type reqKind uint8

const (
	// reqAcquire sets Key to Value for TTL if Key does not exist (SET Key
	// Value NX PX TTL); OK reports whether it did.
	reqAcquire reqKind = iota + 1
	// reqAcquireFenced does what reqAcquire does and, when Key was set, raises
	// the fence counter [FenceKey](Key) to max(counter+1, the master's clock
	// in µs); Fence is the new counter, and OK reports whether Key was set.
	reqAcquireFenced
	// reqRaiseFence raises the fence counter of Key to at least Token while
	// Key still holds Value; OK reports whether Key still held Value.
	reqRaiseFence
	// reqExtend resets Key's TTL to TTL while Key still holds Value; OK
	// reports whether it did. A key that is gone is not created again,
	// unless Repair is set.
	reqExtend
	// reqRelease deletes Key while it still holds Value; OK reports whether
	// it did.
	reqRelease
)

var opNames = [...]string{reqAcquire: "acquire", reqAcquireFenced: "acquire-fenced",
	reqRaiseFence: "raise-fence", reqExtend: "extend", reqRelease: "release"}

func (o reqKind) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "reqKind(" + strconv.Itoa(int(o)) + ")"
}

// request is one request of the lock's protocol to a master and, once its
// batch ran (batch.exchange: encoded as a [Command], sent by [Node.Exec],
// its reply decoded), its reply. A refusal (OK false with a nil Err) means
// the master answered and the key is not ours; an Err means the outcome is
// unknown. It never leaves the package: a Node sees Commands.
type request struct {
	Op reqKind
	// Kind is the kind of lock the request is for: it picks the script
	// (see lockKind), also for the requests that queue and withdraw a
	// waiting call of that kind (a release with Hand): handoff.lua as the
	// kind assembles it.
	Kind  lockKind
	Key   string
	Value string
	TTL   time.Duration // reqAcquire, reqAcquireFenced, reqExtend: whole milliseconds
	Token uint64        // reqRaiseFence
	// Owner, when not empty, makes the request a step of an owned hold
	// ([WithOwner]): Key is then a hash of the owner's holds, each named by
	// its Value, and the request adds, extends, confirms or drops this hold
	// alone. Only reqAcquire and reqAcquireFenced (entering) read Owner's
	// value; the others only need it set.
	Owner string
	// Waiter, on reqRelease, is the releasing Redlock's wake-up channel on
	// this master: a release that frees Key tells the first Lock call
	// queued in Key's queue of waiting calls ([WaitKey]), skipping
	// Waiter's own. Empty: no wake-ups.
	Waiter string
	// Hand, on reqRelease, is the hand-off value of the Lock call that sends
	// it, when the call waits (see [handoff]): the release also deletes Key
	// where it was handed to the call (Key holds Hand, "#" and a
	// registration number; with Reg not 0, one below Reg), and takes the
	// call's registrations (Waiter, Hand, at Queued) off the queue. With Reg
	// and Place not 0 it registers the call again as Reg at Place (smaller
	// first): a release that frees Key then sets it to Hand#Reg for TTL
	// and tells the call, or with TTL 0 (fenced and owned locks) only
	// tells it. Empty: the request is not a waiting call's.
	Hand  string
	Reg   uint64
	Place int64
	// Behind, with Hand and Reg (an Unlock), registers the call again only
	// behind the call the release handed Key to, when it did: Woke says so.
	Behind bool
	// Back, on a waiting call's rollback (Hand, Reg and Place set), has a
	// master where the rollback freed the attempt's own key hand it on at
	// once, to the call when it is first, rather than queue the call
	// behind that hand-off: other masters were handing the key to the call
	// (see [handoff.attempting]).
	Back bool
	// Yield, on a registration (Hand, Reg and Place set, no Value), queues
	// the call without handing the key on where it finds it free: the
	// releasing Redlock's Unlock woke another call for it, which takes the
	// key with an attempt of its own (a fenced, owned, gated or replica-
	// confirmed lock's call), and this call waits its turn behind it (see
	// [mark]). Without it, a registration that finds the key free is
	// handed it, or woken, at once. On an RWMutex call's withdrawal sent
	// ahead of its lock's release (no Place), it wakes no one: the release
	// right behind it wakes whom the lock's state calls for (rw_queue.lua).
	Yield bool
	// Queued, with Hand, is the place the call's registrations so far are
	// queued at (Place, unless an Unlock moves the call behind the next
	// holder): the release takes them off there, and reads no other entry.
	Queued int64
	// Repair, on a reqExtend of a plain lock (Owner empty), also sets Key
	// to Value for TTL where Key does not exist, and reports OK then: the
	// request auto-extend ([WithAutoExtend]) sends after a renewal a
	// quorum confirmed, so that a lock held on a bare quorum spreads again
	// to the masters that lost its key (lua/extend.lua).
	Repair bool
	// Gate, on a vote (reqAcquire, reqAcquireFenced, reqRaiseFence,
	// reqExtend), is the restart gate ([WithRestartGate]): the vote counts
	// only from a master that has been up at least Gate: the vote is one
	// script that checks the gate first (lua/gated.lua) and does nothing
	// else on a master up for less, and that vote fails with an error
	// wrapping [ErrRestartGate]. 0: no gate. On a waiting call's release (Hand set) it is the call's gate: a rollback
	// that finds the key free where the gate is closed only nudges the call
	// it wakes (lua/handoff.lua).
	Gate time.Duration
	// Replicas, on a vote, makes it count only once WAIT Replicas has
	// confirmed it on that many of the master's replicas, within the
	// request's deadline ([WithReplicaConfirm]); a master whose replicas
	// did not confirm in time fails with an error wrapping
	// [ErrNotReplicated]. 0: the master's own reply counts (see
	// replicaWait).
	Replicas int
	// Slot and Permits, on a permit's request (Kind kindPermit), are the
	// slot it asks for or holds and the semaphore's limit (see
	// semaphore.go).
	Slot, Permits uint8

	OK    bool
	Fence uint64 // reqAcquireFenced: the fence counter when OK
	Woke  bool   // reqRelease: it freed the key and woke a waiting call, or handed it the key
	Free  uint64 // a permit's refused vote: the slots free on that master, one bit each
	Err   error

	// Key, Value and TTL in milliseconds as interface values, made once for
	// every master's command of a phase (see boxArgs); nil: not yet.
	key, value, ms any
	// gate is Gate in milliseconds, boxed the same way (gated votes).
	gate any
	// reqRelease: WaitKey(Key) and Waiter, boxed the same way; waitFor is
	// the Key waitKey was made from.
	waitKey, waiter any
	waitFor         string
	// rollback, on reqRelease, says the release undoes a failed attempt: a
	// call it wakes is only nudged (lua/handon.lua).
	rollback bool
	// lock is the lock an reqExtend extends, told when the request fails
	// (see [Lock.strayed]); nil for the other Ops.
	lock *Lock
	// deadline is the request's own, of its phase (the batch's context
	// carries the latest of its requests'); zero when unknown.
	deadline time.Time
}

// boxArgs fills in q's boxed arguments, keeping those already made.
func (q *request) boxArgs() {
	if q.key == nil {
		q.key = q.Key
	}
	if q.value == nil {
		q.value = q.Value
	}
	if q.ms == nil && q.TTL != 0 {
		q.ms = q.TTL.Milliseconds()
	}
	if q.gate == nil && q.Gate > 0 {
		q.gate = q.Gate.Milliseconds()
	}
	if q.Op == reqRelease && q.waitKey == nil {
		q.waitKey, q.waiter, q.waitFor = WaitKey(q.Key), q.Waiter, q.Key
	}
}

// releaseArgs returns q's wait key and Waiter as interface values: those
// boxArgs made while they still hold q's fields, else new ones.
func (q *request) releaseArgs() (waitKey, waiter any) {
	waitKey, waiter = q.waitKey, q.waiter
	if _, ok := waitKey.(string); !ok || q.waitFor != q.Key {
		waitKey = WaitKey(q.Key)
	}
	return waitKey, boxed(waiter, q.Waiter)
}

// The scripts, sent with EVAL every time (see script).
var (
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/acquire_fenced.lua
	acquireFencedLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string
	//go:embed lua/raiseto.lua
	raisetoLua string
	//go:embed lua/hold.lua
	holdLua string
	//go:embed lua/handoff.lua
	handoffLua string
	//go:embed lua/handon.lua
	handonLua string
	//go:embed lua/withdraw.lua
	withdrawLua string
	//go:embed lua/queue.lua
	queueLua string
	//go:embed lua/fence.lua
	fenceLua string
	//go:embed lua/gate.lua
	gateLua string
	//go:embed lua/get.lua
	getLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/gated.lua
	gatedLua string

	// The scripts that can free a key start with the hand-off routine;
	// those that take a fence token, with the counter's steps; those that
	// compare the key's value with a holder's, with its read.
	releaseSrc       any = script(handonLua, getLua, releaseLua)
	extendSrc        any = script(getLua, extendLua)
	acquireFencedSrc any = script(fenceLua, acquireFencedLua)
	raiseFenceSrc    any = script(getLua, raisetoLua, raiseFenceLua)
	holdSrc          any = script(handonLua, fenceLua, holdLua)
	// handoff.lua asks the gate only for a gated call (ARGV[9] not '0'):
	// others send it without gate.lua's routine, which it never calls.
	handoffSrc      any = script(handonLua, getLua, withdrawLua, handoffLua)
	gatedHandoffSrc any = script(handonLua, gateLua, getLua, withdrawLua, handoffLua)

	// A vote behind the restart gate is one script: the gate's check first
	// (gated.lua, reading the gate from the last argument), then the vote.
	gatedAcquireSrc       any = script(gateLua, gatedLua, acquireLua)
	gatedExtendSrc        any = script(gateLua, gatedLua, getLua, extendLua)
	gatedAcquireFencedSrc any = script(gateLua, gatedLua, fenceLua, acquireFencedLua)
	gatedRaiseFenceSrc    any = script(gateLua, gatedLua, getLua, raisetoLua, raiseFenceLua)
	gatedHoldSrc          any = script(gateLua, gatedLua, handonLua, fenceLua, holdLua)
)

// script returns Lua files' code, one after the other, without comment
// lines and indentation: the master hashes every EVAL's script. A routine
// that several scripts need is a file of its own put in front of each
// (handon.lua, fence.lua, get.lua, raiseto.lua, withdraw.lua), never a
// copy.
//
// Scripts go to the master with EVAL, never EVALSHA: a master that lost its
// script cache (a restart, SCRIPT FLUSH) answers EVALSHA with NOSCRIPT, and
// sending the script again then would put it behind requests queued after
// it — a rollback could run before the acquire it undoes. EVAL costs the
// script's bytes on the wire (the master looks it up by hash in its cache)
// and needs no permission beyond +eval.
func script(srcs ...string) string {
	var b strings.Builder
	for _, src := range srcs {
		for line := range strings.Lines(src) {
			if line = strings.TrimLeft(line, " \t"); line != "\n" && !strings.HasPrefix(line, "--") {
				b.WriteString(line)
			}
		}
	}
	return b.String()
}

// batch turns requests to one master into the commands of one
// [Node.Exec] and the replies back into the requests: the one place the
// protocol is spoken, the same for every Node. Its commands and their
// argument slices are reused from one batch to the next (a lane sends one
// batch at a time); a Node keeps none of them after Exec returns.
type batch struct {
	store []Command
	cmds  []*Command
	wait  *Command // the batch's WAIT, or nil
}

// exchange runs reqs on n, which declared t, in one Exec: each request's
// command, in order, then, when votes ask for replica confirmation, one
// WAIT. A request that cannot be sent (an unknown Op; replica confirmation
// on a master whose batches may not take one connection) gets its Err and
// no command.
func (b *batch) exchange(ctx context.Context, n Node, t *Traits, reqs []*request) {
	if b.prepare(ctx, t, reqs) {
		n.Exec(ctx, b.cmds)
		b.tryAgain(ctx, n, t)
		b.finish()
	}
}

// The pause before the commands a shard answered TRYAGAIN go again:
// doubling from tryAgainMin to tryAgainMax, until the batch's deadline.
const (
	tryAgainMin = 2 * time.Millisecond
	tryAgainMax = 20 * time.Millisecond
)

// tryAgain sends again, until ctx ends, the commands of the batch that a
// master which routes by key answered TRYAGAIN (or with a redirect its
// client gave up following: see isTryAgain), after a pause. While a
// Redis Cluster moves a slot between shards, a script that names keys of
// the slot some of which moved and some not (a lock's key and its queue: a
// release, a rollback; its key and fence counter: a fenced or owned vote) is
// refused so before it runs, and goes through once the move got further: a
// release during a resharding would otherwise leave the key on that master
// until its TTL. Sending a command that did not run is safe whatever
// happened to the others. Clients try again themselves, or not: go-redis's
// cluster client up to MaxRedirects times at once (without a retry backoff,
// as NewFromURLs sets it), rueidis only for read-only commands. A command
// still answered TRYAGAIN when ctx ends keeps that reply: a failed vote.
func (b *batch) tryAgain(ctx context.Context, n Node, t *Traits) {
	if t.Routing != RouteByKey {
		return
	}
	pause := tryAgainMin
	for {
		var again []*Command
		for _, c := range b.cmds {
			if isTryAgain(c.Err) {
				again = append(again, c)
			}
		}
		if len(again) == 0 {
			return
		}
		tm := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C:
		}
		pause = min(2*pause, tryAgainMax)
		for _, c := range again {
			c.Reply, c.Err = nil, nil
		}
		n.Exec(ctx, again)
	}
}

// isTryAgain reports whether err is a shard's reply that it did not run the
// command, for now: TRYAGAIN, or a redirect (ASK, MOVED) the client gave up
// following (go-redis after MaxRedirects: an ASK to the new shard, which
// answered TRYAGAIN, and so on). A Node hands error replies back by their
// text.
func isTryAgain(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "TRYAGAIN") || isRedirect(err))
}

// isRedirect reports whether err is a shard's redirect: MOVED or ASK.
func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ")
}

// prepare makes b.cmds the commands of reqs for a Node that declared t
// (see exchange), and reports whether there is any to send. A lane calls
// prepare, its Node's Exec and finish from its own frame (send), so that
// the runner goroutine's stack under the client's deep Exec is as shallow
// as it can be: a runner starts with a small stack, and each frame kept
// below Exec can make it grow (and be copied) once more per batch.
func (b *batch) prepare(ctx context.Context, t *Traits, reqs []*request) bool {
	if cap(b.store) < len(reqs)+1 {
		b.store = make([]Command, len(reqs)+1)
	}
	b.store = b.store[:cap(b.store)]
	b.cmds = b.cmds[:0]
	var rw replicaWait
	for _, q := range reqs {
		if replicated(q) && (t.Routing != RouteServer || !t.OneConnection) {
			q.OK, q.Fence, q.Err = false, 0, errWaitElsewhere // not sent
			continue
		}
		c := &b.store[len(b.cmds)]
		if !encode(q, c) {
			continue
		}
		b.cmds = append(b.cmds, c)
		if replicated(q) {
			rw.add(ctx, q)
		}
	}
	b.wait = nil
	if rw.replicas > 0 {
		wait := &b.store[len(b.cmds)]
		wait.Args = append(wait.Args[:0], "wait", int64(rw.replicas), waitTimeout(rw.deadline))
		wait.Key, wait.Keys, wait.Reply, wait.Err, wait.req = 0, 0, nil, nil, nil
		b.cmds = append(b.cmds, wait)
		b.wait = wait
	}
	return len(b.cmds) > 0
}

// finish reads the replies of the commands prepare made, after Exec, into
// their requests, and clears the commands for the next batch.
func (b *batch) finish() {
	wait := b.wait
	acks, werr := int64(0), error(nil)
	if wait != nil {
		acks, werr = waitReply(wait)
	}
	for _, c := range b.cmds {
		if q := c.req; q != nil {
			decode(q, c)
			if wait != nil && replicated(q) {
				confirmed(q, acks, werr)
			}
		}
		clear(c.Args) // no reference kept to this batch's values
		c.Args, c.Reply, c.Err, c.req = c.Args[:0], nil, nil, nil
	}
	b.wait = nil
}

// execRequests runs reqs on n as one batch, for a caller without a lane.
func execRequests(ctx context.Context, n Node, reqs ...*request) {
	var b batch
	t := n.Traits()
	b.exchange(ctx, n, &t, reqs)
}

// replicated reports whether q is a vote that its master's replicas must
// confirm.
func replicated(q *request) bool { return q.Replicas > 0 && q.Op != reqRelease }

// errWaitElsewhere fails a vote that replicas must confirm on a master
// whose Node does not promise that a batch takes one connection
// (Traits.OneConnection), or that routes commands by key (a Redis Cluster
// or Ring): the WAIT could run on another connection than the vote's. New
// and the calls refuse the option on such masters; this guards a batch
// all the same.
var errWaitElsewhere = errors.New("replica confirmation (WithReplicaConfirm) is not available on a master whose Node does not promise that a batch reaches it on one connection (Traits.OneConnection), or that routes commands by key: the WAIT could run on another connection than the vote's")

// replicaWait is the one WAIT that confirms the replicated votes of a batch
// (issue 31, item 4). WAIT n waits until n replicas have acknowledged every
// write this connection made before it, so one WAIT after the batch's last
// vote confirms all of them: the batch costs one replica round trip, not
// one per vote. It asks for the most replicas any of the votes needs and
// counts each vote confirmed when the acknowledgements reach its own
// Replicas. It goes at the end of the batch, so requests after the last
// vote (releases) are not held behind it on the master; their writes only
// add to what the replicas acknowledge, on the same stream.
//
// Its timeout is taken from the earliest deadline among those votes (see
// waitTimeout). The lane hands a batch's replies back only once the whole
// batch is back, so a WAIT that outlasts a vote's deadline fails that vote
// by timeout anyway and holds the lane for everything queued behind it: the
// earliest deadline keeps the promise a WAIT per vote kept, every vote's
// reply (confirmed or not) by its own deadline. What it costs: when the
// replicas are slower than half of what is left to the earliest vote, the
// votes with later deadlines fail with it (ErrNotReplicated, a failed vote
// like any other) where a longer WAIT might have confirmed them. The
// deadlines of one batch are close — each is its phase's start plus the
// node timeout (an extend's capped at its lock's Until), and a batch holds
// what queued while the previous one ran — and replicas that keep up answer
// long before any of them.
type replicaWait struct {
	replicas int       // the most Replicas of the batch's votes; 0: none
	deadline time.Time // the earliest of their deadlines; zero: none known
}

// add counts q, a vote sent in the batch, in the WAIT: ctx's deadline (the
// batch's latest) stands for q's when q has none.
func (w *replicaWait) add(ctx context.Context, q *request) {
	w.replicas = max(w.replicas, q.Replicas)
	d := q.deadline
	if d.IsZero() {
		d, _ = ctx.Deadline()
	}
	if !d.IsZero() && (w.deadline.IsZero() || d.Before(w.deadline)) {
		w.deadline = d
	}
}

// waitTimeout is WAIT's timeout in ms: half of what is left until deadline,
// at least 1 ms (WAIT 0 would block without end); without a deadline, 1 s.
// A master ends a WAIT at its next event loop turn after the timeout, up to
// 1000/hz ms later (100 ms at the default hz 10): the other half is for that
// and the reply. A WAIT that still ends after a vote's deadline fails the
// vote as a timeout does.
func waitTimeout(deadline time.Time) int64 {
	if deadline.IsZero() {
		return 1000
	}
	return max((time.Until(deadline) / 2).Milliseconds(), 1)
}

// waitReply reads the reply of a WAIT: the number of replicas that
// acknowledged, a non-negative integer.
func waitReply(c *Command) (int64, error) {
	if c.Err != nil {
		return 0, c.Err
	}
	n, ok := c.Reply.(int64)
	if !ok || n < 0 {
		return 0, badReplyf("WAIT answered %s, want a number of replicas", show(c.Reply))
	}
	return n, nil
}

// confirmed fails q, a vote its batch's WAIT followed, unless that WAIT
// answered (acks, err) with at least q.Replicas replicas. A vote the master
// refused stays refused.
func confirmed(q *request, acks int64, err error) {
	if !q.OK {
		return
	}
	switch {
	case err != nil:
		q.OK, q.Err = false, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	case acks < int64(q.Replicas):
		q.OK, q.Err = false, fmt.Errorf("%w: %d of the %d replicas WithReplicaConfirm asks for confirmed the write in time", ErrNotReplicated, acks, q.Replicas)
	}
}

// gated reports whether q is a vote behind a restart gate.
func gated(q *request) bool { return q.Gate > 0 && q.Op != reqRelease }

// gateRefusal is the error a gated vote's script answers when the master
// has been up for less than the gate: "GATE" and the ms left (gated.lua).
const gateRefusal = "GATE "

// closedGate reads err, the reply error of q's gated vote: the gate's
// refusal as a [*gateError], any other error as it is.
func closedGate(q *request, err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), gateRefusal); ok {
		if left, perr := strconv.ParseInt(msg, 10, 64); perr == nil && left > 0 {
			return &gateError{left: time.Duration(left) * time.Millisecond, gate: q.Gate}
		}
		return badReplyf("restart gate answered %s, want GATE and the ms left", show(err.Error()))
	}
	return err
}

// encode makes c the command of q (its arguments appended to c.Args[:0]),
// or reports false, with q.Err set, for an unknown Op. It uses the
// arguments a phase boxed once for every master while they still hold q's
// fields.
func encode(q *request, c *Command) bool {
	key, value := boxed(q.key, q.Key), boxed(q.value, q.Value)
	ms := q.ms
	if m, ok := ms.(int64); !ok || m != q.TTL.Milliseconds() {
		ms = q.TTL.Milliseconds()
	}
	a := c.Args[:0]
	switch {
	case q.Kind != kindMutex:
		a = kindArgs(a, q, key, value, ms)
	case gated(q):
		a = gatedArgs(a, q, key, value, ms)
	case q.Owner != "":
		a = holdArgs(a, q, key, value, ms)
	case q.Op == reqAcquire:
		a = append(a, "set", key, value, "px", ms, "nx")
	case q.Op == reqAcquireFenced:
		a = append(a, "eval", acquireFencedSrc, int64(2), key, FenceKey(q.Key), value, ms)
	case q.Op == reqRaiseFence:
		a = append(a, "eval", raiseFenceSrc, int64(2), key, FenceKey(q.Key), value, int64(q.Token))
	case q.Op == reqExtend:
		a = append(a, "eval", extendSrc, int64(1), key, value, ms, bit(q.Repair))
	case q.Op == reqRelease:
		wk, waiter := q.releaseArgs()
		if q.Hand == "" {
			a = append(a, "eval", releaseSrc, int64(2), key, wk, value, waiter, bit(q.rollback))
		} else {
			src := handoffSrc
			if q.Gate > 0 {
				src = gatedHandoffSrc
			}
			a = append(a, "eval", src, int64(2), key, wk, value, waiter, q.Place, q.Hand, int64(q.Reg), q.TTL.Milliseconds(), bit(q.Behind), q.Queued, gateArg(q), bit(q.Back), bit(q.Yield))
		}
	}
	if len(a) == 0 {
		q.OK, q.Fence, q.Err = false, 0, fmt.Errorf("redlock: unknown request %v: not sent", q.Op)
		return false
	}
	c.Args, c.Key, c.Keys = a, 1, 1
	if a[0] == "eval" {
		c.Key, c.Keys = 3, int(a[2].(int64))
	}
	c.Reply, c.Err, c.req = nil, nil, q
	return true
}

// bit is b as Redis reads a flag: 1 or 0.
func bit(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// holdArgs appends the command of q, a step of an owned hold (hold.lua);
// nothing for an unknown Op.
func holdArgs(a []any, q *request, key, value, ms any) []any {
	switch q.Op {
	case reqAcquire:
		return append(a, "eval", holdSrc, int64(2), key, FenceKey(q.Key), "enter", value, ms, q.Owner, int64(0))
	case reqAcquireFenced:
		return append(a, "eval", holdSrc, int64(2), key, FenceKey(q.Key), "enter", value, ms, q.Owner, int64(1))
	case reqRaiseFence:
		return append(a, "eval", holdSrc, int64(2), key, FenceKey(q.Key), "fence", value, int64(q.Token))
	case reqExtend:
		return append(a, "eval", holdSrc, int64(1), key, "extend", value, ms)
	case reqRelease:
		wk, waiter := q.releaseArgs()
		return append(a, "eval", holdSrc, int64(2), key, wk, "release", value, waiter, bit(q.rollback))
	}
	return a
}

// gatedArgs appends the command of q, a vote behind a restart gate: its
// script with the gate's check in front, the gate in ms as its last
// argument; nothing for an unknown Op.
func gatedArgs(a []any, q *request, key, value, ms any) []any {
	gate := gateArg(q)
	if q.Owner != "" {
		switch q.Op {
		case reqAcquire:
			return append(a, "eval", gatedHoldSrc, int64(2), key, FenceKey(q.Key), "enter", value, ms, q.Owner, int64(0), gate)
		case reqAcquireFenced:
			return append(a, "eval", gatedHoldSrc, int64(2), key, FenceKey(q.Key), "enter", value, ms, q.Owner, int64(1), gate)
		case reqRaiseFence:
			return append(a, "eval", gatedHoldSrc, int64(2), key, FenceKey(q.Key), "fence", value, int64(q.Token), gate)
		case reqExtend:
			return append(a, "eval", gatedHoldSrc, int64(1), key, "extend", value, ms, gate)
		}
		return a
	}
	switch q.Op {
	case reqAcquire:
		return append(a, "eval", gatedAcquireSrc, int64(1), key, value, ms, gate)
	case reqAcquireFenced:
		return append(a, "eval", gatedAcquireFencedSrc, int64(2), key, FenceKey(q.Key), value, ms, gate)
	case reqRaiseFence:
		return append(a, "eval", gatedRaiseFenceSrc, int64(2), key, FenceKey(q.Key), value, int64(q.Token), gate)
	case reqExtend:
		return append(a, "eval", gatedExtendSrc, int64(1), key, value, ms, bit(q.Repair), gate)
	}
	return a
}

// gateArg is q.Gate in ms as an interface value: the one boxArgs made while
// it still holds q.Gate, else a new one.
func gateArg(q *request) any {
	if g, ok := q.gate.(int64); ok && g == q.Gate.Milliseconds() {
		return q.gate
	}
	return q.Gate.Milliseconds()
}

// boxed returns b when it holds s, else s as a new interface value.
func boxed(b any, s string) any {
	if v, ok := b.(string); ok && v == s {
		return b
	}
	return s
}

// decode fills in q's reply from c's, read strictly (reply.go).
func decode(q *request, c *Command) {
	v, err := c.Reply, c.Err
	switch {
	case gated(q) && err != nil:
		q.OK, q.Fence, q.Err = false, 0, closedGate(q, err)
	case q.Kind != kindMutex:
		kindDecode(q, v, err)
	case q.Op == reqAcquireFenced:
		q.Fence, q.Err = fence(q.Key, v, err)
		q.OK = q.Err == nil && q.Fence > 0
	case q.Op == reqRelease:
		q.OK, q.Woke, q.Err = released(v, err)
	case q.Op == reqAcquire && q.Owner == "" && !gated(q):
		q.OK, q.Err = setOK(v, err)
	default:
		q.OK, q.Err = flag(v, err)
	}
}

// checkReply makes an error win over a success in what the tally counts:
// a request that failed (not sent, a WAIT that did not confirm it) never
// counts, whatever else its reply said.
func checkReply(q *request) {
	if q.Err != nil {
		q.OK = false
	}
}

// maxBatch is the most requests one Exec call carries; more queued at once
// go in the next batch.
const maxBatch = 1024

// lane is the one way requests reach a master: a first-in first-out queue.
// Callers push requests and never wait on the lane; one runner, started when
// requests arrive and ended when none are left, takes what has queued,
// passes it to the Node's Exec as one batch, hands each reply back to its
// phase, and repeats. So a request reaches its master only after every
// request queued before it has returned or timed out — a release (or
// rollback, extend, renewal) never overtakes the acquire before it — and
// that is the only place this ordering is kept.
//
// The runner is a goroutine, or for one batch the caller that pushed it
// (pushRun): at one master a caller waits for its request's reply anyway,
// and running the batch itself saves two goroutine switches per request.
// Only a Node that returns by its context's deadline gets such a runner
// (callerRuns), so the caller still waits no longer than its phase's
// deadline.
//
// A request whose phase's deadline passed before its batch went out is not
// sent: its reply is the deadline's error. No goroutine outlives the
// requests.
type lane struct {
	node Node
	run  func() // l.drain, made once so that starting the runner allocates nothing
	// callerRuns: the Node's Exec returns by its context's deadline (see
	// pushRun).
	callerRuns bool

	mu      sync.Mutex // guards queue, spare and running
	queue   []*call
	spare   []*call // the previous batch's slice, for reuse
	running bool    // a runner is draining the queue

	reqs   []*request // the batch being sent; the runner's alone
	b      batch      // its commands, the runner's alone
	traits Traits     // the Node's
}

func newLane(n Node) *lane {
	t := n.Traits()
	l := &lane{node: n, callerRuns: t.KeepsDeadlines, traits: t}
	l.run = l.drain
	return l
}

// push queues c and starts a runner goroutine if none runs.
func (l *lane) push(c *call) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if start {
		go l.run()
	}
}

// pushRun queues p's requests (to this lane, p's only master) for a caller
// that collects p. When no runner runs and the Node keeps deadlines, the
// caller is the runner for one batch, the one with p's requests (and
// whatever other callers queued meanwhile): it sends it, delivers its
// replies, leaves what queued after it to a runner goroutine, and reports
// true. Otherwise it gives p a channel for its replies and is push.
func (l *lane) pushRun(p *phase) bool {
	l.mu.Lock()
	run := !l.running && l.callerRuns
	if !run {
		p.replies = make(chan int, len(p.calls))
	}
	for i := range p.calls {
		l.queue = append(l.queue, &p.calls[i])
	}
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if !run {
		if start {
			go l.run()
		}
		return false
	}
	l.send(l.take())
	l.mu.Lock()
	more := len(l.queue) > 0
	l.running = more
	l.mu.Unlock()
	if more {
		go l.run()
	}
	return true
}

// drain sends batches until the queue is empty.
func (l *lane) drain() {
	for batch := l.take(); batch != nil; batch = l.take() {
		l.send(batch)
	}
}

// take returns the next batch, or nil (and the lane stops running) when the
// queue is empty.
func (l *lane) take() []*call {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.queue
	if len(batch) == 0 {
		l.running = false
		return nil
	}
	if len(batch) > maxBatch {
		l.queue = append(l.spare[:0], batch[maxBatch:]...)
		batch = batch[:maxBatch]
	} else {
		l.queue = l.spare[:0]
	}
	l.spare = nil
	return batch
}

// send runs the live requests of batch in one Exec, under the context of
// the phase with the latest deadline (its values, for tracing hooks, stand
// for the batch's), hands each reply to its phase, and keeps batch's slice
// for reuse.
func (l *lane) send(batch []*call) {
	l.reqs = l.reqs[:0]
	var ctx *phaseCtx
	now := time.Now()
	for _, c := range batch {
		if !now.Before(c.p.ctx.deadline) {
			c.Err = c.p.ctx.Err()
			continue
		}
		l.reqs = append(l.reqs, &c.request)
		if ctx == nil || c.p.ctx.deadline.After(ctx.deadline) {
			ctx = &c.p.ctx
		}
	}
	if len(l.reqs) > 0 && l.b.prepare(ctx, &l.traits, l.reqs) {
		l.node.Exec(ctx, l.b.cmds)
		l.b.tryAgain(ctx, l.node, &l.traits)
		l.b.finish()
	}
	clear(l.reqs)
	for i, c := range batch {
		batch[i] = nil
		c.p.deliver(c)
	}
	l.mu.Lock()
	l.spare = batch[:0]
	l.mu.Unlock()
}
