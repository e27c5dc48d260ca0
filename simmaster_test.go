package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// simMaster is a simulated Redis master for the simulation (sim_test.go):
// an in-memory store with the semantics the Node requests rely on (SET NX
// PX, the compare-and-delete, compare-and-PEXPIRE, fenced-acquire and
// raise-fence scripts of lua/, and the owned holds of lua/hold.lua, without
// its wake-ups), keys expiring by the master's own clock, and
// a life of its own: up, paused (SIGSTOP: requests wait, keys still expire),
// or down (killed; restarted later with its data or empty).
//
// The network between clients and masters is simnet_test.go's. A master is
// only ever reached through it, in bubble time (testing/synctest).
type simMaster struct {
	name string
	id   int

	// Its clock: unix time in ns = epochNs + offset + rate × (bubble time
	// since epoch). Rates within 1 ± the drift factor keep the Redlock's
	// assumption; a jump (clockJump) breaks it.
	epoch   time.Time
	epochNs int64
	offset  time.Duration
	rate    float64

	mu    sync.Mutex
	state masterState
	// changed is closed (and replaced) whenever state changes, for the
	// requests waiting at a paused master.
	changed chan struct{}
	// incarnation counts restarts: a reply from an earlier incarnation is
	// lost with its connection.
	incarnation int
	keys        map[string]simEntry
	fences      map[string]uint64
	restarted   bool // killed at least once: the end-of-run check excuses its keys
}

type masterState uint8

const (
	masterUp masterState = iota
	masterPaused
	masterDown
)

func (s masterState) String() string {
	return [...]string{"up", "paused", "down"}[s]
}

type simEntry struct {
	value    string
	expireAt int64    // on the master's clock, ns; the key is gone from then on
	setBy    *simConn // the connection whose acquire set it

	// An owned key (lua/hold.lua): owner is not empty, value is, and holds
	// has the live holds by value. fence is the owner's token (0: none).
	// expireAt is the latest hold's expiry.
	owner string
	fence uint64
	holds map[string]simHold
}

// simHold is one hold of an owned key.
type simHold struct {
	at    int64    // its expiry on the master's clock, in whole ms (as hold.lua stores it)
	setBy *simConn // the connection whose enter added it
}

// prune drops e's holds that expired by nowMs and sets e.expireAt to
// the latest expiry of those left; it reports whether any is left.
func (e *simEntry) prune(nowMs int64) bool {
	last := int64(0)
	for v, h := range e.holds {
		if h.at <= nowMs {
			delete(e.holds, v)
		} else {
			last = max(last, h.at)
		}
	}
	e.expireAt = last * int64(time.Millisecond)
	return last > 0
}

func newSimMaster(id int, epoch time.Time, offset time.Duration, rate float64) *simMaster {
	return &simMaster{
		name:    fmt.Sprintf("sim-master-%d", id),
		id:      id,
		epoch:   epoch,
		epochNs: epoch.UnixNano(),
		offset:  offset,
		rate:    rate,
		changed: make(chan struct{}),
		keys:    map[string]simEntry{},
		fences:  map[string]uint64{},
	}
}

// clockLocked is the master's clock now, in unix ns (m.mu held).
func (m *simMaster) clockLocked() int64 {
	el := float64(time.Since(m.epoch))
	return m.epochNs + int64(m.offset) + int64(math.Round(el*m.rate))
}

// setStateLocked changes the state and wakes the requests waiting on it.
func (m *simMaster) setStateLocked(s masterState) {
	m.state = s
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *simMaster) pause() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == masterUp {
		m.setStateLocked(masterPaused)
	}
}

func (m *simMaster) resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == masterPaused {
		m.setStateLocked(masterUp)
	}
}

// kill stops the master; its data stays on disk for a restart with data.
func (m *simMaster) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != masterDown {
		m.incarnation++
		m.restarted = true
		m.setStateLocked(masterDown)
	}
}

// restart starts a killed master again, with its data (an AOF with fsync
// always: keys whose expiry passed meanwhile are gone) or empty (fence
// counters too).
func (m *simMaster) restart(withData bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != masterDown {
		return
	}
	if !withData {
		clear(m.keys)
		clear(m.fences)
	}
	m.setStateLocked(masterUp)
}

// jump moves the master's clock by d (an assumption broken on purpose when
// it is forward by more than the drift allowance).
func (m *simMaster) jump(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offset += d
}

// liveLocked returns key's entry unless it has expired by the master's clock
// (an owned key: its expired holds are dropped, and the key with the last).
func (m *simMaster) liveLocked(key string, now int64) (simEntry, bool) {
	e, ok := m.keys[key]
	if ok && e.owner != "" {
		if !e.prune(now / int64(time.Millisecond)) {
			delete(m.keys, key)
			return simEntry{}, false
		}
		m.keys[key] = e
		return e, true
	}
	if ok && now >= e.expireAt {
		delete(m.keys, key)
		return simEntry{}, false
	}
	return e, ok
}

// errSimFence is a fence counter a script would refuse (never set by the
// simulation; the check mirrors lua/acquire_fenced.lua).
var errSimFence = fmt.Errorf("sim: fence counter out of range")

// applyLocked runs one request on the master's store, as the Lua scripts
// and SET NX PX do, and returns its reply (m.mu held, master up).
func (m *simMaster) applyLocked(op Op, key, value, owner string, ttl time.Duration, token uint64) (ok bool, fence uint64, err error) {
	if owner != "" {
		return m.holdLocked(op, key, value, owner, ttl, token)
	}
	now := m.clockLocked()
	px := ttl.Milliseconds() * int64(time.Millisecond)
	switch op {
	case OpAcquire:
		if _, held := m.liveLocked(key, now); held {
			return false, 0, nil
		}
		if px <= 0 {
			return false, 0, fmt.Errorf("ERR invalid expire time in 'set' command")
		}
		m.keys[key] = simEntry{value: value, expireAt: now + px}
		return true, 0, nil
	case OpAcquireFenced:
		fk := FenceKey(key)
		c := m.fences[fk]
		if c >= 1<<53-1 {
			return false, 0, errSimFence
		}
		if _, held := m.liveLocked(key, now); held {
			return false, 0, nil
		}
		if px <= 0 {
			return false, 0, fmt.Errorf("ERR invalid expire time in 'set' command")
		}
		m.keys[key] = simEntry{value: value, expireAt: now + px}
		n := uint64(now / int64(time.Microsecond)) // TIME, in µs
		n = max(n, c+1)
		m.fences[fk] = n
		return true, n, nil
	case OpRaiseFence:
		if e, held := m.liveLocked(key, now); !held || e.owner != "" || e.value != value {
			return false, 0, nil
		}
		fk := FenceKey(key)
		if m.fences[fk] < token {
			m.fences[fk] = token
		}
		return true, 0, nil
	case OpExtend:
		e, held := m.liveLocked(key, now)
		if !held || e.owner != "" || e.value != value {
			return false, 0, nil
		}
		if px <= 0 {
			return false, 0, fmt.Errorf("ERR invalid expire time in 'pexpire' command")
		}
		e.expireAt = now + px
		m.keys[key] = e
		return true, 0, nil
	case OpRelease:
		if e, held := m.liveLocked(key, now); !held || e.owner != "" || e.value != value {
			return false, 0, nil
		}
		delete(m.keys, key)
		return true, 0, nil
	}
	return false, 0, fmt.Errorf("ERR unknown request %v", op)
}

// holdLocked runs a step of an owned hold as lua/hold.lua does (m.mu held,
// master up). A plain key refuses every step. Wake-ups are not simulated:
// a release ignores Waiter and Place and never reports Woke.
func (m *simMaster) holdLocked(op Op, key, value, owner string, ttl time.Duration, token uint64) (ok bool, fence uint64, err error) {
	now := m.clockLocked()
	nowMs := now / int64(time.Millisecond)
	ms := ttl.Milliseconds()
	e, held := m.liveLocked(key, now)
	if held && e.owner == "" {
		return false, 0, nil // a plain lock's key
	}
	mine := held && e.holds[value].at > nowMs
	switch op {
	case OpAcquire, OpAcquireFenced:
		if held && e.owner != owner {
			return false, 0, nil
		}
		if !held {
			e = simEntry{owner: owner, holds: map[string]simHold{}}
		}
		if op == OpAcquireFenced {
			fk := FenceKey(key)
			c := m.fences[fk]
			if c >= 1<<53-1 {
				return false, 0, errSimFence
			}
			if e.fence == 0 || e.fence < c { // none yet, or another token came since
				e.fence = max(uint64(now/int64(time.Microsecond)), c+1)
				m.fences[fk] = e.fence
			}
			fence = e.fence
		}
		e.holds[value] = simHold{at: nowMs + ms}
	case OpRaiseFence:
		if !mine {
			return false, 0, nil
		}
		fk := FenceKey(key)
		if m.fences[fk] < token {
			m.fences[fk] = token
		}
		e.fence = token
	case OpExtend:
		if !mine {
			return false, 0, nil
		}
		e.holds[value] = simHold{at: nowMs + ms, setBy: e.holds[value].setBy}
	case OpRelease:
		if !held {
			return false, 0, nil
		}
		delete(e.holds, value)
	default:
		return false, 0, fmt.Errorf("ERR unknown request %v", op)
	}
	if e.prune(nowMs) {
		m.keys[key] = e
	} else {
		delete(m.keys, key)
	}
	return op != OpRelease || mine, fence, nil
}

// holding returns the live lock keys and their entries at the end of a run.
func (m *simMaster) holding() map[string]simEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clockLocked()
	out := map[string]simEntry{}
	for k := range m.keys {
		if e, ok := m.liveLocked(k, now); ok {
			e.holds = maps.Clone(e.holds)
			out[k] = e
		}
	}
	return out
}

// TestSimMasterAgreesWithRedis runs the same random requests, plain and
// owned (WithOwner: lua/hold.lua), on a real redis-server (through NewNode)
// and on a simMaster, and checks that they answer alike and hold the same
// for each key: the same value for a plain key; for an owned key the same
// owner, the same holds (expiring within 50 ms of each other) and a fence
// field in both or neither. The simulation's masters are only worth what
// their semantics are.
func TestSimMasterAgreesWithRedis(t *testing.T) {
	ctx := context.Background()
	c := clients(t, masters.Addrs()[:1])[0]
	rn := NewNode(c)
	sim := newSimMaster(0, time.Now(), 0, 1)
	rng := rand.New(rand.NewPCG(18, 18))
	keys := []string{testKey(t), testKey(t)}
	values := []string{"a", "b", "c"}
	owners := []string{"", "", "o1", "o2"}
	// fences reads the owner's fence field on redis and on the sim (0: none).
	fences := func(key string) (rf, sf uint64) {
		t.Helper()
		if v, err := c.HGet(ctx, key, "fence").Result(); err == nil {
			if rf, err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("%s fence field %q", key, v)
			}
		}
		sim.mu.Lock()
		if e, ok := sim.liveLocked(key, sim.clockLocked()); ok {
			sf = e.fence
		}
		sim.mu.Unlock()
		return rf, sf
	}
	step := func(q Request) uint64 {
		t.Helper()
		rPrev, sPrev := fences(q.Key)
		r := q
		rn.Exec(ctx, []*Request{&r})
		sim.mu.Lock()
		ok, fence, err := sim.applyLocked(q.Op, q.Key, q.Value, q.Owner, q.TTL, q.Token)
		held, isHeld := sim.liveLocked(q.Key, sim.clockLocked())
		sim.mu.Unlock()
		what := fmt.Sprintf("%v %s=%s owner %q ttl %v token %d", q.Op, q.Key, q.Value, q.Owner, q.TTL, q.Token)
		if r.OK != ok || (r.Err == nil) != (err == nil) || (r.Fence > 0) != (fence > 0) || r.Woke {
			t.Fatalf("%s: redis ok=%v fence=%d woke=%v err=%v, sim ok=%v fence=%d err=%v",
				what, r.OK, r.Fence, r.Woke, r.Err, ok, fence, err)
		}
		typ, terr := c.Type(ctx, q.Key).Result()
		if terr != nil {
			t.Fatal(terr)
		}
		if isHeld && held.owner != "" {
			if typ != "hash" {
				t.Fatalf("after %s: redis holds a %s, sim an owned key of %q", what, typ, held.owner)
			}
			f, herr := c.HGetAll(ctx, q.Key).Result()
			if herr != nil {
				t.Fatal(herr)
			}
			if f["owner"] != held.owner {
				t.Fatalf("after %s: redis owner %q, sim %q", what, f["owner"], held.owner)
			}
			if _, has := f["fence"]; has != (held.fence > 0) {
				t.Fatalf("after %s: redis fence field %q, sim fence %d", what, f["fence"], held.fence)
			}
			// The tokens differ (each master's clock), not what a step
			// does with them: keep the owner's, take a new one, or
			// store the one confirmed.
			rf, sf := fences(q.Key)
			if (rf == rPrev) != (sf == sPrev) || (rf == q.Token) != (sf == q.Token) || (r.Fence == rf) != (fence == sf) {
				t.Fatalf("after %s: redis fence field %d (was %d, reply %d), sim %d (was %d, reply %d)", what, rf, rPrev, r.Fence, sf, sPrev, fence)
			}
			delete(f, "owner")
			delete(f, "fence")
			now := time.Now().UnixMilli()
			for v, at := range f {
				n, perr := strconv.ParseInt(at, 10, 64)
				if perr != nil {
					t.Fatalf("after %s: redis hold %s expires at %q", what, v, at)
				}
				if n <= now {
					delete(f, v) // expired, not yet dropped
					continue
				}
				h, ok := held.holds[v]
				if !ok || h.at < n-50 || h.at > n+50 {
					t.Fatalf("after %s: redis hold %s expires at %d, sim %v (has it: %v)", what, v, n, h.at, ok)
				}
			}
			if len(f) != len(held.holds) {
				t.Fatalf("after %s: redis holds %v, sim %v", what, f, held.holds)
			}
			return r.Fence
		}
		if typ == "hash" {
			t.Fatalf("after %s: redis holds an owned key, sim %+v (held %v)", what, held, isHeld)
		}
		v, gerr := c.Get(ctx, q.Key).Result()
		if gerr != nil && !errors.Is(gerr, redis.Nil) {
			t.Fatal(gerr)
		}
		if want := map[bool]string{true: held.value}[isHeld]; v != want {
			t.Fatalf("after %s: redis holds %q, sim %q", what, v, want)
		}
		return r.Fence
	}
	var tokens []uint64
	for range 1500 {
		q := Request{Op: Op(1 + rng.IntN(5)), Key: keys[rng.IntN(len(keys))], Value: values[rng.IntN(len(values))], Owner: owners[rng.IntN(len(owners))]}
		switch q.Op {
		case OpAcquire, OpAcquireFenced, OpExtend:
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
		case OpRaiseFence:
			if len(tokens) > 0 {
				q.Token = tokens[rng.IntN(len(tokens))] + uint64(rng.IntN(3))
			}
		}
		if f := step(q); f > 0 {
			tokens = append(tokens, f)
		}
	}
	// Expiry and a PEXPIRE that shortens a key, by the master's clock.
	for _, o := range owners[1:] {
		for _, v := range values {
			step(Request{Op: OpRelease, Key: keys[0], Value: v, Owner: o})
		}
	}
	step(Request{Op: OpRelease, Key: keys[0], Value: "a"})
	step(Request{Op: OpRelease, Key: keys[0], Value: "b"})
	step(Request{Op: OpRelease, Key: keys[0], Value: "c"})
	step(Request{Op: OpAcquire, Key: keys[0], Value: "x", TTL: 5 * time.Second})
	step(Request{Op: OpExtend, Key: keys[0], Value: "x", TTL: 30 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	step(Request{Op: OpExtend, Key: keys[0], Value: "x", TTL: 5 * time.Second}) // gone: not re-created
	step(Request{Op: OpAcquireFenced, Key: keys[0], Value: "y", TTL: 30 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	step(Request{Op: OpRaiseFence, Key: keys[0], Value: "y", Token: 1})
	step(Request{Op: OpRelease, Key: keys[0], Value: "z"})
	// Owned holds expire one by one; the key goes with the last.
	step(Request{Op: OpAcquireFenced, Key: keys[0], Value: "x", TTL: 30 * time.Millisecond, Owner: "o1"})
	step(Request{Op: OpAcquire, Key: keys[0], Value: "y", TTL: 5 * time.Second, Owner: "o1"})
	step(Request{Op: OpAcquire, Key: keys[0], Value: "w", TTL: 5 * time.Second, Owner: "o2"}) // refused
	step(Request{Op: OpExtend, Key: keys[0], Value: "y", TTL: 60 * time.Millisecond, Owner: "o1"})
	time.Sleep(40 * time.Millisecond)
	step(Request{Op: OpExtend, Key: keys[0], Value: "x", TTL: 5 * time.Second, Owner: "o1"}) // expired
	step(Request{Op: OpRaiseFence, Key: keys[0], Value: "x", Token: 1, Owner: "o1"})         // expired
	step(Request{Op: OpAcquire, Key: keys[0], Value: "z", TTL: 5 * time.Second})             // plain: refused
	time.Sleep(60 * time.Millisecond)
	step(Request{Op: OpAcquire, Key: keys[0], Value: "w", TTL: 5 * time.Second, Owner: "o2"}) // all expired: free
	step(Request{Op: OpAcquire, Key: keys[0], Value: "v", TTL: 5 * time.Second, Owner: "o2"})
	step(Request{Op: OpRelease, Key: keys[0], Value: "w", Owner: "o2"})
	step(Request{Op: OpRelease, Key: keys[0], Value: "v", Owner: "o2"}) // the last: the key goes
	step(Request{Op: OpAcquire, Key: keys[0], Value: "z", TTL: 5 * time.Second})
}
