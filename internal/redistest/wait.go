package redistest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// WaitUp waits until the server at addr has been up for d by INFO's
// uptime_in_seconds as the restart gate counts it (two seconds less: see
// lua/gate.lua), or ctx ends: a restart gate of d then lets it vote.
func WaitUp(ctx context.Context, addr string, d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 2, DisableIdentity: true})
	defer c.Close()
	for {
		info, err := c.InfoMap(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("redistest: INFO server on %s: %w", addr, err)
		}
		up, err := strconv.Atoi(info["Server"]["uptime_in_seconds"])
		if err != nil {
			return fmt.Errorf("redistest: uptime_in_seconds of %s: %w", addr, err)
		}
		if time.Duration(up)*time.Second >= d+2*time.Second {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: %s not up %v: %w", addr, d, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitReplicaKnown waits until the Sentinel at addr knows a replica of the
// master it watches as name, with its link up (a failover needs one), or
// ctx ends.
func WaitReplicaKnown(ctx context.Context, addr, name string) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	for {
		rs, err := sc.Replicas(ctx, name).Result()
		if err == nil && len(rs) > 0 && rs[0]["flags"] == "slave" && rs[0]["master-link-status"] == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: the Sentinel at %s found no replica of %s: %w (last: %v, %v)", addr, name, ctx.Err(), rs, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
