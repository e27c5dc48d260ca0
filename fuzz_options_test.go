package redlock

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// yesNode returns an in-memory master that grants everything at once: it
// lets a fuzzer drive the acquire, fence, extend and release arithmetic with
// any options, without a network.
func yesNode(name string) Node {
	return NodeFunc(name, func(_ context.Context, c *Command) {
		q := *c.req
		q.OK, q.Fence = true, 1
		replyFor(&q, c)
	})
}

// FuzzOptions: any combination of option values makes New either succeed or
// return a *ConfigError — never panic — and a Redlock that New accepted takes,
// extends and releases a lock (or refuses with a clean error) under them.
func FuzzOptions(f *testing.F) {
	f.Add(int64(10*time.Second), 0.01, int64(100*time.Millisecond), int64(-1), 0, int64(5*time.Millisecond), int64(250*time.Millisecond), "k", int64(time.Second))
	f.Add(int64(time.Millisecond), 0.0, int64(1), int64(0), 1, int64(1), int64(1), "", int64(0))
	f.Add(int64(math.MaxInt64), 0.9999999999999999, int64(math.MaxInt64), int64(math.MaxInt64), math.MaxInt, int64(math.MaxInt64), int64(math.MaxInt64), "{k}\n", int64(math.MaxInt64))
	f.Add(int64(3*time.Millisecond), math.NaN(), int64(-1), int64(-5), -1, int64(-1), int64(-2), "\x00", int64(-1))
	f.Add(int64(1500*time.Microsecond), math.Inf(1), int64(0), int64(math.MinInt64), 0, int64(0), int64(0), "x", int64(1500*time.Microsecond))
	f.Fuzz(func(t *testing.T, ttl int64, drift float64, nodeTimeout, minValidity int64, retry int, bmin, bmax int64, key string, extend int64) {
		opts := []Option{WithTTL(time.Duration(ttl)), WithDriftFactor(drift)}
		if nodeTimeout != 0 {
			opts = append(opts, WithNodeTimeout(time.Duration(nodeTimeout)))
		}
		if minValidity != -1 {
			opts = append(opts, WithMinValidity(time.Duration(minValidity)))
		}
		if retry != 0 {
			opts = append(opts, WithRetry(retry))
		}
		if bmin != 0 || bmax != 0 {
			opts = append(opts, WithBackoff(time.Duration(bmin), time.Duration(bmax)))
		}
		if ttl%2 == 0 {
			opts = append(opts, WithFencing())
		}
		nodes := []Node{yesNode("a"), yesNode("b"), yesNode("c")}
		r, err := New(nodes, opts...)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("New: %v (%T), want a *ConfigError", err, err)
			}
			return
		}
		defer r.Close()
		cfg, err := r.cfg.resolved()
		if err != nil {
			t.Fatalf("New accepted a config that does not resolve: %v", err)
		}
		if cfg.nodeTimeout <= 0 || cfg.ttl%time.Millisecond != 0 || cfg.ttl-cfg.drift()-cfg.minValidity <= 0 {
			t.Fatalf("New accepted ttl %v, node timeout %v, drift %v, min validity %v", cfg.ttl, cfg.nodeTimeout, cfg.drift(), cfg.minValidity)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		l, err := r.TryLock(ctx, key)
		if err != nil {
			if !isClean(err) {
				t.Fatalf("TryLock: %v (%T)", err, err)
			}
			return
		}
		if err := l.Extend(ctx, time.Duration(extend)); err != nil && !isClean(err) {
			t.Fatalf("Extend: %v (%T)", err, err)
		}
		if err := l.Unlock(ctx); err != nil && !isClean(err) {
			t.Fatalf("Unlock: %v (%T)", err, err)
		}
	})
}

// isClean reports whether err is one of the errors the API documents.
func isClean(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce) || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) ||
		errors.Is(err, context.DeadlineExceeded)
}

// TestTTLWholeMilliseconds: the TTL is what the masters were sent, whole
// milliseconds, so the validity is never computed from a longer TTL.
func TestTTLWholeMilliseconds(t *testing.T) {
	r := newRedlock(t, []Node{yesNode("a")}, WithTTL(10*time.Second+999*time.Microsecond))
	l, err := r.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 10*time.Second {
		t.Errorf("TTL %v, want 10s", l.TTL())
	}
}
