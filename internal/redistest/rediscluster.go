package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is one Redis Cluster: shards redis-server processes started
// with --cluster-enabled yes, each a master of an equal range of the 16384
// hash slots, no replicas but those [RedisCluster.AddReplica] adds. To a
// Redlock it is one master.
type RedisCluster struct {
	Shards   []*Server
	Replicas []*Server // in the order AddReplica added them
}

// clusterReadyWait bounds how long StartRedisCluster waits for every node
// to report cluster_state:ok.
const clusterReadyWait = 15 * time.Second

// StartRedisCluster starts a Redis Cluster of shards masters: it starts the
// processes (each with its own cluster configuration file and bus port),
// gives each a range of slots (CLUSTER ADDSLOTSRANGE), introduces them to
// the first (CLUSTER MEET) and waits until every node says cluster_state:ok
// and knows every other. On any failure it stops what it started.
func StartRedisCluster(shards int, opts Options) (*RedisCluster, error) {
	if shards < 1 {
		return nil, fmt.Errorf("redistest: StartRedisCluster needs at least one shard, got %d", shards)
	}
	rc := &RedisCluster{Shards: make([]*Server, shards)}
	buses := make([]int, shards)
	errs := make([]error, shards)
	var wg sync.WaitGroup
	for i := range shards {
		wg.Go(func() { rc.Shards[i], buses[i], errs[i] = startClusterNode(opts) })
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil {
		err = rc.form(buses)
	}
	if err != nil {
		return nil, errors.Join(err, rc.Stop())
	}
	return rc, nil
}

// StartRedisClusterT starts a Redis Cluster like [StartRedisCluster],
// registers Stop with tb.Cleanup, and fails tb if it does not start.
func StartRedisClusterT(tb testing.TB, shards int, opts Options) *RedisCluster {
	tb.Helper()
	rc, err := StartRedisCluster(shards, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := rc.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return rc
}

// startClusterNode starts one cluster-enabled server, its bus on a free port
// of its own (redis-server's default, port+10000, may be out of range or
// taken). A bus port taken meanwhile fails the start: it tries again.
func startClusterNode(opts Options) (*Server, int, error) {
	var err error
	for range startAttempts {
		var bus int
		if bus, err = freePort(); err != nil {
			return nil, 0, fmt.Errorf("redistest: pick a cluster bus port: %w", err)
		}
		o := opts
		o.Args = append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "5000"}, opts.Args...)
		var s *Server
		if s, err = StartServer(o); err == nil {
			return s, bus, nil
		}
	}
	return nil, 0, err
}

// form assigns the slots and joins the nodes, then waits for the cluster.
func (rc *RedisCluster) form(buses []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyWait)
	defer cancel()
	clients := make([]*redis.Client, len(rc.Shards))
	for i, s := range rc.Shards {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DisableIdentity: true})
		defer clients[i].Close()
	}
	n := len(rc.Shards)
	for i, c := range clients {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "cluster", "addslotsrange", lo, hi).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, rc.Shards[i].Addr(), err)
		}
	}
	for i := 1; i < n; i++ {
		if err := clients[0].Do(ctx, "cluster", "meet", "127.0.0.1", rc.Shards[i].port, buses[i]).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s from %s: %w", rc.Shards[i].Addr(), rc.Shards[0].Addr(), err)
		}
	}
	for i, c := range clients {
		var info string
		var err error
		for {
			info, err = c.ClusterInfo(ctx).Result()
			if err == nil && infoField(info, "cluster_state") == "ok" &&
				infoField(info, "cluster_known_nodes") == strconv.Itoa(n) &&
				infoField(info, "cluster_slots_ok") == "16384" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redistest: cluster node %s not ready after %v: %q, %v", rc.Shards[i].Addr(), clusterReadyWait, strings.ReplaceAll(info, "\r\n", " "), err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Addrs returns the shards' addresses, in order: the seed addresses of a
// redis.ClusterClient.
func (rc *RedisCluster) Addrs() []string {
	addrs := make([]string, 0, len(rc.Shards))
	for _, s := range rc.Shards {
		if s != nil {
			addrs = append(addrs, s.Addr())
		}
	}
	return addrs
}

// Stop stops every shard and replica, concurrently, and returns their
// joined errors.
func (rc *RedisCluster) Stop() error {
	all := slices.Concat(rc.Shards, rc.Replicas)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		if s != nil {
			wg.Go(func() { errs[i] = s.Stop() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// MoveSlot moves hash slot slot, with its keys, from shard from to shard
// to, as redis-cli --cluster reshard does: [RedisCluster.BeginMove],
// [RedisCluster.MigrateKeys] of every key, then [RedisCluster.EndMove].
// While it runs, requests for the slot's keys get ASK (keys already moved)
// and TRYAGAIN (multi-key ones split between the shards); after it, MOVED
// from from.
func (rc *RedisCluster) MoveSlot(ctx context.Context, slot, from, to int) error {
	if err := rc.BeginMove(ctx, slot, from, to); err != nil {
		return err
	}
	if err := rc.MigrateKeys(ctx, slot, from, to); err != nil {
		return err
	}
	return rc.EndMove(ctx, slot, from, to)
}

// BeginMove starts moving hash slot slot from shard from to shard to:
// CLUSTER SETSLOT IMPORTING on to, then MIGRATING on from. Until
// [RedisCluster.EndMove], from still serves the slot's keys it has, answers
// ASK for those it has not (on to, a request after ASKING runs) and
// TRYAGAIN for a multi-key request whose keys it has only some of; to
// answers MOVED unless asked with ASKING. The keys stay where they are
// until [RedisCluster.MigrateKeys].
func (rc *RedisCluster) BeginMove(ctx context.Context, slot, from, to int) error {
	c, ids, err := rc.admin(ctx)
	if err != nil {
		return err
	}
	defer closeAll(c)
	if err := c[to].Do(ctx, "cluster", "setslot", slot, "importing", ids[from]).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT %d IMPORTING on %s: %w", slot, rc.Shards[to].Addr(), err)
	}
	if err := c[from].Do(ctx, "cluster", "setslot", slot, "migrating", ids[to]).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT %d MIGRATING on %s: %w", slot, rc.Shards[from].Addr(), err)
	}
	return nil
}

// MigrateKeys moves keys, all in hash slot slot, from shard from to shard
// to with MIGRATE (REPLACE, keeping their TTLs), between
// [RedisCluster.BeginMove] and [RedisCluster.EndMove]; with no keys
// given, every key from has in the slot, in batches, until it has none.
// A key from does not have is skipped.
func (rc *RedisCluster) MigrateKeys(ctx context.Context, slot, from, to int, keys ...string) error {
	c := redis.NewClient(&redis.Options{Addr: rc.Shards[from].Addr(), MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	migrate := func(keys []string) error {
		args := []any{"migrate", "127.0.0.1", rc.Shards[to].port, "", 0, 5000, "replace", "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		// NOKEY (a nil reply here) when from has none of them.
		if err := c.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("redistest: MIGRATE slot %d from %s: %w", slot, rc.Shards[from].Addr(), err)
		}
		return nil
	}
	if len(keys) > 0 {
		return migrate(keys)
	}
	for {
		keys, err := c.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("redistest: GETKEYSINSLOT %d on %s: %w", slot, rc.Shards[from].Addr(), err)
		}
		if len(keys) == 0 {
			return nil
		}
		if err := migrate(keys); err != nil {
			return err
		}
	}
}

// EndMove ends moving hash slot slot from shard from to shard to: CLUSTER
// SETSLOT NODE on to, then on from, then on the other shards (as
// redis-cli does). Keys of the slot still on from are no longer served
// (redis-cli moves them all first: [RedisCluster.MigrateKeys]).
//
// Then it waits, for at most 2 s, until every shard's own view has to
// serving the slot. A gossip message that from sent before its SETSLOT
// NODE, read after to's, gives the slot back to from there when from's
// config epoch is the higher (resolving an epoch collision can make it
// so); the shards then disagree for good, and the next move's SETSLOT
// MIGRATING is refused ("I'm not the owner", seen once in a chaos run's
// reshard). Where a shard disagrees, to's epoch is raised (CLUSTER
// BUMPEPOCH) and the shard is told again.
func (rc *RedisCluster) EndMove(ctx context.Context, slot, from, to int) error {
	c, ids, err := rc.admin(ctx)
	if err != nil {
		return err
	}
	defer closeAll(c)
	setNode := func(i int) error {
		if err := c[i].Do(ctx, "cluster", "setslot", slot, "node", ids[to]).Err(); err != nil {
			return fmt.Errorf("redistest: SETSLOT %d NODE on %s: %w", slot, rc.Shards[i].Addr(), err)
		}
		return nil
	}
	for _, i := range append([]int{to, from}, others(len(c), to, from)...) {
		if err := setNode(i); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		var wrong []int
		for i := range c {
			owner, err := ownerIn(ctx, c[i], slot)
			if err != nil {
				return fmt.Errorf("redistest: who serves slot %d, asked of %s: %w", slot, rc.Shards[i].Addr(), err)
			}
			if owner != rc.Shards[to].port {
				wrong = append(wrong, i)
			}
		}
		if len(wrong) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: slot %d moved to %s, but shards %v still see another owner after 2 s", slot, rc.Shards[to].Addr(), wrong)
		}
		if err := c[to].Do(ctx, "cluster", "bumpepoch").Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER BUMPEPOCH on %s: %w", rc.Shards[to].Addr(), err)
		}
		for _, i := range wrong {
			if err := setNode(i); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ownerIn returns the port of the master that serves slot in c's shard's
// own view (CLUSTER SHARDS), or 0 when none does there.
func ownerIn(ctx context.Context, c *redis.Client, slot int) (int, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return 0, err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int(r.Start) > slot || slot > int(r.End) {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return int(n.Port), nil
				}
			}
		}
	}
	return 0, nil
}

// admin returns a client per shard, to close with closeAll, and each
// shard's node ID (CLUSTER MYID).
func (rc *RedisCluster) admin(ctx context.Context) ([]*redis.Client, []string, error) {
	c := make([]*redis.Client, len(rc.Shards))
	ids := make([]string, len(c))
	for i, s := range rc.Shards {
		c[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DisableIdentity: true})
	}
	for i := range c {
		id, err := c[i].Do(ctx, "cluster", "myid").Text()
		if err != nil {
			closeAll(c)
			return nil, nil, fmt.Errorf("redistest: CLUSTER MYID on %s: %w", rc.Shards[i].Addr(), err)
		}
		ids[i] = id
	}
	return c, ids, nil
}

func closeAll(cs []*redis.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// others returns 0..n-1 without a and b.
func others(n, a, b int) []int {
	var is []int
	for i := range n {
		if i != a && i != b {
			is = append(is, i)
		}
	}
	return is
}

// ShardOfSlot returns the index of the shard that serves slot, asked of
// the first shard (CLUSTER SHARDS).
func (rc *RedisCluster) ShardOfSlot(ctx context.Context, slot int) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: rc.Shards[0].Addr(), MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	port, err := ownerIn(ctx, c, slot)
	if err != nil {
		return -1, err
	}
	for i, s := range rc.Shards {
		if port != 0 && s != nil && s.port == port {
			return i, nil
		}
	}
	return -1, fmt.Errorf("redistest: no shard serves slot %d", slot)
}
