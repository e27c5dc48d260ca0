package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

// replicatedMaster is a primary with one replica that replicates through a
// fault proxy (replica → link → primary). The link's latency delays what
// the replica sends its primary — its REPLCONF ACKs — so every WAIT on the
// primary takes that much longer; Blackhole cuts the replication link.
type replicatedMaster struct {
	primary *redistest.Server
	replica *redistest.Server
	link    *faultproxy.Proxy
	client  *redis.Client // to the primary, as clients() makes them
}

// startReplicated starts n replicated masters and waits until each replica
// is in sync (WAIT 1 answers 1).
func startReplicated(t *testing.T, n int) []*replicatedMaster {
	t.Helper()
	ms := make([]*replicatedMaster, n)
	for i := range ms {
		// hz 100: a WAIT whose timeout passed ends within 10 ms (100 ms at
		// the default hz 10), inside the node timeout.
		p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
		link, err := faultproxy.New(p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Close() })
		host, port, _ := net.SplitHostPort(link.Addr())
		r := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--replicaof", host, port}})
		ms[i] = &replicatedMaster{primary: p, replica: r, link: link, client: clients(t, []string{p.Addr()})[0]}
	}
	for i, m := range ms {
		m.waitSynced(t, fmt.Sprintf("master %d", i))
	}
	return ms
}

// waitSynced waits until m's replica is connected and has acknowledged
// every write (a fresh connection's WAIT 1 waits for none of its own).
func (m *replicatedMaster) waitSynced(t *testing.T, name string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, err := m.client.Do(context.Background(), "wait", 1, 100).Int64(); err == nil && n == 1 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the replica of %s is not in sync after 10 s", name)
		}
	}
}

func replicatedNodes(t *testing.T, ms []*replicatedMaster) []Node {
	t.Helper()
	cs := make([]*redis.Client, len(ms))
	for i, m := range ms {
		cs[i] = m.client
	}
	return nodesOf(t, cs)
}

func setReplicationDelay(ms []*replicatedMaster, d time.Duration) {
	for _, m := range ms {
		m.link.SetLatency(d)
	}
}

// TestReplicaConfirmConcurrent: 200 TryLocks at once on distinct keys, with
// WithReplicaConfirm(1) and a node timeout of 250 ms, over 3 masters whose
// replication links add 0.5–2 ms. The lane batches the requests that queue
// at a master into one pipeline, so the batch's votes must be confirmed
// together, not one replica round trip after another (issue 31, item 4:
// 199 of 200 failed with a WAIT after each vote).
func TestReplicaConfirmConcurrent(t *testing.T) {
	ms := startReplicated(t, 3)
	nodes := replicatedNodes(t, ms)
	const n = 200
	for _, delay := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond} {
		t.Run(fmt.Sprintf("delay=%v", delay), func(t *testing.T) {
			setReplicationDelay(ms, delay)
			defer setReplicationDelay(ms, 0)
			r := newRedlock(t, nodes, WithTTL(10*time.Second), WithReplicaConfirm(1), WithNodeTimeout(250*time.Millisecond))
			locks := make([]*Lock, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				key := testKey(t)
				wg.Go(func() {
					<-start
					locks[i], errs[i] = r.TryLock(context.Background(), key)
				})
			}
			begin := time.Now()
			close(start)
			wg.Wait()
			took := time.Since(begin)
			ok, notReplicated := 0, 0
			var first error
			for _, err := range errs {
				if err == nil {
					ok++
					continue
				}
				if first == nil {
					first = err
				}
				if errors.Is(err, ErrNotReplicated) {
					notReplicated++
				}
			}
			t.Logf("replication delay %v: %d of %d TryLocks succeeded (%d%%), %d failed with ErrNotReplicated among their masters' errors, in %v",
				delay, ok, n, ok*100/n, notReplicated, took.Round(time.Millisecond))
			if ok*100 < 95*n {
				t.Errorf("%d of %d TryLocks succeeded; want at least 95%%; the first failure: %v", ok, n, first)
			}
			for _, l := range locks {
				if l != nil {
					if err := l.Unlock(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
}

// TestReplicaConfirmRenewals: 1,000 auto-extended locks (TTL 1 s, renewed
// about every third of it) with WithReplicaConfirm(1) keep being renewed
// while the replication links add 2 ms: a renewal round sends up to 1,000
// extends to each master in one batch, confirmed together. None is lost.
func TestReplicaConfirmRenewals(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	ms := startReplicated(t, 3)
	r := newRedlock(t, replicatedNodes(t, ms), WithTTL(time.Second), WithReplicaConfirm(1), WithNodeTimeout(250*time.Millisecond))
	locks := holdMany(t, r, n) // without delay: the renewals are what is tested
	for _, l := range locks {
		l.Done()
	}
	const delay, hold = 2 * time.Millisecond, 3500 * time.Millisecond
	setReplicationDelay(ms, delay)
	time.Sleep(hold) // about ten renewal rounds
	setReplicationDelay(ms, 0)
	var held []*Lock
	var first error
	for _, l := range locks {
		select {
		case <-l.Done():
			if first == nil {
				first = context.Cause(l.Context())
			}
		default:
			held = append(held, l)
		}
	}
	lost := n - len(held)
	t.Logf("replication delay %v for %v: %d of %d auto-extended locks lost", delay, hold, lost, n)
	if lost > 0 {
		t.Errorf("%d of %d locks lost; want none; the first: %v", lost, n, first)
	}
	unlockAll(t, held)
}
