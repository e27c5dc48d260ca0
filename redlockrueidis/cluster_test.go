package redlockrueidis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// clusters starts n Redis Clusters of three shards each, the masters of a
// Redlock.
func clusters(t *testing.T, n int) []*redistest.RedisCluster {
	t.Helper()
	cs := make([]*redistest.RedisCluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { cs[i], errs[i] = redistest.StartRedisCluster(3, redistest.Options{}) })
	}
	wg.Wait()
	for i, c := range cs {
		if c != nil {
			t.Cleanup(func() { c.Stop() })
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	return cs
}

// rueidisCluster is a rueidis Node of the cluster rc.
func rueidisCluster(tb testing.TB, rc *redistest.RedisCluster) redlock.Node {
	return newNode(tb, rueidis.ClientOption{InitAddress: rc.Addrs(), DisableCache: true,
		Dialer: net.Dialer{Timeout: time.Second}})
}

// goredisCluster is a go-redis Node of the cluster rc, its client set as
// docs/masters.md says (no retry backoff).
func goredisCluster(tb testing.TB, rc *redistest.RedisCluster) redlock.Node {
	return redlock.NewNode(goredisClusterClient(tb, rc))
}

func goredisClusterClient(tb testing.TB, rc *redistest.RedisCluster) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: true,
		MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, MinRetryBackoff: -1, MaxRetryBackoff: -1})
	tb.Cleanup(func() { c.Close() })
	return c
}

// clusterNodes returns a Node of each cluster, made by node.
func clusterNodes(t *testing.T, cs []*redistest.RedisCluster, node func(testing.TB, *redistest.RedisCluster) redlock.Node) []redlock.Node {
	nodes := make([]redlock.Node, len(cs))
	for i, c := range cs {
		nodes[i] = node(t, c)
	}
	return nodes
}

// clusterValues returns key's value on each cluster ("" where it has none).
func clusterValues(t *testing.T, cs []*redistest.RedisCluster, key string) []string {
	t.Helper()
	vs := make([]string, len(cs))
	for i, rc := range cs {
		v, err := goredisClusterClient(t, rc).Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		vs[i] = v
	}
	return vs
}

// TestClusterHandOff: on masters that are Redis Clusters of three shards, a
// waiting Lock call reached through rueidis is handed the key by the
// holder's Unlock at once, not after its 5 s backoff, whichever shard the
// key is on and whichever client the holder uses, and then holds it on a
// quorum of clusters. The release script SPUBLISHes on a channel in the
// key's slot, which the rueidis Node SSUBSCRIBEs on the slot's shard.
// Before, a rueidis cluster Node gave no wake-ups: the waiter slept its
// backoff.
func TestClusterHandOff(t *testing.T) {
	t.Parallel()
	cs := clusters(t, 3)
	byRueidis := newRedlock(t, clusterNodes(t, cs, rueidisCluster))
	byGoredis := newRedlock(t, clusterNodes(t, cs, goredisCluster))
	mixed := newRedlock(t, []redlock.Node{rueidisCluster(t, cs[0]), goredisCluster(t, cs[1]), rueidisCluster(t, cs[2])})
	for _, dir := range []struct {
		name           string
		holder, waiter *redlock.Redlock
	}{
		{"rueidis to rueidis", byRueidis, newRedlock(t, clusterNodes(t, cs, rueidisCluster))},
		{"go-redis to rueidis", byGoredis, byRueidis},
		{"rueidis to go-redis", byRueidis, byGoredis},
		{"rueidis to mixed", byRueidis, mixed},
	} {
		for i := range 3 { // keys in three slots: on any shard
			key := fmt.Sprintf("handed:%s:%d", dir.name, i)
			w, took := handOff(t, dir.holder, dir.waiter, key, nil)
			t.Logf("%s, key %q: the waiting call had the key %v after the Unlock", dir.name, key, took.Round(time.Millisecond))
			if took > time.Second {
				t.Errorf("%s, key %q: the waiting call had the key %v after the Unlock; want a hand-off, far below its 5 s backoff", dir.name, key, took)
			}
			held := 0
			for _, v := range clusterValues(t, cs, key) {
				if v == w.Value() {
					held++
				}
			}
			if held < 2 {
				t.Errorf("%s, key %q: the handed value is on %d of 3 clusters; want a quorum", dir.name, key, held)
			}
			if err := w.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestClusterHandOffAcrossSlotMove: a rueidis waiter subscribed on the
// shard channel of its key's slot is still handed the key after the slot
// moved to another shard on every cluster while the key was held. The old
// shard ends the subscription (sunsubscribe); the Node subscribes again,
// where the cluster now serves the slot (rueidis follows the MOVED its
// SSUBSCRIBE gets), and delivers Resubscribed, so the waiter queues again
// there; the holder's Unlock hands the key on.
func TestClusterHandOffAcrossSlotMove(t *testing.T) {
	t.Parallel()
	cs := clusters(t, 3)
	holder := newRedlock(t, clusterNodes(t, cs, rueidisCluster))
	waiter := newRedlock(t, clusterNodes(t, cs, rueidisCluster))
	ctx := context.Background()
	const key = "moved"
	slot := keySlot(t, cs[0], key)
	for round := range 3 {
		l, err := holder.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *redlock.Lock, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			w, err := waiter.Lock(wctx, key, redlock.WithBackoff(5*time.Second, 5*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		time.Sleep(300 * time.Millisecond) // the waiter tried, subscribed and queued
		for _, rc := range cs {
			from, err := rc.ShardOfSlot(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.MoveSlot(ctx, slot, from, (from+1)%len(rc.Shards)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond) // subscribed again on the new shards, queued there
		start := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("round %d: Unlock after the slot moved: %v", round, err)
		}
		w := <-got
		if w == nil {
			t.FailNow()
		}
		d := time.Since(start)
		t.Logf("round %d: slot %d moved on every cluster; Unlock to waiter holding %v", round, slot, d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("round %d: the waiter got the lock %v after the Unlock; want a hand-off on the slot's new shards, far below its 5 s backoff", round, d.Round(time.Millisecond))
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// keySlot asks the cluster rc for key's hash slot.
func keySlot(t *testing.T, rc *redistest.RedisCluster, key string) int {
	t.Helper()
	s, err := goredisClusterClient(t, rc).ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(s)
}

// beginMove starts moving slot from shard from to shard to of rc, as
// redis-cli --cluster reshard does (SETSLOT IMPORTING on to, MIGRATING on
// from), and moves none of its keys: until rc.MoveSlot ends the move, a
// command with several keys of the slot, some of them on from and not all,
// is answered TRYAGAIN.
func beginMove(t *testing.T, rc *redistest.RedisCluster, slot, from, to int) {
	t.Helper()
	ctx := context.Background()
	id := func(i int) string {
		c := redis.NewClient(&redis.Options{Addr: rc.Shards[i].Addr(), MaxRetries: -1})
		defer c.Close()
		s, err := c.Do(ctx, "cluster", "myid").Text()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, step := range []struct {
		shard      int
		state, arg string
	}{{to, "importing", id(from)}, {from, "migrating", id(to)}} {
		c := redis.NewClient(&redis.Options{Addr: rc.Shards[step.shard].Addr(), MaxRetries: -1})
		err := c.Do(ctx, "cluster", "setslot", slot, step.state, step.arg).Err()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterTryAgain: a release or a vote whose script the key's shard
// answers TRYAGAIN, because the slot is being moved and the script's keys
// are split between the shards (the key there, its queue not; a fence
// counter there, the key not), is sent again (Redis refuses such a command
// before running it: the core's batch does so for every Node that routes by
// key) until the move lets it through or the node timeout ends: an Unlock
// during a resharding frees the key once the move allows. An Extend names
// the key alone and runs where the key is. Before,
// rueidis, which sends TRYAGAIN again only for read-only commands, handed
// the reply back as a failed vote: the key stayed until its TTL and nobody
// could take it (the chaos scenario reshard saw 92% of calls succeed).
func TestClusterTryAgain(t *testing.T) {
	t.Parallel()
	cs := clusters(t, 1)
	rc := cs[0]
	r := newRedlock(t, []redlock.Node{rueidisCluster(t, rc)}, redlock.WithNodeTimeout(2*time.Second))
	ctx := context.Background()
	for _, op := range []string{"Extend", "Unlock", "TryLock"} {
		key := "tryagain:" + op
		slot := keySlot(t, rc, key)
		l, err := r.TryLock(ctx, key, redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if op == "TryLock" {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			// The fence counter stays: a fenced vote's script names it
			// and the key, which is not there yet.
			if l, err = r.TryLock(ctx, key, redlock.WithFencing()); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		from, err := rc.ShardOfSlot(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		to := (from + 1) % len(rc.Shards)
		beginMove(t, rc, slot, from, to)
		moved := make(chan error, 1)
		go func() {
			time.Sleep(300 * time.Millisecond)
			moved <- rc.MoveSlot(ctx, slot, from, to)
		}()
		start := time.Now()
		switch op {
		case "Extend":
			err = l.Extend(ctx, 20*time.Second)
		case "Unlock":
			err = l.Unlock(ctx)
		case "TryLock":
			l, err = r.TryLock(ctx, key, redlock.WithFencing())
		}
		took := time.Since(start)
		if err := <-moved; err != nil {
			t.Fatal(err)
		}
		t.Logf("%s during the move of slot %d from shard %d to %d: %v after %v", op, slot, from, to, err, took.Round(time.Millisecond))
		if err != nil {
			t.Errorf("%s while the slot's keys were split between two shards: %v; want it sent again until the move let it through", op, err)
			continue
		}
		switch op {
		case "Unlock":
			if n := goredisClusterClient(t, rc).Exists(ctx, key).Val(); n != 0 {
				t.Errorf("the key is still there after Unlock returned nil")
			}
		default:
			if v := goredisClusterClient(t, rc).Get(ctx, key).Val(); v != l.Value() {
				t.Errorf("after %s: the key holds %q; want the lock's value %q", op, v, l.Value())
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestClusterSubscribeFollowsSlotAtOnce: when a shard channel's slot moves
// to another shard, the Node subscribes on the new one within a round trip
// or two of the move's end: it follows the MOVED of the shard that ended
// the subscription. Before, it waited for rueidis's lazy refresh of its
// slot map, which starts after a random delay of up to a second: 0.43-1.77
// s after each of six moves, with no wake-ups meanwhile (the chaos scenario
// reshard: 90-94% of rueidis calls got the lock, against 100% for go-redis).
func TestClusterSubscribeFollowsSlotAtOnce(t *testing.T) {
	t.Parallel()
	rc := clusters(t, 1)[0]
	n := rueidisCluster(t, rc)
	ctx := context.Background()
	const key = "followed"
	resub := make(chan time.Time, 16)
	sub, err := n.Subscribe(ctx, redlock.ShardChannel("ch", key), func(m redlock.Message) {
		if m.Resubscribed {
			resub <- time.Now()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	slot := keySlot(t, rc, key)
	var took []time.Duration
	for i := range 6 {
		from, err := rc.ShardOfSlot(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.MoveSlot(ctx, slot, from, (from+1)%len(rc.Shards)); err != nil {
			t.Fatal(err)
		}
		moved := time.Now()
		select {
		case at := <-resub:
			took = append(took, at.Sub(moved))
		case <-time.After(5 * time.Second):
			t.Fatalf("move %d: not subscribed again within 5 s", i)
		}
	}
	t.Logf("subscribed again after each move: %v", took)
	for i, d := range took {
		if d > 200*time.Millisecond {
			t.Errorf("move %d: subscribed again %v after the move; want within 200 ms", i, d.Round(time.Millisecond))
		}
	}
}
