package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// AddReplica starts a cluster-enabled server with opts (Args after the
// cluster's own: a later --cluster-node-timeout wins), joins it to the
// cluster (CLUSTER MEET from shard 0) and makes it a replica of shard's
// master (CLUSTER REPLICATE), then waits until it is in sync
// (master_link_status:up) and every shard's master lists it (the master's
// repl-diskless-sync-delay is set to 0 first: its default 5 s would delay
// the sync). Killed, the
// master is then replaced by it once the other masters agree the master
// failed (cluster-node-timeout, then an election: a real failover). On
// any failure it stops what it started; else Stop stops it.
func (rc *RedisCluster) AddReplica(shard int, opts Options) (*Server, error) {
	if shard < 0 || shard >= len(rc.Shards) || rc.Shards[shard] == nil {
		return nil, fmt.Errorf("redistest: AddReplica: no shard %d (the cluster has %d)", shard, len(rc.Shards))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyWait)
	defer cancel()
	s, bus, err := startClusterNode(opts)
	if err != nil {
		return nil, err
	}
	if err := rc.replicate(ctx, s, bus, shard); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	rc.Replicas = append(rc.Replicas, s)
	return s, nil
}

func (rc *RedisCluster) replicate(ctx context.Context, s *Server, bus, shard int) error {
	admin := func(addr string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	}
	first, master, me := admin(rc.Shards[0].Addr()), admin(rc.Shards[shard].Addr()), admin(s.Addr())
	defer closeAll([]*redis.Client{first, master, me})
	if err := first.Do(ctx, "cluster", "meet", "127.0.0.1", s.port, bus).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER MEET %s from %s: %w", s.Addr(), rc.Shards[0].Addr(), err)
	}
	// The master's first sync waits 5 s by default for more replicas.
	if err := master.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return fmt.Errorf("redistest: CONFIG SET repl-diskless-sync-delay on %s: %w", rc.Shards[shard].Addr(), err)
	}
	id, err := master.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return fmt.Errorf("redistest: CLUSTER MYID on %s: %w", rc.Shards[shard].Addr(), err)
	}
	// REPLICATE needs the new node to know the master: it learns it by
	// gossip after the MEET.
	replicated := false
	return poll(ctx, fmt.Sprintf("%s a replica of shard %d in sync", s.Addr(), shard), func() (bool, string) {
		if !replicated {
			if err := me.Do(ctx, "cluster", "replicate", id).Err(); err != nil {
				return false, err.Error()
			}
			replicated = true
		}
		info, err := me.Info(ctx, "replication").Result()
		if err != nil || infoField(info, "master_link_status") != "up" {
			return false, fmt.Sprint(strings.ReplaceAll(info, "\r\n", " "), err)
		}
		// Every master must know it as the shard's replica: they vote in
		// its election only then.
		for i, sh := range rc.Shards {
			c := admin(sh.Addr())
			rs, err := c.Do(ctx, "cluster", "replicas", id).StringSlice()
			_ = c.Close()
			if err != nil || len(rs) == 0 || !strings.Contains(strings.Join(rs, "\n"), ":"+strconv.Itoa(s.port)+"@") {
				return false, fmt.Sprintf("shard %d lists replicas %q (%v)", i, rs, err)
			}
		}
		return true, ""
	})
}

// poll calls ok every 20 ms until it reports true, or fails saying what
// (and ok's last word) when ctx ends.
func poll(ctx context.Context, what string, ok func() (bool, string)) error {
	for {
		done, last := ok()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: not %s after %v: %s", what, clusterReadyWait, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
