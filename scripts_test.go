package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/faultproxy"
)

// TestScriptFlushKeepsOrder: after SCRIPT FLUSH a master knows none of the
// scripts until someone runs them again. A fenced acquire queued behind a
// slow request, and rolled back (its caller gave up) before it was sent,
// goes to the master in one batch with its rollback: the rollback must run
// after the acquire, or the key stays behind for its TTL, blocking everyone.
func TestScriptFlushKeepsOrder(t *testing.T) {
	px, err := faultproxy.New(masters.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	admin := clients(t, masters.Addrs()[:1])[0]
	r := newRedlock(t, nodesOf(t, clients(t, []string{px.Addr()})), WithNodeTimeout(time.Second), WithTTL(time.Minute))
	ctx := context.Background()
	if l, err := r.TryLock(ctx, testKey(t), WithFencing()); err != nil { // connected, scripts known
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// The master forgets the scripts; another client runs the release
	// script (a plain Unlock elsewhere), so only that one is known again.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Eval(ctx, releaseSrc.(string), []string{testKey(t), WaitKey(testKey(t))}, "x", "", 0).Err(); err != nil {
		t.Fatal(err)
	}
	px.SetLatency(150 * time.Millisecond)

	slow := make(chan error, 1)
	go func() { // a request in flight to the master for 150 ms
		l, err := r.TryLock(ctx, testKey(t))
		if err == nil {
			err = l.Unlock(ctx)
		}
		slow <- err
	}()
	time.Sleep(30 * time.Millisecond)
	key := testKey(t)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = r.TryLock(tctx, key, WithFencing()) // queued behind it; gives up
	cancel()
	if err == nil {
		t.Fatal("TryLock succeeded; the test needs its caller to give up")
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	settle(r)
	if v, pttl := admin.Get(ctx, key).Val(), admin.PTTL(ctx, key).Val(); v != "" {
		t.Fatalf("after the rolled-back fenced acquire the master holds %s=%q for %v more", key, v, pttl)
	}
}
