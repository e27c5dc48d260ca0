package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "no-such"},
		{"--backend", "vm"},
		{"--nodes", "2"},
		{"--adapter", "redigo"},
		{"--bogus"},
		{"extra"},
		{"--png"}, // without --json
	} {
		var out, errOut bytes.Buffer
		if code := Command(t.Context(), args, &out, &errOut); code != 2 {
			t.Errorf("Command(%q) = %d, want 2; stderr: %s", args, code, errOut.String())
		}
		if errOut.Len() == 0 {
			t.Errorf("Command(%q): nothing on stderr", args)
		}
	}
}

func TestCommandRunsAScenario(t *testing.T) {
	file := filepath.Join(t.TempDir(), "report.json")
	var out, errOut bytes.Buffer
	code := Command(t.Context(), []string{"--backend", "process", "--scenario", "minority-partition", "--duration", "1s", "--json", file}, &out, &errOut)
	t.Log("\n" + out.String())
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut.String())
	}
	table := out.String()
	for _, want := range []string{"SCENARIO", "minority-partition", "expected"} {
		if !strings.Contains(table, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The scenario's line comes as it finishes, before the table.
	line, head := strings.Index(table, "[1/1] minority-partition: expected (safe)"), strings.Index(table, "SCENARIO")
	if line < 0 || line > head {
		t.Errorf("no progress line for the finished scenario before the table")
	}
	if !strings.Contains(strings.Join(strings.Fields(table), " "), "; extended ") { // lines wrap at 120 columns
		t.Errorf("the progress line lacks the extending clients' counts")
	}
	if strings.Contains(table, "\r") {
		t.Error("progress lines written to a non-terminal")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if svg, err := os.ReadFile(filepath.Join(filepath.Dir(file), "report.minority-partition.svg")); err != nil || !strings.HasPrefix(string(svg), "<svg") {
		t.Errorf("no timeline next to the JSON report: %v", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json: %v", err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Name != "minority-partition" || len(rep.Scenarios[0].Faults) == 0 {
		t.Fatalf("--json report: %+v", rep)
	}
}

func TestCommandCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out, errOut bytes.Buffer
	if code := Command(ctx, []string{"--backend", "process", "--duration", "1s"}, &out, &errOut); code != 2 {
		t.Fatalf("cancelled: exit %d, want 2; stderr: %s", code, errOut.String())
	}
}

func TestProcessScenariosNeedTheBinary(t *testing.T) {
	_, err := Run(t.Context(), Config{Backend: BackendProcess, Scenarios: []string{"process-holder-kill"}})
	if err == nil || !strings.Contains(err.Error(), "Config.Redlock") {
		t.Fatalf("Run without Config.Redlock: %v, want an error naming it", err)
	}
}

func TestWriterOutsideExec(t *testing.T) {
	t.Setenv("REDLOCK_KEY", "")
	var errOut bytes.Buffer
	if code := Command(t.Context(), []string{"writer", "--resource", "http://127.0.0.1:1"}, &bytes.Buffer{}, &errOut); code != 1 {
		t.Fatalf("writer without REDLOCK_KEY: exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "redlock exec --fencing") {
		t.Fatalf("stderr %q does not say to run it under redlock exec --fencing", errOut.String())
	}
}

// A soak runs a safe scenario past its duration until it has its
// acquisitions; it refuses a scenario that must find unsafety.
func TestCommandSoak(t *testing.T) {
	file := filepath.Join(t.TempDir(), "soak.json")
	var out, errOut bytes.Buffer
	code := Command(t.Context(), []string{"--soak", "--soak-min", "600", "--backend", "process", "--scenario", "minority-kill",
		"--duration", "1s", "--clients", "4", "--json", file}, &out, &errOut)
	t.Log("\n" + out.String())
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Acquired < 600 {
		t.Fatalf("soak: %d scenarios, acquired %d; want 1 with at least 600", len(rep.Scenarios), rep.Scenarios[0].Acquired)
	}
	if s := rep.Scenarios[0]; len(s.Faults) < 2 {
		t.Errorf("soak of %v: %d faults; the script should have repeated its fault", s.Took, len(s.Faults))
	}

	errOut.Reset()
	if code := Command(t.Context(), []string{"--soak", "--soak-min", "100", "--backend", "process", "--scenario", "holder-pause"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "does not soak") {
		t.Fatalf("soak of holder-pause: exit %d, stderr %q; want 2 and why", code, errOut.String())
	}
}

func TestSafeScenarioNames(t *testing.T) {
	got := strings.Join(SafeScenarioNames(), ",")
	want := "minority-kill,minority-kill-mid-acquire,minority-pause,minority-partition,shard-kill,shard-pause,reshard,subscriptions-drop,majority-kill," +
		"restart-no-persistence-immediate-gated,restart-no-persistence-immediate-fenced-gated,failover-without-key-confirmed," +
		"process-minority-kill,process-holder-kill,rw-minority-kill,rw-minority-pause,rw-minority-partition," +
		"rw-restart-no-persistence-immediate-gated,rw-process-minority-kill," +
		"permits-minority-kill,permits-minority-pause,permits-minority-partition,permits-process-minority-kill,restart-delayed"
	if got != want {
		t.Fatalf("SafeScenarioNames() = %s, want %s", got, want)
	}
}
