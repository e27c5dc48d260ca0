package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
)

// TestClusterTryAgain: while a Redis Cluster master moves the lock's slot to
// another shard, a release, or a fenced vote whose counter stayed behind,
// names keys of the slot some of which the old shard has and some not, and
// is answered TRYAGAIN before it runs; the batch sends it again (see
// batch.tryAgain) until the move lets it through, within the node timeout.
// Before, go-redis's cluster client tried it again at once up to
// MaxRedirects times, all refused the same, and the vote failed: the
// Unlock left the key on that master until its TTL, and the TryLock
// failed. The move here ends 300 ms after it began; redis-cli's take
// milliseconds.
func TestClusterTryAgain(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{})
	a := rc.Addrs()
	r, err := NewFromURLs([]string{"redis+cluster://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2]}, WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	for _, op := range []string{"Unlock", "TryLock"} {
		key := testKey(t) + op
		slot := int(keySlot(key))
		l, err := r.TryLock(ctx, key, WithTTL(10*time.Second), WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if op == "TryLock" { // the fence counter stays, the key goes
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		from, err := rc.ShardOfSlot(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		to := (from + 1) % len(rc.Shards)
		if err := rc.BeginMove(ctx, slot, from, to); err != nil {
			t.Fatal(err)
		}
		moved := make(chan error, 1)
		go func() {
			time.Sleep(300 * time.Millisecond)
			if err := rc.MigrateKeys(ctx, slot, from, to); err != nil {
				moved <- err
				return
			}
			moved <- rc.EndMove(ctx, slot, from, to)
		}()
		start := time.Now()
		if op == "Unlock" {
			err = l.Unlock(ctx)
		} else {
			l, err = r.TryLock(ctx, key, WithFencing())
		}
		took := time.Since(start)
		if merr := <-moved; merr != nil {
			t.Fatal(merr)
		}
		t.Logf("%s during the move of slot %d from shard %d to %d: %v after %v", op, slot, from, to, err, took.Round(time.Millisecond))
		if err != nil {
			t.Errorf("%s while the slot's keys were split between two shards: %v; want it sent again until the move let it through", op, err)
			continue
		}
		if op == "TryLock" {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := r.nodes[0].(*redisNode).c.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("after %s and Unlock the key is still on the master", op)
		}
	}
}
