package chaos

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// dropSubscriptions has every master drop its clients' subscription
// connections (CLIENT KILL TYPE pubsub) again and again for down(): the
// clients' wake-ups from other clients' releases break and go-redis keeps
// subscribing again. Waiters must fall back to their backoff: the lock stays
// safe and available.
func dropSubscriptions(ctx context.Context, e *env) error {
	if !sleep(ctx, e.warm()) {
		return nil
	}
	all := e.last(e.n)
	cs := make([]*redis.Client, e.n)
	for i, a := range e.cl.Addrs() {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
		defer cs[i].Close()
	}
	drop := func(i int) error {
		// A master with no subscriber answers with an error: not a failure.
		_ = cs[i].ClientKillByFilter(ctx, "TYPE", "pubsub").Err()
		return nil
	}
	for first := true; first || e.left() > e.down()+e.settle(); first = false {
		f, err := e.inject(kindDropSubscriptions, all, "every subscription connection dropped, again every TTL/10", drop)
		if err != nil {
			return err
		}
		for end := time.Now().Add(e.down()); time.Now().Before(end); {
			if !sleep(ctx, e.ttl/10) {
				break
			}
			_ = e.each(all, drop)
		}
		if err := e.undo(f, nil, "stop dropping", nil); err != nil {
			return err
		}
		if !sleep(ctx, e.settle()) {
			return nil
		}
	}
	return nil
}
