package redlock

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const foreign = "someone-else"

// TestEarlyDecision: a slow master does not slow the acquire down, and a
// slow majority fails it within the node timeout.
func TestEarlyDecision(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	slow := make([]*faultNode, len(nodes))
	for i := range nodes {
		slow[i] = wrap(nodes[i])
		nodes[i] = slow[i]
	}
	r := newRedlock(t, nodes, WithNodeTimeout(300*time.Millisecond))

	slow[4].acquireDelay.Store(int64(2 * time.Second))
	start := time.Now()
	l, err := r.TryLock(context.Background(), testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("acquire with one master 2s slow took %v; it should not wait for the slow master", took)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		slow[i].acquireDelay.Store(int64(2 * time.Second))
	}
	start = time.Now()
	_, err = r.TryLock(context.Background(), testKey(t))
	took := time.Since(start)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("with a majority slow: err %v, want ErrNotObtained", err)
	}
	if took > time.Second {
		t.Errorf("with a majority 2s slow the acquire took %v; want about the 300ms node timeout", took)
	}
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Failed < 3 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v: want at least 3 failed masters that timed out", err)
	}
}

// fakeClock advances by step on every reading after the first.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// jumpClock is the real clock plus an offset that a test moves forward
// while requests are in flight (see faultNode.onSend), as a stalled process
// or a slow network would make the validity clock appear to jump.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) Now() time.Time       { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *jumpClock) jump(d time.Duration) { c.offset.Add(int64(d)) }

// jumpOnce returns a faultNode hook that moves c forward by d, once, when
// the first request of op is sent to any of the masters.
func jumpOnce(c *jumpClock, op reqKind, d time.Duration) func(*request) {
	var once sync.Once
	return func(q *request) {
		if q.Op == op {
			once.Do(func() { c.jump(d) })
		}
	}
}

// wrapAll wraps every node in a faultNode.
func wrapAll(nodes []Node) []*faultNode {
	fs := make([]*faultNode, len(nodes))
	for i, n := range nodes {
		fs[i] = wrap(n)
		nodes[i] = fs[i]
	}
	return fs
}

// TestValidityShrinks: validity is the TTL less the acquire's elapsed time
// and the drift allowance; under the minimum the acquire fails and is rolled
// back.
func TestValidityShrinks(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	const ttl = 10 * time.Second
	drift := time.Duration(float64(ttl)*DefaultDriftFactor) + 2*time.Millisecond

	for _, tc := range []struct {
		elapsed time.Duration
		ok      bool
	}{{0, true}, {3 * time.Second, true}, {8 * time.Second, true}, {9 * time.Second, false}} {
		r := newRedlock(t, nodesOf(t, cs), WithTTL(ttl))
		start := time.Now()
		fc := &fakeClock{now: start, step: tc.elapsed}
		r.clock = fc
		key := testKey(t)
		l, err := r.TryLock(context.Background(), key)
		if tc.ok != (err == nil) {
			t.Fatalf("elapsed %v: err %v, want ok=%v", tc.elapsed, err, tc.ok)
		}
		if tc.ok {
			decided := start.Add(tc.elapsed)
			if got, want := l.Until().Sub(decided), ttl-tc.elapsed-drift; got != want {
				t.Errorf("elapsed %v: validity %v, want ttl-elapsed-drift = %v", tc.elapsed, got, want)
			}
			continue
		}
		var qe *QuorumError
		if !errors.As(err, &qe) || !qe.Late || qe.Validity != ttl-tc.elapsed-drift {
			t.Fatalf("elapsed %v: error %v, want a late QuorumError with validity %v", tc.elapsed, err, ttl-tc.elapsed-drift)
		}
		settle(r)
		if vs := holders(t, cs, key); count(vs, "") != len(cs) {
			t.Errorf("late acquire not rolled back: masters hold %q", vs)
		}
	}
}

// TestRollbackCleansEveryMaster: after a failed attempt no master holds our
// value, including one whose SET landed although the client timed out.
func TestRollbackCleansEveryMaster(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	late := wrap(nodes[0])
	late.lateReply.Store(true)
	nodes[0] = late
	r := newRedlock(t, nodes, WithNodeTimeout(100*time.Millisecond))

	key := testKey(t)
	if err := cs[1].Set(context.Background(), key, foreign, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := r.TryLock(context.Background(), key)
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Refused != 1 || qe.Failed != 1 || qe.Succeeded != 1 {
		t.Fatalf("err %v: want 1 succeeded, 1 refused, 1 timed out", err)
	}
	settle(r)
	if vs := holders(t, cs, key); vs[0] != "" || vs[1] != foreign || vs[2] != "" {
		t.Fatalf("after rollback masters hold %q; want [\"\" %q \"\"]", vs, foreign)
	}
}

// TestStragglerCannotOutliveUnlock: Lock then Unlock at once while one master
// is slow; the release to it must follow the acquire still in flight, so soon
// after Unlock no master holds the key.
func TestStragglerCannotOutliveUnlock(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	slow := wrap(nodes[2])
	slow.acquireDelay.Store(int64(20 * time.Millisecond))
	nodes[2] = slow
	r := newRedlock(t, nodes, WithNodeTimeout(200*time.Millisecond))

	for i := range 30 {
		key := testKey(t)
		l, err := r.TryLock(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		settle(r)
		if vs := holders(t, cs, key); count(vs, "") != len(vs) {
			t.Fatalf("round %d: after Unlock masters still hold %q", i, vs)
		}
	}
}

// TestCancelAfterLockKeepsStragglers: cancelling the caller's context right
// after Lock returned must not cut short the SETs still in flight, or the lock
// would sit on a bare quorum and one master failure would lose it.
func TestCancelAfterLockKeepsStragglers(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	slow := wrap(nodes[4])
	slow.acquireDelay.Store(int64(30 * time.Millisecond))
	nodes[4] = slow
	r := newRedlock(t, nodes, WithNodeTimeout(300*time.Millisecond))
	key := testKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := r.TryLock(ctx, key)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	settle(r)
	if vs := holders(t, cs, key); count(vs, l.Value()) != 5 {
		t.Fatalf("after cancel, masters hold %q; want our value on all 5", vs)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// yesNode returns an in-memory master that grants everything at once: it
// lets a fuzzer drive the acquire, fence, extend and release arithmetic with
// any options, without a network.
func yesNode(name string) Node {
	return NodeFunc(name, func(_ context.Context, c *Command) {
		q := *c.req
		q.OK, q.Fence = true, 1
		replyFor(&q, c)
	})
}

// FuzzOptions: any combination of option values makes New either succeed or
// return a *ConfigError — never panic — and a Redlock that New accepted takes,
// extends and releases a lock (or refuses with a clean error) under them.
func FuzzOptions(f *testing.F) {
	f.Add(int64(10*time.Second), 0.01, int64(100*time.Millisecond), int64(-1), 0, int64(5*time.Millisecond), int64(250*time.Millisecond), "k", int64(time.Second))
	f.Add(int64(time.Millisecond), 0.0, int64(1), int64(0), 1, int64(1), int64(1), "", int64(0))
	f.Add(int64(math.MaxInt64), 0.9999999999999999, int64(math.MaxInt64), int64(math.MaxInt64), math.MaxInt, int64(math.MaxInt64), int64(math.MaxInt64), "{k}\n", int64(math.MaxInt64))
	f.Add(int64(3*time.Millisecond), math.NaN(), int64(-1), int64(-5), -1, int64(-1), int64(-2), "\x00", int64(-1))
	f.Add(int64(1500*time.Microsecond), math.Inf(1), int64(0), int64(math.MinInt64), 0, int64(0), int64(0), "x", int64(1500*time.Microsecond))
	f.Fuzz(func(t *testing.T, ttl int64, drift float64, nodeTimeout, minValidity int64, retry int, bmin, bmax int64, key string, extend int64) {
		opts := []Option{WithTTL(time.Duration(ttl)), WithDriftFactor(drift)}
		if nodeTimeout != 0 {
			opts = append(opts, WithNodeTimeout(time.Duration(nodeTimeout)))
		}
		if minValidity != -1 {
			opts = append(opts, WithMinValidity(time.Duration(minValidity)))
		}
		if retry != 0 {
			opts = append(opts, WithRetry(retry))
		}
		if bmin != 0 || bmax != 0 {
			opts = append(opts, WithBackoff(time.Duration(bmin), time.Duration(bmax)))
		}
		if ttl%2 == 0 {
			opts = append(opts, WithFencing())
		}
		nodes := []Node{yesNode("a"), yesNode("b"), yesNode("c")}
		r, err := New(nodes, opts...)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("New: %v (%T), want a *ConfigError", err, err)
			}
			return
		}
		defer r.Close()
		cfg, err := r.cfg.resolved()
		if err != nil {
			t.Fatalf("New accepted a config that does not resolve: %v", err)
		}
		if cfg.nodeTimeout <= 0 || cfg.ttl%time.Millisecond != 0 || cfg.ttl-cfg.drift()-cfg.minValidity <= 0 {
			t.Fatalf("New accepted ttl %v, node timeout %v, drift %v, min validity %v", cfg.ttl, cfg.nodeTimeout, cfg.drift(), cfg.minValidity)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		l, err := r.TryLock(ctx, key)
		if err != nil {
			if !isClean(err) {
				t.Fatalf("TryLock: %v (%T)", err, err)
			}
			return
		}
		if err := l.Extend(ctx, time.Duration(extend)); err != nil && !isClean(err) {
			t.Fatalf("Extend: %v (%T)", err, err)
		}
		if err := l.Unlock(ctx); err != nil && !isClean(err) {
			t.Fatalf("Unlock: %v (%T)", err, err)
		}
	})
}

// isClean reports whether err is one of the errors the API documents.
func isClean(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce) || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) ||
		errors.Is(err, context.DeadlineExceeded)
}

// TestTTLWholeMilliseconds: the TTL is what the masters were sent, whole
// milliseconds, so the validity is never computed from a longer TTL.
func TestTTLWholeMilliseconds(t *testing.T) {
	r := newRedlock(t, []Node{yesNode("a")}, WithTTL(10*time.Second+999*time.Microsecond))
	l, err := r.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 10*time.Second {
		t.Errorf("TTL %v, want 10s", l.TTL())
	}
}

// refSlot is the Redis Cluster slot of key, computed apart from keySlot:
// the tag scanned as cluster.c's keyHashSlot does, CRC16-XMODEM from a
// table made from the polynomial.
func refSlot(key string) int {
	s := -1
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			s = i
			break
		}
	}
	if s >= 0 {
		for e := s + 1; e < len(key); e++ {
			if key[e] == '}' {
				if e > s+1 {
					key = key[s+1 : e]
				}
				break
			}
		}
	}
	var tab [256]uint16
	for i := range tab {
		c := uint16(i) << 8
		for range 8 {
			c = c<<1 ^ (c>>15)*0x1021
		}
		tab[i] = c
	}
	var crc uint16
	for _, b := range []byte(key) {
		crc = crc<<8 ^ tab[byte(crc>>8)^b]
	}
	return int(crc) % 16384
}

// keyCases are lock keys for every case of derivedKey's rule; the cluster
// test checks their slots with CLUSTER KEYSLOT as well.
var keyCases = []struct{ key, fence string }{
	{"order:42", "fence:{order:42}"},                 // no braces
	{"{user:1}:cart", "{user:1}:cart:fence"},         // a tag
	{"{user:1}", "{user:1}:fence"},                   // nothing but a tag
	{"a{b}c{d}", "a{b}c{d}:fence"},                   // the first tag counts
	{"a{", "fence:{a{}"},                             // '{' without '}'
	{"a{{b}", "a{{b}:fence"},                         // tag "{b"
	{"{{}}", "{{}}:fence"},                           // tag "{"
	{"{}", ""},                                       // empty tag, '}': rule 3
	{"x{}y", ""},                                     // empty tag
	{"{}{a}", ""},                                    // empty first tag: the whole key
	{"a}b", ""},                                      // '}' without '{'
	{"a}b{c", ""},                                    // '}' before '{', no tag
	{"a}b{c}", "a}b{c}:fence"},                       // '}' before a tag
	{"}", ""},                                        // '}' alone
	{"{", "fence:{{}"},                               // '{' alone
	{"\x00\xff{\x00}", "\x00\xff{\x00}:fence"},       // binary tag
	{"\x00\x01\xff\xfe", "fence:{\x00\x01\xff\xfe}"}, // binary, no braces
	{"\xc3\x28}\xa0", ""},                            // invalid UTF-8 with '}'
	{"ünïcødé 🔒 锁", "fence:{ünïcødé 🔒 锁}"},         // unicode
	{"line\nbreak\r\n", "fence:{line\nbreak\r\n}"}, // newlines
	{"fence:{x", ""},                                                       // refused: not derived, but the prefix
	{"{fence:{x}}", "{fence:{x}}:fence"},                                   // a tag holding the prefix
	{strings.Repeat("k", MaxKeyLen), ""},                                   // longest
	{"}" + strings.Repeat("k", MaxKeyLen-1), ""},                           // longest, rule 3
	{"{t}" + strings.Repeat("k", MaxKeyLen-3), ""},                         // longest, tagged
	{"foo{hash_tag}", "foo{hash_tag}:fence"},                               // Redis's own example
	{"somekey", "fence:{somekey}"},                                         // Redis's own example
	{"\x00", "fence:{\x00}"},                                               // one NUL
	{"{\x00}}", "{\x00}}:fence"},                                           // tag "\x00", a '}' after
	{"waiters:{a}b", ""},                                                   // refused: the prefix
	{"{a}:waiters:x", "{a}:waiters:x:fence"},                               // the suffix inside
	{"{}" + strings.Repeat("}", 100), ""},                                  // many '}'
	{strings.Repeat("{", 100) + "}", strings.Repeat("{", 100) + "}:fence"}, // tag of '{'s
}

// TestKeySlotCRC16 checks the checksum and the slot against values Redis
// documents: CRC16("123456789") = 0x31C3, CLUSTER KEYSLOT somekey = 11058,
// foo{hash_tag} = 2515.
func TestKeySlotCRC16(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{"somekey": 11058, "foo{hash_tag}": 2515, "hash_tag": 2515} {
		if got, ref := int(keySlot(key)), refSlot(key); got != want || ref != want {
			t.Errorf("slot(%q) = %d (reference %d), want %d", key, got, ref, want)
		}
	}
}

// TestKeyDerivedNames: every case of the naming rule keeps the lock key's
// slot, names the counter as documented, and can be traced back.
func TestKeyDerivedNames(t *testing.T) {
	for _, tc := range keyCases {
		checkDerived(t, tc.key)
		if tc.fence != "" {
			if got := FenceKey(tc.key); got != tc.fence {
				t.Errorf("FenceKey(%.40q) = %.60q, want %.60q", tc.key, got, tc.fence)
			}
		}
	}
	// Rule 3 names: a tag of the slot, then the key.
	for _, key := range []string{"{}", "a}b", "}"} {
		got := FenceKey(key)
		tag, _ := hashTag(got)
		if got != "fence:{"+tag+"}"+key || strings.Trim(tag, "0123456789") != "" {
			t.Errorf("FenceKey(%q) = %q, want fence:{DIGITS}%s", key, got, key)
		}
	}
}

// checkDerived checks key's derived names: the same slot as key, distinct,
// never a lock key Lock accepts, traced back to key by derivedFrom.
func checkDerived(t *testing.T, key string) {
	t.Helper()
	want := refSlot(key)
	if got := int(keySlot(key)); got != want {
		t.Errorf("keySlot(%.40q) = %d, reference %d", key, got, want)
	}
	fk, wk := FenceKey(key), WaitKey(key)
	if fk == wk {
		t.Errorf("FenceKey(%.40q) = WaitKey = %.60q", key, fk)
	}
	for name, d := range map[string]string{"fence": fk, "waiters": wk} {
		if got := refSlot(d); got != want {
			t.Errorf("%s of %.40q is %.60q in slot %d, the key in %d", name, key, d, got, want)
		}
		if _, _, locked := derivedFrom(key); locked {
			continue // a key Lock refuses: its names need not trace back
		}
		n, lock, ok := derivedFrom(d)
		if !ok || n != name || lock != key {
			t.Errorf("derivedFrom(%.60q) = %q, %.40q, %v; want %s, %.40q, true", d, n, lock, ok, name, key)
		}
	}
}

// TestKeyDerivedRandom: the properties of checkDerived, and that two lock
// keys never share a derived name, for random keys made of the bytes that
// matter ('{', '}', ':', the words of the names) and others.
func TestKeyDerivedRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"{", "}", ":", "fence", "waiters", "a", "b", "\x00", "\xff", "{}", ":fence", "fence:{", "waiters:{", "7"}
	names := map[string]string{} // derived name -> its lock key
	locks := map[string]bool{}
	for range 20000 {
		var b strings.Builder
		for n := 1 + rng.IntN(6); n > 0; n-- {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		key := b.String()
		checkDerived(t, key)
		if _, _, refused := derivedFrom(key); refused {
			continue
		}
		locks[key] = true
		for _, d := range []string{FenceKey(key), WaitKey(key)} {
			if other, ok := names[d]; ok && other != key {
				t.Fatalf("locks %q and %q share the derived key %q", key, other, d)
			}
			names[d] = key
		}
	}
	for d, key := range names {
		if locks[d] {
			t.Fatalf("derived key %q of %q is also a lock key", d, key)
		}
	}
}

// FuzzDerivedKey: for any key, the derived names keep its slot and trace
// back to it; for any two keys Lock accepts, no derived name is shared or
// is the other key.
func FuzzDerivedKey(f *testing.F) {
	for _, tc := range keyCases {
		if len(tc.key) < 100 {
			f.Add(tc.key, "{"+tc.key+"}")
		}
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" || len(a) > MaxKeyLen || len(b) > MaxKeyLen {
			return
		}
		checkDerived(t, a)
		checkDerived(t, b)
		_, _, ra := derivedFrom(a)
		_, _, rb := derivedFrom(b)
		if ra || rb || a == b {
			return
		}
		for _, da := range []string{FenceKey(a), WaitKey(a)} {
			for _, db := range []string{FenceKey(b), WaitKey(b), b} {
				if da == db {
					t.Fatalf("%q (of %q) is also a name of %q", da, a, b)
				}
			}
			if da == b {
				t.Fatalf("derived key %q of %q is the lock key %q", da, a, b)
			}
		}
	})
}

// TestLongKeyInErrors: an error about a long key quotes a short prefix of it,
// and escapes newlines so a key cannot forge a line in a log.
func TestLongKeyInErrors(t *testing.T) {
	key := "line\nbreak" + strings.Repeat("k", MaxKeyLen-20)
	err := (&QuorumError{Op: opAcquire, Key: key, Nodes: 3, Quorum: 2}).Error()
	if len(err) > 300 || strings.Contains(err, "\n") || !strings.Contains(err, `line\nbreak`) {
		t.Errorf("error about a %d-byte key: %q", len(key), err)
	}
}
