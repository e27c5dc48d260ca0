package redlock

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// oldFencedLock takes and releases key on masters cs as a fenced Lock of a
// version before the counters moved did: acquire_fenced.lua and
// raise_fence.lua on the old counter name key+":fence", then a DEL. It
// returns the token it was handed.
func oldFencedLock(t *testing.T, cs []*redis.Client, key string) uint64 {
	t.Helper()
	ctx := context.Background()
	old := key + ":fence"
	var token uint64
	for i, c := range cs {
		n, err := c.Eval(ctx, acquireFencedSrc.(string), []string{key, old}, "old-holder", 10000).Uint64()
		if err != nil || n == 0 {
			t.Fatalf("master %d: old fenced acquire: %d, %v", i, n, err)
		}
		token = max(token, n)
	}
	for i, c := range cs {
		if ok, err := c.Eval(ctx, raiseFenceSrc.(string), []string{key, old}, "old-holder", token).Int(); err != nil || ok != 1 {
			t.Fatalf("master %d: old raise: %d, %v", i, ok, err)
		}
		if err := c.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return token
}

// TestFenceCounterMovedTokensIncrease: a key without a hash tag had its
// fence counter at key:fence; it is now at fence:{key}, which starts empty.
// Tokens still increase across the move, because round 1 floors a counter
// at the master's clock in µs: the first token from the new counter is
// above every token the old one handed out, and holders that alternate
// between old and new clients (a rolling deploy) get increasing tokens on
// masters whose clocks agree (one machine here; see docs/masters.md).
func TestFenceCounterMovedTokensIncrease(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs), WithFencing())
	ctx := context.Background()
	key := testKey(t)
	if FenceKey(key) == key+":fence" {
		t.Fatalf("FenceKey(%q) is still the old name", key)
	}
	var last uint64
	for range 3 {
		last = oldFencedLock(t, cs, key)
	}
	highest := last
	for i, c := range cs {
		v, err := c.Get(ctx, key+":fence").Uint64()
		if err != nil {
			t.Fatalf("master %d: old counter: %v", i, err)
		}
		highest = max(highest, v)
		if n := c.Exists(ctx, FenceKey(key)).Val(); n != 0 {
			t.Fatalf("master %d: the new counter exists before the first new lock", i)
		}
	}
	l, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("old tokens up to %d (old counters up to %d); first new token %d (+%d µs)", last, highest, l.Fence(), l.Fence()-highest)
	if l.Fence() <= highest {
		t.Fatalf("first token after the move %d, not above the old counter's %d", l.Fence(), highest)
	}
	last = l.Fence()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(r) // Unlock returns at a quorum: the old client needs the key gone everywhere
	// Old and new clients alternating on the key, as in a rolling deploy.
	for i := range 6 {
		var tok uint64
		if i%2 == 0 {
			tok = oldFencedLock(t, cs, key)
		} else {
			l, err := r.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			tok = l.Fence()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			settle(r)
		}
		if tok <= last {
			t.Fatalf("holder %d (old client: %v) got token %d after %d", i, i%2 == 0, tok, last)
		}
		last = tok
	}
}
