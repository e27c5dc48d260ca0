package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

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

// TestKeyRefusedDerivedShapes: Lock refuses every key of a derived name's
// shape with a *ConfigError that says which shape and whose name it is.
func TestKeyRefusedDerivedShapes(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:1])))
	for key, says := range map[string]string{
		FenceKey("order:42"):  `starts with "fence:{", the shape of the names of fence counters (FenceKey): it could be the fence counter of the lock "order:42"`,
		WaitKey("order:42"):   `starts with "waiters:{", the shape of the names of queues of waiting Redlocks (WaitKey): it could be the queue of the lock "order:42"`,
		FenceKey("{u}:1"):     `ends in ":fence"`,
		WaitKey("{u}:1"):      `the queue of the lock "{u}:1"`,
		"order:42:fence":      `the fence counter of the lock "order:42"`,
		FenceKey("a}b"):       `the fence counter of the lock "a}b"`,
		"fence:{unterminated": `choose a name that does not`,
		"waiters:{x}":         `the queue of the lock "x"`,
	} {
		_, err := r.TryLock(t.Context(), key)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "key" || !strings.Contains(err.Error(), says) {
			t.Errorf("TryLock(%q): %v; want a *ConfigError for key saying %s", key, err, says)
		}
	}
}

// TestAwkwardKeys: keys with braces, spaces, unicode, newlines, binary bytes,
// invalid UTF-8, and up to MaxKeyLen bytes lock, fence, extend and unlock end
// to end; longer keys are a *ConfigError naming the limit.
func TestAwkwardKeys(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs), WithFencing())
	ctx := context.Background()
	for _, tc := range []struct{ name, suffix string }{
		{"braces", "{user:1}:{x}"},
		{"spaces", " a key with  spaces "},
		{"unicode", "ünïcødé 🔒 锁"},
		{"newlines", "line\nbreak\r\nDEL *\r\n"},
		{"binary", "\x00\x01\xff\xfe\x00"},
		{"invalid UTF-8", "\xc3\x28\xa0\xa1"},
		{"RESP in key", "*1\r\n$4\r\nPING\r\n"},
		{"longest", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := testKey(t) + tc.suffix
			if tc.name == "longest" {
				key += strings.Repeat("k", MaxKeyLen-len(key))
			}
			l, err := r.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			settle(r)
			if vs := holders(t, cs, key); count(vs, l.Value()) != len(cs) {
				t.Fatalf("masters hold %q under the key, want our value on all", vs)
			}
			if fence, err := cs[0].Get(ctx, FenceKey(key)).Uint64(); err != nil || fence < l.Fence() || l.Fence() == 0 {
				t.Fatalf("fence counter %d (%v), token %d", fence, err, l.Fence())
			}
			if err := l.Extend(ctx, 20*time.Second); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			settle(r)
			if ttl := cs[0].PTTL(ctx, key).Val(); ttl <= 10*time.Second {
				t.Fatalf("PTTL after Extend(20s) is %v", ttl)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			settle(r)
			if vs := holders(t, cs, key); count(vs, "") != len(cs) {
				t.Fatalf("after Unlock masters hold %q", vs)
			}
		})
	}

	for _, n := range []int{MaxKeyLen + 1, 1 << 20} {
		_, err := r.TryLock(ctx, strings.Repeat("k", n))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "key" || !strings.Contains(err.Error(), "MaxKeyLen") {
			t.Errorf("key of %d bytes: err %v, want a *ConfigError for key naming MaxKeyLen", n, err)
		}
		if len(err.Error()) > 200 {
			t.Errorf("key of %d bytes: the error is %d bytes long", n, len(err.Error()))
		}
	}
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
