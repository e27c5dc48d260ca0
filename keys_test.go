package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

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
