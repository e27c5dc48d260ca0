package redlock

import (
	"fmt"
	"math"
	"sync"
	"time"
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
