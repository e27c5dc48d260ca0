package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// The tests of a master that is a go-redis Ring: shards that know nothing
// of each other, each key on the shard go-redis's hash of its hash tag (or
// of the whole key) picks. docs/masters.md has the table these fill in.

// ringMaster starts shards redis-servers and returns a Ring over them,
// configured as the README recommends, closed at the end of the test, and
// the servers.
func ringMaster(t *testing.T, shards int, opt redis.RingOptions) (*redis.Ring, *redistest.Cluster) {
	t.Helper()
	c := redistest.StartT(t, shards, redistest.Options{})
	opt.Addrs = make(map[string]string, shards)
	for i, a := range c.Addrs() {
		opt.Addrs[fmt.Sprintf("shard%d", i)] = a
	}
	opt.MaxRetries, opt.DialerRetries, opt.ContextTimeoutEnabled = -1, 1, true
	ring := redis.NewRing(&opt)
	t.Cleanup(func() { ring.Close() })
	return ring, c
}

// shardOf returns the index in shards of the one go-redis sends key to.
func shardOf(t *testing.T, ring *redis.Ring, shards []*redis.Client, key string) int {
	t.Helper()
	c, err := ring.GetShardClientForKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range shards {
		if s == c {
			return i
		}
	}
	t.Fatalf("GetShardClientForKey(%q) is no shard of the ring", key)
	return -1
}

// keysOnShards returns, for each shard, a key of the form prefix+N that the
// ring sends there.
func keysOnShards(t *testing.T, ring *redis.Ring, shards []*redis.Client, prefix string) []string {
	t.Helper()
	keys := make([]string, len(shards))
	for n, left := 0, len(shards); left > 0; n++ {
		if n > 10000 {
			t.Fatalf("no key %sN for some shard", prefix)
		}
		key := prefix + fmt.Sprint(n)
		if i := shardOf(t, ring, shards, key); keys[i] == "" {
			keys[i] = key
			left--
		}
	}
	return keys
}

// TestRingReplicaConfirmRefused: WithReplicaConfirm on a Redlock that has a
// Ring master is refused, in New and per call (Lock, TryLock, Do), with a
// *ConfigError that names the option and says why; before, go-redis sent
// the keyless WAIT to the shard its hash of "wait" picks, and a vote on a
// shard whose replica was frozen counted as confirmed. The same Redlock
// without the option locks as usual.
func TestRingReplicaConfirmRefused(t *testing.T) {
	ring, _ := ringMaster(t, 2, redis.RingOptions{})
	nodes := append([]Node{NewNode(ring)}, nodesOf(t, clients(t, masters.Addrs()[:2]))...)
	checkReplicaRefusal(t, nodes, "Ring")
}

// checkReplicaRefusal checks that WithReplicaConfirm is refused on nodes,
// whose first master is of a kind that routes by key (what names it).
func checkReplicaRefusal(t *testing.T, nodes []Node, what string) {
	t.Helper()
	ctx := context.Background()
	refusal := func(err error) {
		t.Helper()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "WithReplicaConfirm" ||
			!strings.Contains(ce.Reason, what) || !strings.Contains(ce.Reason, "WAIT names no key") {
			t.Errorf("err = %v; want a *ConfigError on WithReplicaConfirm saying the master is a %s and WAIT names no key", err, what)
		}
	}
	r, err := New(nodes, WithReplicaConfirm(1))
	if r != nil {
		r.Close()
	}
	refusal(err)
	t.Logf("New: %v", err)

	r = newRedlock(t, nodes)
	key := testKey(t)
	_, err = r.TryLock(ctx, key, WithReplicaConfirm(1))
	refusal(err)
	_, err = r.Lock(ctx, key, WithReplicaConfirm(1))
	refusal(err)
	ran := false
	err = r.Do(ctx, key, func(context.Context) error { ran = true; return nil }, WithReplicaConfirm(1))
	refusal(err)
	if ran {
		t.Error("Do ran fn although it refused WithReplicaConfirm")
	}
	// Off (0) is no refusal, and the masters took no key from the refusals.
	l, err := r.TryLock(ctx, key, WithReplicaConfirm(0))
	if err != nil {
		t.Fatalf("TryLock without replica confirmation: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
