package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis master, as the quorum algorithm sees it.
//
// A Redlock sends every request to a master through one first-in first-out
// lane: it calls Exec with the requests that queued while the previous call
// ran, in the order they queued, and never calls Exec on the same Node from
// two lanes of one Redlock at once. Exec must run them on the master in that
// order — each request reaches the master only after the ones before it —
// so that a release never overtakes the acquire it follows.
//
// [NewNode] makes one from a go-redis client (the batch goes out as one
// pipeline on one connection). [NodeFunc] makes one from a function that runs
// one request at a time, for fault-injecting wrappers and other clients.
type Node interface {
	// Name identifies the master in errors and reports: its address and
	// database, or for a master that is a replicated set or a cluster, the
	// addresses and names that identify it (see [NewNode]); never its
	// credentials, never a pointer. Two Nodes with the same Name are the
	// same master.
	Name() string

	// Exec runs reqs on the master in order and fills in each one's reply
	// (OK, Fence, Err). It returns once every request has its reply or its
	// error, and promptly once ctx is done: ctx carries the deadline of the
	// batch (the latest of its requests'). Err means the outcome is unknown:
	// the request may or may not have taken effect.
	Exec(ctx context.Context, reqs []*Request)

	// Traits declares how the Node reaches its master's keys and what it
	// promises; the core asks nothing else of a Node's kind. A Node that
	// wraps another (counting, tracing, injecting faults) returns the inner
	// one's, which embedding the inner Node does: see [Traits].
	Traits() Traits

	// Subscribe listens on channel on the master, for the wake-ups and
	// hand-offs other processes' releases send this Redlock's waiting calls
	// (docs/internals.md, "Wake-ups and hand-offs between processes"): deliver gets each message, and a Message with
	// Resubscribed set each time the subscription is made again after it
	// broke (messages may have been lost meanwhile). deliver is called from
	// one goroutine at a time, never after Close returned.
	//
	// It returns once the master confirmed the subscription (err nil), or
	// with ctx's end or the failure that kept it from confirming. With an
	// error it still returns a Subscription when it keeps trying (a master
	// down: deliver then gets Resubscribed once it is made); the caller
	// closes it. A Node that cannot deliver wake-ups returns an error
	// wrapping [errors.ErrUnsupported] and no Subscription: its waiting
	// calls retry with their backoff.
	Subscribe(ctx context.Context, channel string, deliver func(Message)) (Subscription, error)
}

// Traits is what a [Node] declares about itself. The zero value is a Node
// that reaches one server and may hold a reply past its context's deadline.
type Traits struct {
	// Routing is how commands reach the master's keys.
	Routing Routing
	// KeepsDeadlines promises that Exec returns by its context's deadline
	// whatever the master does (go-redis's ContextTimeoutEnabled): a caller
	// waiting for its phase may then run its batch itself (see lane). A
	// wrapper that can hold a reply past the deadline must not promise it.
	KeepsDeadlines bool
	// NameHint, when Name cannot tell this master from another of its kind,
	// says why and what would; [New] gives it when two Nodes share a name.
	NameHint string
}

// Routing is how a Node's commands reach the master's keys.
type Routing uint8

const (
	// RouteServer: one server (a Sentinel-managed primary included); every
	// command of a batch, whatever keys it names, goes on one connection,
	// in order.
	RouteServer Routing = iota
	// RouteByKey: shards that each hold some of the keys (a Redis Cluster,
	// a Ring); each command goes to the shard of its key. A command that
	// names no key (WAIT) may reach another shard than the vote before it,
	// so [WithReplicaConfirm] is refused on such a master.
	RouteByKey
)

// Message is what a [Node.Subscribe] subscription delivers.
type Message struct {
	Payload string
	// Resubscribed: no message; the subscription was made again after it
	// broke.
	Resubscribed bool
}

// Subscription is a subscription [Node.Subscribe] made.
type Subscription interface {
	// Close ends the subscription; once it returned, deliver is not called
	// again.
	Close() error
}

// Op is what a [Request] asks of a master.
type Op uint8

const (
	// OpAcquire sets Key to Value for TTL if Key does not exist (SET Key
	// Value NX PX TTL); OK reports whether it did.
	OpAcquire Op = iota + 1
	// OpAcquireFenced does what OpAcquire does and, when Key was set, raises
	// the fence counter [FenceKey](Key) to max(counter+1, the master's clock
	// in µs); Fence is the new counter, and OK reports whether Key was set.
	OpAcquireFenced
	// OpRaiseFence raises the fence counter of Key to at least Token while
	// Key still holds Value; OK reports whether Key still held Value.
	OpRaiseFence
	// OpExtend resets Key's TTL to TTL while Key still holds Value; OK
	// reports whether it did. A key that is gone is not created again,
	// unless Repair is set.
	OpExtend
	// OpRelease deletes Key while it still holds Value; OK reports whether
	// it did.
	OpRelease
)

var opNames = [...]string{OpAcquire: "acquire", OpAcquireFenced: "acquire-fenced",
	OpRaiseFence: "raise-fence", OpExtend: "extend", OpRelease: "release"}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Request is one request to a master and, once [Node.Exec] ran it, its
// reply. A refusal (OK false with a nil Err) means the master answered and
// the key is not ours; an Err means the outcome is unknown.
type Request struct {
	Op    Op
	Key   string
	Value string
	TTL   time.Duration // OpAcquire, OpAcquireFenced, OpExtend: whole milliseconds
	Token uint64        // OpRaiseFence
	// Owner, when not empty, makes the request a step of an owned hold
	// ([WithOwner]): Key is then a hash of the owner's holds, each named by
	// its Value, and the request adds, extends, confirms or drops this hold
	// alone. Only OpAcquire and OpAcquireFenced (entering) read Owner's
	// value; the others only need it set.
	Owner string
	// Waiter, on OpRelease, is the releasing Redlock's wake-up channel on
	// this master: a release that frees Key tells the first Lock call
	// queued in Key's queue of waiting calls ([WaitKey]), skipping
	// Waiter's own. Empty: no wake-ups. A Node that cannot deliver wake-ups
	// may ignore Waiter, Place, Hand, Reg, Behind and Queued, and leave
	// Woke false.
	Waiter string
	// Hand, on OpRelease, is the hand-off value of the Lock call that sends
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
	// Queued, with Hand, is the place the call's registrations so far are
	// queued at (Place, unless an Unlock moves the call behind the next
	// holder): the release takes them off there, and reads no other entry.
	Queued int64
	// Repair, on an OpExtend of a plain lock (Owner empty), also sets Key
	// to Value for TTL where Key does not exist, and reports OK then: the
	// request auto-extend ([WithAutoExtend]) sends after a renewal a
	// quorum confirmed, so that a lock held on a bare quorum spreads again
	// to the masters that lost its key (lua/extend.lua). A Node may ignore
	// it: the extend alone is safe, the lock only stays less robust to a
	// later fault on a minority.
	Repair bool
	// Gate, on a vote (OpAcquire, OpAcquireFenced, OpRaiseFence,
	// OpExtend), is the restart gate ([WithRestartGate]): the vote counts
	// only from a master that has been up at least Gate. The go-redis Node
	// sends the vote as one script that checks the gate first
	// (lua/gate.lua) and does nothing else on a master up for less, and
	// fails that vote with an error wrapping [ErrRestartGate]. 0: no gate.
	// A Node of your own ([NodeFunc]) that ignores Gate gives no gate. On
	// a waiting call's release (Hand set) it is the call's gate: a rollback
	// that finds the key free where the gate is closed only nudges the call
	// it wakes (lua/handoff.lua).
	Gate time.Duration
	// Replicas, on a vote, makes it count only once WAIT Replicas has
	// confirmed it on that many of the master's replicas, within the
	// request's deadline ([WithReplicaConfirm]); a master whose replicas
	// did not confirm in time fails with an error wrapping
	// [ErrNotReplicated]. 0: the master's own reply counts. A Node of your
	// own that ignores Replicas gives no confirmation.
	Replicas int

	OK    bool
	Fence uint64 // OpAcquireFenced: the fence counter when OK
	Woke  bool   // OpRelease: it freed the key and woke a waiting call, or handed it the key
	Err   error

	// Key, Value and TTL in milliseconds as interface values, made once for
	// every master's command of a phase (see boxArgs); nil: not yet.
	key, value, ms any
	// gate is Gate in milliseconds, boxed the same way (gated votes).
	gate any
	// OpRelease: WaitKey(Key) and Waiter, boxed the same way; waitFor is
	// the Key waitKey was made from.
	waitKey, waiter any
	waitFor         string
	// rollback, on OpRelease, says the release undoes a failed attempt: a
	// call it wakes is only nudged (lua/handon.lua).
	rollback bool
	// lock is the lock an OpExtend extends, told when the request fails
	// (see [Lock.strayed]); nil for the other Ops.
	lock *Lock
	// deadline is the request's own, of its phase (the batch's context
	// carries the latest of its requests'); zero when unknown.
	deadline time.Time
}

// boxArgs fills in q's boxed arguments, keeping those already made.
func (q *Request) boxArgs() {
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
	if q.Op == OpRelease && q.waitKey == nil {
		q.waitKey, q.waiter, q.waitFor = WaitKey(q.Key), q.Waiter, q.Key
	}
}

// releaseArgs returns q's wait key and Waiter as interface values: those
// boxArgs made while they still hold q's fields, else new ones.
func (q *Request) releaseArgs() (waitKey, waiter any) {
	waitKey, waiter = q.waitKey, q.waiter
	if _, ok := waitKey.(string); !ok || q.waitFor != q.Key {
		waitKey = WaitKey(q.Key)
	}
	return waitKey, boxed(waiter, q.Waiter)
}

// FenceKey is the name of the fence counter kept on each master next to key:
// key + ":fence" when key has a Redis Cluster hash tag (a non-empty {…},
// the first '{' to the first '}' after it), else "fence:{" + key + "}" (or,
// for a key with a '}' but no tag, "fence:{T}" + key with T a short tag of
// key's hash slot). Either way it is in key's hash slot, so that a master
// that is a Redis Cluster runs the scripts that touch both. Earlier versions
// kept the counter of a key without a tag at key + ":fence": the README says
// what the move means ("Fencing tokens").
//
// It never expires: deleting it while the lock is in use can hand out a token
// that does not increase (the clock floor limits the damage to restarts).
// Lock and TryLock refuse keys of either shape (ending in ":fence", or
// starting with "fence:{") with a [*ConfigError], so that no lock is ever
// taken on another lock's counter.
func FenceKey(key string) string { return derivedKey(key, "fence") }

// WaitKey is the name of the queue, kept on each master next to key, of the
// Lock calls waiting for key, in the order they started: a release that
// frees key hands it to the first one still listening (or wakes it, for
// fenced and owned locks). It expires a minute after the last call queued.
// It is named as [FenceKey] is, with "waiters" for "fence": key +
// ":waiters" when key has a hash tag, else "waiters:{" + key + "}", in key's
// hash slot either way. Lock and TryLock refuse keys of either shape with a
// [*ConfigError].
func WaitKey(key string) string { return derivedKey(key, "waiters") }

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
	//go:embed lua/hold.lua
	holdLua string
	//go:embed lua/handoff.lua
	handoffLua string
	//go:embed lua/handon.lua
	handonLua string
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
	raiseFenceSrc    any = script(getLua, raiseFenceLua)
	holdSrc          any = script(handonLua, fenceLua, holdLua)
	handoffSrc       any = script(handonLua, gateLua, getLua, handoffLua)

	// A vote behind the restart gate is one script: the gate's check first
	// (gated.lua, reading the gate from the last argument), then the vote.
	gatedAcquireSrc       any = script(gateLua, gatedLua, acquireLua)
	gatedExtendSrc        any = script(gateLua, gatedLua, getLua, extendLua)
	gatedAcquireFencedSrc any = script(gateLua, gatedLua, fenceLua, acquireFencedLua)
	gatedRaiseFenceSrc    any = script(gateLua, gatedLua, getLua, raiseFenceLua)
	gatedHoldSrc          any = script(gateLua, gatedLua, handonLua, fenceLua, holdLua)
)

// script returns Lua files' code, one after the other, without comment
// lines and indentation: the master hashes every EVAL's script. A routine
// that several scripts need is a file of its own put in front of each
// (handon.lua, fence.lua, get.lua), never a copy.
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

// redisNode is the Node [NewNode] returns.
type redisNode struct {
	c    redis.UniversalClient
	name string
	// unnamed, when not empty, says why name does not tell this master from
	// another of its kind, and what would: [New] says so when two collide.
	unnamed string
	// keepsDeadlines: c puts its context's deadline on the socket
	// (ContextTimeoutEnabled), so Exec returns by the deadline (see lane).
	keepsDeadlines bool
	// kind is how c reaches the master's keys (see nodeKind).
	kind nodeKind
}

// nodeKind is how a go-redis client reaches its master's keys, recorded by
// NewNode; the core reads it only as the Node's Traits.
type nodeKind uint8

const (
	kindServer  nodeKind = iota // one server: a *redis.Client, Sentinel-managed or not
	kindCluster                 // a *redis.ClusterClient: keys spread over shards by hash slot
	kindRing                    // a *redis.Ring: keys spread over shards by go-redis's own hash
)

// kindOf is the kind of master c reaches.
func kindOf(c redis.UniversalClient) nodeKind {
	switch c.(type) {
	case *redis.ClusterClient:
		return kindCluster
	case *redis.Ring:
		return kindRing
	}
	return kindServer
}

// Traits: a Redis Cluster and a Ring route by key; the client keeps
// deadlines when made with ContextTimeoutEnabled.
func (n *redisNode) Traits() Traits {
	t := Traits{KeepsDeadlines: n.keepsDeadlines, NameHint: n.unnamed}
	if n.kind != kindServer {
		t.Routing = RouteByKey
	}
	return t
}

var _ Node = (*redisNode)(nil)

// NewNode returns a Node that talks to the master behind c. Each batch of
// requests goes out as one pipeline on one connection. It returns nil when c
// is nil, which [New] reports as an error.
//
// The Node is named by what c was made for, never with credentials:
//
//   - a *redis.Client for one server: host:port/db (a Unix socket: its path/db);
//   - a *redis.ClusterClient: cluster:host:port,host:port (its seed
//     addresses, sorted);
//   - a *redis.Ring: ring:shard=host:port,…/db (its shards, sorted by name).
//
// A client made by redis.NewFailoverClient (Sentinel) does not tell its
// master name and Sentinels: make its Node with [NewFailoverNode] instead.
// Two clients given different seed addresses of one cluster get different
// names: New cannot tell they are the same master.
//
// The Redlock keeps every deadline it promises whatever the client's
// settings, but a request to a frozen master holds that master's lane until
// the client gives up on it: make the client with ContextTimeoutEnabled: true
// so that this is the node timeout rather than the ReadTimeout (3 s by
// default, times MaxRetries). MaxRetries: -1 and DialerRetries: 1 make a dead
// master fail at once; [ParseMasterURL] and [ParseMaster] set all three.
func NewNode(c redis.UniversalClient) Node {
	if c == nil || isNil(c) {
		return nil
	}
	name, unnamed, keeps := clientName(c)
	return &redisNode{c: c, name: name, unnamed: unnamed, keepsDeadlines: keeps, kind: kindOf(c)}
}

// NewFailoverNode returns a Node that talks to the Sentinel-managed master
// behind c, a client made by redis.NewFailoverClient(opt) (or by
// redis.NewUniversalClient with a MasterName): as [NewNode] does, but named
// sentinel:MASTER@SENTINEL,SENTINEL/db — opt's master name, its Sentinels'
// addresses sorted, and the database — which go-redis does not let NewNode
// read from c. Two Sentinel-managed masters get different names, the same
// one twice the same name. When c is not a failover client, opt is ignored
// and c is named as NewNode names it. It returns nil when c or opt is nil.
func NewFailoverNode(c redis.UniversalClient, opt *redis.FailoverOptions) Node {
	if c == nil || isNil(c) || opt == nil {
		return nil
	}
	n := NewNode(c).(*redisNode)
	if n.unnamed != "" {
		db := opt.DB
		if fc, ok := c.(*redis.Client); ok {
			db = fc.Options().DB
		}
		n.name, n.unnamed = failoverName(opt.MasterName, opt.SentinelAddrs, db), ""
	}
	return n
}

// failoverAddr is the address go-redis gives every client that
// redis.NewFailoverClient makes: the master's is known only once connected.
const failoverAddr = "FailoverClient"

// clientName names the master behind c without its credentials. When the
// name cannot tell c's master from another one of its kind, unnamed says
// why and what would. keeps reports whether c was made with
// ContextTimeoutEnabled: it then bounds every wait (the pool, the dial, the
// socket) by its context's deadline.
func clientName(c any) (name, unnamed string, keeps bool) {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		if o.Addr == failoverAddr {
			return "sentinel:?/" + strconv.Itoa(o.DB),
				"Sentinel-managed clients (redis.NewFailoverClient) do not tell their master name and Sentinels: make each Node with NewFailoverNode(client, its FailoverOptions)",
				o.ContextTimeoutEnabled
		}
		return o.Addr + "/" + strconv.Itoa(o.DB), "", o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		if len(o.Addrs) == 0 {
			return "cluster:?", "cluster clients without seed addresses (redis.NewFailoverClusterClient, ClusterSlots) do not tell which cluster they reach: wrap each with NodeFunc under a name of your own",
				o.ContextTimeoutEnabled
		}
		return "cluster:" + strings.Join(sortedSet(o.Addrs), ","), "", o.ContextTimeoutEnabled
	case *redis.Ring:
		o := c.Options()
		shards := make([]string, 0, len(o.Addrs))
		for shard, addr := range o.Addrs {
			shards = append(shards, shard+"="+addr)
		}
		return "ring:" + strings.Join(sortedSet(shards), ",") + "/" + strconv.Itoa(o.DB), "", o.ContextTimeoutEnabled
	case fmt.Stringer:
		return c.String(), "", false
	}
	return fmt.Sprintf("%T", c), fmt.Sprintf("clients of type %T do not tell which master they reach: wrap each with NodeFunc under a name of your own", c), false
}

// failoverName names a Sentinel-managed master: its name, its Sentinels and
// the database.
func failoverName(master string, sentinels []string, db int) string {
	return "sentinel:" + master + "@" + strings.Join(sortedSet(sentinels), ",") + "/" + strconv.Itoa(db)
}

// sortedSet returns a sorted copy of ss without repeats: a name does not
// depend on the order the addresses were given in.
func sortedSet(ss []string) []string {
	ss = slices.Clone(ss)
	slices.Sort(ss)
	return slices.Compact(ss)
}

func (n *redisNode) Name() string { return n.name }

// Exec sends reqs as one pipeline (a single request as a plain command) and
// reads each reply strictly (reply.go). A vote with a Gate is one script,
// the gate's check and the vote (see command). The votes with Replicas are
// confirmed together by one WAIT at the end of the pipeline (see
// replicaWait). A request of an unknown Op is not sent: its Err says so.
func (n *redisNode) Exec(ctx context.Context, reqs []*Request) {
	if len(reqs) == 1 && !replicated(reqs[0]) {
		if cmd := command(ctx, reqs[0]); cmd != nil {
			_ = n.c.Process(ctx, cmd)
			readReply(reqs[0], cmd)
		}
		return
	}
	cmds := make([]redis.Cmder, len(reqs))
	var rw replicaWait
	pipe := n.c.Pipeline()
	for i, q := range reqs {
		if replicated(q) && n.kind != kindServer {
			// New refuses the option on such masters; this is for a Node
			// used on its own.
			q.OK, q.Err = false, errKeyRoutedWait // not sent
			continue
		}
		if cmds[i] = command(ctx, q); cmds[i] == nil {
			continue
		}
		_ = pipe.Process(ctx, cmds[i])
		if replicated(q) {
			rw.add(ctx, q)
		}
	}
	wait := rw.command(ctx)
	if wait != nil {
		_ = pipe.Process(ctx, wait)
	}
	_, _ = pipe.Exec(ctx) // each command holds its own reply or error
	var acks int64
	var werr error
	if wait != nil {
		acks, werr = wait.Int64()
	}
	for i, q := range reqs {
		if cmds[i] == nil {
			continue
		}
		readReply(q, cmds[i])
		if wait != nil && replicated(q) {
			confirmed(q, acks, werr)
		}
	}
}

// replicated reports whether q is a vote that its master's replicas must
// confirm.
func replicated(q *Request) bool { return q.Replicas > 0 && q.Op != OpRelease }

// errKeyRoutedWait fails a vote that replicas must confirm on a master that
// is a Redis Cluster or a Ring: go-redis sends a WAIT, which names no key,
// to a shard of its own choosing, not after the vote on the key's shard.
var errKeyRoutedWait = errors.New("replica confirmation (WithReplicaConfirm) is not available on a Redis Cluster or Ring master: WAIT names no key, so it would not follow the vote on the key's shard")

// replicaWait is the one WAIT that confirms the replicated votes of a batch
// (issue 31, item 4). WAIT n waits until n replicas have acknowledged every
// write this connection made before it, so one WAIT after the batch's last
// vote confirms all of them: the batch costs one replica round trip, not
// one per vote. It asks for the most replicas any of the votes needs and
// counts each vote confirmed when the acknowledgements reach its own
// Replicas. It goes at the end of the pipeline, so requests after the last
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
func (w *replicaWait) add(ctx context.Context, q *Request) {
	w.replicas = max(w.replicas, q.Replicas)
	d := q.deadline
	if d.IsZero() {
		d, _ = ctx.Deadline()
	}
	if !d.IsZero() && (w.deadline.IsZero() || d.Before(w.deadline)) {
		w.deadline = d
	}
}

// command is the batch's WAIT, or nil when no vote needs one.
func (w *replicaWait) command(ctx context.Context) *redis.Cmd {
	if w.replicas == 0 {
		return nil
	}
	return redis.NewCmd(ctx, "wait", w.replicas, waitTimeout(w.deadline))
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

// confirmed fails q, a vote its batch's WAIT followed, unless that WAIT
// answered (acks, err) with at least q.Replicas replicas. A vote the master
// refused stays refused.
func confirmed(q *Request, acks int64, err error) {
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
func gated(q *Request) bool { return q.Gate > 0 && q.Op != OpRelease }

// gateRefusal is the error a gated vote's script answers when the master
// has been up for less than the gate: "GATE" and the ms left (gate.lua).
const gateRefusal = "GATE "

// closedGate reads err, the reply error of q's gated vote: the gate's
// refusal as a [*gateError], any other error as it is.
func closedGate(q *Request, err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), gateRefusal); ok {
		if left, perr := strconv.ParseInt(msg, 10, 64); perr == nil && left > 0 {
			return &gateError{left: time.Duration(left) * time.Millisecond, gate: q.Gate}
		}
		return badReplyf("restart gate answered %s, want GATE and the ms left", show(err.Error()))
	}
	return err
}

// command is the Redis command of q, or nil (and q.Err set) for an unknown
// Op. It uses the arguments a phase boxed once for every master only while
// they still hold q's fields: a wrapping Node may have changed the request.
func command(ctx context.Context, q *Request) redis.Cmder {
	key, value := boxed(q.key, q.Key), boxed(q.value, q.Value)
	ms := q.ms
	if m, ok := ms.(int64); !ok || m != q.TTL.Milliseconds() {
		ms = q.TTL.Milliseconds()
	}
	if gated(q) {
		return gatedCommand(ctx, q, key, value, ms)
	}
	if q.Owner != "" {
		return holdCommand(ctx, q, key, value, ms)
	}
	switch q.Op {
	case OpAcquire:
		return redis.NewStatusCmd(ctx, "set", key, value, "px", ms, "nx")
	case OpAcquireFenced:
		return redis.NewCmd(ctx, "eval", acquireFencedSrc, 2, key, FenceKey(q.Key), value, ms)
	case OpRaiseFence:
		return redis.NewCmd(ctx, "eval", raiseFenceSrc, 2, key, FenceKey(q.Key), value, q.Token)
	case OpExtend: // go-redis sends a bool as 1 or 0
		return redis.NewCmd(ctx, "eval", extendSrc, 1, key, value, ms, q.Repair)
	case OpRelease:
		wk, waiter := q.releaseArgs()
		if q.Hand == "" {
			return redis.NewCmd(ctx, "eval", releaseSrc, 2, key, wk, value, waiter, q.rollback)
		}
		return redis.NewCmd(ctx, "eval", handoffSrc, 2, key, wk, value, waiter, q.Place, q.Hand, q.Reg, q.TTL.Milliseconds(), q.Behind, q.Queued, gateArg(q))
	}
	return unknownOp(q)
}

// holdCommand is the command of q, a step of an owned hold (hold.lua).
func holdCommand(ctx context.Context, q *Request, key, value, ms any) redis.Cmder {
	switch q.Op {
	case OpAcquire:
		return redis.NewCmd(ctx, "eval", holdSrc, 2, key, FenceKey(q.Key), "enter", value, ms, q.Owner, 0)
	case OpAcquireFenced:
		return redis.NewCmd(ctx, "eval", holdSrc, 2, key, FenceKey(q.Key), "enter", value, ms, q.Owner, 1)
	case OpRaiseFence:
		return redis.NewCmd(ctx, "eval", holdSrc, 2, key, FenceKey(q.Key), "fence", value, q.Token)
	case OpExtend:
		return redis.NewCmd(ctx, "eval", holdSrc, 1, key, "extend", value, ms)
	case OpRelease:
		wk, waiter := q.releaseArgs()
		return redis.NewCmd(ctx, "eval", holdSrc, 2, key, wk, "release", value, waiter, q.rollback)
	}
	return unknownOp(q)
}

// gatedCommand is the command of q, a vote behind a restart gate: its
// script with the gate's check in front, the gate in ms as its last
// argument.
func gatedCommand(ctx context.Context, q *Request, key, value, ms any) redis.Cmder {
	gate := gateArg(q)
	if q.Owner != "" {
		switch q.Op {
		case OpAcquire:
			return redis.NewCmd(ctx, "eval", gatedHoldSrc, 2, key, FenceKey(q.Key), "enter", value, ms, q.Owner, 0, gate)
		case OpAcquireFenced:
			return redis.NewCmd(ctx, "eval", gatedHoldSrc, 2, key, FenceKey(q.Key), "enter", value, ms, q.Owner, 1, gate)
		case OpRaiseFence:
			return redis.NewCmd(ctx, "eval", gatedHoldSrc, 2, key, FenceKey(q.Key), "fence", value, q.Token, gate)
		case OpExtend:
			return redis.NewCmd(ctx, "eval", gatedHoldSrc, 1, key, "extend", value, ms, gate)
		}
		return unknownOp(q)
	}
	switch q.Op {
	case OpAcquire:
		return redis.NewCmd(ctx, "eval", gatedAcquireSrc, 1, key, value, ms, gate)
	case OpAcquireFenced:
		return redis.NewCmd(ctx, "eval", gatedAcquireFencedSrc, 2, key, FenceKey(q.Key), value, ms, gate)
	case OpRaiseFence:
		return redis.NewCmd(ctx, "eval", gatedRaiseFenceSrc, 2, key, FenceKey(q.Key), value, q.Token, gate)
	case OpExtend:
		return redis.NewCmd(ctx, "eval", gatedExtendSrc, 1, key, value, ms, q.Repair, gate)
	}
	return unknownOp(q)
}

// gateArg is q.Gate in ms as an interface value: the one boxArgs made while
// it still holds q.Gate, else a new one.
func gateArg(q *Request) any {
	if g, ok := q.gate.(int64); ok && g == q.Gate.Milliseconds() {
		return q.gate
	}
	return q.Gate.Milliseconds()
}

// unknownOp fails q, a request of an Op the Node does not know, unsent.
func unknownOp(q *Request) redis.Cmder {
	q.OK, q.Fence, q.Err = false, 0, fmt.Errorf("redlock: unknown request %v: not sent", q.Op)
	return nil
}

// boxed returns b when it holds s, else s as a new interface value.
func boxed(b any, s string) any {
	if v, ok := b.(string); ok && v == s {
		return b
	}
	return s
}

// readReply fills in q's reply from cmd's.
func readReply(q *Request, cmd redis.Cmder) {
	if err := cmd.Err(); gated(q) && err != nil && !errors.Is(err, redis.Nil) {
		q.OK, q.Fence, q.Err = false, 0, closedGate(q, err)
		return
	}
	switch c := cmd.(type) {
	case *redis.StatusCmd:
		q.OK, q.Err = setReply(c.Result())
	case *redis.Cmd:
		if q.Op == OpAcquireFenced {
			q.Fence, q.Err = fence(q.Key, c.Val(), c.Err())
			q.OK = q.Err == nil && q.Fence > 0
			return
		}
		if q.Op == OpRelease {
			q.OK, q.Woke, q.Err = released(c.Result())
			return
		}
		q.OK, q.Err = flag(c.Result())
	}
}

// NodeFunc returns a Node named name that runs each request of a batch by
// calling do, one at a time and in order; do fills in the request's reply.
// A request whose turn comes after ctx ended is not passed to do: its Err is
// ctx's error.
//
// It suits a client that has no pipelines; do must be safe for concurrent
// use when the Node serves several Redlocks. Its Traits are the zero
// value's and it delivers no wake-ups: a wrapper around another Node that
// keeps the inner one's wake-ups, lanes and routing embeds it and
// overrides Exec alone (see [Node]).
func NodeFunc(name string, do func(ctx context.Context, req *Request)) Node {
	if do == nil {
		return nil
	}
	return funcNode{name: name, do: do}
}

type funcNode struct {
	name string
	do   func(ctx context.Context, req *Request)
}

func (n funcNode) Name() string { return n.name }

// Traits: one server, no promise on deadlines.
func (funcNode) Traits() Traits { return Traits{} }

// Subscribe: a NodeFunc delivers no wake-ups.
func (funcNode) Subscribe(context.Context, string, func(Message)) (Subscription, error) {
	return nil, fmt.Errorf("a NodeFunc delivers no wake-ups: %w", errors.ErrUnsupported)
}

func (n funcNode) Exec(ctx context.Context, reqs []*Request) {
	for _, q := range reqs {
		if err := ctx.Err(); err != nil {
			q.Err = err
			continue
		}
		n.do(ctx, q)
	}
}

// checkReply turns what a Node filled in into what the tally may count: a
// fenced acquire that claims success must carry a usable token, and an
// error wins over a success. Node implementations other than ours may get
// these wrong; a master that did must count as failed, never as a success.
func checkReply(q *Request) {
	switch {
	case q.Err != nil:
		q.OK = false
	case q.OK && q.Op == OpAcquireFenced && (q.Fence == 0 || q.Fence > maxFence):
		q.OK, q.Err = false, badReplyf("fenced acquire succeeded with token %d, want one in [1, 2^53]", q.Fence)
	}
}

// isNil reports whether v is an interface holding a nil pointer (or other nil
// reference), which a plain == nil check misses.
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
