package redlock

import (
	"math"
	"time"
)

// Defaults of the options; each option's doc comment repeats its own.
const (
	DefaultTTL         = 10 * time.Second
	DefaultDriftFactor = 0.01
	DefaultNodeTimeout = 100 * time.Millisecond
	DefaultMinBackoff  = 5 * time.Millisecond
	DefaultMaxBackoff  = 250 * time.Millisecond

	// driftFloor is the constant part of the clock drift allowance.
	driftFloor = 2 * time.Millisecond
)

// Option configures a Redlock (as a default for every call, in [New]) or one
// call (Lock, TryLock, Do). A call's options apply after the Redlock's.
// Options never change a value the caller passed in; an invalid value makes
// New or the call fail with a [*ConfigError].
type Option func(*config)

// config is the resolved configuration of one call. It is a value: copied,
// never shared.
type config struct {
	ttl            time.Duration
	nodeTimeoutOpt time.Duration // as given; 0: derived from ttl
	driftFactor    float64
	minValidityOpt time.Duration // as given; -1: derived from ttl
	maxAttempts    int           // 0: until ctx ends
	minBackoff     time.Duration
	maxBackoff     time.Duration
	fencing        bool
	autoExtend     bool
	owner          string        // WithOwner; "": a plain lock
	gate           time.Duration // WithRestartGate; 0: off
	replicas       int           // WithReplicaConfirm; 0: off
	kind           lockKind      // what the call takes: set by the method called, never by an Option
	inCall         bool          // the options are a call's, not New's
	slot, permits  uint8         // a permit's slot and its Semaphore's limit (kindPermit)
	attempt        int32         // the acquire attempt under way, from 1 (for the observer)
	observer       *Observer     // New only (WithObserver); a pointer keeps a Lock in its size class
	err            error         // the first invalid option

	// Set by resolved from the fields above and the TTL.
	nodeTimeout time.Duration
	minValidity time.Duration
}

func defaultConfig() config {
	return config{
		ttl:            DefaultTTL,
		driftFactor:    DefaultDriftFactor,
		minValidityOpt: -1,
		minBackoff:     DefaultMinBackoff,
		maxBackoff:     DefaultMaxBackoff,
	}
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithTTL sets how long the key lives on each master, and so the longest the
// lock is valid without Extend. The lock's validity is the TTL less the time
// the acquire took and the drift allowance. Default: 10 s ([DefaultTTL]).
// Redis keeps millisecond precision, so the TTL is truncated to whole
// milliseconds (the validity is computed from what the masters were sent);
// it must be at least 1 ms and leave validity after drift and the minimum
// validity.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) {
		if ttl < time.Millisecond {
			c.fail(configErr("WithTTL", "TTL must be at least 1ms, got %v", ttl))
			return
		}
		c.ttl = ttl.Truncate(time.Millisecond)
	}
}

// WithNodeTimeout bounds every request to one master (acquire, release,
// extend), so a dead or paused master cannot eat the lock's validity. Keep it
// small next to the TTL. Default: 100 ms ([DefaultNodeTimeout]), or a tenth of
// the TTL when that is smaller. Must be positive.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail(configErr("WithNodeTimeout", "node timeout must be positive, got %v", d))
			return
		}
		c.nodeTimeoutOpt = d
	}
}

// WithDriftFactor sets the clock drift allowance as a fraction of the TTL;
// the allowance is TTL × factor + 2 ms and is taken off the validity.
// Default: 0.01 ([DefaultDriftFactor]). Must be in [0, 1).
func WithDriftFactor(f float64) Option {
	return func(c *config) {
		if math.IsNaN(f) || f < 0 || f >= 1 {
			c.fail(configErr("WithDriftFactor", "drift factor must be in [0, 1), got %v", f))
			return
		}
		c.driftFactor = f
	}
}

// WithMinValidity sets the least validity an acquire must leave to count as
// a success; an acquire that took so long that less is left fails (and is
// rolled back). Default: a tenth of the TTL. Must not be negative.
func WithMinValidity(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail(configErr("WithMinValidity", "minimum validity must not be negative, got %v", d))
			return
		}
		c.minValidityOpt = d
	}
}

// WithRetry limits how many acquire attempts Lock makes before it gives up
// (TryLock always makes one). Default: no limit; Lock retries until its
// context ends. Must be at least 1.
func WithRetry(maxAttempts int) Option {
	return func(c *config) {
		if maxAttempts < 1 {
			c.fail(configErr("WithRetry", "attempts must be at least 1, got %d", maxAttempts))
			return
		}
		c.maxAttempts = maxAttempts
	}
}

// WithBackoff sets the pause between Lock's attempts: it starts at min,
// doubles after each failed attempt up to max, and each pause is drawn at
// random from [d/2, d] so that contending clients spread out. Default: 5 ms
// to 250 ms ([DefaultMinBackoff], [DefaultMaxBackoff]). min must be positive
// and max at least min.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) {
		if min <= 0 || max < min {
			c.fail(configErr("WithBackoff", "need 0 < min <= max, got min %v, max %v", min, max))
			return
		}
		c.minBackoff, c.maxBackoff = min, max
	}
}

// WithFencing makes each acquire also produce a fencing token ([Lock.Fence])
// that strictly increases from one holder of the key to the next, at the cost
// of one more round trip per acquire: the token is confirmed on a quorum of
// masters that still hold the key, within the validity, or the acquire fails.
// A resource rejects stale holders' writes with a [Fence]. Default: off.
//
// The token counter lives on each master next to the key, at [FenceKey](key),
// and never expires. Tokens stay increasing while the
// masters' clocks differ by less than the time a master stays down before it
// restarts empty, and while nobody deletes the counters.
func WithFencing() Option {
	return func(c *config) { c.fencing = true }
}

// WithAutoExtend makes the Redlock renew the lock in the background while it
// is held: at about a third of its TTL, and again after a short pause when a
// renewal fails (TTL/30, kept within the [WithBackoff] bounds), until
// Unlock. Each renewal needs a quorum within the lock's current validity,
// like [Lock.Extend]; when renewals keep failing until the validity is
// nearly spent, or the masters no longer hold the lock's value, the lock is
// lost: [Lock.Done] closes and [Lock.Context] is cancelled with a cause
// wrapping [ErrLockLost], by [Lock.Until] whatever the masters and the
// clients do. Default: off ([Redlock.Do] always turns it on).
//
// After a plain lock's renewal succeeded, when a master refused it, the
// key is also set, to the lock's value and TTL, on the masters where it is
// gone (one that restarted empty, or one a contender freed after winning
// it in a split acquire), so that a lock taken on a bare quorum does not
// stay one: it would be lost to a fault on any one master of that quorum
// while a majority is healthy. A master where another value holds the key
// (a waiting call it was handed to) is left alone, and a renewal still
// counts only masters that kept the lock's value.
//
// One scheduler per Redlock renews all its locks, the renewals due together
// in one round through each master's lane (one pipeline per master), so
// holding many auto-extended locks costs no goroutine per lock.
func WithAutoExtend() Option {
	return func(c *config) { c.autoExtend = true }
}

// WithRestartGate makes a master's vote — in an acquire, either fence round,
// an Extend or a renewal — count only once the master has been up for at
// least gate: a master that restarted (and may have lost the keys it held)
// stays out of every quorum until any lock that counted on its lost keys
// has expired, which is the delayed restart Redlock assumes, enforced by
// the library. Set it to at least the largest TTL any client uses on these
// masters (a TTL, or an Extend's, longer than the gate is refused with a
// [*ConfigError]).
//
// Every vote is one script on its master that checks the gate first
// (lua/gate.lua): how long its process has been up, read from the running
// process on every vote (LASTSAVE, the last save or else the start, as a
// cheap lower bound; INFO's uptime_in_seconds when that bound is too
// short), so that nothing a snapshot or an AOF brings back can vouch for
// a new process. A master up for less than gate writes nothing, and the
// vote fails with an error wrapping [ErrRestartGate] and is rolled back
// like any failed vote. Uptime counts in whole seconds, stamped by a
// clock that lags a tick, and two less than read: the gate lasts up to 3 s
// longer than asked, never shorter. It adds
// no command and no round trip; it costs the master an EVAL where a plain
// acquire is a SET (see docs/benchmarks.md), and the ACL permissions
// +eval, +info and +lastsave (without +lastsave every vote reads INFO). What it covers — restarts with and without data,
// FLUSHALL, cluster shards, failovers — is in the README ("Guarantees")
// and docs/internals.md.
//
// Default: 0, off. A master's first minutes are a gate's cost: masters
// started just before the first lock (a test run, a fresh deployment) give
// no votes for gate. Turn it on where masters run for long.
func WithRestartGate(gate time.Duration) Option {
	return func(c *config) {
		if gate < 0 {
			c.fail(configErr("WithRestartGate", "gate %v is negative; want 0 (off) or at least the largest TTL", gate))
			return
		}
		c.gate = gate
	}
}

// WithReplicaConfirm makes a master's vote — in an acquire, either fence
// round, an Extend or a renewal — count only once replicas of that
// master's replicas confirmed the write: the go-redis Node sends WAIT
// replicas after the votes of each batch it sends a master, in the same
// pipeline (one WAIT confirms every write before it on the connection),
// with half of what is left of the node timeout as WAIT's timeout. A master
// whose replicas did not confirm in time counts as failed (an error
// wrapping [ErrNotReplicated]) and is rolled back like one. It adds no
// round trip; each batch waits once for the slowest of the replicas it
// needs, however many votes it carries.
//
// What it buys: a failover that promotes one of the replicas that
// confirmed keeps every vote the lock counted. Set replicas to the number
// of replicas each master has, so that whichever Sentinel promotes had the
// key. WAIT does not make Redis strongly consistent: a replica confirms
// what it received, not what it wrote to disk, and one that restarts empty
// and is promoted before it resynced is a master that restarted empty
// ([WithRestartGate] does not see it: its uptime is its own). A master
// without enough replicas (all of them, with a plain Redis) never votes.
// Refused on masters that are a Redis Cluster or a Ring: WAIT names no
// key, so go-redis sends it to a shard of its choosing rather than after
// the vote on the key's shard; and on masters whose Node does not promise
// that a batch takes one connection and is never sent again
// ([Traits].OneConnection: a go-redis client needs MaxRetries: -1, and a
// [NodeFunc] must be declared with [NodeWithTraits]), since WAIT confirms
// only its own connection's writes. [New], or the call (Lock, TryLock,
// Do), fails with a [*ConfigError] that names the master and says why
// (docs/masters.md).
//
// Default: 0, off.
func WithReplicaConfirm(replicas int) Option {
	return func(c *config) {
		if replicas < 0 {
			c.fail(configErr("WithReplicaConfirm", "replicas is %d; want 0 (off) or the number of replicas each master has", replicas))
			return
		}
		c.replicas = replicas
	}
}

// MaxOwnerLen is the longest owner [WithOwner] accepts, in bytes.
const MaxOwnerLen = 1 << 10

// WithOwner makes the call take the lock as owner: a call with the same
// owner on a key that owner already holds succeeds at once with a nested
// hold instead of waiting for the holder (reentrancy), while other owners
// and plain locks are refused as usual. Go has no thread identity, so the
// owner names the call chain that may nest: a request ID, a job ID, a shell
// script and the scripts it runs (`redlock exec` passes its owner on in
// REDLOCK_OWNER). Two call chains that share an owner do not exclude each
// other: pick one per chain, such as a UUID. A Go program that can pass the
// *Lock down its calls does not need an owner.
//
// Each hold is its own *Lock, with its own value, TTL, Until, Extend,
// auto-extend and Unlock; holds may be released in any order, and the key is
// freed on a master when its last hold there is released or expires. A
// nested hold needs a quorum within its validity as a first acquire does,
// and a failed one is rolled back without touching the owner's other holds.
// With [WithFencing], a nested hold gets the owner's token (its first
// hold's) where no newer token was handed out on the masters since, else a
// new, larger one: never a smaller one. The next holder's token is larger
// than all of them.
//
// The owner is a call option: [New] refuses it. It must be 1 to
// [MaxOwnerLen] bytes. Default: none (a plain lock).
func WithOwner(owner string) Option {
	return func(c *config) {
		if owner == "" || len(owner) > MaxOwnerLen {
			c.fail(configErr("WithOwner", "owner must be 1 to %d bytes, got %d", MaxOwnerLen, len(owner)))
			return
		}
		c.owner = owner
	}
}

// resolved fills in the defaults that depend on the TTL and checks that the
// combination leaves the lock some validity.
func (c config) resolved() (config, error) {
	if c.err != nil {
		return c, c.err
	}
	c.nodeTimeout = c.nodeTimeoutOpt
	if c.nodeTimeout == 0 {
		c.nodeTimeout = max(min(DefaultNodeTimeout, c.ttl/10), time.Millisecond)
	}
	c.minValidity = c.minValidityOpt
	if c.minValidity < 0 {
		c.minValidity = c.ttl / 10
	}
	if c.gate > 0 && c.gate < c.ttl {
		return c, configErr("WithRestartGate", "gate %v is shorter than the TTL %v: a master that restarted without the key could vote for another holder while this lock still counts on it; use a gate of at least the largest TTL",
			c.gate, c.ttl)
	}
	if left := c.ttl - c.drift() - c.minValidity; left <= 0 {
		return c, configErr("WithTTL", "TTL %v leaves no validity after the drift allowance %v and the minimum validity %v; use a longer TTL",
			c.ttl, c.drift(), c.minValidity)
	}
	return c, nil
}

// drift is the clock drift allowance for the TTL.
func (c *config) drift() time.Duration {
	return time.Duration(float64(c.ttl)*c.driftFactor) + driftFloor
}
