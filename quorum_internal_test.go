package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// These tests move the validity clock forward while a request is in flight
// (jumpClock, faultNode.onSend): each phase must measure its elapsed time
// from before its requests were sent, take the drift allowance off, and
// refuse a quorum that leaves too little validity. They are the second,
// independent guard of what TestValidityShrinks checks for acquires, and
// the first for Extend and renewals.

// sendTime records the validity clock's reading as the first request of op
// is sent, before the jump; jump then moves the clock by d.
type sendTime struct {
	once sync.Once
	at   time.Time
}

func (s *sendTime) hook(c *jumpClock, op reqKind, d time.Duration) func(*request) {
	return func(q *request) {
		if q.Op == op {
			s.once.Do(func() {
				s.at = c.Now()
				c.jump(d)
			})
		}
	}
}

// jumpRedlock returns a Redlock over three masters whose validity clock is
// c, and whose masters run hook as each request is sent.
func jumpRedlock(t *testing.T, c *jumpClock, hook func(*request), opts ...Option) *Redlock {
	t.Helper()
	nodes := nodesOf(t, clients(t, masters.Addrs()[:3]))
	for _, f := range wrapAll(nodes) {
		f.onSend(hook)
	}
	r := newRedlock(t, nodes, opts...)
	r.clock = c
	return r
}

// held takes a lock on a fresh key with opts; it is unlocked when the test
// ends.
func held(t *testing.T, r *Redlock, opts ...Option) *Lock {
	t.Helper()
	l, err := r.TryLock(context.Background(), testKey(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unlock(context.Background()) })
	return l
}

func drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*DefaultDriftFactor) + driftFloor
}

// TestAcquireUntilFromItsStart: Until is the acquire's start plus the TTL
// less the drift allowance, whatever time the replies took.
func TestAcquireUntilFromItsStart(t *testing.T) {
	const ttl = 10 * time.Second
	c := &jumpClock{}
	var sent sendTime
	r := jumpRedlock(t, c, sent.hook(c, reqAcquire, 2*time.Second), WithTTL(ttl))
	before := c.Now()
	l, err := r.TryLock(context.Background(), testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	lo, hi := before.Add(ttl-drift(ttl)), sent.at.Add(ttl-drift(ttl))
	if u := l.Until(); u.Before(lo) || u.After(hi) {
		t.Fatalf("Until is %v after the acquire began; want within [%v, %v]: start + TTL − drift, the start taken before the SETs went out",
			u.Sub(before), lo.Sub(before), hi.Sub(before))
	}
}

// TestAcquireMinimumValidity: an acquire whose quorum came with less than
// the minimum validity left fails as late, and is rolled back.
func TestAcquireMinimumValidity(t *testing.T) {
	c := &jumpClock{}
	var sent sendTime
	r := jumpRedlock(t, c, sent.hook(c, reqAcquire, 9500*time.Millisecond), WithTTL(10*time.Second))
	cs := clients(t, masters.Addrs()[:3])
	key := testKey(t)
	_, err := r.TryLock(context.Background(), key)
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.As(err, &qe) || !qe.Late || qe.Validity > time.Second-drift(10*time.Second) {
		t.Fatalf("err %v: want a late QuorumError with under 1s of validity", err)
	}
	settle(r)
	if vs := holders(t, cs, key); count(vs, "") != len(vs) {
		t.Fatalf("late acquire not rolled back: masters hold %q", vs)
	}
}

// TestExtendUntilFromItsStart: Extend moves Until to its own start plus
// the TTL less drift, not to when its replies came.
func TestExtendUntilFromItsStart(t *testing.T) {
	const ttl = 10 * time.Second
	c := &jumpClock{}
	var sent sendTime
	r := jumpRedlock(t, c, sent.hook(c, reqExtend, 3*time.Second), WithTTL(ttl))
	ctx := context.Background()
	l := held(t, r)
	before := c.Now()
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	lo, hi := before.Add(ttl-drift(ttl)), sent.at.Add(ttl-drift(ttl))
	if u := l.Until(); u.Before(lo) || u.After(hi) {
		t.Fatalf("Until is %v after Extend began; want within [%v, %v]", u.Sub(before), lo.Sub(before), hi.Sub(before))
	}
}

// TestExtendMinimumValidity: an Extend whose quorum came with less than the
// minimum validity left fails as late and leaves Until where it was.
func TestExtendMinimumValidity(t *testing.T) {
	const ttl = 10 * time.Second
	c := &jumpClock{}
	var sent sendTime
	// 5.5 s of a 10 s TTL pass during the extend: 4.4 s left, under 5 s.
	r := jumpRedlock(t, c, sent.hook(c, reqExtend, 5500*time.Millisecond), WithTTL(ttl), WithMinValidity(5*time.Second))
	l := held(t, r)
	until := l.Until()
	err := l.Extend(context.Background(), ttl)
	var qe *QuorumError
	if !errors.As(err, &qe) || !qe.Late || qe.Succeeded < qe.Quorum {
		t.Fatalf("Extend: %v, want a late QuorumError after a quorum extended", err)
	}
	if u := l.Until(); !u.Equal(until) {
		t.Errorf("a late Extend moved Until by %v", u.Sub(until))
	}
}

// TestRenewalUntilFromItsStart: a renewal moves Until to its own start
// plus the TTL less drift.
func TestRenewalUntilFromItsStart(t *testing.T) {
	const ttl = 900 * time.Millisecond
	c := &jumpClock{}
	var sent sendTime
	r := jumpRedlock(t, c, sent.hook(c, reqExtend, 200*time.Millisecond), WithTTL(ttl))
	l := held(t, r, WithAutoExtend())
	first := l.Until()
	deadline := time.Now().Add(2 * time.Second)
	for l.Until().Equal(first) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	u := l.Until()
	if u.Equal(first) {
		t.Fatal("no renewal within 2s")
	}
	if hi := sent.at.Add(ttl - drift(ttl)); u.After(hi) {
		t.Fatalf("after the renewal Until is %v past the renewal's start + TTL − drift: elapsed counted from the replies", u.Sub(hi))
	}
}

// TestRenewalMinimumValidity: a renewal whose quorum came with less than the
// minimum validity left does not count; when no retry can finish within the
// validity, the lock is lost.
func TestRenewalMinimumValidity(t *testing.T) {
	const ttl = 3 * time.Second
	c := &jumpClock{}
	var sent sendTime
	// The renewal starts 1 s in, with Until 1.97 s ahead; 1.8 s pass while
	// it is in flight: 1.17 s of validity left, under the 1.5 s minimum,
	// and a retry after 100 ms could not end within the 100 ms node timeout
	// before Until.
	r := jumpRedlock(t, c, sent.hook(c, reqExtend, 1800*time.Millisecond),
		WithTTL(ttl), WithMinValidity(1500*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	l := held(t, r, WithAutoExtend())
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatalf("lock not lost after a renewal that left %v of validity", ttl-1800*time.Millisecond-drift(ttl))
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
}

// TestRefusedMajorityFailsAtOnce: once a majority refused, the attempt
// fails without waiting for the masters that have not answered.
func TestRefusedMajorityFailsAtOnce(t *testing.T) {
	cs := clients(t, masters.Addrs())
	nodes := nodesOf(t, cs)
	fs := wrapAll(nodes)
	for _, f := range fs[3:] {
		f.acquireDelay.Store(int64(time.Minute)) // silent until the attempt's deadline
	}
	r := newRedlock(t, nodes, WithTTL(4*time.Second), WithNodeTimeout(time.Minute))
	key := testKey(t)
	occupy(t, cs, key, 0, 1, 2)
	done := make(chan error, 1)
	go func() {
		_, err := r.TryLock(context.Background(), key)
		done <- err
	}()
	select {
	case err := <-done:
		var qe *QuorumError
		if !errors.As(err, &qe) || qe.Refused != 3 || qe.Succeeded != 0 {
			t.Fatalf("err %v: want 3 refusals", err)
		}
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("3 of 5 masters refused and TryLock still waits for the other two")
	}
}

// TestExtendAfterUntil: an Extend whose quorum came after the lock's
// validity ended fails with ErrNotHeld and leaves Until alone.
func TestExtendAfterUntil(t *testing.T) {
	c := &jumpClock{}
	r := jumpRedlock(t, c, jumpOnce(c, reqExtend, 2*time.Second))
	l := held(t, r, WithTTL(time.Second))
	until := l.Until()
	if err := l.Extend(context.Background(), 10*time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend whose quorum came 1s after Until: %v, want ErrNotHeld", err)
	}
	if u := l.Until(); u.After(until) {
		t.Fatalf("Until moved by %v", u.Sub(until))
	}
}
