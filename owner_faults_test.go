package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/redlock/redlock/internal/redistest"
)

// TestNestedEnterWithMastersPaused: a nested enter while a minority of the
// masters are stopped (SIGSTOP) succeeds on the others, or fails when one
// more master's reply is lost although its request landed; either way,
// once every hold is released another owner takes the key at once, and a
// failed enter's rollback leaves the outer hold whole on every master.
func TestNestedEnterWithMastersPaused(t *testing.T) {
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	fs, nodes := faultNodes(t, cs)
	r := newRedlock(t, nodes, WithTTL(30*time.Second), WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()
	A := WithOwner("A")

	for _, outcome := range []string{"succeeds", "fails"} {
		t.Run(outcome, func(t *testing.T) {
			key := testKey(t)
			outer := mustLock(t, r, key, A)
			settle(r)
			for _, s := range cl.Servers[3:] {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
			}
			if outcome == "fails" {
				fs[2].lateReply.Store(true) // lands, but its reply is lost
			}
			inner, err := r.TryLock(ctx, key, A)
			fs[2].lateReply.Store(false)
			for _, s := range cl.Servers[3:] {
				if err := s.Resume(); err != nil {
					t.Fatal(err)
				}
			}
			settle(r)
			_, recs := holds(t, cs, key)
			for i, rec := range recs {
				if rec[outer.Value()] == "" {
					t.Fatalf("master %d lost the outer hold during a nested enter that %s: %v", i, outcome, rec)
				}
			}
			switch {
			case outcome == "succeeds" && err != nil:
				t.Fatalf("nested enter with 2 of 5 masters stopped: %v", err)
			case outcome == "fails" && err == nil:
				t.Fatal("nested enter succeeded with 2 replies of 5")
			case outcome == "fails":
				if !errors.Is(err, ErrNotObtained) {
					t.Fatalf("failed nested enter: %v, want ErrNotObtained", err)
				}
				for i, rec := range recs {
					if len(rec) != 1 {
						t.Fatalf("master %d keeps %v after the failed enter's rollback; want the outer hold alone", i, rec)
					}
				}
			}
			mustRefuse(t, r, key, "owner B while A holds", WithOwner("B"))
			if inner != nil {
				if err := inner.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := outer.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			bctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			b, err := r.Lock(bctx, key, WithOwner("B"))
			if err != nil {
				t.Fatalf("owner B a second after A released every hold: %v", err)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOwnedHoldsProperty drives one key through random sequences of nested
// enters (some with requests that never reach a master, some that land but
// whose reply is lost), releases in any order, and attempts by another
// owner and by plain locks, against real masters. After every step it
// checks every master: a hold's record, once there, stays until the hold is
// released; no record is there that no hold owns; and once every hold is
// released another owner takes the key at once. It makes 15 checks unless
// -rapid.checks says otherwise.
func TestOwnedHoldsProperty(t *testing.T) {
	limitRapidChecks(t, 15)
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	fs, nodes := faultNodes(t, cs)
	const timeout = 250 * time.Millisecond // as newRedlock's: not exceeded by a loaded machine
	r := newRedlock(t, nodes, WithTTL(time.Minute), WithNodeTimeout(timeout))
	ctx := context.Background()
	var entered, failed, refused int

	rapid.Check(t, func(rt *rapid.T) {
		key := testKey(t)
		held := map[string]*Lock{}   // value → hold
		where := map[string][]bool{} // value → masters its record reached
		defer func() {
			for _, l := range held {
				_ = l.Unlock(ctx)
			}
			settle(r)
		}()
		check := func(step string) {
			settle(r)
			owners, recs := holds(t, cs, key)
			for i, rec := range recs {
				for v := range rec {
					if held[v] == nil {
						rt.Fatalf("after %s: master %d keeps a record %s that no hold owns: %v", step, i, v, slices.Sorted(maps.Keys(rec)))
					}
				}
				for v, on := range where {
					if on[i] && rec[v] == "" {
						rt.Fatalf("after %s: master %d lost hold %s's record", step, i, v)
					}
					on[i] = rec[v] != ""
				}
				if len(rec) > 0 && owners[i] != "A" {
					rt.Fatalf("after %s: master %d names owner %q", step, i, owners[i])
				}
			}
		}
		steps := rapid.IntRange(1, 15).Draw(rt, "steps")
		for range steps {
			switch op := rapid.SampledFrom([]string{"enter", "enter", "release", "other"}).Draw(rt, "op"); op {
			case "enter":
				// Faults on up to 3 masters: a request delayed past the node
				// timeout is never sent; a late reply lands unseen.
				faulty := rapid.SliceOfNDistinct(rapid.IntRange(0, len(fs)-1), 0, 3, rapid.ID[int]).Draw(rt, "faulty")
				late := rapid.Bool().Draw(rt, "landed")
				for _, i := range faulty {
					if late {
						fs[i].lateReply.Store(true)
					} else {
						fs[i].acquireDelay.Store(int64(2 * timeout))
					}
				}
				l, err := r.TryLock(ctx, key, WithOwner("A"))
				for _, i := range faulty {
					fs[i].lateReply.Store(false)
					fs[i].acquireDelay.Store(0)
				}
				switch {
				case err == nil:
					held[l.Value()] = l
					where[l.Value()] = make([]bool, len(fs))
					entered++
				case len(faulty) < 3 && refusedBy(err) > 0:
					rt.Fatalf("nested enter with faults on %d of 5 masters refused: %v", len(faulty), err)
				default:
					failed++ // the faults, or a loaded machine's timeouts
				}
			case "release":
				if len(held) == 0 {
					continue
				}
				v := rapid.SampledFrom(slices.Sorted(maps.Keys(held))).Draw(rt, "hold")
				if err := held[v].Unlock(ctx); err != nil {
					rt.Fatalf("Unlock: %v", err)
				}
				delete(held, v)
				delete(where, v)
			case "other":
				opts := []Option{WithOwner("B")}
				if rapid.Bool().Draw(rt, "plain") {
					opts = nil
				}
				l, err := r.TryLock(ctx, key, opts...)
				if len(held) > 0 && err == nil {
					rt.Fatalf("another holder took the key while A held %d holds", len(held))
				}
				if len(held) == 0 && refusedBy(err) > 0 {
					rt.Fatalf("another holder refused right after A released every hold: %v", err)
				}
				if err == nil && len(held) == 0 {
					if err := l.Unlock(ctx); err != nil {
						rt.Fatal(err)
					}
				}
				refused++
			}
			check(fmt.Sprint(len(held), " holds"))
		}
	})
	t.Logf("%d nested enters, %d failed under faults, %d attempts by others", entered, failed, refused)
}

// refusedBy is how many masters refused the attempt that failed with err
// (a timeout is no refusal: a loaded machine can make one).
func refusedBy(err error) int {
	var qe *QuorumError
	if errors.As(err, &qe) {
		return qe.Refused
	}
	return 0
}

// faultNodes wraps a Node over each client in a faultNode, and returns
// them also as Nodes, for New.
func faultNodes(t testing.TB, cs []*redis.Client) ([]*faultNode, []Node) {
	fs := wrapAll(nodesOf(t, cs))
	nodes := make([]Node, len(fs))
	for i, f := range fs {
		nodes[i] = f
	}
	return fs, nodes
}
