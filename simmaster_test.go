package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// simMaster is a simulated Redis master for the simulation (sim_test.go):
// an in-memory store with the semantics the Node requests rely on (SET NX
// PX, the compare-and-delete, compare-and-PEXPIRE, fenced-acquire and
// raise-fence scripts of lua/, the owned holds of lua/hold.lua, and the
// keys' queues of waiting Lock calls with their wake-ups and hand-offs, as
// lua/release.lua, lua/handoff.lua and hold.lua's release step keep them,
// publishing to the master's subscribers), keys and queues expiring by the
// master's own clock, and
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
	queues      map[string]*simQueue              // the keys' queues (WaitKey)
	subs        map[string]map[simSubscriber]bool // subscribers by channel
	stats       simWakeStats
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
	handTo   string   // a key handed (hand#reg): the channel told

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
		queues:  map[string]*simQueue{},
		subs:    map[string]map[simSubscriber]bool{},
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
		clear(m.subs) // the subscriptions' connections break
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
		clear(m.queues)
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
	ok, fence, _, err = m.applyReqLocked(Request{Op: op, Key: key, Value: value, Owner: owner, TTL: ttl, Token: token})
	return ok, fence, err
}

// applyReqLocked runs q on the master's store, as the Lua scripts and SET
// NX PX do, and returns its reply (m.mu held, master up). A release also
// does what the scripts do with the key's queue (Waiter, Place, Hand, Reg,
// Behind): see releaseLocked.
func (m *simMaster) applyReqLocked(q Request) (ok bool, fence uint64, woke bool, err error) {
	op, key, value, owner, ttl, token := q.Op, q.Key, q.Value, q.Owner, q.TTL, q.Token
	if owner != "" {
		if op == OpRelease {
			ok, woke = m.holdReleaseLocked(q)
			return ok, 0, woke, nil
		}
		ok, fence, err = m.holdLocked(op, key, value, owner, ttl, token)
		return ok, fence, false, err
	}
	if op == OpRelease {
		ok, woke = m.releaseLocked(q)
		return ok, 0, woke, nil
	}
	ok, fence, err = m.plainLocked(op, key, value, ttl, token)
	return ok, fence, false, err
}

// plainLocked runs a plain (not owned) request other than a release.
func (m *simMaster) plainLocked(op Op, key, value string, ttl time.Duration, token uint64) (ok bool, fence uint64, err error) {
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
	}
	return false, 0, fmt.Errorf("ERR unknown request %v", op)
}

// holdLocked runs a step of an owned hold as lua/hold.lua does (m.mu held,
// master up). A plain key refuses every step. A release's wake-ups are
// holdReleaseLocked's.
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

// The key's queue of waiting Lock calls (WaitKey: a sorted set by place, see
// lua/release.lua), and the master's pub/sub: subscribers per channel, told
// by the release scripts' PUBLISH.

// simQueue is a sorted set with an expiry on the master's clock.
type simQueue struct {
	members  map[string]float64 // member → score (the call's place, µs)
	expireAt int64              // ns on the master's clock; 0: none
}

// simSubscriber is a subscription to a channel on a master: deliver is told
// each message published there (m.mu held: it must not block).
type simSubscriber interface {
	deliver(channel, payload string)
}

// simWakeStats counts what the release scripts did with the queues.
type simWakeStats struct {
	registrations int // hand-off registrations (handoff.lua with Reg)
	handoffs      int // the key set to hand#reg and a subscriber told
	wakes         int // a plain channel told ('w')
	dropped       int // entries dropped: nobody listened
	behind        int // Unlocks that queued their call behind the next holder
	freeHand      int // registrations that found the key free and handed it
	ghosts        int // releases of exactly a hand-off value (handedTo)
}

// queueLocked returns wk's live queue, or nil (m.mu held).
func (m *simMaster) queueLocked(wk string, now int64) *simQueue {
	q := m.queues[wk]
	if q != nil && q.expireAt != 0 && now >= q.expireAt {
		delete(m.queues, wk)
		return nil
	}
	return q
}

func (m *simMaster) zremLocked(wk, member string, now int64) {
	q := m.queueLocked(wk, now)
	if q == nil {
		return
	}
	delete(q.members, member)
	if len(q.members) == 0 {
		delete(m.queues, wk) // Redis deletes an empty sorted set
	}
}

func (m *simMaster) zaddLocked(wk string, score float64, member string, now int64) {
	q := m.queueLocked(wk, now)
	if q == nil {
		q = &simQueue{members: map[string]float64{}}
		m.queues[wk] = q
	}
	q.members[member] = score
}

// pexpireLocked is PEXPIRE wk ms: nothing when wk does not exist.
func (m *simMaster) pexpireLocked(wk string, ms int64, now int64) {
	if q := m.queueLocked(wk, now); q != nil {
		q.expireAt = now + ms*int64(time.Millisecond)
	}
}

// zrangeLocked is ZRANGE wk 0 stop: by score, then member bytes.
func (m *simMaster) zrangeLocked(wk string, stop int, now int64) []string {
	q := m.queueLocked(wk, now)
	if q == nil {
		return nil
	}
	ms := make([]string, 0, len(q.members))
	for v := range q.members {
		ms = append(ms, v)
	}
	sort.Slice(ms, func(i, j int) bool {
		a, b := q.members[ms[i]], q.members[ms[j]]
		if a != b {
			return a < b
		}
		return ms[i] < ms[j]
	})
	if stop >= 0 && len(ms) > stop+1 {
		ms = ms[:stop+1]
	}
	return ms
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

// parseEntry splits a queue entry as the scripts' pattern
// '^([^|]*)|([^|]+)|(%d+)|(%d+)$' does: a hand-off registration
// channel|hand|ttl|reg, or (ok false) a plain channel.
func parseEntry(m string) (c, h, t, r string, ok bool) {
	p := strings.Split(m, "|")
	if len(p) != 4 || p[1] == "" || !digits(p[2]) || !digits(p[3]) {
		return m, "", "", "", false
	}
	return p[0], p[1], p[2], p[3], true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// redisInt parses a SET PX argument as Redis does (no sign, no leading
// zero, no overflow); ok false: SET answers an error.
func redisInt(s string) (int64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// handOnLocked is lua/handon.lua, run when the key is free: the first
// entries of the queue (ZRANGE 0 7) are told in turn until one listens.
// skip passes over the entries of channel ch (handoff.lua passes none when
// the call queued again). It reports whether one was told.
func (m *simMaster) handOnLocked(key, wk, ch string, skip bool, now int64) bool {
	for _, e := range m.zrangeLocked(wk, 7, now) {
		c, h, t, r, hand := parseEntry(e)
		if skip && c == ch {
			continue
		}
		msg, ok := "w"+key, true
		if hand {
			msg = "h" + h + "|" + r + "|" + key
			ms, valid := redisInt(t)
			if ok = valid && ms > 0; ok {
				m.keys[key] = simEntry{value: h + "#" + r, expireAt: now + ms*int64(time.Millisecond), handTo: c}
			}
		}
		ok = ok && m.publishLocked(c, msg) > 0
		if hand || !ok {
			m.zremLocked(wk, e, now)
		}
		if ok {
			if hand {
				m.stats.handoffs++
			} else {
				m.stats.wakes++
			}
			return true
		}
		m.stats.dropped++
		if hand {
			delete(m.keys, key)
		}
	}
	return false
}

// releaseLocked is lua/release.lua, or lua/handoff.lua when q.Hand is set
// (m.mu held, master up): it reports whether it deleted the key and whether
// it told a waiting call.
func (m *simMaster) releaseLocked(q Request) (ok, woke bool) {
	now := m.clockLocked()
	key, wk, ch := q.Key, WaitKey(q.Key), q.Waiter
	pl := strconv.FormatInt(q.Place, 10)
	e, exists := m.liveLocked(key, now)
	wrongType := exists && e.owner != ""
	absent := !exists
	v := e.value
	if q.Hand == "" {
		if exists && !wrongType && v == q.Value {
			delete(m.keys, key)
			ok = true
			if strings.Contains(v, "#") {
				m.stats.ghosts++
			}
		}
		if ch != "" {
			m.zremLocked(wk, ch, now)
		}
		if ok {
			woke = m.handOnLocked(key, wk, ch, true, now)
		}
		if pl != "0" {
			m.zaddLocked(wk, float64(q.Place), ch, now)
			m.pexpireLocked(wk, 60000, now)
		}
		return ok, woke
	}
	hd, rg := q.Hand, q.Reg
	if exists && !wrongType {
		mine := v == q.Value
		if !mine && strings.HasPrefix(v, hd+"#") {
			j, err := strconv.ParseUint(v[len(hd)+1:], 10, 64)
			if err != nil {
				j = rg
			}
			mine = rg == 0 || j < rg
		}
		if mine {
			delete(m.keys, key)
			ok = true
		}
	}
	rq := pl != "0" && rg != 0
	bh := rq && q.Behind
	me := ch + "|" + hd + "|"
	// Only registrations up to rg are taken off; with a later one queued,
	// this one does not queue.
	newer := false
	for _, e := range m.zrangeLocked(wk, -1, now) {
		if strings.HasPrefix(e, me) {
			var r uint64
			if i := strings.LastIndexByte(e, '|'); i >= 0 {
				r, _ = strconv.ParseUint(e[i+1:], 10, 64)
			}
			if rg == 0 || r <= rg {
				m.zremLocked(wk, e, now)
			} else {
				newer = true
			}
		}
	}
	rq = rq && !newer
	bh = bh && !newer
	me += strconv.FormatInt(q.TTL.Milliseconds(), 10) + "|" + strconv.FormatUint(rg, 10)
	again := rq && !bh
	if rq {
		m.stats.registrations++
	}
	if again {
		m.zaddLocked(wk, float64(q.Place), me, now)
	}
	if ok || absent && again {
		woke = m.handOnLocked(key, wk, ch, !again, now)
		if woke && !ok {
			m.stats.freeHand++
		}
	}
	if bh && woke {
		m.zaddLocked(wk, float64(q.Place), me, now)
		m.stats.behind++
	}
	if rq {
		m.pexpireLocked(wk, 60000, now)
	}
	return ok, woke
}

// holdReleaseLocked is hold.lua's release step, its wake-ups included (m.mu
// held, master up).
func (m *simMaster) holdReleaseLocked(q Request) (ok, woke bool) {
	now := m.clockLocked()
	key, wk, ch := q.Key, WaitKey(q.Key), q.Waiter
	e, held := m.liveLocked(key, now)
	owned := held && e.owner != ""
	ok, _, _ = m.holdLocked(OpRelease, key, q.Value, q.Owner, 0, 0)
	_, still := m.liveLocked(key, now)
	freed := owned && !still
	if ch != "" {
		m.zremLocked(wk, ch, now)
	}
	if freed {
		woke = m.handOnLocked(key, wk, ch, true, now)
	}
	if q.Place != 0 {
		m.zaddLocked(wk, float64(q.Place), ch, now)
		m.pexpireLocked(wk, 60000, now)
	}
	return ok, woke
}

// queueOf returns wk's live queue: its members and scores (a copy).
func (m *simMaster) queueOf(wk string) map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queueLocked(wk, m.clockLocked())
	if q == nil {
		return nil
	}
	return maps.Clone(q.members)
}

// simRecorder records what a master publishes to a channel's subscriber.
type simRecorder struct{ got *[]string }

func (r simRecorder) deliver(channel, payload string) {
	*r.got = append(*r.got, channel+" "+payload)
}

// TestSimMasterQueuesAgreeWithRedis runs random releases that use the
// key's queue — plain releases that queue or wake, hand-off registrations
// (various Reg, Place, Behind), Unlocks and give-ups of hand-off calls,
// owned releases — with subscribers coming and going, on a real
// redis-server (through NewNode, so lua/release.lua, lua/handoff.lua and
// lua/hold.lua run) and on a simMaster, and checks that they answer alike
// (OK, Woke), publish the same messages to the same channels, and leave the
// same key value (and TTL or none), and the same queue (members, scores,
// TTL or none).
func TestSimMasterQueuesAgreeWithRedis(t *testing.T) {
	ctx := context.Background()
	c := clients(t, masters.Addrs()[:1])[0]
	rn := NewNode(c)
	sim := newSimMaster(0, time.Now(), 0, 1)
	rng := rand.New(rand.NewPCG(19, 19))
	base := testKey(t)
	keys := []string{base + ":a", base + ":b"}
	chans := []string{base + ":ch0", base + ":ch1", base + ":ch2", ""}
	hands := []string{"h1", "h2", "h3"}
	owners := []string{"o1", "o2"}
	subs := map[string]*redis.PubSub{} // real subscriptions, by channel
	var published []string             // the sim's, this step
	rec := map[string]simRecorder{}
	for _, ch := range chans[:3] {
		rec[ch] = simRecorder{&published}
	}
	defer func() {
		for _, ps := range subs {
			ps.Close()
		}
	}()
	toggle := func(ch string) {
		t.Helper()
		if ps := subs[ch]; ps != nil {
			if err := ps.Unsubscribe(ctx, ch); err != nil {
				t.Fatal(err)
			}
			if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			ps.Close()
			delete(subs, ch)
			sim.mu.Lock()
			sim.unsubscribeLocked(ch, rec[ch])
			sim.mu.Unlock()
			return
		}
		ps := c.Subscribe(ctx, ch)
		if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		subs[ch] = ps
		sim.mu.Lock()
		sim.subscribeLocked(ch, rec[ch])
		sim.mu.Unlock()
	}
	// drain returns what redis published to the subscribed channels since
	// the last call, sorted (a step publishes once at most).
	drain := func() []string {
		t.Helper()
		var got []string
		for ch, ps := range subs {
			if err := ps.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := ps.ReceiveTimeout(ctx, 2*time.Second)
				if err != nil {
					t.Fatalf("receive on %s: %v", ch, err)
				}
				if msg, ok := m.(*redis.Message); ok {
					got = append(got, msg.Channel+" "+msg.Payload)
				}
				if _, ok := m.(*redis.Pong); ok {
					break
				}
			}
		}
		slices.Sort(got)
		return got
	}
	counts := map[string]int{}
	compare := func(what, key string) {
		t.Helper()
		sim.mu.Lock()
		now := sim.clockLocked()
		e, held := sim.liveLocked(key, now)
		sim.mu.Unlock()
		typ, err := c.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case held && e.owner != "":
			if typ != "hash" {
				t.Fatalf("after %s: redis holds a %s, sim an owned key", what, typ)
			}
		case held:
			v, _ := c.Get(ctx, key).Result()
			if v != e.value {
				t.Fatalf("after %s: redis holds %q (%s), sim %q", what, v, typ, e.value)
			}
		default:
			if typ != "none" {
				t.Fatalf("after %s: redis holds a %s, sim nothing", what, typ)
			}
		}
		if held {
			if pt, _ := c.PTTL(ctx, key).Result(); pt <= 0 {
				t.Fatalf("after %s: redis key TTL %v, sim has one", what, pt)
			}
		}
		wk := WaitKey(key)
		zs, err := c.ZRangeWithScores(ctx, wk, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		sq := sim.queueOf(wk)
		sm := sim.zrangeLockedCopy(wk)
		if len(zs) != len(sq) {
			t.Fatalf("after %s: redis queue %v, sim %v", what, zs, sm)
		}
		for i, z := range zs {
			if z.Member.(string) != sm[i] || z.Score != sq[sm[i]] {
				t.Fatalf("after %s: redis queue %v, sim %v (scores %v)", what, zs, sm, sq)
			}
		}
		if len(zs) > 0 {
			pt, _ := c.PTTL(ctx, wk).Result()
			sim.mu.Lock()
			hasTTL := sim.queues[wk].expireAt != 0
			sim.mu.Unlock()
			if (pt > 0) != hasTTL {
				t.Fatalf("after %s: redis queue TTL %v, sim has one: %v", what, pt, hasTTL)
			}
		}
	}
	places := []int64{0, 100, 200, 200, 300, 400}
	pick := func(ss []string) string { return ss[rng.IntN(len(ss))] }
	for i := range 3000 {
		if rng.IntN(15) == 0 {
			toggle(chans[rng.IntN(3)])
			continue
		}
		key := pick(keys)
		q := Request{Op: OpRelease, Key: key, Waiter: pick(chans)}
		if q.Waiter == "" && rng.IntN(2) == 0 {
			q.Waiter = chans[0]
		}
		kind := ""
		switch x := rng.IntN(100); {
		case x < 15:
			kind = "acquire"
			q = Request{Op: OpAcquire, Key: key, Value: pick([]string{"v1", "v2"}), TTL: time.Duration(5+rng.IntN(5)) * time.Second}
		case x < 20:
			kind = "owned acquire"
			q = Request{Op: OpAcquire, Key: key, Value: pick([]string{"v1", "v2"}), Owner: pick(owners), TTL: time.Duration(5+rng.IntN(5)) * time.Second}
		case x < 30:
			kind = "owned release"
			q.Value, q.Owner, q.Place = pick([]string{"v1", "v2"}), pick(owners), places[rng.IntN(len(places))]
		case x < 45:
			kind = "release"
			q.Value = pick([]string{"v1", "v2", "", "h1#1", "h2#2", "h3#1"})
			q.Place = places[rng.IntN(len(places))]
		case x < 75:
			kind = "registration"
			q.Value = pick([]string{"v1", "v2", "x"})
			q.Hand, q.Reg = pick(hands), uint64(1+rng.IntN(4))
			q.Place = places[1+rng.IntN(len(places)-1)]
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
			if rng.IntN(4) == 0 {
				q.Place = 0 // a rollback that does not queue again
			}
		case x < 88:
			kind = "unlock behind"
			q.Hand, q.Reg, q.Behind = pick(hands), uint64(1+rng.IntN(4)), true
			q.Value = q.Hand + "#" + strconv.Itoa(1+rng.IntN(4))
			q.Place = 500 + int64(rng.IntN(3))*100
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
		default:
			kind = "give-up"
			q.Hand, q.Place = pick(hands), places[1+rng.IntN(len(places)-1)]
			if rng.IntN(2) == 0 {
				q.Value = q.Hand + "#" + strconv.Itoa(1+rng.IntN(4)) // an Unlock of a hand-off without Behind
			}
		}
		counts[kind]++
		what := fmt.Sprintf("step %d %s %+v", i, kind, q)
		r := q
		rn.Exec(ctx, []*Request{&r})
		published = published[:0]
		sim.mu.Lock()
		ok, _, woke, err := sim.applyReqLocked(q)
		sim.mu.Unlock()
		if r.OK != ok || r.Woke != woke || (r.Err == nil) != (err == nil) {
			t.Fatalf("%s: redis ok=%v woke=%v err=%v, sim ok=%v woke=%v err=%v", what, r.OK, r.Woke, r.Err, ok, woke, err)
		}
		want := slices.Sorted(slices.Values(published))
		if got := drain(); !slices.Equal(got, want) {
			t.Fatalf("%s: redis published %q, sim %q", what, got, want)
		}
		compare(what, key)
	}
	sim.mu.Lock()
	st := sim.stats
	sim.mu.Unlock()
	t.Logf("steps %v; sim: %+v", counts, st)
	if st.handoffs == 0 || st.wakes == 0 || st.behind == 0 || st.freeHand == 0 || st.dropped == 0 || st.registrations == 0 {
		t.Errorf("some paths were not exercised: %+v", st)
	}
}

// zrangeLockedCopy is ZRANGE wk 0 -1 (m.mu taken).
func (m *simMaster) zrangeLockedCopy(wk string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.zrangeLocked(wk, -1, m.clockLocked())
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
