package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// extendFault wraps a master: each extend is applied on the master (it
// lands), and then its caller is told something else, as happens when a
// reply is lost or late.
type extendFault struct {
	Node
	mode string // "late": the reply is held back until ctx ends; "slow": for 200 ms; "fail": an error instead of the reply
}

var errReplyLost = errors.New("reply lost")

func (f *extendFault) Exec(ctx context.Context, cmds []*Command) {
	for _, c := range cmds {
		f.Node.Exec(context.WithoutCancel(ctx), []*Command{c})
		if c.req == nil || c.req.Op != reqExtend {
			continue
		}
		switch f.mode {
		case "late":
			<-ctx.Done()
			c.Reply, c.Err = nil, ctx.Err()
		case "slow":
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				c.Reply, c.Err = nil, ctx.Err()
			}
		case "fail":
			c.Reply, c.Err = nil, errReplyLost
		}
	}
}

// TestExtendUnknownOutcome: an Extend to a shorter TTL whose outcome is
// unknown (the caller gave up, no quorum answered, the quorum came too late)
// may still have landed on the masters, so the keys may expire at the new
// TTL. Until must then be no later than the new TTL allows: another client
// can take the lock once the keys expired, and the first holder must know
// by then that its lock is over.
func TestExtendUnknownOutcome(t *testing.T) {
	const longTTL, shortTTL = 30 * time.Second, 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		faults string // per master: "" passes through, else the extendFault mode
		ctx    func() (context.Context, context.CancelFunc)
		opts   []Option
	}{
		{"cancelled before", "", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, nil},
		{"cancelled in flight", "late,late,late", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, nil},
		{"no quorum", "fail,fail,", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, nil},
		// The quorum answers after 200 ms of a 300 ms TTL: less than the
		// minimum validity (150 ms) is left.
		{"quorum too late", "slow,slow,slow", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, []Option{WithMinValidity(150 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := clients(t, masters.Addrs()[:3])
			nodes := nodesOf(t, cs)
			faults := make([]string, 3)
			for i, m := range splitComma(tc.faults, 3) {
				faults[i] = m
				if m != "" {
					nodes[i] = &extendFault{Node: nodes[i], mode: m}
				}
			}
			r := newRedlock(t, nodes)
			other := newRedlock(t, nodesOf(t, cs))
			key := testKey(t)
			l, err := r.TryLock(context.Background(), key, append([]Option{WithTTL(longTTL), WithNodeTimeout(time.Second)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.ctx()
			err = l.Extend(ctx, shortTTL)
			cancel()
			if err == nil && tc.name != "cancelled before" {
				t.Fatalf("Extend succeeded; the test needs an unknown outcome")
			}
			// Another client takes the lock as soon as the masters let it.
			var got *Lock
			deadline := time.Now().Add(3 * time.Second)
			for got == nil && time.Now().Before(deadline) {
				if got, _ = other.TryLock(context.Background(), key, WithTTL(longTTL)); got == nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
			at := time.Now()
			if got == nil {
				// The masters still hold the long TTL: safe, and Until may stay.
				return
			}
			defer got.Unlock(context.Background())
			if until := l.Until(); until.After(at) {
				t.Fatalf("Extend(%v) failed (%v), another client took the lock, and the first holder's Until is still %v ahead: two holders",
					shortTTL, err, until.Sub(at).Round(time.Millisecond))
			}
		})
	}
}

// splitComma splits s at commas into n fields ("" when missing).
func splitComma(s string, n int) []string {
	out := make([]string, n)
	i := 0
	for _, c := range s {
		if c == ',' {
			i++
			continue
		}
		if i < n {
			out[i] += string(c)
		}
	}
	return out
}

// TestExtendTruncatesTTL: the masters keep whole milliseconds, and so must
// TTL and Until after an Extend.
func TestExtendTruncatesTTL(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:3])))
	ctx := context.Background()
	l, err := r.TryLock(ctx, testKey(t), WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	const asked = 1500*time.Millisecond + 700*time.Microsecond
	before := time.Now()
	if err := l.Extend(ctx, asked); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if got := l.TTL(); got != asked.Truncate(time.Millisecond) {
		t.Errorf("TTL after Extend(%v) = %v, want %v", asked, got, asked.Truncate(time.Millisecond))
	}
	drift := time.Duration(float64(1500*time.Millisecond)*DefaultDriftFactor) + driftFloor
	if until, most := l.Until(), after.Add(1500*time.Millisecond-drift); until.After(most) {
		t.Errorf("Until %v after the Extend returned, more than the truncated TTL less drift allows (%v)",
			until.Sub(before), most.Sub(before))
	}
}

// TestDoneNotDelayedByExtend: an Extend still waiting for its masters when
// the lock's validity ends must not hold back Done: the lock is over at
// Until unless the extend reached a quorum before it.
func TestDoneNotDelayedByExtend(t *testing.T) {
	cs := clients(t, masters.Addrs()[:3])
	nodes := nodesOf(t, cs)
	slow := make([]*faultNode, len(nodes))
	for i := range nodes {
		slow[i] = wrap(nodes[i])
		nodes[i] = slow[i]
	}
	const ttl = time.Second
	r := newRedlock(t, nodes, WithNodeTimeout(900*time.Millisecond))
	ctx := context.Background()
	l, err := r.TryLock(ctx, testKey(t), WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	until := l.Until()
	for _, f := range slow {
		f.extendDelay.Store(int64(5 * time.Second))
	}
	time.Sleep(time.Until(until.Add(-100 * time.Millisecond)))
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, ttl) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Done not closed 3s after Until")
	}
	if late := time.Since(until); late > 300*time.Millisecond {
		t.Errorf("Done closed %v after Until; an Extend in flight held it back", late.Round(time.Millisecond))
	}
	if err := <-extended; err == nil {
		t.Error("Extend that reached no master succeeded")
	}
	l.Unlock(ctx)
}

// TestExtendReturnsByUntil: an Extend whose masters do not answer returns
// by Until, however long the node timeout: a quorum after that is of no use.
func TestExtendReturnsByUntil(t *testing.T) {
	nodes := nodesOf(t, clients(t, masters.Addrs()[:3]))
	for _, f := range wrapAll(nodes) {
		f.extendDelay.Store(int64(5 * time.Second))
	}
	r := newRedlock(t, nodes, WithNodeTimeout(2*time.Second))
	l := held(t, r, WithTTL(time.Second))
	until := l.Until()
	time.Sleep(time.Until(until.Add(-300 * time.Millisecond)))
	if err := l.Extend(context.Background(), time.Second); err == nil {
		t.Fatal("Extend succeeded with no master answering")
	}
	if late := time.Since(until); late > 150*time.Millisecond {
		t.Fatalf("Extend returned %v after Until", late.Round(time.Millisecond))
	}
}

// TestExtendStraggler: an extend request that timed out on a master (go-redis
// then drops the connection) may land later, after a later extend sent on a
// new connection. When it asks for a shorter TTL, it cuts the key short on
// that master; if that master counted in the later extend's quorum, Until
// must already allow for it. In "failed", an Extend to a short TTL times
// out on two of three masters and then a longer one succeeds on all three;
// in "succeeded", the short one succeeds on two masters and times out on
// the third, and the longer one succeeds on that third master and another.
// Either way the short requests land last; the keys on a quorum must then
// still outlive Until, and no other client may take the lock before Until.
func TestExtendStraggler(t *testing.T) {
	// A node timeout a loaded machine does not exceed by accident; the
	// straggler lands well after the long extend, which goes out when the
	// short one's deadline passed.
	const ttl, shortTTL, longTTL = 4 * time.Second, 2 * time.Second, 8 * time.Second
	const nodeTimeout, strayDelay = 600 * time.Millisecond, 1500 * time.Millisecond
	for _, tc := range []struct {
		name         string
		stray, fails []int // the masters where the short extend straggles, where the long one fails
	}{
		{"failed", []int{0, 1}, nil},
		{"succeeded", []int{2}, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := clients(t, masters.Addrs()[:3])
			nodes := nodesOf(t, cs)
			fs := wrapAll(nodes)
			for _, i := range tc.stray {
				fs[i].strayTTL.Store(int64(shortTTL))
				fs[i].strayDelay.Store(int64(strayDelay))
			}
			for _, i := range tc.fails {
				fs[i].failTTL.Store(int64(longTTL))
			}
			r := newRedlock(t, nodes, WithNodeTimeout(nodeTimeout))
			other := newRedlock(t, nodesOf(t, cs), WithNodeTimeout(nodeTimeout))
			ctx := context.Background()
			key := testKey(t)
			l, err := r.TryLock(ctx, key, WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			shortErr := l.Extend(ctx, shortTTL)
			if got, want := shortErr == nil, tc.name == "succeeded"; got != want {
				t.Fatalf("Extend(%v) = %v; the test needs it to succeed: %v", shortTTL, shortErr, want)
			}
			if err := l.Extend(ctx, longTTL); err != nil {
				t.Fatalf("Extend(%v) after Extend(%v) (%v): %v", longTTL, shortTTL, shortErr, err)
			}
			for fs[0].strayed.Load()+fs[1].strayed.Load()+fs[2].strayed.Load() < int64(len(tc.stray)) {
				time.Sleep(5 * time.Millisecond)
			}
			// Every straggler landed: the keys on a quorum must outlive Until.
			until := l.Until()
			var outlive []int
			for i, c := range cs {
				pttl, err := c.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatalf("PTTL on master %d: %v", i, err)
				}
				if expiry := time.Now().Add(pttl + time.Millisecond); pttl > 0 && !expiry.Before(until) {
					outlive = append(outlive, i)
				}
			}
			if len(outlive) < 2 {
				t.Errorf("Until is %v ahead, but only masters %v keep the key that long: no quorum",
					time.Until(until).Round(time.Millisecond), outlive)
			}
			// Another client takes the lock as soon as the masters let it.
			var got *Lock
			for deadline := time.Now().Add(shortTTL + 2*time.Second); got == nil && time.Now().Before(deadline); {
				if got, _ = other.TryLock(ctx, key, WithTTL(ttl)); got == nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if got != nil {
				at := time.Now()
				defer got.Unlock(ctx)
				if until := l.Until(); until.After(at) {
					t.Errorf("another client took the lock and the first holder's Until is still %v ahead: two holders",
						until.Sub(at).Round(time.Millisecond))
				}
			}
			l.Unlock(ctx)
		})
	}
}
