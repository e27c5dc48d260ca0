package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// simMaster is a simulated Redis master for the simulation (sim_test.go):
// an in-memory store with the semantics the Node requests rely on (SET NX
// PX, the compare-and-delete, compare-and-PEXPIRE, fenced-acquire and
// raise-fence scripts of lua/), keys expiring by the master's own clock, and
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

// liveLocked returns key's entry unless it has expired by the master's clock.
func (m *simMaster) liveLocked(key string, now int64) (simEntry, bool) {
	e, ok := m.keys[key]
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
func (m *simMaster) applyLocked(op Op, key, value string, ttl time.Duration, token uint64) (ok bool, fence uint64, err error) {
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
		if e, held := m.liveLocked(key, now); !held || e.value != value {
			return false, 0, nil
		}
		fk := FenceKey(key)
		if m.fences[fk] < token {
			m.fences[fk] = token
		}
		return true, 0, nil
	case OpExtend:
		e, held := m.liveLocked(key, now)
		if !held || e.value != value {
			return false, 0, nil
		}
		if px <= 0 {
			return false, 0, fmt.Errorf("ERR invalid expire time in 'pexpire' command")
		}
		e.expireAt = now + px
		m.keys[key] = e
		return true, 0, nil
	case OpRelease:
		if e, held := m.liveLocked(key, now); !held || e.value != value {
			return false, 0, nil
		}
		delete(m.keys, key)
		return true, 0, nil
	}
	return false, 0, fmt.Errorf("ERR unknown request %v", op)
}

// holding returns the live lock keys and their entries at the end of a run.
func (m *simMaster) holding() map[string]simEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clockLocked()
	out := map[string]simEntry{}
	for k := range m.keys {
		if e, ok := m.liveLocked(k, now); ok {
			out[k] = e
		}
	}
	return out
}

// TestSimMasterAgreesWithRedis runs the same random requests on a real
// redis-server (through NewNode) and on a simMaster, and checks that they
// answer alike and hold the same value for each key: the simulation's
// masters are only worth what their semantics are.
func TestSimMasterAgreesWithRedis(t *testing.T) {
	ctx := context.Background()
	c := clients(t, masters.Addrs()[:1])[0]
	rn := NewNode(c)
	sim := newSimMaster(0, time.Now(), 0, 1)
	rng := rand.New(rand.NewPCG(18, 18))
	keys := []string{testKey(t), testKey(t)}
	values := []string{"a", "b", "c"}
	step := func(q Request) uint64 {
		t.Helper()
		r := q
		rn.Exec(ctx, []*Request{&r})
		sim.mu.Lock()
		ok, fence, err := sim.applyLocked(q.Op, q.Key, q.Value, q.TTL, q.Token)
		held, isHeld := sim.liveLocked(q.Key, sim.clockLocked())
		sim.mu.Unlock()
		if r.OK != ok || (r.Err == nil) != (err == nil) || (r.Fence > 0) != (fence > 0) {
			t.Fatalf("%v %s=%s ttl %v token %d: redis ok=%v fence=%d err=%v, sim ok=%v fence=%d err=%v",
				q.Op, q.Key, q.Value, q.TTL, q.Token, r.OK, r.Fence, r.Err, ok, fence, err)
		}
		v, gerr := c.Get(ctx, q.Key).Result()
		if gerr != nil && !errors.Is(gerr, redis.Nil) {
			t.Fatal(gerr)
		}
		if want := map[bool]string{true: held.value}[isHeld]; v != want {
			t.Fatalf("after %v %s=%s: redis holds %q, sim %q", q.Op, q.Key, q.Value, v, want)
		}
		return r.Fence
	}
	var tokens []uint64
	for range 400 {
		q := Request{Op: Op(1 + rng.IntN(5)), Key: keys[rng.IntN(len(keys))], Value: values[rng.IntN(len(values))]}
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
	step(Request{Op: OpAcquire, Key: keys[0], Value: "z", TTL: 5 * time.Second})
}
