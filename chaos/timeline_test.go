package chaos

import (
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

// With png, each timeline is also rendered as a PNG next to its SVG. CI
// installs rsvg-convert and sets REDLOCK_REQUIRE_RSVG=1, so that the test
// runs there rather than skipping.
func TestTimelinePNG(t *testing.T) {
	if _, err := exec.LookPath(rsvgConvert); err != nil {
		if os.Getenv("REDLOCK_REQUIRE_RSVG") == "1" {
			t.Fatalf("REDLOCK_REQUIRE_RSVG=1 but: %v", err)
		}
		t.Skipf("no %s (apt-get install librsvg2-bin): %v", rsvgConvert, err)
	}
	h := pausedHolder(false)
	s := ScenarioReport{Name: "x", Findings: Check(h), History: h, Took: 250 * ms}
	s.Outcome = summary(s.Findings)
	file := filepath.Join(t.TempDir(), "r.json")
	if err := writeTimelines(file, Report{Scenarios: []ScenarioReport{s}}, true); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(strings.TrimSuffix(file, ".json") + ".x.png")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 50 {
		t.Fatalf("PNG is %v: too small for a timeline", b)
	}
}
