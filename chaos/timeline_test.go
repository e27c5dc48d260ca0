package chaos

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// The timeline of a history with an overlap is well-formed SVG, has a row
// per master faulted and per client, marks the overlap in red in both
// panels, and the rejected and unsafe writes apart.
func TestTimeline(t *testing.T) {
	h := pausedHolder(false)
	h.Acquires = append(h.Acquires, held(2, "k", 130*ms, 230*ms, 180*ms, 0)) // overlaps #1
	h.Writes = append(h.Writes, Write{Seq: 4, Holder: 1, Key: "k", At: 140 * ms, Token: 0, Accepted: false})
	h.Faults = []Fault{{Kind: "kill", Nodes: []int{3}, At: 20 * ms, End: 60 * ms}}
	s := ScenarioReport{Name: "x", Findings: Check(h), History: h, Faults: h.Faults, Took: 250 * ms}
	s.Outcome = summary(s.Findings)
	var b strings.Builder
	if err := s.WriteTimeline(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{"master 3", "client 0", "client 1", "client 2", "first overlap: k held by #1 and #2"} {
		if !strings.Contains(svg, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	if n := strings.Count(svg, `fill="#e00"`); n != 2*len(s.Overlaps) {
		t.Errorf("%d red overlap bands, want %d (each overlap in both panels)", n, 2*len(s.Overlaps))
	}
	if !strings.Contains(svg, "rejected</title>") || !strings.Contains(svg, "accepted: late or stale</title>") {
		t.Error("timeline does not tell rejected and unsafe writes apart")
	}
}
