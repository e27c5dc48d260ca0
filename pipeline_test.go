package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// Concurrent requests to a master travel in batches; a master that forgot
// the scripts (SCRIPT FLUSH, as after a restart) has them loaded again and
// every request still gets its own answer.
func TestPipelinedNodeBatchesAndReloadsScripts(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	ctx := context.Background()
	for _, c := range cs {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	base := testKey(t)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			key := fmt.Sprintf("%s:%d", base, g)
			l, err := r.TryLock(ctx, key, WithFencing())
			if err != nil {
				t.Errorf("TryLock %s: %v", key, err)
				return
			}
			if l.Fence() == 0 {
				t.Errorf("%s: no fence token", key)
			}
			if _, err := r.TryLock(ctx, key); err == nil {
				t.Errorf("%s: taken twice", key)
			}
			if err := l.Extend(ctx, l.TTL()); err != nil {
				t.Errorf("Extend %s: %v", key, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock %s: %v", key, err)
			}
		})
	}
	wg.Wait()
	settle(r)
	for g := range 32 {
		key := fmt.Sprintf("%s:%d", base, g)
		if vs := holders(t, cs, key); count(vs, "") != len(cs) {
			t.Errorf("%s left on masters: %q", key, vs)
		}
	}
}
