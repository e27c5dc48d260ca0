// Package redlock takes one lock across N independent Redis masters with the
// Redlock quorum algorithm, and says plainly what that lock does and does not
// guarantee.
//
// An acquire sends SET key value NX PX ttl to every master at once, each
// request bounded by a per-node timeout, and decides as soon as the outcome is
// known: success once a quorum (N/2+1) set the key, failure once too many
// refused or failed. The lock is valid for the TTL less the time the acquire
// took and a clock drift allowance, measured on Go's monotonic clock
// ([Lock.Until]). A failed attempt is rolled back on every master, including
// those that timed out, before Lock retries.
//
// Each master is a [Node]; [NewNode] wraps a go-redis client. Every request
// to a master — acquire, extend, renewal, release, rollback — goes through
// that master's first-in first-out lane, so a release never overtakes the
// acquire before it, and the requests that queued while a batch was in
// flight go out together as the next pipeline. docs/internals.md in the
// repository says where each guarantee is held.
//
// [WithOwner] names a call chain that may take a lock it already holds (a
// nested hold, released on its own) where the *Lock cannot be passed down.
//
// For work that may outlast the TTL, [Redlock.Do] (or [WithAutoExtend])
// renews the lock in the background, and [Lock.Done] and [Lock.Context] say
// when it was lost ([ErrLockLost]): stop then, another client may hold it.
//
// # What a lock does not guarantee
//
// Redlock is safe only while four assumptions hold (the README lists the
// same). The library cannot make the first two true; it enforces the last
// two, each under an option that is off by default:
//
//   - Bounded clock drift: the masters' clocks run at nearly the same rate as
//     the client's (the drift allowance, [WithDriftFactor], covers 1% by
//     default). A master whose clock jumps forward expires keys early.
//   - Bounded pauses: a holder that stops (GC, swapping, a stopped VM) past
//     [Lock.Until] may still believe it holds the lock while another client
//     holds it. Check Until, watch [Lock.Done] (auto-extend), and make the
//     resource reject stale holders with fencing tokens ([WithFencing]).
//   - No fast restart without data: a master that loses its keys (restart
//     without AOF fsync=always) must stay down longer than the largest TTL
//     before it rejoins (the delayed-restart rule), or two clients can both
//     win a quorum. [WithRestartGate] enforces it.
//   - No failover to a replica that lacked the key: replication is
//     asynchronous, so a promoted replica may come up without a key its
//     primary acknowledged, as a restart would. [WithReplicaConfirm] counts
//     a vote only once the master's replicas confirmed it.
//
// Fencing tokens add two assumptions of their own: the masters' clocks differ
// by less than the time a master stays down before it restarts empty, and
// nobody deletes or lowers the fence counters ([FenceKey]): no FLUSHALL, no
// allkeys-* eviction policy, no DEL by pattern.
package redlock

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Redlock takes locks across a fixed set of independent Redis masters. It is
// safe for concurrent use; make one per set of masters and share it.
//
// Every request to a master goes through that master's lane, in the order
// the calls made them (see [Node]). Some requests outlive the calls that
// start them (a release to a slow master after Unlock returned, the rollback
// of a failed attempt). [Redlock.Close] waits for them.
type Redlock struct {
	nodes  []Node
	lanes  []*lane // lanes[i]: the one way requests reach nodes[i]
	quorum int

	cfg   config // defaults from New's options, not yet resolved against a call's
	clock clock  // the validity arithmetic's (deadlines use the real clock)
	// ttlMS is cfg.ttl in whole milliseconds as an interface value, made
	// once for every request that sends the default TTL (see Lock.request).
	ttlMS any
	// randN draws the backoff jitter from [0, n): nil in production (the
	// runtime's generator); the simulation (sim_test.go) sets a seeded one
	// so that a seed reruns the same pauses. Safe for concurrent use.
	randN func(n time.Duration) time.Duration

	sched scheduler // renews auto-extended locks, ends watched ones at Until

	bg background // requests still running in the background
	// timers are stopped timers for phase.collect to reuse, one pool per
	// Redlock: a timer belongs to the synctest bubble that made it.
	timers sync.Pool
	// deadlines are phaseCtx's *deadlineTimer for reuse, the same way.
	deadlines sync.Pool
	closed    atomic.Bool
	closing   chan struct{} // closed by Close: Lock calls waiting to retry stop

	// closeClients closes the clients the Redlock made (NewFromURLs); nil
	// when the caller owns them (New).
	closeClients func() error
	closeOnce    sync.Once
	closeErr     error     // closeClients' result, set inside closeOnce
	waiters      waiters   // this process's goroutines waiting in Lock, per key
	wake         *wakeups  // this Redlock's wake-ups from other processes' releases
	obs          Observer  // WithObserver's; nil when none
	born         time.Time // phase timings are offsets from it (Observer only)

	// noReplicas is why [WithReplicaConfirm] cannot be honoured on these
	// masters (see replicaRefusal); "" when it can.
	noReplicas string
}

// New returns a Redlock over the given masters, with opts as the defaults of
// every call. Each Node must be a different, independent master (not replicas
// of one another). An odd number of masters is best: with an even N the
// quorum N/2+1 tolerates no more failures than N−1 masters would.
func New(nodes []Node, opts ...Option) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, configErr("nodes", "need at least one master, got none")
	}
	seen := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if n == nil || isNil(n) {
			return nil, configErr("nodes", "node %d is nil", i)
		}
		name := n.Name()
		if name == "" {
			return nil, configErr("nodes", "node %d has an empty name; a Node's Name identifies its master in errors and tells it from the others", i)
		}
		if j, dup := seen[name]; dup {
			if hint := n.Traits().NameHint; hint != "" {
				return nil, configErr("nodes", "nodes %d and %d are both named %s: %s", j, i, name, hint)
			}
			return nil, configErr("nodes", "nodes %d and %d are the same master %s; each must be an independent master", j, i, name)
		}
		seen[name] = i
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, configErr("options", "option is nil")
		}
		o(&cfg)
	}
	if _, err := cfg.resolved(); err != nil {
		return nil, err
	}
	if cfg.owner != "" {
		return nil, configErr("WithOwner", "an owner names the call chain that may nest holds: pass it to Lock, TryLock or Do, not to New")
	}
	noReplicas := replicaRefusal(nodes)
	if cfg.replicas > 0 && noReplicas != "" {
		return nil, configErr("WithReplicaConfirm", "%s", noReplicas)
	}
	r := &Redlock{
		nodes:   append([]Node(nil), nodes...),
		quorum:  len(nodes)/2 + 1,
		cfg:     cfg,
		born:    time.Now(),
		clock:   systemClock{},
		closing: make(chan struct{}),
	}
	r.ttlMS = cfg.ttl.Milliseconds()
	r.noReplicas = noReplicas
	if cfg.observer != nil {
		r.obs = *cfg.observer
	}
	r.lanes = make([]*lane, len(r.nodes))
	for i, n := range r.nodes {
		r.lanes[i] = newLane(n)
	}
	r.sched = scheduler{r: r, wake: make(chan struct{}, 1)}
	r.wake = newWakeups(r)
	return r, nil
}

// MaxKeyLen is the longest key Lock and TryLock accept, in bytes. Any bytes
// are allowed (braces, spaces, newlines, binary, invalid UTF-8): each master
// stores the key as it is, next to its fence counter [FenceKey](key). The
// limit keeps a payload passed by mistake as a lock name from being sent to
// every master on every attempt.
const MaxKeyLen = 64 << 10

// Quorum is the number of masters that must agree: N/2+1.
func (r *Redlock) Quorum() int { return r.quorum }

// Nodes returns the masters, in the order given to New.
func (r *Redlock) Nodes() []Node { return append([]Node(nil), r.nodes...) }

// Lock acquires the lock on key, retrying with jittered backoff while the key
// is taken or too few masters answer, until it succeeds, the attempts run out
// ([WithRetry]) or ctx ends. Options given here apply to this call on top of
// the Redlock's.
//
// The error wraps [ErrNotObtained] and, when ctx ended the wait, ctx's error;
// errors.As with a [*QuorumError] gives the last attempt's counts and per-node
// errors.
func (r *Redlock) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := r.callConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return r.lock(ctx, CallLock, key, key, &cfg)
}

// lock is the Lock call of every kind of lock (cfg.kind): name is what the
// caller named it, key its key on the masters (see lockKind.base).
func (r *Redlock) lock(ctx context.Context, op CallOp, name, key string, cfg *config) (held *Lock, err error) {
	if r.obs != nil {
		var c *Call
		ctx, c = r.startCall(ctx, op, name)
		defer func() { r.endCall(ctx, c, cfg.attempt, held, err) }()
	}
	// The call's place while it waits, and all that can end the wait.
	var t turn
	r.openTurn(&t, ctx, key, cfg)
	defer func() { t.end(held) }()
	err = ErrNotObtained
	for n := 1; ; n++ {
		if l, stop := t.wait(ctx); l != nil {
			held = l
			return l, nil
		} else if stop != nil {
			return nil, joinCtx(err, stop)
		}
		cfg.attempt = int32(min(n, math.MaxInt32))
		if held, err = t.attempt(ctx, name); err == nil {
			return held, nil
		}
		if !errors.Is(err, ErrNotObtained) {
			return nil, err // not worth a retry (a Semaphore's PermitsError)
		}
		if ctx.Err() != nil || (cfg.maxAttempts > 0 && n >= cfg.maxAttempts) {
			return nil, joinCtx(err, ctx.Err())
		}
		t.refused(ctx)
	}
}

// unhand takes the call h, which gave up, off the key's queues on every
// master, and releases the key where it was handed to it, in the
// background.
//
// Its release skips this Redlock's own waiting calls, as an Unlock's does:
// they are woken here, to try.
func (r *Redlock) unhand(h *handoff, nodeTimeout time.Duration) {
	channel, _ := r.wake.name()
	if channel == "" {
		return
	}
	r.startPhase(context.Background(), time.Now().Add(nodeTimeout), false,
		request{Op: reqRelease, Kind: h.kind, Key: h.key, Hand: h.value, Waiter: channel, Queued: h.at()})
	r.waiters.wake(h.key)
}

// jitter draws a pause at random from [d/2, d], so contending clients spread out.
func (r *Redlock) jitter(d time.Duration) time.Duration {
	if r.randN != nil {
		return d/2 + r.randN(d/2+1)
	}
	return d/2 + rand.N(d/2+1)
}

// TryLock makes one attempt to acquire the lock on key. The error wraps
// [ErrNotObtained] when the key is held elsewhere or too few masters answered.
func (r *Redlock) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := r.callConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return r.tryLock(ctx, CallTryLock, key, key, &cfg)
}

// tryLock is the TryLock call of every kind of lock (see lock).
func (r *Redlock) tryLock(ctx context.Context, op CallOp, name, key string, cfg *config) (l *Lock, err error) {
	if r.obs != nil {
		var c *Call
		ctx, c = r.startCall(ctx, op, name)
		defer func() { r.endCall(ctx, c, 1, l, err) }()
	}
	return r.acquire(ctx, name, key, cfg, nil)
}

// Do acquires the lock on key (waiting and retrying as [Redlock.Lock] does),
// runs fn while auto-extend renews the lock ([WithAutoExtend] is always on),
// and unlocks it when fn returns, also when fn panics.
//
// fn's context is derived from ctx and is also cancelled when the lock is
// lost, with a cause (context.Cause) wrapping [ErrLockLost]: fn must then
// stop, as another client may take the lock. The unlock runs under a fresh
// context bounded by a few node timeouts, so it is sent even when ctx has
// ended and never hangs.
//
// Do returns the acquire's error (fn did not run), or fn's error joined
// ([errors.Join]) with the unlock's: that wraps [ErrNotHeld] and
// [ErrLockLost] when the lock was lost while fn ran.
func (r *Redlock) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return configErr("fn", "fn must not be nil")
	}
	if r != nil && r.obs != nil {
		var c *Call
		ctx, c = r.startCall(ctx, CallDo, key)
		defer func() { r.endCall(ctx, c, 0, nil, err) }()
	}
	opts = append(opts[:len(opts):len(opts)], WithAutoExtend())
	l, err := r.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	lctx := l.Context()
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	defer func() {
		stop()
		cancel(nil)
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 3*l.cfg.nodeTimeout+time.Second)
		defer ucancel()
		if uerr := l.Unlock(uctx); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return fn(fctx)
}

// Close stops auto-extend — locks it was renewing are lost (their contexts
// are cancelled with a cause wrapping [ErrLockLost] and [ErrClosed]) —, ends
// the Lock calls waiting to retry (their error wraps [ErrNotObtained] and
// ErrClosed), waits for the requests still running in the background
// (renewals, releases to slow masters, rollbacks) and makes later acquires
// fail with ErrClosed. Locks already held can still be released and
// extended, unless the Redlock made its own clients ([NewFromURLs]): Close
// then closes them too. Clients given to New are the caller's to close.
// Close may be called more than once; later calls return the first call's
// error.
func (r *Redlock) Close() error {
	if !r.closed.Swap(true) {
		close(r.closing)
	}
	r.sched.close()
	r.wake.close()
	r.bg.Wait()
	r.closeOnce.Do(func() {
		if r.closeClients != nil {
			r.closeErr = r.closeClients()
		}
	})
	return r.closeErr
}

// callConfig is the Redlock's defaults with a call's options on top.
func (r *Redlock) callConfig(key string, opts []Option) (config, error) {
	if r == nil {
		return config{}, configErr("Redlock", "method called on a nil *Redlock; make one with New")
	}
	if r.closed.Load() {
		return config{}, ErrClosed
	}
	if key == "" {
		return config{}, configErr("key", "key must not be empty")
	}
	if len(key) > MaxKeyLen {
		return config{}, configErr("key", "key is %d bytes, more than MaxKeyLen (%d); a lock name should be short", len(key), MaxKeyLen)
	}
	if name, lock, ok := derivedFrom(key); ok {
		return config{}, derivedKeyErr(key, name, lock)
	}
	cfg := r.cfg
	if len(opts) > 0 {
		c := new(config) // the options see a copy on the heap; cfg stays off it
		*c = cfg
		c.inCall = true
		for _, o := range opts {
			if o == nil {
				return config{}, configErr("options", "option is nil")
			}
			o(c)
		}
		cfg = *c
		if cfg.replicas > 0 && r.noReplicas != "" {
			return config{}, configErr("WithReplicaConfirm", "%s", r.noReplicas)
		}
	}
	return cfg.resolved()
}

// replicaRefusal says why [WithReplicaConfirm] cannot be honoured on
// nodes, "" when it can. WAIT counts the replicas that acknowledged the
// writes made on its own connection, and names no key: it confirms a vote
// only when it follows the vote on the vote's connection, which a Node
// promises with Traits.OneConnection. A client that sends each command to
// the shard of its key (a Redis Cluster, a Ring) sends it to a shard of
// its own choosing; a pooled one may send it on another connection; one
// that re-sends a batch may send it after a vote that wrote nothing.
func replicaRefusal(nodes []Node) string {
	for i, n := range nodes {
		t := n.Traits()
		switch {
		case t.Routing == RouteByKey:
			return fmt.Sprintf("master %d (%s) routes commands by key (a Redis Cluster, a Ring): WAIT names no key, so it goes to a shard of the client's choosing, not on the vote's connection to the key's shard, and its count would not be the vote's; confirm replicas only on masters that are one server or a Sentinel-managed primary",
				i, n.Name())
		case !t.OneConnection:
			hint := t.ConnectionHint
			if hint == "" {
				hint = "its Node does not declare Traits.OneConnection"
			}
			return fmt.Sprintf("master %d (%s) does not promise that a batch reaches it on one connection and is never sent again, so the WAIT after a vote could run on another connection, or after a re-sent vote that wrote nothing, and confirm nothing of it: %s",
				i, n.Name(), hint)
		}
	}
	return ""
}

// newValue returns a fresh lock value: 128 random bits, base64url-encoded.
func newValue() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (the runtime aborts if it would)
	var s [22]byte          // base64.RawURLEncoding.EncodedLen(16)
	base64.RawURLEncoding.Encode(s[:], b[:])
	return string(s[:])
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// joinCtx adds ctx's error to err, on the same line, unless err already
// carries it: errors.Is and errors.As see both.
func joinCtx(err, ctxErr error) error {
	if ctxErr == nil || errors.Is(err, ctxErr) {
		return err
	}
	return fmt.Errorf("%w; gave up: %w", err, ctxErr)
}

// derivedKeyErr is the error for a lock key that has the shape of a fence
// counter, a queue of waiting calls, or a synchronizer's key (see
// derivedKey, lockKind.base): name is "fence", "waiters", "rw" or "sem",
// lock the lock key it could belong to ("" when none).
func derivedKeyErr(key, name, lock string) error {
	what, fn, one := "fence counters", "FenceKey", "fence counter"
	switch name {
	case "waiters":
		what, fn, one = "queues of waiting Redlocks", "WaitKey", "queue"
	case "rw":
		what, fn, one = "read-write locks' keys", "Redlock.RWMutex", "read-write lock key"
	case "sem":
		what, fn, one = "semaphores' keys", "Redlock.Semaphore", "semaphore key"
	}
	shape := "ends in \":" + name + "\""
	if !strings.HasSuffix(key, ":"+name) {
		shape = "starts with \"" + name + ":{\""
	}
	if lock == "" {
		return configErr("key", "key %.64q %s, the shape of the names of %s (%s): choose a name that does not", key, shape, what, fn)
	}
	return configErr("key", "key %.64q %s, the shape of the names of %s (%s): it could be the %s of the lock %.64q", key, shape, what, fn, one, lock)
}

// The keys kept next to a lock key — its fence counter ([FenceKey]) and its
// queue of waiting calls ([WaitKey]) — are named so that a Redis Cluster
// puts them in the lock key's hash slot: every script touches the lock key
// and one of them, and a cluster refuses a script whose keys are in two
// slots (CROSSSLOT).
//
// A cluster hashes only a key's hash tag, when it has one: the bytes between
// its first '{' and the first '}' after it, when there is at least one.
// Else it hashes the whole key. So the name of a derived key (NAME is
// "fence" or "waiters") is:
//
//  1. key:NAME, when key has a hash tag: it keeps key's tag, since the
//     suffix has no braces. These names did not change.
//  2. NAME:{key}, when key has none and no '}': the tag is then key itself.
//  3. NAME:{t}key, when key has none but has a '}' (such as "a}b", "x{}y}"
//     or "{}"): key cannot be a tag, so t is a short tag of key's slot
//     (slotTag), and key follows it to keep the name unique.
//
// No derived name of one lock is another lock's key, nor another lock's
// derived name: names of the first kind end in ":NAME", those of the others
// start with "NAME:{" and end in '}' or in the lock key, and Lock refuses lock keys of either shape (derivedFrom). The
// shape "{key}:fence" would not do: it is also the counter of the lock
// "{key}" by rule 1.
func derivedKey(key, name string) string {
	if _, ok := hashTag(key); ok {
		return key + ":" + name
	}
	if !strings.Contains(key, "}") {
		return name + ":{" + key + "}"
	}
	return name + ":{" + slotTags()[keySlot(key)] + "}" + key
}

// derivedFrom reports whether a lock key of this name would be refused
// because it has the shape of a derived key: which kind ("fence",
// "waiters", or a synchronizer's "rw" or "sem"), and the lock key it
// belongs to when there is one.
func derivedFrom(key string) (name, lock string, ok bool) {
	for _, name := range [...]string{"fence", "waiters", "rw", "sem"} {
		if lock, ok := strings.CutSuffix(key, ":"+name); ok {
			return name, lock, true
		}
		if rest, ok := strings.CutPrefix(key, name+":{"); ok {
			if inner, ok := strings.CutSuffix(rest, "}"); ok && !strings.Contains(inner, "}") {
				return name, inner, true
			}
			if _, lock, ok := strings.Cut(rest, "}"); ok {
				return name, lock, true
			}
			return name, "", true
		}
	}
	return "", "", false
}

// hashTag returns key's hash tag, as a Redis Cluster finds it: the bytes
// between the first '{' and the first '}' after it, when not empty.
func hashTag(key string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key without one, modulo 16384.
func keySlot(key string) uint16 {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	return crc16(key) & 16383
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTags is, for each of the 16384 slots, the smallest decimal number
// whose hash is that slot: a tag that puts a derived key in a given slot.
// Made on first use (about 170,000 hashes), by keys of rule 3 only.
var slotTags = sync.OnceValue(func() *[16384]string {
	var tags [16384]string
	for i, left := 0, len(tags); left > 0; i++ {
		s := strconv.Itoa(i)
		if slot := crc16(s) & 16383; tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
	return &tags
})

// FenceKey is the name of the fence counter kept on each master next to key:
// key + ":fence" when key has a Redis Cluster hash tag (a non-empty {…},
// the first '{' to the first '}' after it), else "fence:{" + key + "}" (or,
// for a key with a '}' but no tag, "fence:{T}" + key with T a short tag of
// key's hash slot). Either way it is in key's hash slot, so that a master
// that is a Redis Cluster runs the scripts that touch both.
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

// background counts the requests still running in the background (replies
// to collect, releases to slow masters, rollbacks, renewals) so that Close
// can wait for them. It is a sync.WaitGroup that may be added to while Wait
// runs: locks already held can still be released and extended after Close,
// and a shutdown need not wait for its workers before calling it, so an Add
// from zero can meet a Wait — which a WaitGroup forbids (it panics "reused
// before previous Wait has returned", or the race detector reports it).
// Wait returns once the count is zero; requests added while it waits are
// waited for too, those added after it returned are not.
type background struct {
	n    atomic.Int64
	mu   sync.Mutex
	idle chan struct{} // made by a Wait that found requests running; closed at zero
}

func (b *background) Add(d int) { b.n.Add(int64(d)) }

func (b *background) Done() {
	if b.n.Add(-1) != 0 {
		return
	}
	b.mu.Lock()
	if b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
}

func (b *background) Wait() {
	for {
		b.mu.Lock()
		if b.n.Load() == 0 {
			b.mu.Unlock()
			return
		}
		if b.idle == nil {
			b.idle = make(chan struct{})
		}
		idle := b.idle
		b.mu.Unlock()
		<-idle
	}
}
