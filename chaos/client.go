package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/chaos/cluster"
	"github.com/redlock/redlock/redlockrueidis"
)

// Adapters: what a contender reaches its masters through ([Config.Adapter]).
const (
	AdapterGoRedis = "go-redis" // go-redis clients, the library's own Node ([redlock.NewNode])
	AdapterRueidis = "rueidis"  // rueidis clients, through redlockrueidis.NewNode
	AdapterMixed   = "mixed"    // contender i: go-redis when i is even, rueidis when odd
)

// Adapters lists the values of [Config.Adapter].
func Adapters() []string { return []string{AdapterGoRedis, AdapterRueidis, AdapterMixed} }

// adapterOf is the adapter of contender id when the run's is adapter:
// mixed alternates, starting with go-redis.
func adapterOf(adapter string, id int) string {
	if adapter != AdapterMixed {
		return adapter
	}
	if id%2 == 0 {
		return AdapterGoRedis
	}
	return AdapterRueidis
}

// client is one contender: its own client per master (go-redis or
// rueidis: adapter), and its own Redlock over them, as a separate process
// would have.
type client struct {
	id      int
	adapter string         // AdapterGoRedis or AdapterRueidis
	closers []func() error // close the clients of its masters
	rl      *redlock.Redlock
}

// newClient connects to the masters at addrs through adapter. wrap, when
// not nil, wraps each master's Node (to put a trigger in front of it).
func newClient(id int, adapter string, addrs []string, wrap func(i int, n redlock.Node) redlock.Node, opts ...redlock.Option) (*client, error) {
	c := &client{id: id, adapter: adapter}
	nodes := make([]redlock.Node, len(addrs))
	for i, addr := range addrs {
		var node redlock.Node
		if adapter == AdapterRueidis {
			r, n, err := rueidisMaster(addr)
			if err != nil {
				return nil, errors.Join(fmt.Errorf("master %d: %w", i, err), c.close())
			}
			c.closers = append(c.closers, func() error { r.Close(); return nil })
			node = n
		} else {
			r, n := masterClient(addr)
			c.closers = append(c.closers, r.Close)
			node = n
		}
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

// clientTimeout is the dial, read and write timeout of every client of a
// master: short, as a client under faults should have.
const clientTimeout = 200 * time.Millisecond

// masterClient connects to the master at addr — "host:port", a Redis
// Cluster's redis+cluster:// URL ([cluster.Shards]) or a Sentinel's
// redis+sentinel:// URL ([cluster.Sentinels]) — through go-redis with short
// timeouts and no retries, as a client under faults should have, and
// returns its Node too.
func masterClient(addr string) (redis.UniversalClient, redlock.Node) {
	const timeout = clientTimeout
	if shards, ok := cluster.ShardAddrs(addr); ok {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: shards, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 4, DisableIdentity: true,
			MinRetryBackoff: -1, MaxRetryBackoff: -1, // docs/masters.md: a dead shard fails at once
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

// rueidisMaster connects to the master at addr (as [masterClient] reads
// it) through rueidis, with the settings of docs/masters.md#rueidis-clients
// and the same short timeouts: a dial, and a wait for a reply on a
// connection (ConnWriteTimeout, after which rueidis closes it, as go-redis
// does after its ReadTimeout), of clientTimeout. DisableRetry: the Node
// never marks a command read-only, so rueidis retries none of them anyway.
// Its commands go on one pipelined connection per server (the Node sends
// them without a key, see redlockrueidis); the pool it bounds is that of
// the connections of subscriptions (Dedicate), of which a Redlock holds one
// per master.
func rueidisMaster(addr string) (rueidis.Client, redlock.Node, error) {
	opt := rueidis.ClientOption{
		Dialer:           net.Dialer{Timeout: clientTimeout},
		ConnWriteTimeout: clientTimeout,
		DisableRetry:     true,
		DisableCache:     true, // the Node never reads through it
		BlockingPoolSize: 4,
	}
	if shards, ok := cluster.ShardAddrs(addr); ok {
		opt.InitAddress = shards
	} else if m, err := redlock.ParseMaster(addr); err == nil && m.Sentinel != nil {
		o := m.Sentinel
		opt.InitAddress, opt.SelectDB = o.SentinelAddrs, o.DB
		opt.Username, opt.Password = o.Username, o.Password
		opt.Sentinel = rueidis.SentinelOption{MasterSet: o.MasterName, Username: o.SentinelUsername, Password: o.SentinelPassword,
			Dialer: opt.Dialer}
	} else {
		opt.InitAddress = []string{addr}
		opt.ForceSingleClient = true // NewClient would fail while the master is down
	}
	c, err := rueidis.NewClient(opt)
	if c == nil {
		// With ForceSingleClient rueidis returns a client that dials again
		// on use, with the dial's error, when the server is down.
		return nil, nil, fmt.Errorf("rueidis.NewClient(%v): %w", opt.InitAddress, err)
	}
	return c, redlockrueidis.NewNode(c, opt), nil
}

// close waits for the Redlock's background requests, then closes the
// connections.
func (c *client) close() error {
	var errs []error
	if c.rl != nil {
		errs = append(errs, c.rl.Close())
	}
	for _, close := range c.closers {
		errs = append(errs, close())
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
//
// In a scenario on RWMutexes (env.rw), it takes key's RWMutex as its
// writer.
func (e *env) acquire(ctx context.Context, c *client, key string, timeout time.Duration, opts ...redlock.Option) *holding {
	return e.acquireAs(ctx, c, key, timeout, false, opts...)
}

// acquireAs is acquire, as a reader of key's RWMutex when read is set.
func (e *env) acquireAs(ctx context.Context, c *client, key string, timeout time.Duration, read bool, opts ...redlock.Option) *holding {
	start := e.rec.now()
	actx, cancel := context.WithTimeout(ctx, timeout)
	var l *redlock.Lock
	var err error
	switch {
	case e.permits > 0:
		l, err = c.rl.Semaphore(key, e.permits).Acquire(actx, opts...)
	case read:
		l, err = c.rl.RWMutex(key).RLock(actx, opts...)
	case e.rw:
		l, err = c.rl.RWMutex(key).Lock(actx, opts...)
	default:
		l, err = c.rl.Lock(actx, key, opts...)
	}
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			msg := err.Error()
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
			e.rec.acquire(Acquire{Client: c.id, Adapter: c.adapter, Key: key, Read: read, Start: start, Err: msg})
		}
		return nil
	}
	id := e.rec.acquire(Acquire{
		Client: c.id, Adapter: c.adapter, Key: key, Read: read, OK: true, Start: start, Acquired: e.rec.now(),
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

// warmUp has each of cs take and release a lock of its own in the hash
// slot of each of the workload's keys, one client beside the other, before
// the scenario's clock starts, until a Lock and its Unlock both succeeded
// (for at most 10 s). A Redlock's first calls dial every master (and, on
// Redis Clusters, load the slot map and dial the key's shard): under -race
// on a busy 2-core machine that took over the node timeout, those votes'
// outcomes were unknown, and the 8 workload clients then blocked each
// other for up to 2 s (TTL 1 s) of the scenario's first seconds, where its
// first fault begins (shard-pause: up to 718 ms of a fault without an
// acquisition, 6 runs in 6 beside two busy loops; 27-50 ms after). The
// scenarios judge the faults they inject, not the first dial. A warm-up
// lock that could not be released expires after its TTL: its key is its
// own.
func (e *env) warmUp(ctx context.Context, cs []*client) error {
	keys := append(slices.Clone(e.keys), extendKey)
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			deadline := time.Now().Add(10 * time.Second)
			for _, k := range keys {
				for n := 0; ; n++ {
					err := warmOnce(ctx, c, fmt.Sprintf("{%s}%s%d:%d", k, warmInfix, c.id, n))
					if err == nil {
						break
					}
					if ctx.Err() != nil || time.Now().After(deadline) {
						errs[i] = fmt.Errorf("client %d: warm-up in the slot of %s: %w", c.id, k, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// warmInfix marks the warm-up's keys, and their companions: the leak
// check leaves them out (a warm-up call that waited once leaves its
// hand-off queue until the queue's expiry, as any call does; the scenario
// judges the workload's keys).
const warmInfix = ":warm:"

// warmOnce locks key and unlocks it.
func warmOnce(ctx context.Context, c *client, key string) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, err := c.rl.Lock(wctx, key)
	if err != nil {
		return err
	}
	return l.Unlock(wctx)
}
