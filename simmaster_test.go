package redlock

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// simMaster is a simulated Redis master for the simulation (sim_test.go):
// a keyspace that runs exactly the commands the production Node sends —
// SET NX PX, and the scripts of lua/ in a Lua interpreter (simredis_test.go)
// — keys expiring by the master's own clock, a pub/sub that the scripts'
// PUBLISH tells the master's subscribers through, and a life of its own:
// up, paused (SIGSTOP: requests wait, keys still expire), or down (killed;
// restarted later with its data or empty).
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
	keys        map[string]*simKey                // the keyspace
	subs        map[string]map[simSubscriber]bool // subscribers by channel
	stats       simWakeStats
	restarted   bool  // killed at least once: the end-of-run check excuses its keys
	startedAt   int64 // on its clock, ns: INFO's uptime counts from it
	runID       string
	// rdb is the last snapshot the master saved (save), which a restart
	// from its snapshot loads; nil: none saved yet (such a restart comes
	// back empty, as Redis does without a dump.rdb). startedFrom is how
	// the running incarnation came up.
	rdb         map[string]*simKey
	startedFrom simRestart
	// gateEarly counts the gated votes the restart gate let count while the
	// master had been up less than the gate, by why (simGateEarly).
	gateEarly simGateEarly
	// shimErrs: what a request needed that simredis_test.go does not
	// simulate; luaErrs: scripts that raised an error (a bug in the script
	// when nobody changes keys by hand, as in the simulation). Both are
	// reported, never ignored; at most maxSimErrs of each are kept.
	shimErrs, luaErrs []error
	// scripts runs the master's scripts on a goroutine of their own (see
	// onScriptGoroutine), until stopScripts; nil: none yet.
	scripts    chan func()
	scriptDone chan struct{}
}

const maxSimErrs = 10

type masterState uint8

const (
	masterUp masterState = iota
	masterPaused
	masterDown
)

func (s masterState) String() string {
	return [...]string{"up", "paused", "down"}[s]
}

// simEntry is a lock key as the checker sees it (holding).
type simEntry struct {
	value    string
	expireAt int64    // on the master's clock, ns; the key is gone from then on
	setBy    *simConn // the connection whose acquire set it
	handTo   string   // a key handed (hand#reg): the channel told

	// An owned key (a hash, see lua/hold.lua): owner is not empty, value
	// is, and holds has the live holds by value.
	owner string
	holds map[string]simHold
}

// simHold is one hold of an owned key.
type simHold struct {
	at    int64    // its expiry on the master's clock, in whole ms (as hold.lua stores it)
	setBy *simConn // the connection whose enter added it
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
		keys:    map[string]*simKey{},
		subs:    map[string]map[simSubscriber]bool{},
		// Up for an hour when the run starts: a restart gate lets it vote.
		startedAt: epoch.UnixNano() + int64(offset) - int64(time.Hour),
		runID:     simRunID(id, epoch, 0),
	}
}

// simRunID is the run_id INFO reports for incarnation inc of master id: 40
// hex digits, as Redis draws at each start, here from the master and the
// incarnation so that a seed's run reads the same ids.
func simRunID(id int, epoch time.Time, inc int) string {
	sum := sha1.Sum(fmt.Appendf(nil, "sim-master-%d/%d/%d", id, epoch.UnixNano(), inc))
	return hex.EncodeToString(sum[:])
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
		clear(m.subs) // the subscriptions' connections break
		m.setStateLocked(masterDown)
	}
}

// simRestart is what a killed master comes back with.
type simRestart uint8

const (
	// restartData: its data (an AOF with fsync always): every write up to
	// the kill; keys whose expiry passed meanwhile are gone.
	restartData simRestart = iota
	// restartEmpty: nothing (no persistence): fence counters and the
	// restart gate's cache (EpochKey) too.
	restartEmpty
	// restartSnapshot: the keys of its last snapshot (an RDB, see save),
	// every write after it lost: lock keys, fence counters and the restart
	// gate's cache as they were then.
	restartSnapshot
)

func (r simRestart) String() string {
	return [...]string{"with data", "EMPTY", "from its SNAPSHOT"}[r]
}

// restart starts a killed master again, with what how says. Its start
// time (INFO's uptime) and run_id are new.
func (m *simMaster) restart(how simRestart) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != masterDown {
		return
	}
	now := m.clockLocked()
	switch how {
	case restartEmpty:
		clear(m.keys)
	case restartSnapshot:
		// As Redis loads an RDB on a master: a key whose expiry passed is
		// not loaded.
		clear(m.keys)
		for name, k := range m.rdb {
			if k.expireAt == 0 || now < k.expireAt {
				m.keys[name] = k.clone()
			}
		}
	}
	m.startedAt = now
	m.startedFrom = how
	m.runID = simRunID(m.id, m.epoch, m.incarnation)
	m.setStateLocked(masterUp)
}

// save takes a snapshot of the keyspace (SAVE, or a BGSAVE's fork), which
// a later restart from the snapshot loads: the keys with their absolute
// expiries (on the master's clock). A master that is down or paused (a
// stopped process forks no child) saves nothing and keeps its last one.
func (m *simMaster) save() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != masterUp {
		return false
	}
	now := m.clockLocked()
	m.rdb = make(map[string]*simKey, len(m.keys))
	for name, k := range m.keys {
		if k.expireAt == 0 || now < k.expireAt {
			m.rdb[name] = k.clone()
		}
	}
	return true
}

// jump moves the master's clock by d (an assumption broken on purpose when
// it is forward by more than the drift allowance).
func (m *simMaster) jump(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offset += d
}

// applyLocked runs args, the command of q, on the master (m.mu held,
// master up), returns its reply, and keeps what the checker needs: which
// connection's acquire set a key or entered a hold.
func (m *simMaster) applyLocked(q *request, args []any, c *simConn) (reply any, err error) {
	m.onScriptGoroutine(func() { reply, err = m.execLocked(q, args) })
	if k := m.keys[q.Key]; q.OK && q.Op == reqExtend && q.Repair && k != nil && k.kind == kindString && k.setBy == nil {
		k.setBy = c // set by extend.lua's renew: released as an acquired key is
	}
	if q.OK && (q.Op == reqAcquire || q.Op == reqAcquireFenced) {
		k := m.keys[q.Key]
		switch {
		case k == nil:
		case k.kind == kindString:
			k.setBy = c
		case k.kind == kindHash:
			if k.holdBy == nil {
				k.holdBy = map[string]*simConn{}
			}
			k.holdBy[q.Value] = c
		}
	}
	return reply, err
}

// execLocked is simredis_test.go's; do runs q as a client of the master.
func (m *simMaster) do(q *request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.execLocked(q, nil)
}

// holding returns the live lock keys and their entries at the end of a
// run: the string keys and the hashes of owned holds, read as lua/hold.lua
// keeps them (field owner, field fence, and one field per hold holding its
// expiry in ms), with the holds that expired by the master's clock left
// out; not the fence counters and the queues.
func (m *simMaster) holding() map[string]simEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := simExec{m: m, now: m.clockLocked()}
	nowMs := x.now / int64(time.Millisecond)
	out := map[string]simEntry{}
	for name := range m.keys {
		k := x.lookup(name)
		if _, _, derived := derivedFrom(name); k == nil || derived {
			continue
		}
		switch k.kind {
		case kindString:
			out[name] = simEntry{value: k.str, expireAt: k.expireAt, setBy: k.setBy, handTo: k.handTo}
		case kindHash:
			e := simEntry{expireAt: k.expireAt, holds: map[string]simHold{}}
			for _, f := range k.hash {
				switch f.name {
				case "owner":
					e.owner = f.value
				case "fence":
				default:
					if at, err := strconv.ParseInt(f.value, 10, 64); err == nil && at > nowMs {
						e.holds[f.name] = simHold{at: at, setBy: k.holdBy[f.name]}
					}
				}
			}
			if len(e.holds) > 0 {
				out[name] = e
			}
		}
	}
	return out
}

// problems returns what the master could not simulate, and the scripts
// that raised errors.
func (m *simMaster) problems() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(append([]error(nil), m.shimErrs...), m.luaErrs...)
}

// The master's pub/sub: subscribers per channel, told by the scripts'
// PUBLISH.

// simSubscriber is a subscription to a channel on a master: deliver is told
// each message published there (m.mu held: it must not block).
type simSubscriber interface {
	deliver(channel, payload string)
}

// simWakeStats counts what the release scripts did with the queues, as
// seen from the commands they ran (simredis_test.go).
type simWakeStats struct {
	registrations int // hand-off registrations that landed (Hand, Reg and Place set)
	handoffs      int // a key set by a script, then a subscriber told
	wakes         int // a subscriber told, no key set
	dropped       int // a PUBLISH nobody listened to
	behind        int // Unlocks (Behind) that queued their call again after a subscriber was told
	freeHand      int // registrations that freed nothing but handed the key
	ghosts        int // plain releases of exactly a hand-off value (hand#reg)
}

// publishLocked is PUBLISH: it tells channel's subscribers and returns how
// many there are.
func (m *simMaster) publishLocked(channel, payload string) int {
	subs := m.subs[channel]
	for s := range subs {
		s.deliver(channel, payload)
	}
	return len(subs)
}

// subscribeLocked and unsubscribeLocked add and remove a subscriber.
func (m *simMaster) subscribeLocked(channel string, s simSubscriber) {
	if m.subs[channel] == nil {
		m.subs[channel] = map[simSubscriber]bool{}
	}
	m.subs[channel][s] = true
}

func (m *simMaster) unsubscribeLocked(channel string, s simSubscriber) {
	delete(m.subs[channel], s)
	if len(m.subs[channel]) == 0 {
		delete(m.subs, channel)
	}
}

func (s *simWakeStats) add(o simWakeStats) {
	s.registrations += o.registrations
	s.handoffs += o.handoffs
	s.wakes += o.wakes
	s.dropped += o.dropped
	s.behind += o.behind
	s.freeHand += o.freeHand
	s.ghosts += o.ghosts
}

// clock is the master's clock now, in unix ns.
func (m *simMaster) clock() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clockLocked()
}
