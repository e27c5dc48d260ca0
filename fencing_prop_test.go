package redlock

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/redlock/redlock/internal/redistest"
)

// TestFenceTokensProperty drives one key through random interleavings of
// acquire, expire (the key deleted on some masters, as a lapsed TTL leaves
// it), release and restart-empty of a master, against real servers, and
// checks that every holder's token is above the previous holder's. It makes
// 50 checks unless -rapid.checks says otherwise (10 with -short).
func TestFenceTokensProperty(t *testing.T) {
	limitRapidChecks(t, 50)
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithFencing(), WithTTL(time.Minute), WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()

	var holders, restarts, expiries int
	rapid.Check(t, func(rt *rapid.T) {
		key := testKey(t)
		var held []*Lock
		var last uint64 // the previous holder's token
		defer func() {
			for _, l := range held {
				_ = l.Unlock(ctx)
			}
			settle(r)
		}()
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range steps {
			switch rapid.SampledFrom([]string{"acquire", "acquire", "expire", "release", "restart-empty"}).Draw(rt, "op") {
			case "acquire":
				l, err := r.TryLock(ctx, key)
				settle(r) // a failed attempt's rollback ends before the next step
				if err != nil {
					if !errors.Is(err, ErrNotObtained) {
						rt.Fatalf("acquire: %v", err)
					}
					continue
				}
				if l.Fence() <= last {
					rt.Fatalf("holder's token %d is not above the previous holder's %d", l.Fence(), last)
				}
				last = l.Fence()
				held = append(held, l)
				holders++
			case "expire":
				nodes := rapid.SliceOfNDistinct(rapid.IntRange(0, len(cs)-1), 1, len(cs), rapid.ID[int]).Draw(rt, "expire on")
				for _, i := range nodes {
					if err := cs[i].Del(ctx, key).Err(); err != nil {
						rt.Logf("DEL on master %d (restarted, its old connection failed): %v", i, err)
					}
				}
				expiries++
			case "release":
				if len(held) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(held)-1).Draw(rt, "release")
				_ = held[i].Unlock(ctx) // ErrNotHeld when the key was deleted from a quorum
				settle(r)
				held = append(held[:i], held[i+1:]...)
			case "restart-empty":
				i := rapid.IntRange(0, len(cs)-1).Draw(rt, "restart")
				if err := cl.Servers[i].Restart(false); err != nil {
					rt.Fatal(err)
				}
				restarts++
			}
		}
	})
	t.Logf("%d holders' tokens checked; faults: %d restarts without data, %d expiries", holders, restarts, expiries)
}

// limitRapidChecks sets -rapid.checks to n for this test when the command
// line did not set it: each check here talks to real servers.
func limitRapidChecks(t *testing.T, n int) {
	set := false
	goflag.Visit(func(f *goflag.Flag) { set = set || f.Name == "rapid.checks" })
	f := goflag.Lookup("rapid.checks")
	if set || f == nil {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}
