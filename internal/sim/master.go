// Package sim is the simulated Redis master of the library's simulation
// (TestSim, in the root's sim_test.go): a keyspace of strings, hashes and
// sorted sets with Redis's semantics, the commands the library's scripts
// call, EVAL in a Lua 5.1 interpreter (gopher-lua, with Lua 5.1's own
// pattern matcher) that converts between Lua and RESP as Redis 7.0 does,
// PUBLISH to the master's subscribers, and a life of its own: paused,
// killed, restarted with its data, empty or from a snapshot, its clock
// offset, fast or jumped.
//
// It knows nothing of locks: a Master runs the words of a command as a
// redis-server would (ExecLocked), whatever built them. The library's
// scripts reach it inside the EVALs the core builds, so the simulation
// runs the real scripts of lua/, never a copy. Its network, the Nodes
// that reach it, and what the checker makes of its keys are the root's
// test (sim_test.go).
//
// A Master is meant for testing/synctest bubbles: its clock counts from
// time.Now, which is virtual there.
package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// Master is a simulated Redis master: a keyspace that runs the commands
// the production Node sends — SET NX PX, and the scripts of lua/ in a Lua
// interpreter (redis.go, lua.go) — keys expiring by the master's own
// clock, a pub/sub that the scripts' PUBLISH tells the master's
// subscribers through, and a life of its own: up, paused (SIGSTOP:
// requests wait, keys still expire), or down (killed; restarted later with
// its data or empty).
//
// The embedded Mutex guards everything the master holds; the methods whose
// names end in Locked need it held, the others take it.
type Master struct {
	name string
	id   int

	// Its clock: unix time in ns = epochNs + offset + rate × (bubble time
	// since epoch). Rates within 1 ± the drift factor keep the Redlock's
	// assumption; a jump (Jump) breaks it.
	epoch   time.Time
	epochNs int64
	offset  time.Duration
	rate    float64

	sync.Mutex
	state State
	// changed is closed (and replaced) whenever state changes, for the
	// requests waiting at a paused master.
	changed chan struct{}
	// incarnation counts restarts: a reply from an earlier incarnation is
	// lost with its connection.
	incarnation int
	keys        map[string]*simKey             // the keyspace
	subs        map[string]map[Subscriber]bool // subscribers by channel
	stats       WakeStats
	restarted   bool  // killed at least once: the end-of-run check excuses its keys
	startedAt   int64 // on its clock, ns: INFO's uptime counts from it
	lastsave    int64 // LASTSAVE: time(NULL) (stampLocked) at the start or the incarnation's last Save
	runID       string
	// rdb is the last snapshot the master saved (Save), which a restart
	// from its snapshot loads; nil: none saved yet (such a restart comes
	// back empty, as Redis does without a dump.rdb). startedFrom is how
	// the running incarnation came up.
	rdb         map[string]*simKey
	startedFrom Restart
	// scripts runs the master's scripts on a goroutine of their own (see
	// onScriptGoroutine), until StopScripts; nil: none yet.
	scripts    chan func()
	scriptDone chan struct{}
}

// State is a master's life: up, paused or down.
type State uint8

const (
	// Up: it answers.
	Up State = iota
	// Paused: stopped (SIGSTOP); requests wait for it, keys still expire.
	Paused
	// Down: killed; it refuses connections until Restart.
	Down
)

func (s State) String() string {
	return [...]string{"up", "paused", "down"}[s]
}

// Entry is a lock key as a checker sees it (Holding).
type Entry struct {
	Value    string
	ExpireAt int64  // on the master's clock, ns; the key is gone from then on
	SetBy    any    // what set it (Mark): the connection whose acquire did
	HandTo   string // a key a script set and then published about (a hand-off): the channel told

	// An owned key (a hash, see lua/hold.lua): Owner is not empty, Value
	// is, and Holds has the live holds by value.
	Owner string
	Holds map[string]Hold
}

// Hold is one hold of an owned key.
type Hold struct {
	At    int64 // its expiry on the master's clock, in whole ms (as hold.lua stores it)
	SetBy any   // what entered it (Mark): the connection whose enter did
}

// NewMaster returns master id, up (for an hour, by its clock), empty, its
// clock at epoch + offset at epoch and running at rate (1: as fast as
// time.Now's).
func NewMaster(id int, epoch time.Time, offset time.Duration, rate float64) *Master {
	return &Master{
		name:    fmt.Sprintf("sim-master-%d", id),
		id:      id,
		epoch:   epoch,
		epochNs: epoch.UnixNano(),
		offset:  offset,
		rate:    rate,
		changed: make(chan struct{}),
		keys:    map[string]*simKey{},
		subs:    map[string]map[Subscriber]bool{},
		// Up for an hour when the run starts: a restart gate lets it vote.
		startedAt: epoch.UnixNano() + int64(offset) - int64(time.Hour),
		runID:     simRunID(id, epoch, 0),
	}
}

// coarseTick is the period of the kernel's coarse wall clock, which
// time(NULL) reads on Linux: it advances once a tick (4 ms at HZ=250), so
// it lags the clock TIME reads by up to a tick.
const coarseTick = 4 * time.Millisecond

// stampLocked is time(NULL) at ns on the master's clock (unix ns): the
// whole second of the coarse clock, which last advanced at the master's
// latest tick, ticks falling at a phase of its own (its id). Redis stamps
// its start and LASTSAVE with it.
func (m *Master) stampLocked(ns int64) int64 {
	tick := int64(coarseTick)
	phase := int64(m.id+1) * int64(1300*time.Microsecond) % tick
	return (ns - ((ns-phase)%tick+tick)%tick) / int64(time.Second)
}

// Name is the master's name, "sim-master-<id>".
func (m *Master) Name() string { return m.name }

// ID is the id it was made with.
func (m *Master) ID() int { return m.id }

// Epoch is the moment its clock counts from.
func (m *Master) Epoch() time.Time { return m.epoch }

// StateLocked is its state now.
func (m *Master) StateLocked() State { return m.state }

// ChangedLocked is closed when the state next changes (a paused master
// resumed, a master killed or restarted).
func (m *Master) ChangedLocked() <-chan struct{} { return m.changed }

// IncarnationLocked counts the master's kills: a connection made in an
// earlier incarnation is broken.
func (m *Master) IncarnationLocked() int { return m.incarnation }

// StartedAtLocked is when the running incarnation started, on the master's
// clock (unix ns): INFO's uptime counts from it.
func (m *Master) StartedAtLocked() int64 { return m.startedAt }

// StartedFromLocked is how the running incarnation came up (RestartData
// for the first one).
func (m *Master) StartedFromLocked() Restart { return m.startedFrom }

// Restarted reports whether the master was ever killed.
func (m *Master) Restarted() bool {
	m.Lock()
	defer m.Unlock()
	return m.restarted
}

// Stats returns what the scripts' PUBLISHes did.
func (m *Master) Stats() WakeStats {
	m.Lock()
	defer m.Unlock()
	return m.stats
}

// simRunID is the run_id INFO reports for incarnation inc of master id: 40
// hex digits, as Redis draws at each start, here from the master and the
// incarnation so that a seed's run reads the same ids.
func simRunID(id int, epoch time.Time, inc int) string {
	sum := sha1.Sum(fmt.Appendf(nil, "sim-master-%d/%d/%d", id, epoch.UnixNano(), inc))
	return hex.EncodeToString(sum[:])
}

// ClockLocked is the master's clock now, in unix ns.
func (m *Master) ClockLocked() int64 {
	el := float64(time.Since(m.epoch))
	return m.epochNs + int64(m.offset) + int64(math.Round(el*m.rate))
}

// setStateLocked changes the state and wakes the requests waiting on it.
func (m *Master) setStateLocked(s State) {
	m.state = s
	close(m.changed)
	m.changed = make(chan struct{})
}

// Pause stops the master (SIGSTOP): requests wait for Resume.
func (m *Master) Pause() {
	m.Lock()
	defer m.Unlock()
	if m.state == Up {
		m.setStateLocked(Paused)
	}
}

// Resume lets a paused master run again.
func (m *Master) Resume() {
	m.Lock()
	defer m.Unlock()
	if m.state == Paused {
		m.setStateLocked(Up)
	}
}

// Kill stops the master; its data stays on disk for a restart with data.
func (m *Master) Kill() {
	m.Lock()
	defer m.Unlock()
	if m.state != Down {
		m.incarnation++
		m.restarted = true
		clear(m.subs) // the subscriptions' connections break
		m.setStateLocked(Down)
	}
}

// Restart is what a killed master comes back with.
type Restart uint8

const (
	// RestartData: its data (an AOF with fsync always): every write up to
	// the kill; keys whose expiry passed meanwhile are gone.
	RestartData Restart = iota
	// RestartEmpty: nothing (no persistence): fence counters and the
	// restart gate's cache (EpochKey) too.
	RestartEmpty
	// RestartSnapshot: the keys of its last snapshot (an RDB, see Save),
	// every write after it lost: lock keys, fence counters and the restart
	// gate's cache as they were then.
	RestartSnapshot
)

func (r Restart) String() string {
	return [...]string{"with data", "EMPTY", "from its SNAPSHOT"}[r]
}

// Restart starts a killed master again, with what how says. Its start
// time (INFO's uptime) and run_id are new.
func (m *Master) Restart(how Restart) {
	m.Lock()
	defer m.Unlock()
	if m.state != Down {
		return
	}
	now := m.ClockLocked()
	switch how {
	case RestartEmpty:
		clear(m.keys)
	case RestartSnapshot:
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
	m.setStateLocked(Up)
}

// Save takes a snapshot of the keyspace (SAVE, or a BGSAVE's fork), which
// a later restart from the snapshot loads: the keys with their absolute
// expiries (on the master's clock). A master that is down or paused (a
// stopped process forks no child) saves nothing and keeps its last one.
func (m *Master) Save() bool {
	m.Lock()
	defer m.Unlock()
	if m.state != Up {
		return false
	}
	now := m.ClockLocked()
	m.lastsave = m.stampLocked(now)
	m.rdb = make(map[string]*simKey, len(m.keys))
	for name, k := range m.keys {
		if k.expireAt == 0 || now < k.expireAt {
			m.rdb[name] = k.clone()
		}
	}
	return true
}

// Jump moves the master's clock by d (an assumption broken on purpose when
// it is forward by more than the drift allowance).
func (m *Master) Jump(d time.Duration) {
	m.Lock()
	defer m.Unlock()
	m.offset += d
}

// Holding returns the live lock keys and their entries: the string keys
// and the hashes of owned holds, read as lua/hold.lua keeps them (field
// owner, field fence, and one field per hold holding its expiry in ms),
// with the holds that expired by the master's clock left out; not the keys
// for which derived reports true (the fence counters and the queues).
func (m *Master) Holding(derived func(key string) bool) map[string]Entry {
	m.Lock()
	defer m.Unlock()
	x := simExec{m: m, now: m.ClockLocked()}
	nowMs := x.now / int64(time.Millisecond)
	out := map[string]Entry{}
	for name := range m.keys {
		k := x.lookup(name)
		if k == nil || derived(name) {
			continue
		}
		switch k.kind {
		case kindString:
			out[name] = Entry{Value: k.str, ExpireAt: k.expireAt, SetBy: k.setBy, HandTo: k.handTo}
		case kindHash:
			e := Entry{ExpireAt: k.expireAt, Holds: map[string]Hold{}}
			for _, f := range k.hash {
				switch f.name {
				case "owner":
					e.Owner = f.value
				case "fence":
				default:
					// Live through its millisecond, as hold.lua has it.
					if at, err := strconv.ParseInt(f.value, 10, 64); err == nil && at >= nowMs {
						e.Holds[f.name] = Hold{At: at, SetBy: k.holdBy[f.name]}
					}
				}
			}
			if len(e.Holds) > 0 {
				out[name] = e
			}
		}
	}
	return out
}

// MarkLocked records tag as what set key, for a checker (Holding's
// SetBy): on a string key, or on the hold value of an owned key (a hash).
// With onlyNew, a string key keeps a mark it has, and a hash is left
// alone. A key that does not exist is not marked. The mark stays with the
// key while it lives (PEXPIRE, HSET, HDEL keep it; SET makes a new key,
// DEL and expiry drop it).
func (m *Master) MarkLocked(key, value string, tag any, onlyNew bool) {
	k := m.keys[key]
	switch {
	case k == nil:
	case k.kind == kindString:
		if !onlyNew || k.setBy == nil {
			k.setBy = tag
		}
	case k.kind == kindHash && !onlyNew:
		if k.holdBy == nil {
			k.holdBy = map[string]any{}
		}
		k.holdBy[value] = tag
	}
}

// The master's pub/sub: subscribers per channel, told by the scripts'
// PUBLISH.

// Subscriber is a subscription to a channel on a master: Deliver is told
// each message published there, the master's lock held: it must not block.
type Subscriber interface {
	Deliver(channel, payload string)
}

// WakeStats counts what the scripts' PUBLISHes did (cmdPublish).
type WakeStats struct {
	Handoffs int // a key set by a script, then a subscriber told
	Wakes    int // a subscriber told, no key set
	Dropped  int // a PUBLISH nobody listened to
}

// Add adds o's counts to s's.
func (s *WakeStats) Add(o WakeStats) {
	s.Handoffs += o.Handoffs
	s.Wakes += o.Wakes
	s.Dropped += o.Dropped
}

// publishLocked is PUBLISH: it tells channel's subscribers and returns how
// many there are.
func (m *Master) publishLocked(channel, payload string) int {
	subs := m.subs[channel]
	for s := range subs {
		s.Deliver(channel, payload)
	}
	return len(subs)
}

// SubscribeLocked and UnsubscribeLocked add and remove a subscriber of
// channel.
func (m *Master) SubscribeLocked(channel string, s Subscriber) {
	if m.subs[channel] == nil {
		m.subs[channel] = map[Subscriber]bool{}
	}
	m.subs[channel][s] = true
}

func (m *Master) UnsubscribeLocked(channel string, s Subscriber) {
	delete(m.subs[channel], s)
	if len(m.subs[channel]) == 0 {
		delete(m.subs, channel)
	}
}

// Clock is the master's clock now, in unix ns.
func (m *Master) Clock() int64 {
	m.Lock()
	defer m.Unlock()
	return m.ClockLocked()
}
