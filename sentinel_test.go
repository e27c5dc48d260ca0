package redlock

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// TestSentinelMasters: two masters that are each a primary and a replica
// watched by a Sentinel, and one plain master, taken as URLs. New accepts
// them as three masters, a lock is taken on each primary and released, and
// once both primaries are down the errors name the Sentinel-managed masters
// by their names. It starts real servers and fails, never skips, when
// redis-server is missing.
func TestSentinelMasters(t *testing.T) {
	start := func(opts redistest.Options) *redistest.Server {
		t.Helper()
		s, err := redistest.StartServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop() })
		return s
	}
	var urls, names []string
	var primaries []*redistest.Server
	for _, master := range []string{"m1", "m2"} {
		p := start(redistest.Options{})
		host, port, _ := net.SplitHostPort(p.Addr())
		start(redistest.Options{Args: []string{"--replicaof", host, port}})
		s := start(redistest.Options{Sentinel: map[string]string{master: p.Addr()}})
		primaries = append(primaries, p)
		urls = append(urls, "redis+sentinel://"+s.Addr()+"?master_name="+master)
		names = append(names, "sentinel:"+master+"@"+s.Addr()+"/0")
	}
	urls = append(urls, masters.Addrs()[0])
	names = append(names, masters.Addrs()[0]+"/0")

	r, err := NewFromURLs(urls, WithTTL(10*time.Second), WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatalf("NewFromURLs(two Sentinel-managed masters and a plain one): %v", err)
	}
	defer r.Close()
	for i, n := range r.Nodes() {
		if n.Name() != names[i] {
			t.Errorf("master %d is named %q; want %q", i, n.Name(), names[i])
		}
	}

	ctx := context.Background()
	key := testKey(t)
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	// The Sentinel-managed masters' lock is on their primaries (TryLock
	// returns at a quorum: the last SET may still be on its way).
	for i, p := range primaries {
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		var v string
		for end := time.Now().Add(2 * time.Second); v != l.Value() && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			v, err = c.Get(ctx, key).Result()
		}
		c.Close()
		if v != l.Value() {
			t.Errorf("primary of %s holds %q (%v); want the lock's value", names[i], v, err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	// Both primaries down: too few masters, and the errors say which.
	for _, p := range primaries {
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = r.TryLock(ctx, testKey(t))
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.As(err, &qe) || qe.Failed != 2 {
		t.Fatalf("TryLock with both primaries down = %v; want ErrNotObtained with a QuorumError of 2 failed", err)
	}
	t.Logf("with both primaries down: %v", err)
	for _, name := range names[:2] {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("the error %q does not name %s", err, name)
		}
	}
	if strings.Contains(err.Error(), "FailoverClient") {
		t.Errorf("the error %q names a master by go-redis's label", err)
	}
}
