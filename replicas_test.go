package redlock

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// TestReplicaConfirm: three masters, each a primary with one replica. With
// WithReplicaConfirm(1) a vote counts only once the master's replica
// confirmed it: with the replicas of two masters frozen (SIGSTOP) the
// acquire fails within the node timeout, both masters failed with
// ErrNotReplicated, and nothing is left on the primaries; without the
// option the same acquire succeeds on the primaries' word alone. With the
// replicas running, locks, Extend and fenced locks are confirmed.
func TestReplicaConfirm(t *testing.T) {
	var nodes []Node
	var primaries []*redis.Client
	var replicas []*redistest.Server
	for range 3 {
		// hz 100: the master ends a WAIT whose timeout passed within 10 ms
		// (100 ms at the default hz 10), inside the node timeout.
		p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
		host, port, _ := net.SplitHostPort(p.Addr())
		r := redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		primaries, replicas, nodes = append(primaries, c), append(replicas, r), append(nodes, NewNode(c))
	}
	ctx := context.Background()
	// The replicas are in sync: WAIT 1 answers 1 on every primary.
	for i, c := range primaries {
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if n, err := c.Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the replica of master %d is not in sync after 10 s", i)
			}
		}
	}
	const nodeTimeout = 2 * time.Second // WAIT gets half: slack for a loaded machine
	confirm := newRedlock(t, nodes, WithTTL(5*time.Second), WithReplicaConfirm(1), WithNodeTimeout(nodeTimeout))
	plain := newRedlock(t, nodes, WithTTL(5*time.Second), WithNodeTimeout(nodeTimeout))

	for _, opts := range [][]Option{nil, {WithFencing()}, {WithOwner("job")}} {
		l, err := confirm.TryLock(ctx, testKey(t), opts...)
		if err != nil {
			t.Fatalf("TryLock %v with every replica confirming: %v", opts, err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Errorf("Extend %v with every replica confirming: %v", opts, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}

	for _, r := range replicas[:2] {
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		defer r.Resume()
	}
	key := testKey(t)
	start := time.Now()
	_, err := confirm.TryLock(ctx, key)
	took := time.Since(start)
	// Both masters fail: unconfirmed, or (rarely, on a loaded machine: about
	// 1 run in 6 here with load 6-8) no reply by the node timeout.
	var qe *QuorumError
	n := 0
	if errors.As(err, &qe) {
		for _, e := range qe.Errs {
			if errors.Is(e, ErrNotReplicated) {
				n++
			}
		}
	}
	if !errors.Is(err, ErrNotObtained) || qe == nil || qe.Failed != 2 || n < 1 {
		t.Fatalf("TryLock with two masters' replicas frozen = %v; want ErrNotObtained with 2 masters failed, not confirmed", err)
	}
	if took > nodeTimeout+500*time.Millisecond {
		t.Errorf("TryLock took %v with the node timeout %v: WAIT's timeout did not keep to it", took, nodeTimeout)
	}
	t.Logf("with two replicas frozen: %v (after %v)", err, took.Round(time.Millisecond))
	settle(confirm)
	for i, c := range primaries {
		if ex, err := c.Exists(ctx, key).Result(); err != nil || ex != 0 {
			t.Errorf("primary %d keeps the failed acquire's key: EXISTS = %d, %v", i, ex, err)
		}
	}
	l, err := plain.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("without WithReplicaConfirm the same TryLock = %v; want the lock on the primaries' word", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
	if _, err := New(nodes, WithReplicaConfirm(-1)); err == nil {
		t.Error("New with WithReplicaConfirm(-1): no error")
	}
}
