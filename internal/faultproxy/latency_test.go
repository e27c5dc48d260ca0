package faultproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestNoLatencyByDefault(t *testing.T) {
	p := newProxy(t)
	c := newClient(t, p.Addr())
	timePing(t, c) // dial
	if got := minPing(t, c, 10); got > 5*time.Millisecond {
		t.Errorf("fastest PING through a proxy without latency took %v; want near zero", got)
	}
}

func TestLatencyDelaysEachRoundTrip(t *testing.T) {
	p := newProxy(t)
	c := newClient(t, p.Addr())
	timePing(t, c) // dial

	const d = 30 * time.Millisecond
	p.SetLatency(d)
	if p.Latency() != d {
		t.Errorf("Latency() = %v; want %v", p.Latency(), d)
	}
	for range 5 {
		if got := timePing(t, c); got < d || got > d+100*time.Millisecond {
			t.Errorf("PING with latency %v took %v", d, got)
		}
	}

	p.SetLatency(0)
	if got := minPing(t, c, 10); got > 5*time.Millisecond {
		t.Errorf("fastest PING after SetLatency(0) took %v; want near zero", got)
	}
}

func TestLatencyDoesNotSerializeConnections(t *testing.T) {
	p := newProxy(t)
	const n, d = 50, 10 * time.Millisecond
	clients := make([]*redis.Client, n)
	for i := range clients {
		clients[i] = newClient(t, p.Addr()) // one connection each
		timePing(t, clients[i])             // dial before the latency
	}
	p.SetLatency(d)

	took := make([]time.Duration, n)
	errs := make([]error, n)
	begin := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			start := time.Now()
			errs[i] = c.Ping(context.Background()).Err()
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	total := time.Since(begin)

	for i := range n {
		if errs[i] != nil || took[i] < d {
			t.Errorf("PING %d: %v after %v; want success after at least %v", i, errs[i], took[i], d)
		}
	}
	if serial := n * d; total > serial/2 {
		t.Errorf("%d concurrent PINGs with latency %v took %v; serialised they take %v", n, d, total, serial)
	}
}

func TestPipelinePaysLatencyOnce(t *testing.T) {
	p := newProxy(t)
	c := newClient(t, p.Addr())
	const n, d = 100, 50 * time.Millisecond
	ctx := context.Background()
	pings := func(n int) ([]redis.Cmder, error) {
		return c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for range n {
				pipe.Ping(ctx)
			}
			return nil
		})
	}
	// go-redis runs pipelines on a pool of their own: dial it first.
	if _, err := pings(1); err != nil {
		t.Fatal(err)
	}
	p.SetLatency(d)

	begin := time.Now()
	cmds, err := pings(n)
	took := time.Since(begin)
	if err != nil || len(cmds) != n {
		t.Fatalf("pipeline of %d PINGs: %d replies, %v", n, len(cmds), err)
	}
	// About d: paid per command it would be n*d (5 s). The upper bound is
	// a tenth of that: beside the pool's other test binaries (make
	// test-root) this took 146 ms once, the CPU's delay, not the proxy's.
	if took < d || took > n*d/10 {
		t.Errorf("pipeline of %d PINGs with latency %v took %v; want about %v (under %v)", n, d, took, d, n*d/10)
	}
}

func TestLatencyKeepsByteOrderAndIsPaidOncePerBurst(t *testing.T) {
	p := newProxy(t)
	c := redisClient(p.Addr())
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // dial
		t.Fatal(err)
	}
	const d = 20 * time.Millisecond
	p.SetLatency(d)

	value := make([]byte, 4<<20) // about 128 chunks of bufSize
	rand.Read(value)
	begin := time.Now()
	if err := c.Set(ctx, "big", value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Delaying each chunk by d after the previous one would take ~128*d.
	if took := time.Since(begin); took < d || took > 15*d {
		t.Errorf("SET of %d bytes with latency %v took %v; want about %v", len(value), d, took, d)
	}
	got, err := c.Get(ctx, "big").Bytes()
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("GET big: %d bytes, %v; want the %d bytes set", len(got), err, len(value))
	}
}

// redisClient is a client with go-redis's default timeouts.
func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
}
