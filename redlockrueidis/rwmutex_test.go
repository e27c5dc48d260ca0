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
	ctx := context.Background()
	slow := redlock.WithBackoff(10*time.Second, 20*time.Second)
	goredisRL := newRedlock(t, allOf(t, addrs, goredisNode))
	rueidisRL := newRedlock(t, allOf(t, addrs, rueidisNode))
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
			got <- time.Now()
			_, rerr := dir.reader.RWMutex(name).TryRLock(ctx)
			if !errors.Is(rerr, redlock.ErrNotObtained) {
				t.Errorf("%s: a reader beside the writer: %v", dir.name, rerr)
			}
			w.Unlock(ctx)
		}()
		time.Sleep(300 * time.Millisecond)
		unlocked := time.Now()
		if err := r1.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if d := (<-got).Sub(unlocked); d > time.Second {
			t.Errorf("%s: the writer got in %v after the last reader's Unlock; want a wake-up, far below its backoff", dir.name, d)
		}
	}
}
