package bench

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/redlockrueidis"
)

// lib is one lock library, as the benchmarks drive it: each with its own
// defaults, except the TTL.
type lib interface {
	// lock waits (the library's own way) until the lock on key is held.
	lock(ctx context.Context, key string) (held, error)
	// tryLock makes one attempt.
	tryLock(ctx context.Context, key string) (held, error)
}

type held interface {
	unlock(ctx context.Context) error
	extend(ctx context.Context) error
}

// --- redlock ---

type redlockLib struct {
	r    *redlock.Redlock
	call []redlock.Option // options of every Lock and TryLock call
}

// owned returns l with every call made as owner.
func (l *redlockLib) owned(owner string) *redlockLib {
	return &redlockLib{r: l.r, call: []redlock.Option{redlock.WithOwner(owner)}}
}

func newRedlock(b testing.TB, cs []*redis.Client, opts ...redlock.Option) *redlockLib {
	b.Helper()
	nodes := make([]redlock.Node, len(cs))
	for i, c := range cs {
		nodes[i] = redlock.NewNode(c)
	}
	return redlockOver(b, nodes, opts)
}

// newRueidisRedlock is redlock over a rueidis client per address, made as
// docs/masters.md (rueidis clients) makes them (lib=rueidis), closed at the end
// of the benchmark.
func newRueidisRedlock(b testing.TB, addrs []string, opts ...redlock.Option) *redlockLib {
	b.Helper()
	nodes := make([]redlock.Node, len(addrs))
	for i, a := range addrs {
		opt := rueidis.ClientOption{InitAddress: []string{a},
			ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: time.Second}}
		c, err := rueidis.NewClient(opt)
		if err != nil {
			b.Fatalf("rueidis.NewClient(%s): %v", a, err)
		}
		b.Cleanup(c.Close)
		nodes[i] = redlockrueidis.NewNode(c, opt)
	}
	return redlockOver(b, nodes, opts)
}

// redlockOver is a Redlock over nodes with the benchmarks' TTL, closed at
// the end of the benchmark.
func redlockOver(b testing.TB, nodes []redlock.Node, opts []redlock.Option) *redlockLib {
	b.Helper()
	r, err := redlock.New(nodes, append([]redlock.Option{redlock.WithTTL(ttl)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return &redlockLib{r: r}
}

type redlockHeld struct{ l *redlock.Lock }

func (l *redlockLib) lock(ctx context.Context, key string) (held, error) {
	h, err := l.r.Lock(ctx, key, l.call...)
	return redlockHeld{h}, err
}

func (l *redlockLib) tryLock(ctx context.Context, key string) (held, error) {
	h, err := l.r.TryLock(ctx, key, l.call...)
	return redlockHeld{h}, err
}

func (h redlockHeld) unlock(ctx context.Context) error { return h.l.Unlock(ctx) }
func (h redlockHeld) extend(ctx context.Context) error { return h.l.Extend(ctx, ttl) }

// --- go-redsync/redsync v4 ---

type redsyncLib struct{ rs *redsync.Redsync }

func newRedsync(cs []*redis.Client) *redsyncLib {
	pools := make([]redsyncredis.Pool, len(cs))
	for i, c := range cs {
		pools[i] = goredis.NewPool(c)
	}
	return &redsyncLib{rs: redsync.New(pools...)}
}

type redsyncHeld struct{ m *redsync.Mutex }

func (l *redsyncLib) lock(ctx context.Context, key string) (held, error) {
	m := l.rs.NewMutex(key, redsync.WithExpiry(ttl))
	return redsyncHeld{m}, m.LockContext(ctx)
}

func (l *redsyncLib) tryLock(ctx context.Context, key string) (held, error) {
	m := l.rs.NewMutex(key, redsync.WithExpiry(ttl))
	return redsyncHeld{m}, m.TryLockContext(ctx)
}

func (h redsyncHeld) unlock(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if !ok && err == nil {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

func (h redsyncHeld) extend(ctx context.Context) error {
	ok, err := h.m.ExtendContext(ctx)
	if !ok && err == nil {
		err = errors.New("redsync: extend failed")
	}
	return err
}

// --- bsm/redislock (one master) ---

type redislockLib struct{ c *redislock.Client }

func newRedislock(c *redis.Client) *redislockLib { return &redislockLib{c: redislock.New(c)} }

type redislockHeld struct{ l *redislock.Lock }

func (l *redislockLib) lock(ctx context.Context, key string) (held, error) {
	h, err := l.c.Obtain(ctx, key, ttl, &redislock.Options{
		RetryStrategy: redislock.ExponentialBackoff(redlock.DefaultMinBackoff, redlock.DefaultMaxBackoff),
	})
	return redislockHeld{h}, err
}

func (l *redislockLib) tryLock(ctx context.Context, key string) (held, error) {
	h, err := l.c.Obtain(ctx, key, ttl, nil)
	return redislockHeld{h}, err
}

func (h redislockHeld) unlock(ctx context.Context) error { return h.l.Release(ctx) }
func (h redislockHeld) extend(ctx context.Context) error { return h.l.Refresh(ctx, ttl, nil) }
