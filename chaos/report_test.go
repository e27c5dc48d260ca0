package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// testReport is a report with the longest scenario name, a soak's counts
// of acquire calls and three-digit counts of writes: what the table's
// width must allow for.
func testReport() Report {
	longest := slices.MaxFunc(ScenarioNames(), func(a, b string) int { return len(a) - len(b) })
	return Report{Backend: BackendProcess, Nodes: 5, Clients: 8, Keys: 1, TTL: time.Second, Duration: 10 * time.Second,
		Scenarios: []ScenarioReport{
			{Name: longest, Outcome: "UNSAFE: 3 late writes accepted, 14 stale writes accepted; fencing rejected 132 writes",
				Findings: Findings{Attempts: 10234, Acquired: 10001, LateAccepted: 3, LateRejected: 12, StaleAccepted: 14, StaleRejected: 120,
					P50: 45 * time.Millisecond, P99: 123 * time.Millisecond, MaxGap: 1500 * time.Millisecond},
				Faults: []Fault{
					{Kind: "kill", Nodes: []int{3, 4}, At: 500 * time.Millisecond, End: 2 * time.Second},
					{Kind: "holder-kill", Note: "holder #3: redlock exec (pid 30875) and its writer (pid 30974) SIGKILLed, and a note long enough to wrap at the table's width", At: 600 * time.Millisecond, End: 600 * time.Millisecond},
				},
				Expected: false, Expect: []string{"overlaps"}, Failed: []string{"overlaps"}},
			{Name: "minority-kill", Outcome: "safe", Findings: Findings{Attempts: 828, Acquired: 827}, Expected: true},
		}}
}

// TestTableFits120Columns: the default table and the text around it keep
// to 120 columns, list the faults, and say what the counts count.
func TestTableFits120Columns(t *testing.T) {
	var b strings.Builder
	if err := testReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	for _, line := range strings.Split(out, "\n") {
		if len(line) > tableWidth {
			t.Errorf("line of %d columns: %q", len(line), line)
		}
	}
	for _, want := range []string{
		"1 key,", "827/828", "ACQUIRED: acquire calls that got the lock / acquire calls made",
		"Faults (masters by index", "kill masters 3,4 from 500ms to 2s", "holder-kill at 600ms: holder #3", "--wide",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(out, "1 keys") || strings.Contains(out, "PORCUPINE  ") {
		t.Errorf("table says 1 keys, or has the wide table's columns")
	}
}

// TestWideTable: --wide has every column and the outcome in words.
func TestWideTable(t *testing.T) {
	var b strings.Builder
	if err := testReport().WriteWideTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PORCUPINE", "p99", "GAP", "fencing rejected 132 writes", "Faults (masters"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("wide table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestProgressLine: a finished scenario's line says what its counts count,
// in the singular for one.
func TestProgressLine(t *testing.T) {
	s := testReport().Scenarios[1]
	s.Faults = []Fault{{Kind: "kill", Nodes: []int{1}, End: -1}}
	line := s.progressLine(2, 2)
	if want := "[2/2] minority-kill: expected (safe); 827 of 828 acquire calls got the lock, 1 fault,"; !strings.HasPrefix(line, want) {
		t.Errorf("progress line %q; want it to start %q", line, want)
	}
	if got, want := s.Faults[0].String(), "kill master 1 from 0s to the end"; got != want {
		t.Errorf("fault %q; want %q", got, want)
	}
}
