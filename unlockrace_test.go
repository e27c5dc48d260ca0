package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestNoRenewalAfterUnlock: locks unlocked around their renewal leave no
// key behind. Their keys are gone from two of five masters, so each
// renewal that succeeds is followed by one that puts the key back there
// (spreadLocked, lua/extend.lua with its renew flag): it must never reach a
// master after the Unlock's release.
func TestNoRenewalAfterUnlock(t *testing.T) {
	const ttl = 600 * time.Millisecond
	const n = 400
	cs := clients(t, masters.Addrs())
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	base := testKey(t)
	for round := range 5 {
		locks := make([]*Lock, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				l, err := r.TryLock(ctx, fmt.Sprintf("%s:%d:%d", base, round, i), WithTTL(ttl), WithAutoExtend())
				if err != nil {
					t.Error(err)
					return
				}
				locks[i] = l
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for i := range n {
			for _, c := range cs[3:] {
				c.Del(ctx, fmt.Sprintf("%s:%d:%d", base, round, i))
			}
		}
		// Unlock them all around the first renewal's due time.
		due := renewalDue(locks[0].Until(), &config{ttl: ttl, driftFactor: DefaultDriftFactor})
		time.Sleep(time.Until(due) - 2*time.Millisecond)
		for _, l := range locks {
			wg.Go(func() { _ = l.Unlock(ctx) })
			time.Sleep(40 * time.Microsecond)
		}
		wg.Wait()
		settle(r)
		left := 0
		for i := range n {
			left += 5 - count(holders(t, cs, fmt.Sprintf("%s:%d:%d", base, round, i)), "")
		}
		if left > 0 {
			t.Fatalf("round %d: %d keys left on the masters after every lock was unlocked", round, left)
		}
	}
}
