package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what Run found, scenario by scenario.
type Report struct {
	Backend              string
	Adapter              string // Config.Adapter
	Nodes, Clients, Keys int
	TTL, Duration        time.Duration
	Scenarios            []ScenarioReport
}

// ScenarioReport is one scenario's run: the faults injected, what the
// checker found, and whether that is what the scenario expects.
type ScenarioReport struct {
	Name    string
	About   string
	Fencing bool
	Took    time.Duration

	Faults []Fault
	Findings
	CrossCheck CrossCheck     // porcupine's verdict on the same history
	Leaked     int            // lock keys left on untouched masters after every holder released
	ByAdapter  map[string]int `json:",omitempty"` // locks acquired, by the holder's adapter (AdapterMixed runs, but for client processes)
	LeakedKeys []string       `json:",omitempty"` // which, where, and how long they still had to live

	Outcome  string   // what happened, in a few words
	Expect   []string // what the scenario must show
	Expected bool     // every expectation held
	Failed   []string `json:",omitempty"` // the expectations that did not
	Err      string   `json:",omitempty"` // the scenario could not run to the end

	History History // every acquire, write and fault, for --json
}

// Unexpected returns the names of the scenarios whose verdict was not the
// expected one.
func (r Report) Unexpected() []string {
	var out []string
	for _, s := range r.Scenarios {
		if !s.Expected {
			out = append(out, s.Name)
		}
	}
	return out
}

// Verdict is "expected" or "UNEXPECTED".
func (s ScenarioReport) Verdict() string {
	if s.Expected {
		return "expected"
	}
	return "UNEXPECTED"
}

// WriteTable writes one row per scenario, then the details of what was
// unsafe or unexpected.
func (r Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "backend %s: %d masters, %d clients (%s), %d keys, TTL %v, %v per scenario\n\n",
		r.Backend, r.Nodes, r.Clients, r.adapter(), r.Keys, r.TTL, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tFAULTS\tACQUIRED\tAVAIL\tGAP\tEXTENDED\tOVERLAPS\tLATE acc/rej\tSTALE acc/rej\tp50\tp99\tLEAKED\tPORCUPINE\tOUTCOME\tVERDICT")
	for _, s := range r.Scenarios {
		fmt.Fprintf(tw, "%s\t%d\t%d/%d\t%.0f%%\t%v\t%s\t%d\t%d/%d\t%d/%d\t%v\t%v\t%d\t%s\t%s\t%s\n",
			s.Name, len(s.Faults), s.Acquired, s.Attempts, 100*s.Availability(), roundLatency(s.MaxGap), s.extended(), len(s.Overlaps),
			s.LateAccepted, s.LateRejected, s.StaleAccepted, s.StaleRejected,
			roundLatency(s.P50), roundLatency(s.P99), s.Leaked, s.porcupine(), s.Outcome, s.Verdict())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Scenarios {
		if len(s.Overlaps) > 0 {
			fmt.Fprintf(w, "\n%s: %s", s.Name, s.Overlaps[0])
			if n := len(s.Overlaps) - 1; n > 0 {
				fmt.Fprintf(w, " (and %d more)", n)
			}
			fmt.Fprintln(w)
		}
		for _, k := range s.LeakedKeys {
			fmt.Fprintf(w, "\n%s: left behind on %s\n", s.Name, k)
		}
		if !s.Expected {
			fmt.Fprintf(w, "\n%s: UNEXPECTED; it must show: %s\n  not shown: %s\n",
				s.Name, strings.Join(s.Expect, "; "), strings.Join(s.Failed, "; "))
		}
	}
	fmt.Fprintln(w, "\nAVAIL (acquire calls that got the lock within a TTL), p50 and p99 are over the calls started while masters")
	fmt.Fprintln(w, "were faulted (the whole run when none were); GAP: the longest stretch of such a fault with no acquisition at all;")
	fmt.Fprintln(w, "EXTENDED: holdings of the clients that renew (auto-extend, Extend), renewals, locks lost (Done before Unlock);")
	fmt.Fprintln(w, "LATE: writes after the holder's validity (as renewed) ended or its lock was lost; STALE: writes after a newer")
	fmt.Fprintln(w, "holder of the key had written. PORCUPINE: an independent check of the same history for linearizability")
	fmt.Fprintln(w, "against a sequential lock (then, when fenced, a fenced register); it must agree with OVERLAPS (and the fence).")
	return nil
}

// progressLine is the line printed as the scenario finishes: its verdict
// and counts.
func (s ScenarioReport) progressLine(index, total int) string {
	line := fmt.Sprintf("[%d/%d] %s: %s (%s); %d/%d acquired, %d faults, %d overlaps, %v",
		index, total, s.Name, s.Verdict(), s.Outcome, s.Acquired, s.Attempts, len(s.Faults), len(s.Overlaps), s.Took.Round(100*time.Millisecond))
	if s.Extended > 0 {
		line += fmt.Sprintf("; extended %d, renewals %d, lost %d", s.Extended, s.Renewals, s.Lost)
	}
	if len(s.ByAdapter) > 0 {
		line += fmt.Sprintf("; acquired by go-redis %d, rueidis %d", s.ByAdapter[AdapterGoRedis], s.ByAdapter[AdapterRueidis])
	}
	return line
}

// porcupine is the PORCUPINE column: its verdict on the lock model, then on
// the fenced register for fenced runs.
func (s ScenarioReport) porcupine() string {
	v := string(s.CrossCheck.Lock)
	if s.CrossCheck.Register != "" {
		v += "/" + string(s.CrossCheck.Register)
	}
	return v
}

// extended is the EXTENDED column: holdings/renewals/lost, or "-".
func (s ScenarioReport) extended() string {
	if s.Extended == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", s.Extended, s.Renewals, s.Lost)
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// adapter says what the clients reach the masters through.
func (r Report) adapter() string {
	switch r.Adapter {
	case AdapterMixed:
		return "mixed: go-redis and rueidis in turn"
	case "":
		return AdapterGoRedis
	}
	return r.Adapter
}
