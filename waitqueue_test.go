package redlock

import (
	"context"
	"testing"
	"time"
)

// TestQueueEmptiesWhenWaitersEnd: a waiting call of each kind of lock
// (plain: handed the key; fenced and owned: woken) registers in the key's
// queue on every master. However the call ends — the holder's release
// tells it, the holder's key expires (no release: no master tells it, and
// it takes the key by its own attempt), or it gives up — once it ended and
// its lock was unlocked, no registration of it is left on any master, to
// be told in place of a call that still waits.
func TestQueueEmptiesWhenWaitersEnd(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	kinds := []struct {
		name           string
		holder, waiter []Option
	}{
		{"plain", nil, nil},
		{"fenced", []Option{WithFencing()}, []Option{WithFencing()}},
		{"owned", []Option{WithOwner("h")}, []Option{WithOwner("w")}},
	}
	for _, k := range kinds {
		for _, end := range []string{"release", "expiry", "give-up"} {
			t.Run(k.name+"/"+end, func(t *testing.T) {
				holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
				waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(200*time.Millisecond, 200*time.Millisecond))
				key := testKey(t)
				l := mustLock(t, holder, key, k.holder...)
				settle(holder)
				wctx, giveUp := context.WithCancel(ctx)
				defer giveUp()
				got := lockAsync(t, wctx, waiter, key, k.waiter...)
				waitRegistered(t, admin, key, 1)
				switch end {
				case "release":
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				case "expiry":
					for _, c := range admin {
						if err := c.Del(ctx, key).Err(); err != nil {
							t.Fatal(err)
						}
					}
				case "give-up":
					giveUp()
				}
				o := <-got
				if end == "give-up" {
					if o.err == nil {
						t.Fatal("the call took the key after it gave up")
					}
				} else {
					if o.err != nil {
						t.Fatal(o.err)
					}
					if err := o.l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				settle(waiter)
				for i, c := range admin {
					if m, err := c.ZRange(ctx, WaitKey(key), 0, -1).Result(); err != nil || len(m) != 0 {
						t.Errorf("master %d: the queue holds %q (err %v) after the call ended; want it empty", i, m, err)
					}
				}
				_ = l.Unlock(ctx)
			})
		}
	}
}
