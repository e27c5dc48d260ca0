package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/chaos/cluster"
)

// client is one contender: its own go-redis client per master, and its own
// Redlock over them, as a separate process would have.
type client struct {
	id  int
	rdb []redis.UniversalClient
	rl  *redlock.Redlock
}

// newClient connects to the masters at addrs. wrap, when not nil, wraps
// each master's Node (to put a trigger in front of it).
func newClient(id int, addrs []string, wrap func(i int, n redlock.Node) redlock.Node, opts ...redlock.Option) (*client, error) {
	c := &client{id: id}
	nodes := make([]redlock.Node, len(addrs))
	for i, addr := range addrs {
		r, node := masterClient(addr)
		c.rdb = append(c.rdb, r)
		nodes[i] = node
		if wrap != nil {
			nodes[i] = wrap(i, nodes[i])
		}
	}
	rl, err := redlock.New(nodes, opts...)
	if err != nil {
		return nil, errors.Join(err, c.close())
	}
	c.rl = rl
	return c, nil
}

// masterClient connects to the master at addr — "host:port", a Redis
// Cluster's redis+cluster:// URL ([cluster.Shards]) or a Sentinel's
// redis+sentinel:// URL ([cluster.Sentinels]) — with short timeouts and no
// retries, as a client under faults should have, and returns its Node too.
func masterClient(addr string) (redis.UniversalClient, redlock.Node) {
	const timeout = 200 * time.Millisecond
	if shards, ok := cluster.ShardAddrs(addr); ok {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: shards, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 4, DisableIdentity: true,
		})
		return c, redlock.NewNode(c)
	}
	if m, err := redlock.ParseMaster(addr); err == nil && m.Sentinel != nil {
		o := m.Sentinel
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolSize, o.DisableIdentity = timeout, timeout, timeout, 4, true
		c := redis.NewFailoverClient(o)
		return c, redlock.NewFailoverNode(c, o)
	}
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		ContextTimeoutEnabled: true, // the per-node timeout is a context deadline
		MaxRetries:            -1,   // a retry would hide a fault from the quorum
		DialerRetries:         1,
		PoolSize:              4,
		DisableIdentity:       true,
	})
	return c, redlock.NewNode(c)
}

// close waits for the Redlock's background requests, then closes the
// connections.
func (c *client) close() error {
	var errs []error
	if c.rl != nil {
		errs = append(errs, c.rl.Close())
	}
	for _, r := range c.rdb {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// holding is a lock obtained and recorded.
type holding struct {
	id   int
	lock *redlock.Lock
}

// acquire calls Lock on key, bounded by timeout, and records the call. It
// returns nil when the lock was not obtained. A call cut short because the
// run ended is not recorded: it says nothing about availability.
func (e *env) acquire(ctx context.Context, c *client, key string, timeout time.Duration, opts ...redlock.Option) *holding {
	start := e.rec.now()
	actx, cancel := context.WithTimeout(ctx, timeout)
	l, err := c.rl.Lock(actx, key, opts...)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			msg := err.Error()
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
			e.rec.acquire(Acquire{Client: c.id, Key: key, Start: start, Err: msg})
		}
		return nil
	}
	id := e.rec.acquire(Acquire{
		Client: c.id, Key: key, OK: true, Start: start, Acquired: e.rec.now(),
		Until: e.rec.at(l.Until()), Released: -1, Lost: -1, Token: l.Fence(), Value: l.Value(),
	})
	return &holding{id: id, lock: l}
}

// write writes to the resource as h.
func (e *env) write(h *holding) bool {
	return e.res.write(h.id, h.lock.Key(), h.lock.Fence())
}

// release records the call to Unlock and makes it, with a fresh context:
// the run's may have ended. Its error is recorded; it is expected after a
// fault (the key gone from a quorum, validity over) and is not a finding.
func (e *env) release(h *holding) {
	e.rec.released(h.id, e.rec.now())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.lock.Unlock(ctx); err != nil {
		e.rec.unlockFailed(h.id, err)
	}
}
