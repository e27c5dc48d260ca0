package chaos

import (
	"testing"
	"time"
)

const ms = time.Millisecond

// held is a successful acquire of key k by client c.
func held(id int, k string, acquired, until, released time.Duration, token uint64) Acquire {
	return Acquire{ID: id, Client: id, Key: k, OK: true, Start: acquired - ms, Acquired: acquired, Until: until, Released: released, Lost: -1, Token: token}
}

func TestCheckFindsOverlap(t *testing.T) {
	h := History{Acquires: []Acquire{
		held(0, "k", 0, 100*ms, 90*ms, 0),
		held(1, "k", 50*ms, 150*ms, 140*ms, 0),
	}}
	f := Check(h)
	if len(f.Overlaps) != 1 {
		t.Fatalf("overlaps = %v, want one", f.Overlaps)
	}
	if o := f.Overlaps[0]; o.First != 0 || o.Second != 1 || o.From != 50*ms || o.To != 90*ms {
		t.Fatalf("overlap = %+v, want #0 and #1 from 50ms to 90ms", o)
	}
}

func TestCheckTouchingWindowsDoNotOverlap(t *testing.T) {
	h := History{Acquires: []Acquire{
		held(0, "k", 0, 100*ms, 40*ms, 0),           // released at 40ms
		held(1, "k", 40*ms, 140*ms, 120*ms, 0),      // acquired at 40ms: touches
		held(2, "k", 140*ms, 240*ms, -1, 0),         // never released; #1's validity ends at 140ms
		held(3, "other", 50*ms, 150*ms, -1, 0),      // another key
		{ID: 4, Key: "k", Start: 10 * ms, Err: "x"}, // a failed acquire holds nothing
	}}
	if f := Check(h); len(f.Overlaps) != 0 {
		t.Fatalf("overlaps = %v, want none", f.Overlaps)
	}
}

func TestCheckReleaseEndsTheWindowBeforeValidity(t *testing.T) {
	// #0 released at 30ms, long before its validity ended at 100ms; #1
	// acquired at 60ms. Had the checker used Until alone it would report an
	// overlap.
	h := History{Acquires: []Acquire{
		held(0, "k", 0, 100*ms, 30*ms, 0),
		held(1, "k", 60*ms, 160*ms, 90*ms, 0),
	}}
	if f := Check(h); len(f.Overlaps) != 0 {
		t.Fatalf("overlaps = %v, want none", f.Overlaps)
	}
	// The same without the release overlaps.
	h.Acquires[0].Released = -1
	if f := Check(h); len(f.Overlaps) != 1 {
		t.Fatalf("overlaps = %v, want one", f.Overlaps)
	}
}

// pausedHolder is Kleppmann's case: #0 holds k until 100ms, stops, #1 takes
// k at 120ms and writes at 130ms, #0 wakes and writes at 200ms.
func pausedHolder(fenced bool) History {
	var t0, t1 uint64
	if fenced {
		t0, t1 = 10, 11
	}
	return History{
		Acquires: []Acquire{
			held(0, "k", 0, 100*ms, 210*ms, t0),
			held(1, "k", 120*ms, 220*ms, 150*ms, t1),
		},
		Writes: []Write{
			{Seq: 1, Holder: 0, Key: "k", At: 10 * ms, Token: t0, Accepted: true},
			{Seq: 2, Holder: 1, Key: "k", At: 130 * ms, Token: t1, Accepted: true},
			{Seq: 3, Holder: 0, Key: "k", At: 200 * ms, Token: t0, Accepted: !fenced},
		},
	}
}

func TestCheckLateWriteAccepted(t *testing.T) {
	f := Check(pausedHolder(false))
	if len(f.Overlaps) != 0 {
		t.Errorf("overlaps = %v, want none: #0's window ended at its validity", f.Overlaps)
	}
	if f.LateAccepted != 1 || f.LateRejected != 0 {
		t.Errorf("late writes accepted %d, rejected %d; want 1, 0", f.LateAccepted, f.LateRejected)
	}
	if f.StaleAccepted != 1 || f.StaleRejected != 0 {
		t.Errorf("stale writes accepted %d, rejected %d; want 1, 0", f.StaleAccepted, f.StaleRejected)
	}
}

func TestCheckLateWriteRejected(t *testing.T) {
	f := Check(pausedHolder(true))
	if f.LateAccepted != 0 || f.LateRejected != 1 {
		t.Errorf("late writes accepted %d, rejected %d; want 0, 1", f.LateAccepted, f.LateRejected)
	}
	if f.StaleAccepted != 0 || f.StaleRejected != 1 {
		t.Errorf("stale writes accepted %d, rejected %d; want 0, 1", f.StaleAccepted, f.StaleRejected)
	}
}

func TestCheckWriteAtValidityEndIsNotLate(t *testing.T) {
	h := History{
		Acquires: []Acquire{held(0, "k", 0, 100*ms, 110*ms, 0)},
		Writes:   []Write{{Seq: 1, Holder: 0, Key: "k", At: 100 * ms, Accepted: true}},
	}
	if f := Check(h); f.LateAccepted+f.LateRejected != 0 {
		t.Fatalf("a write at the end of validity counted as late: %+v", f)
	}
}

func TestCheckStaleWriteWithinValidity(t *testing.T) {
	// Two holders at once (a master restarted empty): #0's writes after
	// #1's first write are stale although #0's validity has not ended.
	h := History{
		Acquires: []Acquire{
			held(0, "k", 0, 300*ms, 250*ms, 5),
			held(1, "k", 100*ms, 400*ms, 200*ms, 9),
		},
		Writes: []Write{
			{Seq: 1, Holder: 0, Key: "k", At: 50 * ms, Token: 5, Accepted: true},
			{Seq: 2, Holder: 0, Key: "k", At: 110 * ms, Token: 5, Accepted: true}, // before #1 wrote: not stale
			{Seq: 3, Holder: 1, Key: "k", At: 120 * ms, Token: 9, Accepted: true},
			{Seq: 4, Holder: 0, Key: "k", At: 130 * ms, Token: 5, Accepted: false},
			{Seq: 5, Holder: 0, Key: "k", At: 140 * ms, Token: 5, Accepted: true},
		},
	}
	f := Check(h)
	if len(f.Overlaps) != 1 {
		t.Errorf("overlaps = %v, want one", f.Overlaps)
	}
	if f.StaleAccepted != 1 || f.StaleRejected != 1 {
		t.Errorf("stale writes accepted %d, rejected %d; want 1, 1", f.StaleAccepted, f.StaleRejected)
	}
	if f.LateAccepted+f.LateRejected != 0 {
		t.Errorf("late writes %d, want none", f.LateAccepted+f.LateRejected)
	}
}

func TestCheckAvailabilityDuringFaults(t *testing.T) {
	h := History{
		Acquires: []Acquire{
			{ID: 0, Key: "k", Start: 0, OK: true, Acquired: 5 * ms, Until: 50 * ms, Released: 10 * ms, Lost: -1},
			{ID: 1, Key: "k", Start: 100 * ms, OK: true, Acquired: 120 * ms, Until: 150 * ms, Released: 130 * ms, Lost: -1},
			{ID: 2, Key: "k", Start: 140 * ms, Err: "no quorum"},
			{ID: 3, Key: "k", Start: 300 * ms, Err: "no quorum"},
		},
		Faults: []Fault{
			{Kind: "kill", Nodes: []int{1}, At: 90 * ms, End: 200 * ms},
			{Kind: "holder-pause", At: 250 * ms, End: 400 * ms}, // not a node fault
		},
	}
	f := Check(h)
	if f.FaultAttempts != 2 || f.FaultAcquired != 1 || f.Availability() != 0.5 {
		t.Fatalf("during faults: %d of %d, availability %v; want 1 of 2, 0.5", f.FaultAcquired, f.FaultAttempts, f.Availability())
	}
	if f.MaxGap != 80*ms { // from #1 acquired at 120ms to the end of the kill at 200ms
		t.Errorf("max gap %v, want 80ms", f.MaxGap)
	}
	if f.P50 != 20*ms || f.P99 != 20*ms {
		t.Fatalf("p50 %v p99 %v, want 20ms", f.P50, f.P99)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*ms)
	}
	if p := percentile(ds, 50); p != 50*ms {
		t.Errorf("p50 = %v, want 50ms", p)
	}
	if p := percentile(ds, 99); p != 99*ms {
		t.Errorf("p99 = %v, want 99ms", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %v, want 0", p)
	}
}

func TestFenceGuard(t *testing.T) {
	g := newFenceGuard()
	for _, c := range []struct {
		key   string
		token uint64
		want  bool
	}{
		{"k", 5, true}, {"k", 5, true}, {"k", 7, true}, {"k", 6, false}, {"j", 1, true}, {"k", 8, true},
	} {
		if got := g.admit(c.key, c.token); got != c.want {
			t.Errorf("admit(%s, %d) = %v, want %v", c.key, c.token, got, c.want)
		}
	}
}

// An extended holder's window ends at its renewed Until, or at the loss of
// its lock when that comes first; a write after the loss is late.
func TestCheckExtendedWindowEndsAtRenewedUntilOrLoss(t *testing.T) {
	renewed := held(0, "k", 0, 300*ms, 290*ms, 0) // Until renewed from 100ms to 300ms
	renewed.Extend, renewed.Renewals = extendAuto, 2
	h := History{
		Acquires: []Acquire{renewed, held(1, "k", 200*ms, 400*ms, 350*ms, 0)},
		Writes:   []Write{{Seq: 1, Holder: 0, Key: "k", At: 250 * ms, Accepted: true}},
		Faults:   []Fault{{Kind: "kill", Nodes: []int{4}, At: 50 * ms, End: 150 * ms}},
	}
	f := Check(h)
	if len(f.Overlaps) != 1 || f.LateAccepted != 0 {
		t.Fatalf("renewed to 300ms: overlaps %v, late %d; want one overlap from 200ms, no late write", f.Overlaps, f.LateAccepted)
	}
	if f.Extended != 1 || f.Renewals != 2 || f.RenewedInFault != 1 || f.Lost != 0 {
		t.Fatalf("extended %d, renewals %d, renewed in fault %d, lost %d; want 1, 2, 1, 0", f.Extended, f.Renewals, f.RenewedInFault, f.Lost)
	}

	h.Acquires[0].Lost = 180 * ms // Done closed at 180ms: the window ends there
	f = Check(h)
	if len(f.Overlaps) != 0 {
		t.Fatalf("lost at 180ms: overlaps %v, want none", f.Overlaps)
	}
	if f.LateAccepted != 1 || f.Lost != 1 {
		t.Fatalf("lost at 180ms: late accepted %d, lost %d; want the write at 250ms late, one lost", f.LateAccepted, f.Lost)
	}
}
