package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/chaos/cluster"
	"github.com/redlock/redlock/internal/redistest"
)

// addrsCluster is a cluster.Cluster of running masters for leaked, which
// only reads their addresses.
type addrsCluster struct{ addrs []string }

func (c addrsCluster) Addrs() []string       { return c.addrs }
func (addrsCluster) Kill(int) error          { return nil }
func (addrsCluster) Start(int) error         { return nil }
func (addrsCluster) Restart(int, bool) error { return nil }
func (addrsCluster) Pause(int) error         { return nil }
func (addrsCluster) Resume(int) error        { return nil }
func (addrsCluster) Partition(int) error     { return nil }
func (addrsCluster) Heal(int) error          { return nil }
func (addrsCluster) Close() error            { return nil }

// TestLeakedReadsEveryKind: a plain lock's key and an owned lock's (the
// redlock exec clients hold theirs as an owner: a hash) are reported as
// leaked; fence counters and queues of waiting Redlocks are not locks.
func TestLeakedReadsEveryKind(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0]})
	defer c.Close()
	plain, owned := keyPrefix+"plain", keyPrefix+"owned"
	c.Set(ctx, plain, "v1", time.Minute)
	c.Set(ctx, redlock.FenceKey(plain), "7", 0)
	c.HSet(ctx, owned, "owner", "job-7", "fence", "9", "h1", "123")
	c.PExpire(ctx, owned, time.Minute)
	c.ZAdd(ctx, redlock.WaitKey(plain), redis.Z{Score: 1, Member: "redlock:wake:x"})
	e := &env{cl: addrsCluster{cl.Addrs()}, n: 1, rec: newRecorder(), faulted: make([]bool, 1)}
	out, err := e.leaked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(out, "\n")
	if len(out) != 2 || !strings.Contains(got, plain+" ") || !strings.Contains(got, owned+" ") {
		t.Fatalf("leaked:\n%s\nwant the plain and the owned lock, not the counter or the queue", got)
	}
}

// TestLeakedCountsCompanionsAndOrphans: with companions, leaked lists a
// hand-off queue, and any key on a shard of a Redis Cluster master that
// does not serve its slot (an orphan, as a slot move that went wrong
// would leave), but not a fence counter on the shard that serves it (kept
// by design); without, only the lock and the orphan lock.
func TestLeakedCountsCompanionsAndOrphans(t *testing.T) {
	sh, err := cluster.NewShards(cluster.Options{N: 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sh.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	shards, _ := cluster.ShardAddrs(sh.Addrs()[0])
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: shards})
	defer c.Close()
	lock, orphan := keyPrefix+"0", keyPrefix+"orphan"
	c.Set(ctx, lock, "v1", time.Minute)
	c.Set(ctx, redlock.FenceKey(lock), "7", 0)
	c.ZAdd(ctx, redlock.WaitKey(lock), redis.Z{Score: 1, Member: "redlock:wake:x"})

	// The orphan: written on the shard that does not serve its slot, by
	// opening the slot there for import and closing it again.
	at, err := sh.ShardOf(ctx, 0, orphan)
	if err != nil {
		t.Fatal(err)
	}
	owner := redis.NewClient(&redis.Options{Addr: shards[at]})
	defer owner.Close()
	other := redis.NewClient(&redis.Options{Addr: shards[1-at], PoolSize: 1})
	defer other.Close()
	id, err := owner.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	slot, err := owner.ClusterKeySlot(ctx, orphan).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "cluster", "setslot", slot, "importing", id)
		p.Do(ctx, "asking")
		p.Set(ctx, orphan, "v2", 0)
		p.Do(ctx, "cluster", "setslot", slot, "stable")
		return nil
	}); err != nil {
		t.Fatalf("write an orphan: %v", err)
	}

	for _, companions := range []bool{true, false} {
		e := &env{cl: sh, n: 1, rec: newRecorder(), faulted: make([]bool, 1), companions: companions}
		out, err := e.leaked(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(out, "\n")
		want := []string{lock + " ", orphan + " on "}
		if companions {
			want = append(want, redlock.WaitKey(lock)+", a "+companionQueue)
		}
		ok := len(out) == len(want)
		for _, w := range want {
			ok = ok && strings.Contains(got, w)
		}
		if !ok {
			t.Errorf("leaked with companions %v:\n%s\nwant %d lines, with %q", companions, got, len(want), want)
		}
	}
}
