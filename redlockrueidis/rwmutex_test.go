package redlockrueidis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock/redlock"
)

// TestRWMutexAcrossAdapters: an RWMutex taken through rueidis Nodes and
// through go-redis Nodes on the same masters is one lock: readers of both
// share it, a writer of either waits for the other's readers and is woken
// by the last one's Unlock (across Redlocks: by the masters), and the
// readers of the other wait for it.
func TestRWMutexAcrossAdapters(t *testing.T) {
	_, addrs := newMasters(t, 3)
	rwAcross(t, newRedlock(t, allOf(t, addrs, goredisNode)), newRedlock(t, allOf(t, addrs, rueidisNode)))
}

// TestRWMutexAcrossAdaptersOnClusters: the same on masters that are Redis
// Clusters of three shards, where the wake-ups go by sharded pub/sub (a
// waiting writer's claim keeps new readers out only while it waits; it is
// woken, not left to its backoff, by the last reader's Unlock).
func TestRWMutexAcrossAdaptersOnClusters(t *testing.T) {
	t.Parallel()
	cs := clusters(t, 3)
	rwAcross(t, newRedlock(t, clusterNodes(t, cs, goredisCluster)), newRedlock(t, clusterNodes(t, cs, rueidisCluster)))
}

// rwAcross runs TestRWMutexAcrossAdapters' checks on a Redlock of go-redis
// Nodes and one of rueidis Nodes of the same masters.
func rwAcross(t *testing.T, goredisRL, rueidisRL *redlock.Redlock) {
	ctx := context.Background()
	slow := redlock.WithBackoff(10*time.Second, 20*time.Second)
	for _, dir := range []struct {
		name           string
		reader, writer *redlock.Redlock
	}{
		{"rueidis readers, go-redis writer", rueidisRL, goredisRL},
		{"go-redis readers, rueidis writer", goredisRL, rueidisRL},
	} {
		name := "rw:" + dir.name
		r1, err := dir.reader.RWMutex(name).TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := dir.writer.RWMutex(name).TryRLock(ctx)
		if err != nil {
			t.Fatalf("%s: a reader of the other adapter beside a reader: %v", dir.name, err)
		}
		if err := r2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			w, err := dir.writer.RWMutex(name).Lock(ctx, slow)
			if err != nil {
				t.Error(err)
				got <- time.Time{}
				return
			}
			in := time.Now()
			_, rerr := dir.reader.RWMutex(name).TryRLock(ctx)
			if !errors.Is(rerr, redlock.ErrNotObtained) {
				t.Errorf("%s: a reader beside the writer: %v", dir.name, rerr)
			}
			if err := w.Unlock(ctx); err != nil {
				t.Error(err)
			}
			got <- in
		}()
		time.Sleep(300 * time.Millisecond)
		unlocked := time.Now()
		if err := r1.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if d := (<-got).Sub(unlocked); d > time.Second {
			t.Errorf("%s: the writer got in %v after the last reader's Unlock; want a wake-up, far below its backoff", dir.name, d)
		}
		readers := make(chan error, 2)
		w, err := dir.writer.RWMutex(name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			go func() {
				r, err := dir.reader.RWMutex(name).RLock(ctx, slow)
				if err == nil {
					err = r.Unlock(ctx)
				}
				readers <- err
			}()
		}
		time.Sleep(300 * time.Millisecond) // both readers refused and queued
		unlocked = time.Now()
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case err := <-readers:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(time.Second):
				t.Fatalf("%s: a waiting reader was not woken within 1 s of the writer's Unlock", dir.name)
			}
		}
		t.Logf("%s: both waiting readers in within %v of the writer's Unlock", dir.name, time.Since(unlocked).Round(time.Millisecond))
	}
}
