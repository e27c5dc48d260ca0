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
	Leaked     int            // lock keys left on untouched masters after every holder released (reshard: their companions too, see env.leaked)
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

// WriteTable writes one row per scenario, in at most 120 columns (the
// scenarios' names permitting), then the details of what was unsafe or
// unexpected, and the faults injected. [Report.WriteWideTable] has every
// column.
func (r Report) WriteTable(w io.Writer) error { return r.writeTable(w, false) }

// WriteWideTable is [Report.WriteTable] with every column: also the
// longest gap in acquisitions, the extending clients' counts, latencies,
// porcupine's verdict and the outcome in words.
func (r Report) WriteWideTable(w io.Writer) error { return r.writeTable(w, true) }

func (r Report) writeTable(w io.Writer, wide bool) error {
	fmt.Fprintf(w, "backend %s: %s, %s (%s), %s, TTL %v, %v per scenario\n\n",
		r.Backend, plural(r.Nodes, "master"), plural(r.Clients, "client"), r.adapter(), plural(r.Keys, "key"), r.TTL, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "SCENARIO\tFAULTS\tACQUIRED\tAVAIL\tGAP\tEXTENDED\tOVERLAPS\tLATE acc/rej\tSTALE acc/rej\tp50\tp99\tLEAKED\tPORCUPINE\tOUTCOME\tVERDICT")
	} else {
		fmt.Fprintln(tw, "SCENARIO\tACQUIRED\tAVAIL\tOVERLAPS\tLATE\tSTALE\tLEAKED\tOUTCOME\tVERDICT")
	}
	for _, s := range r.Scenarios {
		if wide {
			fmt.Fprintf(tw, "%s\t%d\t%d/%d\t%.0f%%\t%v\t%s\t%d\t%d/%d\t%d/%d\t%v\t%v\t%d\t%s\t%s\t%s\n",
				s.Name, len(s.Faults), s.Acquired, s.Attempts, 100*s.Availability(), roundLatency(s.MaxGap), s.extended(), len(s.Overlaps),
				s.LateAccepted, s.LateRejected, s.StaleAccepted, s.StaleRejected,
				roundLatency(s.P50), roundLatency(s.P99), s.Leaked, s.porcupine(), s.Outcome, s.Verdict())
			continue
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%.0f%%\t%d\t%d/%d\t%d/%d\t%d\t%s\t%s\n",
			s.Name, s.Acquired, s.Attempts, 100*s.Availability(), len(s.Overlaps),
			s.LateAccepted, s.LateRejected, s.StaleAccepted, s.StaleRejected, s.Leaked, s.safety(), s.Verdict())
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
	r.writeFaults(w)
	fmt.Fprintln(w)
	if wide {
		writeWrapped(w, "", "", wideTableLegend)
	} else {
		writeWrapped(w, "", "", tableLegend)
	}
	return nil
}

// The tables' legends: what each column counts.
const (
	acquiredLegend = "ACQUIRED: acquire calls that got the lock / acquire calls made, by every client on every key. " +
		"AVAIL: the share of the calls started while masters were faulted (the whole run when none were) that got the lock within a TTL. "
	tableLegend = acquiredLegend +
		"OVERLAPS: two holders of a key at once. LATE: writes after the holder's validity (as renewed) ended or its lock was lost; " +
		"STALE: writes after a newer holder of the key had written; each as accepted/rejected by the resource. " +
		"LEAKED: lock keys left on masters after every holder released (reshard: also hand-off queues, and any key on a shard that does not serve its slot). OUTCOME: UNSAFE when an overlap, a late or a stale write was accepted. " +
		"VERDICT: whether that is what the scenario must show, porcupine's check of the same history included. " +
		"--wide adds GAP, EXTENDED, p50, p99, PORCUPINE and the outcome in words."
	wideTableLegend = acquiredLegend +
		"p50 and p99: the latency of those calls. GAP: the longest stretch of such a fault with no acquisition at all. " +
		"EXTENDED: holdings of the clients that renew (auto-extend, Extend), renewals, locks lost (Done before Unlock). " +
		"LATE: writes after the holder's validity (as renewed) ended or its lock was lost; STALE: writes after a newer holder of the key had written. " +
		"PORCUPINE: an independent check of the same history for linearizability against a sequential lock (then, when fenced, a fenced register); " +
		"it must agree with OVERLAPS (and the fence)."
)

// tableWidth is the width the table's lines keep to, and the text around
// it wraps at.
const tableWidth = 120

// maxFaultsListed is how many faults per scenario the table lists; --json
// has them all.
const maxFaultsListed = 8

// writeFaults lists each scenario's faults, one line each.
func (r Report) writeFaults(w io.Writer) {
	listed := false
	for _, s := range r.Scenarios {
		listed = listed || len(s.Faults) > 0
	}
	if !listed {
		return
	}
	fmt.Fprintln(w, "\nFaults (masters by index, from 0; times from the scenario's start):")
	for _, s := range r.Scenarios {
		for i, f := range s.Faults {
			if i == maxFaultsListed {
				writeWrapped(w, "  ", "    ", fmt.Sprintf("%s: and %d more (--json lists them all)", s.Name, len(s.Faults)-i))
				break
			}
			writeWrapped(w, "  ", "    ", fmt.Sprintf("%s: %s", s.Name, f))
		}
	}
}

// String describes the fault in a few words: what, where, when.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(f.Kind)
	if len(f.Nodes) > 0 {
		nodes := make([]string, len(f.Nodes))
		for i, n := range f.Nodes {
			nodes[i] = fmt.Sprint(n)
		}
		what := "master"
		if len(nodes) > 1 {
			what = "masters"
		}
		fmt.Fprintf(&b, " %s %s", what, strings.Join(nodes, ","))
	}
	at := roundLatency(f.At)
	switch {
	case f.End < 0:
		fmt.Fprintf(&b, " from %v to the end", at)
	case f.End-f.At < time.Millisecond:
		fmt.Fprintf(&b, " at %v", at)
	default:
		fmt.Fprintf(&b, " from %v to %v", at, roundLatency(f.End))
	}
	if f.Note != "" {
		b.WriteString(": " + f.Note)
	}
	return b.String()
}

// writeWrapped writes the words of text after prefix, in lines of at most
// tableWidth columns; the lines after the first start with indent.
func writeWrapped(w io.Writer, prefix, indent, text string) {
	line, empty := prefix, true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > tableWidth {
			fmt.Fprintln(w, line)
			line, empty = indent, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	fmt.Fprintln(w, line)
}

// progressLine is the line printed as the scenario finishes: its verdict,
// outcome (which counts the overlaps) and counts. It is printed wrapped
// at tableWidth.
func (s ScenarioReport) progressLine(index, total int) string {
	line := fmt.Sprintf("[%d/%d] %s: %s (%s); %d of %d acquire calls got the lock, %s, %v",
		index, total, s.Name, s.Verdict(), s.Outcome, s.Acquired, s.Attempts, plural(len(s.Faults), "fault"), s.Took.Round(100*time.Millisecond))
	if s.Extended > 0 {
		line += fmt.Sprintf("; extended %d, renewals %d, lost %d", s.Extended, s.Renewals, s.Lost)
	}
	if len(s.ByAdapter) > 0 {
		line += fmt.Sprintf("; acquired by go-redis %d, rueidis %d", s.ByAdapter[AdapterGoRedis], s.ByAdapter[AdapterRueidis])
	}
	return line
}

// safety is the OUTCOME column of the narrow table: "safe" or "UNSAFE"
// (the counts are in the columns before it).
func (s ScenarioReport) safety() string {
	word, _, _ := strings.Cut(s.Outcome, ":")
	word, _, _ = strings.Cut(word, ";")
	return word
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
