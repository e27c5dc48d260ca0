package chaos

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// Porcupine reaches the same verdict as Check on the hand-made histories of
// the checker's tests.
func TestCrossCheckAgreesWithCheck(t *testing.T) {
	for name, h := range map[string]History{
		"overlap": {Acquires: []Acquire{
			held(0, "k", 0, 100*ms, 90*ms, 0),
			held(1, "k", 50*ms, 150*ms, 140*ms, 0),
		}},
		"touching": {Acquires: []Acquire{
			held(0, "k", 0, 100*ms, 40*ms, 0),
			held(1, "k", 40*ms, 140*ms, 120*ms, 0),
			held(2, "k", 140*ms, 240*ms, -1, 0),
			held(3, "other", 50*ms, 150*ms, -1, 0),
			{ID: 4, Key: "k", Start: 10 * ms, Err: "x"},
		}},
		"paused holder":        pausedHolder(false),
		"paused holder fenced": pausedHolder(true),
	} {
		f := Check(h)
		c := crossCheck(h, f, true)
		if len(c.Disagree) > 0 {
			t.Errorf("%s: %v", name, c.Disagree)
		}
		if want := len(f.Overlaps) > 0; (c.Lock == porcupine.Illegal) != want {
			t.Errorf("%s: porcupine says %s, overlaps %v", name, c.Lock, f.Overlaps)
		}
	}
}

// A resource that accepts a write with a token below one it accepted is
// found by both, and so is one that rejects a write it should accept.
func TestCrossCheckFenceViolation(t *testing.T) {
	h := pausedHolder(true)
	h.Writes[2].Accepted = true // token 10 after 11: the fence failed
	f := Check(h)
	c := crossCheck(h, f, true)
	if f.FenceViolations != 1 || c.Register != porcupine.Illegal || len(c.Disagree) > 0 {
		t.Fatalf("accepted a lower token: violations %d, porcupine %s, disagree %v; want 1, Illegal, none", f.FenceViolations, c.Register, c.Disagree)
	}
	h = pausedHolder(true)
	h.Writes[1].Accepted = false // token 11 after 10, rejected; then 10 again, rejected too
	f = Check(h)
	if c = crossCheck(h, f, true); f.FenceViolations != 2 || c.Register != porcupine.Illegal {
		t.Fatalf("rejected a higher token: violations %d, porcupine %s; want 2, Illegal", f.FenceViolations, c.Register)
	}
}

// When the two checkers differ the scenario is told why: here our
// findings are tampered with (an overlap dropped) to stand for a bug in
// our checker.
func TestCrossCheckReportsDisagreement(t *testing.T) {
	h := History{Acquires: []Acquire{
		held(0, "k", 0, 100*ms, 90*ms, 0),
		held(1, "k", 50*ms, 150*ms, 140*ms, 0),
	}}
	f := Check(h)
	f.Overlaps = nil
	c := crossCheck(h, f, false)
	if len(c.Disagree) != 1 || !strings.Contains(c.Disagree[0], "Illegal") {
		t.Fatalf("disagree = %v, want one line naming porcupine's Illegal", c.Disagree)
	}
}
