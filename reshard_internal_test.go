package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
)

// The tests in this file put a lock's hash slot on a Redis Cluster master
// into each state a resharding brings, one step at a time (redistest's
// BeginMove, MigrateKeys, EndMove), and run the lock's operations there:
//
//   - migrating: the slot is MIGRATING on its shard and IMPORTING on the
//     other, no key moved yet: the source serves a request whose keys it
//     has, answers ASK when it has none of them, and TRYAGAIN to a script
//     whose keys it has only some of;
//   - ask: migrating, with the lock's keys already moved to the target: the
//     source answers ASK, the target serves a request after ASKING unless
//     it is a script whose keys it has only some of (TRYAGAIN);
//   - split: migrating, some of the lock's keys moved, some not (TRYAGAIN);
//   - moved: the move is complete and the Redlock's client still has the
//     old slot map: MOVED.
//
// Each master's reply is either followed (go-redis follows ASK and MOVED)
// or its vote counts as failed. The checks, every time: a vote counted as
// granted has the key where the cluster serves it, with the lock's value and
// TTL; a vote counted as failed left nothing that outlives its TTL; and once
// the lock is gone nothing of it is left on any shard. The Redlock has two
// plain masters besides the cluster, so that each case runs twice: with
// both plain masters granting (the operation does not need the cluster's
// vote) and with one of them refusing (the cluster's vote decides it).

// reshardStage is where a case puts the lock's slot before its operation.
type reshardStage int

const (
	stageMigrating reshardStage = iota
	stageAsk
	stageSplit
	stageMoved
)

func (s reshardStage) String() string {
	return [...]string{"migrating", "ask", "split", "moved"}[s]
}

// reshardRig is a Redlock's masters for the resharding tests: a Redis
// Cluster of two shards, whose slots a test moves, and two plain masters.
type reshardRig struct {
	t     *testing.T
	rc    *redistest.RedisCluster
	url   string
	shard []*redis.Client // one per shard, to it alone
	plain []*redis.Client
}

func newReshardRig(t *testing.T) *reshardRig {
	t.Helper()
	rc := redistest.StartRedisClusterT(t, 2, redistest.Options{})
	a := rc.Addrs()
	return &reshardRig{t: t, rc: rc, url: "redis+cluster://" + a[0] + "?addr=" + a[1],
		shard: clients(t, a), plain: clients(t, masters.Addrs()[:2])}
}

// reshardLog records what a Redlock's cluster master saw: each phase's
// outcome (an Observer) and the redirects and retries its shards answered
// (a go-redis hook on each shard's client).
type reshardLog struct {
	mu      sync.Mutex
	phases  []PhaseEvent
	replies []string // "ASK", "MOVED", "TRYAGAIN", in order
}

func (o *reshardLog) Start(ctx context.Context, _ *Call) context.Context { return ctx }
func (o *reshardLog) End(context.Context, *Call)                         {}
func (o *reshardLog) Lost(string, error)                                 {}

func (o *reshardLog) Phase(_ context.Context, e *PhaseEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := *e
	c.Nodes = slices.Clone(e.Nodes)
	o.phases = append(o.phases, c)
}

// last returns the last phase of kind op, and forgets them all.
func (o *reshardLog) last(op PhaseOp) (PhaseEvent, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer func() { o.phases = nil }()
	for i := len(o.phases) - 1; i >= 0; i-- {
		if o.phases[i].Op == op {
			return o.phases[i], true
		}
	}
	return PhaseEvent{}, false
}

func (o *reshardLog) reply(err error) {
	if err == nil {
		return
	}
	word, _, _ := strings.Cut(err.Error(), " ")
	if word == "ASK" || word == "MOVED" || word == "TRYAGAIN" {
		o.mu.Lock()
		o.replies = append(o.replies, word)
		o.mu.Unlock()
	}
}

// takeReplies returns the redirects and retries seen since the last call.
func (o *reshardLog) takeReplies() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.replies
	o.replies = nil
	return r
}

func (o *reshardLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *reshardLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// A redirect is the error next returns; go-redis clears the
		// command's own before it follows it.
		err := next(ctx, cmd)
		o.reply(err)
		return err
	}
}

func (o *reshardLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			o.reply(c.Err())
		}
		return err
	}
}

// redlock returns a Redlock over the cluster (master 0, its client made as
// NewFromURLs makes it) and the plain masters (none when alone), the log of
// what it saw, and its cluster client.
func (g *reshardRig) redlock(alone bool, opts ...Option) (*Redlock, *reshardLog, *redis.ClusterClient) {
	g.t.Helper()
	m, err := ParseMaster(g.url)
	if err != nil {
		g.t.Fatal(err)
	}
	m.fewConns()
	log := &reshardLog{}
	cc := redis.NewClusterClient(m.Cluster)
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(log) })
	g.t.Cleanup(func() { cc.Close() })
	nodes := []Node{m.node(cc)}
	if !alone {
		nodes = append(nodes, nodesOf(g.t, g.plain)...)
	}
	opts = append([]Option{WithNodeTimeout(500 * time.Millisecond), WithObserver(log)}, opts...)
	return newRedlock(g.t, nodes, opts...), log, cc
}

// begin starts moving key's slot from the shard that serves it to the
// other one.
func (g *reshardRig) begin(ctx context.Context, key string) (slot, from, to int) {
	g.t.Helper()
	slot = int(keySlot(key))
	from, err := g.rc.ShardOfSlot(ctx, slot)
	if err != nil {
		g.t.Fatal(err)
	}
	to = 1 - from
	if err := g.rc.BeginMove(ctx, slot, from, to); err != nil {
		g.t.Fatal(err)
	}
	return slot, from, to
}

// migrate moves keys of slot from shard from to shard to (all, when none
// given).
func (g *reshardRig) migrate(ctx context.Context, slot, from, to int, keys ...string) {
	g.t.Helper()
	if err := g.rc.MigrateKeys(ctx, slot, from, to, keys...); err != nil {
		g.t.Fatal(err)
	}
}

// finish moves the slot's remaining keys and ends the move.
func (g *reshardRig) finish(ctx context.Context, slot, from, to int) {
	g.t.Helper()
	g.migrate(ctx, slot, from, to)
	if err := g.rc.EndMove(ctx, slot, from, to); err != nil {
		g.t.Fatal(err)
	}
}

// lockKeys are the keys a lock on key may have on a master: the key, its
// fence counter, its queue of waiting calls.
func lockKeys(key string) []string { return []string{key, FenceKey(key), WaitKey(key)} }

// on returns the keys of the lock on key that shard i holds, whether or
// not it serves them (CLUSTER GETKEYSINSLOT).
func (g *reshardRig) on(ctx context.Context, i int, key string) []string {
	g.t.Helper()
	ks, err := g.shard[i].ClusterGetKeysInSlot(ctx, int(keySlot(key)), 1000).Result()
	if err != nil {
		g.t.Fatalf("shard %d: GETKEYSINSLOT: %v", i, err)
	}
	var ours []string
	for _, k := range ks {
		if slices.Contains(lockKeys(key), k) {
			ours = append(ours, k)
		}
	}
	return ours
}

// stored is a key as one shard stores it.
type stored struct {
	shard int
	value string   // a string key's value
	holds []string // a hash's fields (an owned lock's)
	pttl  time.Duration
}

// has reports whether the key holds value: a string key's value, or one of
// an owned key's holds.
func (s stored) has(value string) bool {
	return s.value == value || slices.Contains(s.holds, value)
}

// serving returns k as the cluster serves it while the slot moves from
// shard from to shard to: from from when it has k, else from to (the
// target of ASK, read after ASKING); shard -1 when neither has it.
func (g *reshardRig) serving(ctx context.Context, from, to int, key, k string) stored {
	g.t.Helper()
	for _, i := range []int{from, to} {
		if slices.Contains(g.on(ctx, i, key), k) {
			return g.read(ctx, i, k)
		}
	}
	return stored{shard: -1}
}

// read reads k on shard i, each command after ASKING (which counts for
// one command, and which the slot's owner ignores).
func (g *reshardRig) read(ctx context.Context, i int, k string) stored {
	g.t.Helper()
	s := stored{shard: i}
	p := g.shard[i].Pipeline()
	p.Do(ctx, "asking")
	typ := p.Type(ctx, k)
	p.Do(ctx, "asking")
	pttl := p.PTTL(ctx, k)
	if _, err := p.Exec(ctx); err != nil {
		g.t.Fatalf("shard %d: TYPE, PTTL %s: %v", i, k, err)
	}
	s.pttl = pttl.Val()
	p = g.shard[i].Pipeline()
	p.Do(ctx, "asking")
	var err error
	switch typ.Val() {
	case "string":
		get := p.Get(ctx, k)
		_, err = p.Exec(ctx)
		s.value = get.Val()
	case "hash":
		hk := p.HKeys(ctx, k)
		_, err = p.Exec(ctx)
		s.holds = hk.Val()
	}
	if err != nil {
		g.t.Fatalf("shard %d: read %s: %v", i, k, err)
	}
	return s
}

// noLeftovers fails t unless, once the lock on key is gone, nothing of it
// is left on any shard or plain master: no queue, and no key but one that
// a failed attempt's rollback could not delete (a TRYAGAIN), which expires
// within ttl and holds none of the values released holds. The fence
// counter, which never expires, may stay.
func (g *reshardRig) noLeftovers(ctx context.Context, key string, ttl time.Duration, released func(value string) bool) {
	g.t.Helper()
	check := func(where, k string, s stored) {
		switch {
		case k == FenceKey(key):
		case k == key && s.holds == nil && s.pttl > 0 && s.pttl <= ttl && !released(s.value):
			g.t.Logf("%s: %s holds %q for %v more: an attempt's key its rollback did not delete", where, k, s.value, s.pttl)
		default:
			g.t.Errorf("%s: %s left behind: %+v", where, k, s)
		}
	}
	for i := range g.shard {
		for _, k := range g.on(ctx, i, key) {
			check(fmt.Sprint("shard ", i), k, g.read(ctx, i, k))
		}
	}
	for i, c := range g.plain {
		for _, k := range []string{key, WaitKey(key)} {
			if c.Exists(ctx, k).Val() != 0 {
				check(fmt.Sprint("plain master ", i), k, stored{value: c.Get(ctx, k).Val(), pttl: c.PTTL(ctx, k).Val()})
			}
		}
	}
}

// clusterVote checks the cluster master's part (master 0) in phase e
// against want and its error against reply; a Pending part (the phase was
// decided without it) is not checked unless decisive.
func clusterVote(t *testing.T, e PhaseEvent, want Outcome, reply string, decisive bool) Outcome {
	t.Helper()
	got := e.Nodes[0]
	if got.Outcome == Pending && !decisive {
		return Pending
	}
	// A vote answered TRYAGAIN is sent again until the node timeout
	// (batch.tryAgain): the slot stays mid-move here, so it fails, with
	// TRYAGAIN or with the timeout of its last try.
	timedOut := reply == "TRYAGAIN" && got.Err != nil && (errors.Is(got.Err, context.DeadlineExceeded) || strings.Contains(got.Err.Error(), "timeout"))
	if got.Outcome != want || (reply != "") != (got.Err != nil) || got.Err != nil && !strings.Contains(got.Err.Error(), reply) && !timedOut {
		t.Errorf("the cluster master's %s vote: %v (%v); want %v %s", e.Op, got.Outcome, got.Err, want, reply)
	}
	return got.Outcome
}

// TestClusterReshardVotes: acquire (plain, fenced, owned), Extend and
// Unlock on a Redis Cluster master whose lock's slot is in each stage of a
// resharding. A redirect (ASK, MOVED) is followed; TRYAGAIN, which a
// migrating slot answers to a script whose keys are not all on one shard
// (the fenced and owned acquire: key and counter; the release: key and
// queue), is sent again until the node timeout (batch.tryAgain), and while
// the slot stays mid-move counts as a failed vote and writes nothing. On
// Redis 7.0 that is
// every fenced or owned acquire and every release while the slot migrates,
// wherever its keys are, unless a waiter's queue makes the release's keys
// whole (TestClusterReshardHandOff).
func TestClusterReshardVotes(t *testing.T) {
	g := newReshardRig(t)
	ctx := context.Background()
	const ttl = 5 * time.Second
	for _, c := range []struct {
		op    string // acquire, fenced, fenced-new (no counter yet), owned, extend, unlock
		stage reshardStage
		want  Outcome // the cluster master's vote
		reply string  // its error, when it failed
		seen  string  // the reply its shards answered first
	}{
		{"acquire", stageMigrating, Succeeded, "", "ASK"}, // the key is nowhere: the target takes it
		{"acquire", stageMoved, Succeeded, "", "MOVED"},
		{"fenced", stageMigrating, Failed, "TRYAGAIN", "TRYAGAIN"}, // the counter on the source, the key nowhere
		{"fenced", stageAsk, Failed, "TRYAGAIN", "ASK"},            // the counter on the target: ASK, then TRYAGAIN there
		{"fenced-new", stageMigrating, Failed, "TRYAGAIN", "ASK"},  // neither anywhere: ASK, then TRYAGAIN there
		{"fenced", stageMoved, Succeeded, "", "MOVED"},
		{"owned", stageMigrating, Failed, "TRYAGAIN", "ASK"},
		{"owned", stageMoved, Succeeded, "", "MOVED"},
		{"extend", stageMigrating, Succeeded, "", ""}, // the key still on the source, which serves it
		{"extend", stageAsk, Succeeded, "", "ASK"},
		{"extend", stageMoved, Succeeded, "", "MOVED"},
		{"unlock", stageMigrating, Failed, "TRYAGAIN", "TRYAGAIN"}, // the key on the source, no queue
		{"unlock", stageAsk, Failed, "TRYAGAIN", "ASK"},            // the key on the target, no queue
		{"unlock", stageMoved, Succeeded, "", "MOVED"},
	} {
		for _, decisive := range []bool{false, true} {
			name := c.op + "/" + c.stage.String() + map[bool]string{false: "/quorum-without", true: "/decisive"}[decisive]
			t.Run(name, func(t *testing.T) {
				g.t = t
				r, log, cc := g.redlock(false)
				key := testKey(t)
				b := g.plain[1] // the plain master that refuses when the cluster decides
				var opts []Option
				switch c.op {
				case "fenced", "fenced-new":
					opts = append(opts, WithFencing())
				case "owned":
					opts = append(opts, WithOwner("job"))
				}
				opts = append(opts, WithTTL(ttl))

				// The lock before the move: the counter of a fenced one,
				// the lock that Extend and Unlock act on.
				var l *Lock
				var err error
				var token uint64
				switch c.op {
				case "fenced":
					if l, err = r.TryLock(ctx, key, opts...); err == nil {
						token = l.Fence()
						err = l.Unlock(ctx)
					}
				case "extend", "unlock":
					l, err = r.TryLock(ctx, key, opts...)
				default:
					err = cc.Get(ctx, key).Err() // the client learns the slots
					if errors.Is(err, redis.Nil) {
						err = nil
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				settle(r) // the cluster's vote, when the plain masters decided without it
				if l != nil && c.op != "fenced" {
					owner, err := g.rc.ShardOfSlot(ctx, int(keySlot(key)))
					if err != nil {
						t.Fatal(err)
					}
					if k := g.read(ctx, owner, key); !k.has(l.Value()) {
						t.Fatalf("the lock's key on the cluster before the move: %+v, want its value", k)
					}
				}

				slot, from, to := g.begin(ctx, key)
				switch c.stage {
				case stageAsk:
					g.migrate(ctx, slot, from, to, lockKeys(key)...)
				case stageMoved:
					g.finish(ctx, slot, from, to)
				}
				log.takeReplies()
				log.last("")
				counter := g.serving(ctx, from, to, key, FenceKey(key))
				if c.stage == stageMoved {
					counter = g.serving(ctx, to, to, key, FenceKey(key))
				}

				if decisive {
					switch c.op {
					case "extend", "unlock":
						err = b.Del(ctx, key).Err()
					default:
						err = b.Set(ctx, key, "another holder", time.Minute).Err()
					}
					if err != nil {
						t.Fatal(err)
					}
				}

				// The operation, and what the cluster master's vote says
				// about where its key is.
				var phase PhaseOp
				switch c.op {
				case "extend":
					phase, err = PhaseExtend, l.Extend(ctx, 6*ttl)
				case "unlock":
					phase, err = PhaseRelease, l.Unlock(ctx)
				default:
					phase = PhaseAcquire
					l, err = r.TryLock(ctx, key, opts...)
				}
				settle(r)
				e, ok := log.last(phase)
				if !ok {
					t.Fatalf("no %s phase observed", phase)
				}
				seen := log.takeReplies()
				t.Logf("%s: %v; the cluster master: %v %v; its shards answered %v", phase, err, e.Nodes[0].Outcome, e.Nodes[0].Err, seen)
				if c.seen == "" && len(seen) > 0 || c.seen != "" && (len(seen) == 0 || seen[0] != c.seen) {
					t.Errorf("the cluster's shards answered %v, want %q first: the slot is not in the stage the case is about", seen, c.seen)
				}
				vote := clusterVote(t, e, c.want, c.reply, decisive)
				// What the master did: its vote; for one that was not
				// awaited, what the case says it does (its twin, where the
				// cluster decides, shows that it does).
				did := vote
				if did == Pending {
					did = c.want
				}
				switch {
				case !decisive && err != nil:
					t.Fatalf("%s with both plain masters granting: %v", phase, err)
				case decisive && (err == nil) != (c.want == Succeeded):
					t.Errorf("%s with the cluster's vote deciding: %v, want it to succeed iff the cluster's vote is %v", phase, err, c.want)
				}
				var qe *QuorumError
				if errors.As(err, &qe) && len(qe.Masters) > 0 && qe.Masters[0].Outcome != vote {
					t.Errorf("the QuorumError lists the cluster master as %v, the observer as %v", qe.Masters[0].Outcome, vote)
				}

				// Where the slot is now: migrating (from serves what it
				// has, to the rest) or moved to to.
				src, dst := from, to
				if c.stage == stageMoved {
					src = to
				}
				k := g.serving(ctx, src, dst, key, key)
				switch {
				case phase == PhaseAcquire && did == Succeeded:
					if !k.has(l.Value()) || k.pttl <= 0 || k.pttl > ttl {
						t.Errorf("the cluster voted for the lock, but serves its key as %+v; want the lock's value %q, TTL up to %v", k, l.Value(), ttl)
					}
					if c.op == "fenced" {
						f := g.serving(ctx, src, dst, key, FenceKey(key))
						if n, _ := strconv.ParseUint(f.value, 10, 64); n <= token || l.Fence() <= token {
							t.Errorf("token %d after %d; the cluster's counter %+v", l.Fence(), token, f)
						}
					}
				case phase == PhaseAcquire:
					for i := range g.shard {
						for _, kk := range g.on(ctx, i, key) {
							if kk != FenceKey(key) {
								t.Errorf("the cluster's vote did not count, but shard %d has %s", i, kk)
							}
						}
					}
					if f := g.serving(ctx, src, dst, key, FenceKey(key)); f.value != counter.value {
						t.Errorf("the cluster's vote did not count, but its counter moved from %+v to %+v", counter, f)
					}
				case phase == PhaseExtend && did == Succeeded:
					if !k.has(l.Value()) || k.pttl <= ttl {
						t.Errorf("the cluster voted for the Extend to %v, but serves the key as %+v", 6*ttl, k)
					}
				case phase == PhaseExtend && did == Failed:
					if !k.has(l.Value()) || k.pttl > ttl {
						t.Errorf("the cluster's Extend failed, but it serves the key as %+v; want it as the lock left it", k)
					}
				case phase == PhaseRelease && did == Succeeded:
					if k.shard >= 0 {
						t.Errorf("the cluster released the key, but serves it as %+v", k)
					}
				case phase == PhaseRelease && did == Failed:
					// Left behind until its TTL, the lock's own.
					if !k.has(l.Value()) || k.pttl <= 0 || k.pttl > ttl {
						t.Errorf("the cluster's release failed, and it serves the key as %+v; want the lock's, expiring within %v", k, ttl)
					}
				}

				// The move completed, a client that knows nothing of it
				// finds the key where the vote put it.
				if c.stage != stageMoved {
					g.finish(ctx, slot, from, to)
				}
				fresh := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.rc.Addrs()})
				defer fresh.Close()
				v, gerr := fresh.Get(ctx, key).Result()
				if phase == PhaseAcquire && did == Succeeded && c.op != "owned" && v != l.Value() {
					t.Errorf("after the move the cluster has %q (%v), want %q", v, gerr, l.Value())
				}
				if phase == PhaseRelease && did == Failed {
					// The lock's key, left by the failed release: it goes at
					// its TTL; a release after the move takes it now.
					q := request{Op: reqRelease, Key: key, Value: l.Value()}
					execRequests(ctx, r.nodes[0], &q)
					if !q.OK || q.Err != nil {
						t.Errorf("a release after the move: %v, %v; want the lock's key there to release", q.OK, q.Err)
					}
				}
				if decisive {
					if err := b.Del(ctx, key).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if l != nil && phase != PhaseRelease {
					if err := l.Unlock(ctx); err != nil {
						t.Errorf("Unlock after the move: %v", err)
					}
					settle(r)
				}
				g.noLeftovers(ctx, key, ttl, func(v string) bool { return l != nil && v == l.Value() })
			})
		}
	}
}

// handoffOf returns the hand-off of w's Lock call waiting for key, or nil.
func handoffOf(w *Redlock, key string) *handoff {
	w.wake.handsMu.Lock()
	defer w.wake.handsMu.Unlock()
	for _, h := range w.wake.hands {
		if h.key == key {
			return h
		}
	}
	return nil
}

// queuedOn reports whether c (a plain master, or a shard that serves the
// key's slot) has the registration reg of hand-off h in key's queue.
func queuedOn(ctx context.Context, c *redis.Client, key string, h *handoff, reg uint64) bool {
	for _, m := range c.ZRange(ctx, WaitKey(key), 0, -1).Val() {
		if strings.Contains(m, "|"+h.value+"|") && strings.HasSuffix(m, "|"+strconv.FormatUint(reg, 10)) {
			return true
		}
	}
	return false
}

// waitRegistered waits until w's call waiting for key has a registration
// later than after in the queue on each of w's masters (the cluster's on
// shard, which serves the slot) and listens on shard; it returns the
// call's hand-off and that registration.
func (g *reshardRig) waitRegistered(ctx context.Context, w *Redlock, key string, shard int, after uint64) (*handoff, uint64) {
	g.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if h := handoffOf(w, key); h != nil {
			h.mu.Lock()
			reg := h.reg
			h.mu.Unlock()
			ok := reg > after && queuedOn(ctx, g.shard[shard], key, h, reg)
			for _, c := range g.plain[:len(w.nodes)-1] {
				ok = ok && queuedOn(ctx, c, key, h, reg)
			}
			ch := ShardChannel(w.wake.chans[0], key)
			if ok && g.shard[shard].PubSubShardNumSub(ctx, ch).Val()[ch] > 0 {
				return h, reg
			}
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("the waiting call is not registered on every master after 5s")
		}
	}
}

// TestClusterReshardHandOff: a holder's Unlock hands the key to a call of
// another Redlock queued for it, while the key's slot on the Redis Cluster
// master is in each stage of a resharding: with two plain masters besides
// the cluster, which hand the key on whatever the cluster does, and with
// the cluster as the Redlocks' only master, where the cluster's word
// alone ends the call's wait. Each time, a hand-off the call counts is
// the key set to its value where the cluster serves it.
//
//   - migrating, the key and its queue on the source: the release runs
//     there, but the key it frees the source no longer writes (a migrating
//     slot's source refuses a write to a key it does not have, also from a
//     script): it cannot hand the key on, and tells the call to try
//     instead (a nudge, not counted as a hand-off), which takes the key
//     by ASK on the target;
//   - ask, both moved to the target: the release runs there and hands the
//     key on, but the call listens on the source, which serves the slot's
//     shard channels until the move ends: nobody hears it, the target
//     takes the key back and the call off its queue, and the call waits
//     for its backoff;
//   - split, the key moved and the queue not: TRYAGAIN, the release fails
//     and the holder's key stays until its TTL;
//   - moved: the release follows MOVED and hands the key on on the
//     target, where the call subscribed again.
func TestClusterReshardHandOff(t *testing.T) {
	g := newReshardRig(t)
	ctx := context.Background()
	const ttl, backoff = 5 * time.Second, 10 * time.Second
	for _, c := range []struct {
		stage   reshardStage
		release Outcome // the cluster master's part in the Unlock
		reply   string  // its error, when it failed
		told    bool    // whether it tells the waiting call
		handed  bool    // whether it hands the key to it
	}{
		{stageMigrating, Succeeded, "", true, false},
		{stageAsk, Succeeded, "", false, false},
		{stageSplit, Failed, "TRYAGAIN", false, false},
		{stageMoved, Succeeded, "", true, true},
	} {
		for _, alone := range []bool{false, true} {
			name := c.stage.String() + map[bool]string{false: "/quorum-without", true: "/cluster-alone"}[alone]
			t.Run(name, func(t *testing.T) {
				g.t = t
				holder, log, _ := g.redlock(alone)
				waiter, wlog, _ := g.redlock(alone, WithBackoff(backoff, backoff))
				key := testKey(t)
				l, err := holder.TryLock(ctx, key, WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				slot := int(keySlot(key))
				from, err := g.rc.ShardOfSlot(ctx, slot)
				if err != nil {
					t.Fatal(err)
				}
				to := 1 - from
				settle(holder) // the cluster's vote, when the plain masters decided without it
				if k := g.read(ctx, from, key); k.value != l.Value() {
					t.Fatalf("the holder's key on the cluster: %+v, want its value %s", k, l.Value())
				}
				// Told, the call ends long before its backoff.
				wctx, cancel := context.WithTimeout(ctx, backoff/3)
				defer cancel()
				got := lockAsync(t, wctx, waiter, key, WithTTL(ttl))
				h, reg := g.waitRegistered(ctx, waiter, key, from, 0)

				if err := g.rc.BeginMove(ctx, slot, from, to); err != nil {
					t.Fatal(err)
				}
				switch c.stage {
				case stageAsk:
					g.migrate(ctx, slot, from, to, key, WaitKey(key))
				case stageSplit:
					g.migrate(ctx, slot, from, to, key)
				case stageMoved:
					g.finish(ctx, slot, from, to)
					// The call's subscription follows the slot, and the
					// call registers again there.
					h, reg = g.waitRegistered(ctx, waiter, key, to, reg)
				}
				log.last("")
				log.takeReplies()
				err = l.Unlock(ctx)
				settle(holder)
				e, ok := log.last(PhaseRelease)
				if !ok {
					t.Fatal("no release phase observed")
				}
				t.Logf("Unlock: %v; the cluster master: %v %v; its shards answered %v", err, e.Nodes[0].Outcome, e.Nodes[0].Err, log.takeReplies())
				clusterVote(t, e, c.release, c.reply, alone)
				if (err == nil) != (!alone || c.release == Succeeded) {
					t.Errorf("Unlock: %v; want an error only when the cluster alone failed it", err)
				}

				src, dst := from, to
				if c.stage == stageMoved {
					src = to
				}
				var w obtained
				if !alone || c.told {
					w = <-got
					if w.Err != nil {
						t.Fatalf("the waiting call: %v", w.Err)
					}
					byHand := strings.HasPrefix(w.Lock.Value(), h.value+"#")
					if byHand != (!alone || c.handed) {
						t.Errorf("the waiting call took the key by hand-off: %v (%s), want %v", byHand, w.Lock.Value(), !alone || c.handed)
					}
				}
				k := g.serving(ctx, src, dst, key, key)
				h.mu.Lock()
				counted := h.seen[0] && h.reg == reg
				h.mu.Unlock()
				t.Logf("the waiting call counted the cluster's hand-off: %v; the cluster serves the key as %+v; its shards answered it %v", counted, k, wlog.takeReplies())
				switch {
				case counted && !k.has(handValue(h.value, reg)) || k.pttl > ttl:
					t.Errorf("the waiting call counted the cluster's hand-off, but the cluster serves the key as %+v", k)
				case alone && counted != c.handed:
					t.Errorf("the waiting call counted the cluster's hand-off: %v, want %v", counted, c.handed)
				case alone && c.told && !c.handed && !k.has(w.Lock.Value()):
					t.Errorf("the waiting call took the key by its own vote, but the cluster serves it as %+v", k)
				case c.release == Failed && (!k.has(l.Value()) || k.pttl <= 0):
					t.Errorf("the cluster's release failed, and it serves the key as %+v; want the holder's, expiring", k)
				}

				// The move completed, the holder's key a failed release
				// left goes, the waiting call ends (holding the key by now,
				// or not), and nothing of the lock is left.
				if c.stage != stageMoved {
					g.finish(ctx, slot, from, to)
				}
				if c.release == Failed {
					q := request{Op: reqRelease, Key: key, Value: l.Value()}
					execRequests(ctx, holder.nodes[0], &q)
					if !q.OK || q.Err != nil {
						t.Errorf("a release after the move: %v, %v; want the holder's key there to release", q.OK, q.Err)
					}
				}
				if w.Lock == nil {
					cancel()
					w = <-got
				}
				if w.Lock != nil {
					if err := w.Lock.Unlock(ctx); err != nil {
						t.Errorf("the waiter's Unlock: %v", err)
					}
				}
				settle(holder)
				settle(waiter)
				g.noLeftovers(ctx, key, ttl, func(v string) bool {
					return v == l.Value() || strings.HasPrefix(v, h.value+"#") || w.Lock != nil && v == w.Lock.Value()
				})
			})
		}
	}
}
