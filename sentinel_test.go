package redlock

import (
	"context"
	"errors"
	"fmt"
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
	start := func(opts redistest.Options) *redistest.Server { return redistest.StartServerT(t, opts) }
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

// TestSentinelFailoverWhileHeld: three masters, each a primary and a
// replica under a Sentinel. A fenced lock is held with auto-extend while
// every master fails over (SENTINEL FAILOVER: the replica, which had the
// key by replication, is promoted and the old primary becomes its
// replica). The lock is kept: it is on every new primary with a TTL, its
// Done stays open, Extend and the renewals reach the new primaries, another
// Redlock cannot take it, and Unlock removes it from every new primary.
// What a failover to a replica that lacked the key does is in
// docs/masters.md ("Sentinel-managed masters").
func TestSentinelFailoverWhileHeld(t *testing.T) {
	start := func(opts redistest.Options) *redistest.Server { return redistest.StartServerT(t, opts) }
	var urls []string
	var sentinels []*redis.SentinelClient
	var sentinelAddrs []string
	for _, master := range []string{"m1", "m2", "m3"} {
		p := start(redistest.Options{})
		host, port, _ := net.SplitHostPort(p.Addr())
		start(redistest.Options{Args: []string{"--replicaof", host, port}})
		s := start(redistest.Options{Sentinel: map[string]string{master: p.Addr()}})
		urls = append(urls, "redis+sentinel://"+s.Addr()+"?master_name="+master)
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { sc.Close() })
		sentinels, sentinelAddrs = append(sentinels, sc), append(sentinelAddrs, s.Addr())
	}
	ctx := context.Background()
	primary := func(i int) string {
		t.Helper()
		a, err := sentinels[i].GetMasterAddrByName(ctx, fmt.Sprintf("m%d", i+1)).Result()
		if err != nil {
			t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME m%d: %v", i+1, err)
		}
		return net.JoinHostPort(a[0], a[1])
	}
	// A failover needs the Sentinel to have found the replica.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for i, a := range sentinelAddrs {
		if err := redistest.WaitReplicaKnown(wctx, a, fmt.Sprintf("m%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}

	const ttl = 3 * time.Second
	r, err := NewFromURLs(urls, WithTTL(ttl), WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other, err := NewFromURLs(urls, WithTTL(ttl), WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	key := testKey(t)
	l, err := r.Lock(ctx, key, WithFencing(), WithAutoExtend())
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}

	old := make([]string, len(sentinels))
	for i, sc := range sentinels {
		old[i] = primary(i)
		if err := sc.Failover(ctx, fmt.Sprintf("m%d", i+1)).Err(); err != nil {
			t.Fatalf("SENTINEL FAILOVER m%d: %v", i+1, err)
		}
	}
	for i := range sentinels {
		for end := time.Now().Add(20 * time.Second); primary(i) == old[i]; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("m%d did not fail over in 20 s", i+1)
			}
		}
	}
	// Two TTLs on the new primaries: only the renewals keep the key.
	time.Sleep(2 * ttl)
	select {
	case <-l.Done():
		t.Fatalf("the lock ended across the failover: %v", context.Cause(l.Context()))
	default:
	}
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend after the failover: %v", err)
	}
	for i := range sentinels {
		c := redis.NewClient(&redis.Options{Addr: primary(i)})
		v, err := c.Get(ctx, key).Result()
		pttl, _ := c.PTTL(ctx, key).Result()
		c.Close()
		if v != l.Value() || pttl <= 0 || pttl > ttl {
			t.Errorf("new primary of m%d holds %q with TTL %v (%v); want the lock's value with a TTL in (0, %v]", i+1, v, pttl, err, ttl)
		}
	}
	if s, err := other.TryLock(ctx, key, WithFencing()); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another Redlock's TryLock after the failover = %v, %v; want ErrNotObtained", s, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
	next, err := other.TryLock(ctx, key, WithFencing())
	if err != nil {
		t.Fatalf("TryLock after the Unlock: %v", err)
	}
	if next.Fence() <= l.Fence() {
		t.Errorf("the next holder's token %d is not above %d", next.Fence(), l.Fence())
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSentinelReplicaConfirmAndHandOff: a Sentinel-managed master made
// with NewFailoverNode is one server to the library (a *redis.Client that
// follows Sentinel to the primary): WithReplicaConfirm is accepted in New,
// a vote is confirmed by the primary's replica (WAIT on the vote's
// connection), and a call waiting in another Redlock is handed the key
// when the holder unlocks, far sooner than its backoff.
func TestSentinelReplicaConfirmAndHandOff(t *testing.T) {
	p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
	host, port, _ := net.SplitHostPort(p.Addr())
	redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
	s := redistest.StartServerT(t, redistest.Options{Sentinel: map[string]string{"m1": p.Addr()}})
	opt := &redis.FailoverOptions{MasterName: "m1", SentinelAddrs: []string{s.Addr()},
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true}
	c := redis.NewFailoverClient(opt)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, err := c.Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
			break
		} else if time.Now().After(end) {
			t.Fatalf("the replica did not catch up: WAIT 1 = %d, %v", n, err)
		}
	}
	nodes := []Node{NewFailoverNode(c, opt)}
	const backoff = 1500 * time.Millisecond
	holder := newRedlock(t, nodes, WithReplicaConfirm(1))
	waiter := newRedlock(t, nodes, WithReplicaConfirm(1), WithBackoff(backoff, backoff))
	key := testKey(t)
	w, d := handOffAfter(t, holder, waiter, key, WithFencing())
	t.Logf("holder's Unlock to waiter's lock: %v", d.Round(time.Millisecond))
	if d > backoff/4 {
		t.Errorf("the waiter got the lock %v after the Unlock; want far below its backoff %v (a hand-off)", d, backoff)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Error(err)
	}
}
