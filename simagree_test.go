package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The simulated masters are only worth what their semantics are: these
// tests run the same requests on a real redis-server (through NewNode) and
// on a simMaster, and hold the two to the same replies and the same
// keyspace, value by value.

// simAgreeSlack is how far apart two clock readings of the same step may
// be on redis and on the sim (TTLs, tokens and hold expiries are readings
// of each master's own clock), beyond the time the step itself took.
const simAgreeSlack = 5 * time.Millisecond

// simAgreement compares a redis-server and a simMaster after each step.
type simAgreement struct {
	t     *testing.T
	ctx   context.Context
	c     *redis.Client
	sim   *simMaster
	start time.Time     // the current step's
	worst time.Duration // the longest step so far
}

// begin marks the start of a step: it runs on redis first, then on the
// sim, so their clocks read it apart by at most the time since then.
func (a *simAgreement) begin() { a.start = time.Now() }

// tol is how far apart two clock readings may be: the slack, plus the
// longest step so far (a counter or a hold may date from an earlier one).
func (a *simAgreement) tol() time.Duration {
	a.worst = max(a.worst, time.Since(a.start))
	return simAgreeSlack + a.worst
}

// sameNumber reports whether redis's value r and the sim's s are equal,
// or are both the same clock reading give or take tol: µs (TIME-based
// fence tokens) or ms (hold expiries).
func (a *simAgreement) sameNumber(r, s string) bool {
	if r == s {
		return true
	}
	rn, ok1 := redisInt(r)
	sn, ok2 := redisInt(s)
	if !ok1 || !ok2 {
		return false
	}
	d := max(rn-sn, sn-rn)
	switch {
	case rn > 1e14: // µs since 1970
		return d <= a.tol().Microseconds()
	case rn > 1e11: // ms since 1970
		return d <= a.tol().Milliseconds()
	}
	return false
}

// simKeyView is a key as TYPE, GET, HGETALL, ZRANGE WITHSCORES and PTTL
// show it.
type simKeyView struct {
	kind   string
	str    string
	hash   map[string]string
	zset   []redis.Z
	pttlMs int64 // -1: no TTL
}

func (v simKeyView) String() string {
	return fmt.Sprintf("%s %q %v %v pttl %dms", v.kind, v.str, v.hash, v.zset, v.pttlMs)
}

func (m *simMaster) view(name string) simKeyView {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := simExec{m: m, now: m.clockLocked()}
	k := x.lookup(name)
	if k == nil {
		return simKeyView{kind: "none", pttlMs: -2}
	}
	v := simKeyView{kind: k.kind.String(), str: k.str, pttlMs: -1}
	if k.expireAt != 0 {
		v.pttlMs = (k.expireAt - x.now) / int64(time.Millisecond)
	}
	if k.kind == kindHash {
		v.hash = map[string]string{}
		for _, f := range k.hash {
			v.hash[f.name] = f.value
		}
	}
	for _, mem := range k.members() {
		v.zset = append(v.zset, redis.Z{Score: k.zset[mem], Member: mem})
	}
	return v
}

func (a *simAgreement) redisView(name string) simKeyView {
	a.t.Helper()
	ctx, c := a.ctx, a.c
	typ, err := c.Type(ctx, name).Result()
	if err != nil {
		a.t.Fatal(err)
	}
	v := simKeyView{kind: typ}
	switch typ {
	case "string":
		v.str, err = c.Get(ctx, name).Result()
	case "hash":
		v.hash, err = c.HGetAll(ctx, name).Result()
	case "zset":
		v.zset, err = c.ZRangeWithScores(ctx, name, 0, -1).Result()
	}
	if err != nil {
		a.t.Fatal(err)
	}
	pt, err := c.PTTL(ctx, name).Result()
	if err != nil {
		a.t.Fatal(err)
	}
	v.pttlMs = pt.Milliseconds()
	if pt < 0 {
		v.pttlMs = int64(pt / time.Nanosecond) // go-redis keeps -1 and -2 as they are
	}
	return v
}

// keys checks that redis and the sim hold the same in each key of names:
// the type; the value of a string, the fields and values of a hash, the
// members and scores of a sorted set, in order; and the remaining TTL.
func (a *simAgreement) keys(what string, names ...string) {
	a.t.Helper()
	for _, name := range names {
		r, s := a.redisView(name), a.sim.view(name)
		bad := r.kind != s.kind || !a.sameNumber(r.str, s.str) || len(r.hash) != len(s.hash) || !slices.Equal(r.zset, s.zset)
		for f, rv := range r.hash {
			sv, ok := s.hash[f]
			bad = bad || !ok || !a.sameNumber(rv, sv)
		}
		switch {
		case r.pttlMs < 0 || s.pttlMs < 0:
			bad = bad || r.pttlMs != s.pttlMs
		default:
			bad = bad || max(r.pttlMs-s.pttlMs, s.pttlMs-r.pttlMs) > a.tol().Milliseconds()
		}
		if bad {
			a.t.Fatalf("after %s: %s differs (clock tolerance %v):\n  redis %v\n  sim   %v", what, name, a.tol(), r, s)
		}
	}
}

// noProblems fails the test for what the sim could not simulate and for
// scripts that raised.
func (a *simAgreement) noProblems() {
	a.t.Helper()
	if ps := a.sim.problems(); len(ps) > 0 {
		a.t.Fatalf("the sim met problems: %v", ps)
	}
}

func newSimAgreement(t *testing.T) *simAgreement {
	c := clients(t, masters.Addrs()[:1])[0]
	sim := newSimMaster(0, time.Now(), 0, 1)
	t.Cleanup(sim.stopScripts)
	return &simAgreement{t: t, ctx: context.Background(), c: c, sim: sim, start: time.Now()}
}

// TestSimMasterAgreesWithRedis runs the same random requests, plain and
// owned (WithOwner: lua/hold.lua), on a real redis-server and on a
// simMaster, and checks after each that they answered alike (OK, Woke,
// the error or none, the fence token within the clocks' tolerance) and
// hold the same key, fence counter and queue (simAgreement.keys); and that
// the owner's fence field moves alike (kept, new, or the token confirmed).
func TestSimMasterAgreesWithRedis(t *testing.T) {
	a := newSimAgreement(t)
	ctx, c, sim := a.ctx, a.c, a.sim
	rn := NewNode(c)
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
		if v, ok := sim.view(key).hash["fence"]; ok {
			var err error
			if sf, err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("sim %s fence field %q", key, v)
			}
		}
		return rf, sf
	}
	step := func(q request) uint64 {
		t.Helper()
		rPrev, sPrev := fences(q.Key)
		a.begin()
		r, s := q, q
		execRequests(ctx, rn, &r)
		sim.do(&s)
		what := fmt.Sprintf("%v %s=%s owner %q ttl %v token %d", q.Op, q.Key, q.Value, q.Owner, q.TTL, q.Token)
		if r.OK != s.OK || (r.Err == nil) != (s.Err == nil) || r.Woke != s.Woke ||
			!a.sameNumber(strconv.FormatUint(r.Fence, 10), strconv.FormatUint(s.Fence, 10)) {
			t.Fatalf("%s: redis ok=%v fence=%d woke=%v err=%v, sim ok=%v fence=%d woke=%v err=%v",
				what, r.OK, r.Fence, r.Woke, r.Err, s.OK, s.Fence, s.Woke, s.Err)
		}
		a.keys(what, q.Key, FenceKey(q.Key), WaitKey(q.Key))
		if sim.view(q.Key).kind == "hash" {
			// The tokens differ (each master's clock), not what a step
			// does with them: keep the owner's, take a new one, or
			// store the one confirmed.
			rf, sf := fences(q.Key)
			if (rf == rPrev) != (sf == sPrev) || (rf == q.Token) != (sf == q.Token) || (r.Fence == rf) != (s.Fence == sf) {
				t.Fatalf("after %s: redis fence field %d (was %d, reply %d), sim %d (was %d, reply %d)", what, rf, rPrev, r.Fence, sf, sPrev, s.Fence)
			}
		}
		return r.Fence
	}
	var tokens []uint64
	for range 1500 {
		q := request{Op: reqKind(1 + rng.IntN(5)), Key: keys[rng.IntN(len(keys))], Value: values[rng.IntN(len(values))], Owner: owners[rng.IntN(len(owners))]}
		switch q.Op {
		case reqAcquire, reqAcquireFenced, reqExtend:
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
		case reqRaiseFence:
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
			step(request{Op: reqRelease, Key: keys[0], Value: v, Owner: o})
		}
	}
	step(request{Op: reqRelease, Key: keys[0], Value: "a"})
	step(request{Op: reqRelease, Key: keys[0], Value: "b"})
	step(request{Op: reqRelease, Key: keys[0], Value: "c"})
	step(request{Op: reqAcquire, Key: keys[0], Value: "x", TTL: 5 * time.Second})
	step(request{Op: reqExtend, Key: keys[0], Value: "x", TTL: 30 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	step(request{Op: reqExtend, Key: keys[0], Value: "x", TTL: 5 * time.Second}) // gone: not re-created
	step(request{Op: reqAcquireFenced, Key: keys[0], Value: "y", TTL: 30 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	step(request{Op: reqRaiseFence, Key: keys[0], Value: "y", Token: 1})
	step(request{Op: reqRelease, Key: keys[0], Value: "z"})
	// Owned holds expire one by one; the key goes with the last.
	step(request{Op: reqAcquireFenced, Key: keys[0], Value: "x", TTL: 30 * time.Millisecond, Owner: "o1"})
	step(request{Op: reqAcquire, Key: keys[0], Value: "y", TTL: 5 * time.Second, Owner: "o1"})
	step(request{Op: reqAcquire, Key: keys[0], Value: "w", TTL: 5 * time.Second, Owner: "o2"}) // refused
	step(request{Op: reqExtend, Key: keys[0], Value: "y", TTL: 60 * time.Millisecond, Owner: "o1"})
	time.Sleep(40 * time.Millisecond)
	step(request{Op: reqExtend, Key: keys[0], Value: "x", TTL: 5 * time.Second, Owner: "o1"}) // expired
	step(request{Op: reqRaiseFence, Key: keys[0], Value: "x", Token: 1, Owner: "o1"})         // expired
	step(request{Op: reqAcquire, Key: keys[0], Value: "z", TTL: 5 * time.Second})             // plain: refused
	time.Sleep(60 * time.Millisecond)
	step(request{Op: reqAcquire, Key: keys[0], Value: "w", TTL: 5 * time.Second, Owner: "o2"}) // all expired: free
	step(request{Op: reqAcquire, Key: keys[0], Value: "v", TTL: 5 * time.Second, Owner: "o2"})
	step(request{Op: reqRelease, Key: keys[0], Value: "w", Owner: "o2"})
	step(request{Op: reqRelease, Key: keys[0], Value: "v", Owner: "o2"}) // the last: the key goes
	step(request{Op: reqAcquire, Key: keys[0], Value: "z", TTL: 5 * time.Second})
	// A fence counter changed by hand: both refuse it alike.
	for _, owner := range []string{"", "o1"} {
		k := testKey(t)
		if err := c.Set(ctx, FenceKey(k), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		sim.mu.Lock()
		sim.keys[FenceKey(k)] = &simKey{kind: kindString, str: "x"}
		sim.mu.Unlock()
		step(request{Op: reqAcquireFenced, Key: k, Value: "a", TTL: time.Second, Owner: owner})
	}
	a.noProblems()
}

// simRecorder records what a master publishes to a channel's subscriber.
type simRecorder struct{ got *[]string }

func (r simRecorder) deliver(channel, payload string) {
	*r.got = append(*r.got, channel+" "+payload)
}

// TestSimMasterQueuesAgreeWithRedis runs random releases that use the
// key's queue — plain releases, registrations for a hand-off or a wake-up
// (various Reg, Place, Behind, TTL), Unlocks and give-ups of hand-off calls,
// owned releases — with subscribers coming and going, on a real
// redis-server and on a simMaster, and checks that they answer alike (OK,
// Woke), publish the same messages to the same channels, and hold the
// same key, queue (members, scores) and TTLs (simAgreement.keys).
func TestSimMasterQueuesAgreeWithRedis(t *testing.T) {
	a := newSimAgreement(t)
	ctx, c, sim := a.ctx, a.c, a.sim
	rn := NewNode(c)
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
	places := []int64{0, 100, 200, 200, 300, 400}
	pick := func(ss []string) string { return ss[rng.IntN(len(ss))] }
	for i := range 3000 {
		if rng.IntN(15) == 0 {
			toggle(chans[rng.IntN(3)])
			continue
		}
		key := pick(keys)
		q := request{Op: reqRelease, Key: key, Waiter: pick(chans)}
		if q.Waiter == "" && rng.IntN(2) == 0 {
			q.Waiter = chans[0]
		}
		kind := ""
		switch x := rng.IntN(100); {
		case x < 15:
			kind = "acquire"
			q = request{Op: reqAcquire, Key: key, Value: pick([]string{"v1", "v2"}), TTL: time.Duration(5+rng.IntN(5)) * time.Second}
		case x < 20:
			kind = "owned acquire"
			q = request{Op: reqAcquire, Key: key, Value: pick([]string{"v1", "v2"}), Owner: pick(owners), TTL: time.Duration(5+rng.IntN(5)) * time.Second}
		case x < 30:
			kind = "owned release"
			q.Value, q.Owner = pick([]string{"v1", "v2"}), pick(owners)
		case x < 45:
			kind = "release"
			q.Value = pick([]string{"v1", "v2", "", "h1#1", "h2#2", "h3#1"})
		case x < 75:
			kind = "registration"
			q.Value = pick([]string{"v1", "v2", "x"})
			q.Hand, q.Reg = pick(hands), uint64(1+rng.IntN(4))
			q.Place = places[1+rng.IntN(len(places)-1)]
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
			if rng.IntN(3) == 0 {
				q.TTL = 0 // a fenced or owned lock's call: woken, not handed the key
			}
			q.Queued = q.Place
			if rng.IntN(4) == 0 {
				q.Place = 0 // a rollback that does not queue again
			}
		case x < 88:
			kind = "unlock behind"
			q.Hand, q.Reg, q.Behind = pick(hands), uint64(1+rng.IntN(4)), true
			q.Value = q.Hand + "#" + strconv.Itoa(1+rng.IntN(4))
			q.Place = 500 + int64(rng.IntN(3))*100
			q.Queued = places[1+rng.IntN(len(places)-1)] // where it waited before
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
		default:
			kind = "give-up"
			q.Hand, q.Place = pick(hands), places[1+rng.IntN(len(places)-1)]
			q.Queued = q.Place
			if rng.IntN(2) == 0 {
				q.Value = q.Hand + "#" + strconv.Itoa(1+rng.IntN(4)) // an Unlock of a hand-off without Behind
			}
		}
		counts[kind]++
		what := fmt.Sprintf("step %d %s %+v", i, kind, q)
		a.begin()
		r, s := q, q
		execRequests(ctx, rn, &r)
		published = published[:0]
		sim.do(&s)
		if r.OK != s.OK || r.Woke != s.Woke || (r.Err == nil) != (s.Err == nil) {
			t.Fatalf("%s: redis ok=%v woke=%v err=%v, sim ok=%v woke=%v err=%v", what, r.OK, r.Woke, r.Err, s.OK, s.Woke, s.Err)
		}
		want := slices.Sorted(slices.Values(published))
		if got := drain(); !slices.Equal(got, want) {
			t.Fatalf("%s: redis published %q, sim %q", what, got, want)
		}
		a.keys(what, key, WaitKey(key), FenceKey(key))
	}
	sim.mu.Lock()
	st := sim.stats
	sim.mu.Unlock()
	t.Logf("steps %v; sim: %+v", counts, st)
	if st.handoffs == 0 || st.wakes == 0 || st.behind == 0 || st.freeHand == 0 || st.dropped == 0 || st.registrations == 0 {
		t.Errorf("some paths were not exercised: %+v", st)
	}
	a.noProblems()
}

// TestSimLuaAgreesWithRedis runs small scripts that meet each rule of
// Redis's conversions between Lua and RESP — a script's reply to the
// client (numbers truncated, arrays cut at the first nil, ok and err
// tables, booleans by protocol), a command's reply to the script (nil as
// false, status and error tables, redis.call raising, redis.pcall not),
// numbers passed as arguments, error_reply's and status_reply's forms,
// globals protection — on a real redis-server and in the sim's Lua, over
// RESP3 (go-redis's default) and RESP2, and checks that go-redis reads the
// same value or error from both.
func TestSimLuaAgreesWithRedis(t *testing.T) {
	ctx := context.Background()
	addr := masters.Addrs()[0]
	k := testKey(t)
	scripts := []string{
		`return 3.99`,
		`return -3.99`,
		`return 'x'`,
		`return true`,
		`return false`,
		`return nil`,
		`return {1, 'a', {2, 'b'}, 3}`,
		`return {1, false, 3}`,
		`return {1, nil, 3}`,
		`return {true, 2.5}`,
		`return {ok='fine'}`,
		`return {err='ERR bad'}`,
		`return {err='bad thing'}`,
		`return {err='-CODE with dash'}`,
		`return {1, {err='inner'}}`,
		`return redis.error_reply('oops')`,
		`return redis.error_reply('my error')`,
		`return redis.error_reply('-X y')`,
		`return redis.error_reply('trail\r\n')`,
		`return redis.error_reply(1)`,
		`return redis.error_reply('x').err`,
		`return redis.error_reply('my error').err`,
		`return redis.status_reply('S')`,
		`return redis.status_reply('S').ok`,
		`return redis.call('SET', KEYS[1], 'v')`,
		`return redis.call('SET', KEYS[1], 'v').ok`,
		`return redis.call('GET', KEYS[2])`,
		`return type(redis.call('GET', KEYS[2]))`,
		`return redis.call('TYPE', KEYS[1]).ok`,
		`return redis.call('TYPE', KEYS[2]).ok`,
		`return redis.pcall('HGET', KEYS[1], 'f')`,
		`return redis.pcall('HGET', KEYS[1], 'f').err`,
		`return redis.call('HGET', KEYS[1], 'f')`,
		`return redis.pcall('GET')`,
		`return redis.pcall('GET').err`,
		`return redis.pcall('GET', KEYS[1], 'extra').err`,
		`return redis.pcall().err`,
		`return redis.pcall('SET', KEYS[1], {}).err`,
		`return redis.pcall('SET', KEYS[1], 'v', 'PX', 0).err`,
		`return redis.pcall('SET', KEYS[1], 'v', 'PX', '01').err`,
		`return redis.pcall('SET', KEYS[1], 'v', 'PX', 10, 'NX', 'XX').err`,
		`return redis.pcall('PEXPIRE', KEYS[1], 'x').err`,
		`return redis.pcall('ZADD', KEYS[3], 'x', 'm').err`,
		`return redis.pcall('ZADD', KEYS[3], 1).err`,
		`return redis.pcall('HSET', KEYS[3], 'f').err`,
		`redis.call('SET', KEYS[1], 0.1) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], 1.5) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], 12345678901234567) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], 1e20) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], -7) return redis.call('GET', KEYS[1])`,
		`return tostring(1e15) .. ' ' .. tostring(0.1) .. ' ' .. tostring(123) .. ' ' .. tostring(-2.5)`,
		`return string.format('%.0f', 1234567890123456)`,
		`redis.call('DEL', KEYS[3]) redis.call('ZADD', KEYS[3], 2, 'b', 1, 'c', 1, 'a', '-inf', 'z') return redis.call('ZRANGE', KEYS[3], 0, -1)`,
		`return redis.call('ZRANGE', KEYS[3], -2, 10)`,
		`return redis.call('ZRANGE', KEYS[3], 3, 1)`,
		`return redis.call('ZREM', KEYS[3], 'a', 'nope')`,
		`redis.call('DEL', KEYS[4]) return {redis.call('HSET', KEYS[4], 'a', '1', 'b', '2'), redis.call('HSET', KEYS[4], 'a', '3')}`,
		`return redis.call('HGETALL', KEYS[4])`,
		`return {redis.call('HDEL', KEYS[4], 'a', 'b', 'c'), redis.call('TYPE', KEYS[4]).ok}`,
		`return {redis.call('PEXPIRE', KEYS[2], 100), redis.call('PEXPIRE', KEYS[1], 0), redis.call('TYPE', KEYS[1]).ok}`,
		`return {redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]), #redis.call('TIME')}`,
		`return undefined_global`,
		`x = 1 return x`,
		`return redis.call('EVAL', 'return 1', 0)`,
		`return nil .. 'x'`,
		`return 'unterminated`,
		// Patterns: string.find and string.match are Lua 5.1's (simluapat_test.go).
		`return {string.match('redlock:wake:ab/3|hAnD|150|12', '^([^|]*)|([^|]+)|(%d+)|(%d+)$')}`,
		`return {string.match('plainchannel', '^([^|]*)|([^|]+)|(%d+)|(%d+)$')}`,
		`return {string.match('c||150|12', '^([^|]*)|([^|]+)|(%d+)|(%d+)$')}`,
		`return {string.match('ch|h|150|12', '(%d+)$')}`,
		`return {('x|h|12a'):match('(%d+)$')}`,
		`return {string.find('hello world', 'o w')}`,
		`return {string.find('hello', 'l+')}`,
		`return {string.find('a.b', '.', 1, true)}`,
		`return {string.find('a.b', '%.')}`,
		`return {string.find('abc', 'b', -1)}`,
		`return {string.find('abc', 'b', -10)}`,
		`return {string.find('abc', '', 10)}`,
		`return {string.find('abc', '', 4)}`,
		`return {string.find('a+b', '+', 1, true)}`,
		`return {string.find('a+b', 'a+b')}`,
		`return {string.find('key=val', '(%w+)=(%w+)')}`,
		`return {string.match('key = value', '(%w+)%s*=%s*(%w+)')}`,
		`return {string.match('hello', '()ll()')}`,
		`return {string.match('abcabc', '(a)(b)c%1%2')}`,
		`return {string.match('THE (quick) fox', '%((%a+)%)')}`,
		`return {string.match('x(a(b)c)y', '%b()')}`,
		`return {string.match('THE quick', '%f[%a]%a+', 4)}`,
		`return {string.match('  trim  ', '^%s*(.-)%s*$')}`,
		`return {string.match('aaa', 'a-b')}`,
		`return {string.match('aaab', 'a-b')}`,
		`return {string.match('x]y', '[]]')}`,
		`return {string.match('a-z', '[a%-z]+')}`,
		`return {string.match('f00', '[^%d]+')}`,
		`return {string.match('CamelCase', '%u%l+', 2)}`,
		`return {string.match('a,b;c', '[,;]')}`,
		`return {string.match('a1.5', '%d%.%d')}`,
		`return {string.match(12345, '%d%d')}`,
		`return {string.match('a\0b', '%z(.)')}`,
		`return {string.match('ab?', 'b?%?')}`,
		`return {string.match('x9_!', '[%w_]+'), string.match('x9_!', '%p'), string.match('\t x', '%s+()'), string.match('AbC', '%U+')}`,
		`return {string.match('ab', '()()a')}`,
		`return #string.match(string.rep('a', 300) .. 'b', '(a*)b')`,
		`return string.match('x', '[')`,
		`return string.match('x', '%')`,
		`return string.match('x', '(x')`,
		`return string.match('x', 'x)')`,
		`return string.match('x', '%1')`,
		`return string.match('xx', '()x%1')`,
		`return ...`,
		`return select('#', ...)`,
	}
	for _, proto := range []int{3, 2} {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		sim := newSimMaster(0, time.Now(), 0, 1)
		t.Cleanup(sim.stopScripts)
		keys := []string{k + ":1", k + ":2", k + ":3", k + ":4"}
		for _, src := range scripts {
			args := append([]any{"eval", src, len(keys)}, toAny(keys)...)
			rc := redis.NewCmd(ctx, args...)
			_ = c.Process(ctx, rc)
			sc := redis.NewCmd(ctx, args...)
			sim.mu.Lock()
			x := simExec{m: sim, now: sim.clockLocked()}
			words, err := cmdArgs(sc.Args())
			if err != nil {
				t.Fatal(err)
			}
			if err := setCmdReply(sc, x.dispatch(words)); err != nil {
				t.Fatal(err)
			}
			sim.mu.Unlock()
			if x.shimErr != nil {
				t.Errorf("RESP%d %s: the shim failed: %v", proto, src, x.shimErr)
				continue
			}
			rv, rerr := rc.Result()
			sv, serr := sc.Result()
			if !sameReply(rv, sv) || !sameError(rerr, serr) {
				t.Errorf("RESP%d %s:\n  redis %#v, %v\n  sim   %#v, %v", proto, src, rv, rerr, sv, serr)
			}
		}
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// sameReply compares go-redis values, an error element by its text.
func sameReply(a, b any) bool {
	as, ok1 := a.([]any)
	bs, ok2 := b.([]any)
	if ok1 && ok2 {
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			if !sameReply(as[i], bs[i]) {
				return false
			}
		}
		return true
	}
	if ea, ok := a.(error); ok {
		eb, ok := b.(error)
		return ok && ea.Error() == eb.Error()
	}
	return reflect.DeepEqual(a, b)
}

// sameError compares redis's error a with the sim's b: by their text,
// except for an error the script raised (" script: <sha1>, on
// @user_script:N." follows it), whose text up to there is the same when
// redis.call raised it and only its code (ERR) when the interpreter did:
// gopher-lua words its errors, line numbers and compile errors its own way.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if errors.Is(a, redis.Nil) || errors.Is(b, redis.Nil) {
		return errors.Is(a, redis.Nil) && errors.Is(b, redis.Nil)
	}
	as, bs := a.Error(), b.Error()
	const compiling = "ERR Error compiling script"
	if strings.HasPrefix(as, compiling) {
		return strings.HasPrefix(bs, compiling)
	}
	ra, _, raised := strings.Cut(as, " script: ")
	if !raised {
		return as == bs
	}
	rb, _, _ := strings.Cut(bs, " script: ")
	if strings.HasPrefix(ra, "ERR user_script:") {
		return strings.HasPrefix(rb, "ERR ")
	}
	return ra == rb
}

// TestSimInfoAgreesWithRedis: the sim's INFO server has Redis's shape — the
// section's header, then field:value lines, each ending in CRLF, its
// fields in the order a redis-server gives them (the installed one may
// have more), a run_id of 40 hex digits — and counts uptime_in_seconds as
// Redis 7.0 does (server.unixtime − server.stat_starttime, both whole
// seconds): 75 ms after a start at 10.9 s of the clock it reads 1.
func TestSimInfoAgreesWithRedis(t *testing.T) {
	ctx := context.Background()
	c := clients(t, masters.Addrs()[:1])[0]
	real, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	sim := newSimMaster(0, time.Now(), 0, 1)
	t.Cleanup(sim.stopScripts)
	info := func(start, now time.Duration) string {
		sim.mu.Lock()
		defer sim.mu.Unlock()
		sim.startedAt = int64(start)
		x := simExec{m: sim, now: int64(now)}
		return cmdInfo(&x, []string{"info", "server"}).s
	}
	fields := func(who, s string) []string {
		t.Helper()
		body, ok := strings.CutPrefix(s, "# Server\r\n")
		if !ok || !strings.HasSuffix(body, "\r\n") {
			t.Fatalf("%s INFO server = %q; want \"# Server\\r\\n\" then lines ending in CRLF", who, s)
		}
		var names []string
		for l := range strings.SplitSeq(strings.TrimSuffix(body, "\r\n"), "\r\n") {
			name, v, ok := strings.Cut(l, ":")
			if !ok || strings.ContainsAny(l, "\r\n") {
				t.Fatalf("%s INFO server line %q is not field:value", who, l)
			}
			if name == "run_id" && (len(v) != 40 || strings.Trim(v, "0123456789abcdef") != "") {
				t.Errorf("%s run_id %q; want 40 hex digits", who, v)
			}
			names = append(names, name)
		}
		return names
	}
	rn := fields("redis", real)
	sn := fields("sim", info(0, time.Hour))
	i := 0
	for _, n := range sn {
		for i < len(rn) && rn[i] != n {
			i++
		}
		if i == len(rn) {
			t.Fatalf("the sim's INFO server field %q is not in redis's, or out of its order: sim %v, redis %v", n, sn, rn)
		}
	}
	for _, tc := range []struct {
		start, now time.Duration
		want       string
	}{
		{10*time.Second + 900*time.Millisecond, 11*time.Second + 75*time.Millisecond, "uptime_in_seconds:1\r\n"},
		{10*time.Second + 900*time.Millisecond, 11*time.Second + 899*time.Millisecond, "uptime_in_seconds:1\r\n"},
		{10*time.Second + 900*time.Millisecond, 10*time.Second + 999*time.Millisecond, "uptime_in_seconds:0\r\n"},
		{10 * time.Second, 12*time.Second - time.Nanosecond, "uptime_in_seconds:1\r\n"},
		{10 * time.Second, 3*24*time.Hour + 11*time.Second, "uptime_in_seconds:259201\r\nuptime_in_days:3\r\n"},
	} {
		if got := info(tc.start, tc.now); !strings.Contains(got, tc.want) {
			t.Errorf("started at %v, INFO at %v: %q; want it to hold %q", tc.start, tc.now, got, tc.want)
		}
	}
}
