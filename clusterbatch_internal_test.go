package redlock

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// newBatchRig starts a reshard rig and returns a context for the test, the
// rig, its cluster client and that client's Node.
func newBatchRig(t *testing.T) (context.Context, *reshardRig, *redis.ClusterClient, Node) {
	t.Helper()
	g := newReshardRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	_, _, cc := g.redlock(true)
	return ctx, g, cc, NewNode(cc)
}

// TestClusterBatchRunsEachCommandOnce: a batch to a Redis Cluster master
// whose slot is moving, where the first command is answered TRYAGAIN (a
// script with one key on the source and one not) and the second ASK (its
// key is not on the source). go-redis v9.23's cluster pipeline then puts
// the second command in its next attempt twice (once for ASK's target,
// once for its slot's shard: osscluster.go, pipelineReadCmds), and runs it
// twice, from two goroutines at once. A Node must run each command of a
// batch at most once: the count the second one raises is 1.
func TestClusterBatchRunsEachCommandOnce(t *testing.T) {
	ctx, g, cc, n := newBatchRig(t)
	here, gone, count := "{dup}here", "{dup}gone", "{dup}count"
	if err := cc.Set(ctx, here, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	slot, from, to := g.begin(ctx, here)
	cmds := []*Command{
		{Args: []any{"eval", "return redis.call('EXISTS', KEYS[1], KEYS[2])", int64(2), here, gone}, Key: 3, Keys: 2},
		{Args: []any{"eval", "return redis.call('INCR', KEYS[1])", int64(1), count}, Key: 3, Keys: 1},
	}
	n.Exec(ctx, cmds)
	t.Logf("replies: %v %v; %v %v", cmds[0].Reply, cmds[0].Err, cmds[1].Reply, cmds[1].Err)
	g.finish(ctx, slot, from, to)
	got, err := cc.Get(ctx, count).Int()
	if err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Fatalf("the batch's INCR ran %d times; want once", got)
	}
}

// TestClusterBatchFollowsMoved: a batch to a Redis Cluster master whose
// client still maps a slot to the shard it left. The shard answers MOVED
// to both of the batch's commands on that slot's key; the Node sends them
// again where the slot went, in the batch's order and once each, and the
// batch's command on another slot runs once where it was sent.
func TestClusterBatchFollowsMoved(t *testing.T) {
	ctx, g, cc, n := newBatchRig(t)
	moved, other := "{mv}count", "{other}count"
	if err := cc.Set(ctx, moved, 0, time.Minute).Err(); err != nil {
		t.Fatal(err) // the client now maps the slot to its shard
	}
	slot, from, to := g.begin(ctx, moved)
	g.finish(ctx, slot, from, to)
	incr := func(key string) *Command {
		return &Command{Args: []any{"eval", "return redis.call('INCR', KEYS[1])", int64(1), key}, Key: 3, Keys: 1}
	}
	cmds := []*Command{incr(moved), incr(other), incr(moved)}
	n.Exec(ctx, cmds)
	for i, want := range []int64{1, 1, 2} {
		if cmds[i].Err != nil || cmds[i].Reply != want {
			t.Errorf("command %d: reply %v, err %v; want %d", i, cmds[i].Reply, cmds[i].Err, want)
		}
	}
	for key, want := range map[string]int{moved: 2, other: 1} {
		if got, err := cc.Get(ctx, key).Int(); err != nil || got != want {
			t.Errorf("%s: %d (%v); want %d", key, got, err, want)
		}
	}
}

// TestClusterBatchKeylessAndUnreachable: a command that names no key
// goes through the cluster client, after the batch's keyed ones; and when
// the cluster's map is out of reach (no seed answers), every keyed command
// of the batch gets the failure as its Err, none a reply.
func TestClusterBatchKeylessAndUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := redistest.StartRedisClusterT(t, 2, redistest.Options{})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	n := NewNode(cc)
	set := &Command{Args: []any{"set", "{kl}a", "1"}, Key: 1, Keys: 1}
	ping := &Command{Args: []any{"ping"}}
	n.Exec(ctx, []*Command{ping, set})
	if ping.Err != nil || ping.Reply != "PONG" || set.Err != nil || set.Reply != "OK" {
		t.Errorf("replies: ping %v (%v), set %v (%v); want PONG, OK", ping.Reply, ping.Err, set.Reply, set.Err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there: a dial is refused at once
	down := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{closed}, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { down.Close() })
	cmds := []*Command{
		{Args: []any{"set", "{kl}a", "1"}, Key: 1, Keys: 1},
		{Args: []any{"set", "{other}b", "1"}, Key: 1, Keys: 1},
	}
	NewNode(down).Exec(ctx, cmds)
	for i, c := range cmds {
		if c.Err == nil || c.Reply != nil {
			t.Errorf("command %d to an unreachable cluster: reply %v, err %v; want an error", i, c.Reply, c.Err)
		}
	}
}
