package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRedisClusterServesEverySlot: the three shards form one cluster that
// a ClusterClient writes keys of every shard to, each key on the shard
// that owns its slot; Stop ends every process.
func TestRedisClusterServesEverySlot(t *testing.T) {
	rc, err := StartRedisCluster(3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	seen := map[string]int{}
	for i := range 30 {
		k := fmt.Sprint("k", i)
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		n, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		seen[n.Options().Addr]++
	}
	if len(seen) != 3 {
		t.Errorf("30 keys landed on %v, want every one of 3 shards", seen)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	pids := []int{rc.Shards[0].Pid(), rc.Shards[1].Pid(), rc.Shards[2].Pid()}
	if err := rc.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !pidGone(pid) {
			t.Errorf("pid %d still exists after Stop", pid)
		}
	}
}

// TestRedisClusterMoveSteps: a slot moved one step at a time is in each
// state a resharding brings. After BeginMove and the migration of one of
// its two keys, the source serves the key it has, answers ASK for the one
// it has not and TRYAGAIN to a command on both; the target serves the
// moved key to a client that says ASKING, and MOVED to one that does not.
// After the other key's migration and EndMove, the source answers MOVED,
// the target serves both, and the slot is the target's.
func TestRedisClusterMoveSteps(t *testing.T) {
	rc := StartRedisClusterT(t, 2, Options{})
	ctx := context.Background()
	a, b := "{move}a", "{move}b"
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	defer cc.Close()
	for _, k := range []string{a, b} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := int(cc.ClusterKeySlot(ctx, a).Val())
	from, err := rc.ShardOfSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := 1 - from
	src, dst := newClient(t, rc.Shards[from].Addr()), newClient(t, rc.Shards[to].Addr())
	// reply runs args on c, after ASKING when asking, and returns its
	// value, "nil", or its error's first word.
	reply := func(c *redis.Client, asking bool, args ...any) string {
		p := c.Pipeline()
		if asking {
			p.Do(ctx, "asking")
		}
		cmd := p.Do(ctx, args...)
		_, _ = p.Exec(ctx)
		if err := cmd.Err(); errors.Is(err, redis.Nil) {
			return "nil"
		} else if err != nil {
			word, _, _ := strings.Cut(err.Error(), " ")
			return word
		}
		return fmt.Sprint(cmd.Val())
	}
	for _, step := range []struct {
		name string
		do   func() error
		want [][]any // the client (src, dst), ASKING, then the command; its reply
	}{
		{"BeginMove", func() error { return rc.BeginMove(ctx, slot, from, to) }, [][]any{
			{src, false, "get", a, a},
			{dst, true, "get", a, "nil"}, // the target has no key yet
		}},
		{"MigrateKeys(a)", func() error { return rc.MigrateKeys(ctx, slot, from, to, a) }, [][]any{
			{src, false, "get", a, "ASK"},
			{src, false, "get", b, b},
			{src, false, "mget", a, b, "TRYAGAIN"},
			{dst, true, "get", a, a},
			{dst, false, "get", a, "MOVED"},
			{dst, true, "mget", a, b, "TRYAGAIN"},
		}},
		{"MigrateKeys, EndMove", func() error {
			if err := rc.MigrateKeys(ctx, slot, from, to); err != nil {
				return err
			}
			return rc.EndMove(ctx, slot, from, to)
		}, [][]any{
			{src, false, "get", a, "MOVED"},
			{dst, false, "get", a, a},
			{dst, false, "get", b, b},
		}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		for _, w := range step.want {
			c, asking, args, want := w[0].(*redis.Client), w[1].(bool), w[2:len(w)-1], w[len(w)-1]
			if got := reply(c, asking, args...); got != want {
				t.Errorf("after %s: %v on the %s (ASKING %v) = %s, want %s", step.name, args, map[bool]string{true: "source", false: "target"}[c == src], asking, got, want)
			}
		}
	}
	if got, err := rc.ShardOfSlot(ctx, slot); got != to || err != nil {
		t.Errorf("after the move, slot %d is on shard %d (%v), want %d", slot, got, err, to)
	}
}

// TestRedisClusterAddReplica: AddReplica makes a replica of the shard's
// master that has what the master writes, refuses a shard the cluster does
// not have, and Stop ends the replica too.
func TestRedisClusterAddReplica(t *testing.T) {
	rc, err := StartRedisCluster(1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.AddReplica(1, Options{}); err == nil || !strings.Contains(err.Error(), "no shard 1") {
		t.Errorf("AddReplica(1) of a 1-shard cluster: %v; want no shard 1", err)
	}
	rs, err := rc.AddReplica(0, Options{})
	if err != nil {
		_ = rc.Stop()
		t.Fatal(err)
	}
	ctx := context.Background()
	m := redis.NewClient(&redis.Options{Addr: rc.Shards[0].Addr()})
	r := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	if err := m.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Error(err)
	}
	if n, err := m.Wait(ctx, 1, 2000).Result(); err != nil || n != 1 {
		t.Errorf("WAIT 1: %d, %v; want the replica's acknowledgement", n, err)
	}
	if role, err := r.Do(ctx, "role").Slice(); err != nil || len(role) == 0 || role[0] != "slave" {
		t.Errorf("the replica's ROLE: %v, %v", role, err)
	}
	var get *redis.StringCmd
	_, err = r.Pipelined(ctx, func(p redis.Pipeliner) error { // one connection: READONLY holds for it
		p.ReadOnly(ctx)
		get = p.Get(ctx, "k")
		return nil
	})
	if err != nil || get.Val() != "v" {
		t.Errorf("the replica holds k = %q (%v); want v", get.Val(), err)
	}
	_, _ = m.Close(), r.Close()
	pid := rs.Pid()
	if err := rc.Stop(); err != nil {
		t.Fatal(err)
	}
	if !pidGone(pid) {
		t.Errorf("the replica's pid %d still exists after Stop", pid)
	}
}
