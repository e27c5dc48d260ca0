package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSentinelsFailover: a write to master 0's primary after its
// replication link was cut is gone once the Sentinel promoted the replica,
// and clients that follow the Sentinel reach the new primary.
func TestSentinelsFailover(t *testing.T) {
	start := time.Now()
	s, err := NewSentinels(Options{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("started in %v", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	p0, err := s.Primary(0)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: p0})
	defer c.Close()
	if err := c.Set(ctx, "before", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // replicated
	if err := s.CutReplica(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "after", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s.KillPrimary(0); err != nil {
		t.Fatal(err)
	}
	if err := s.Failover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("failed over in %v", time.Since(start).Round(time.Millisecond))
	p1, err := s.Primary(0)
	if err != nil || p1 == p0 {
		t.Fatalf("primary after the failover %q (%v); want the replica, not %s", p1, err, p0)
	}
	n := redis.NewClient(&redis.Options{Addr: p1})
	defer n.Close()
	if v, err := n.Get(ctx, "before").Result(); err != nil || v != "v" {
		t.Errorf("the promoted replica lacks the write made before the cut: %q, %v", v, err)
	}
	if ex, err := n.Exists(ctx, "after").Result(); err != nil || ex != 0 {
		t.Errorf("the promoted replica has the write made after the cut: EXISTS = %d, %v", ex, err)
	}
	if err := s.CutReplica(0); err == nil {
		t.Error("CutReplica after the failover: no error")
	}
}
