package chaos

import (
	"fmt"
	"slices"
	"time"
)

// Findings is what [Check] found in a history.
type Findings struct {
	Attempts int // acquire calls
	Acquired int // of which obtained the lock

	// Overlaps are pairs of holders of one key whose windows
	// [acquired, min(until, lost, released)] intersect. Windows that only touch
	// (one ends when the other begins) do not overlap.
	Overlaps []Overlap
	// OverGrants, in a scenario on Semaphores (whose permits are recorded
	// as sharing holds, Read), are the moments more holders than permits
	// held one (CheckPermits).
	OverGrants []string `json:",omitempty"`

	// Late writes were made after their holder's validity ended: at its
	// Until as last renewed, or when its lock was lost (Done), if sooner.
	LateAccepted, LateRejected int
	// Stale writes were made after a newer holder of the same key (one
	// that acquired later) had written: the writes a fencing token exists to
	// reject. Accepted ones corrupted the resource.
	StaleAccepted, StaleRejected int
	// Rejected counts every write the fencing check rejected.
	Rejected int
	// FenceViolations are writes the resource decided against its own
	// rule: accepted with a token below one it had accepted for the key, or
	// rejected with one at least as high as every token it had accepted.
	FenceViolations int

	// During node faults (the whole run when there were none): acquire calls
	// started, of which obtained, and the latency of those obtained.
	FaultAttempts, FaultAcquired int
	P50, P99                     time.Duration

	// Holdings of the extending clients (auto-extend or Extend by hand):
	// how many, how often their Until moved later, how many were lost
	// (Done closed before Unlock), and how many renewed while held across
	// a fault on masters.
	Extended, Renewals, Lost, RenewedInFault int

	// MaxGap is the longest stretch of a fault on masters in which no
	// client acquired any lock: how long the lock service stood still. An
	// acquire call's own success rate mixes in the contention between
	// clients; a gap does not. Zero when no master was faulted.
	MaxGap time.Duration
}

// Overlap is two holders of Key at once.
type Overlap struct {
	Key           string
	First, Second int           // Acquire.IDs, First acquired earlier
	From, To      time.Duration // the intersection
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s held by #%d and #%d at once for %v (from %v)",
		o.Key, o.First, o.Second, (o.To - o.From).Round(time.Millisecond), o.From.Round(time.Millisecond))
}

// Availability is the share of acquire calls during faults that obtained
// the lock, 1 when there were none.
func (f Findings) Availability() float64 {
	if f.FaultAttempts == 0 {
		return 1
	}
	return float64(f.FaultAcquired) / float64(f.FaultAttempts)
}

// Check reads a history and reports overlaps, late and stale writes,
// availability and acquire latency.
func Check(h History) Findings {
	var f Findings
	byID := make(map[int]Acquire, len(h.Acquires))
	byKey := make(map[string][]Acquire)
	for _, a := range h.Acquires {
		byID[a.ID] = a
		f.Attempts++
		if a.OK {
			f.Acquired++
			byKey[a.Key] = append(byKey[a.Key], a)
		}
	}

	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f.Overlaps = append(f.Overlaps, overlaps(byKey[k])...)
	}

	highest := make(map[string]uint64)       // key -> highest token accepted so far
	newest := make(map[string]time.Duration) // key -> latest acquired-at among writers so far
	writes := slices.Clone(h.Writes)
	slices.SortFunc(writes, func(a, b Write) int { return int(a.Seq - b.Seq) })
	for _, w := range writes {
		if !w.Accepted {
			f.Rejected++
		}
		if w.Accepted != (w.Token >= highest[w.Key]) {
			f.FenceViolations++
		}
		if w.Accepted {
			highest[w.Key] = max(highest[w.Key], w.Token)
		}
		holder, ok := byID[w.Holder]
		if !ok {
			continue // a write with no recorded holder: not made by the workload
		}
		if w.At > holder.valid() {
			if w.Accepted {
				f.LateAccepted++
			} else {
				f.LateRejected++
			}
		}
		if n, seen := newest[w.Key]; seen && n > holder.Acquired {
			if w.Accepted {
				f.StaleAccepted++
			} else {
				f.StaleRejected++
			}
		}
		if n, seen := newest[w.Key]; !seen || holder.Acquired > n {
			newest[w.Key] = holder.Acquired
		}
	}

	windows := nodeFaultWindows(h.Faults)
	for _, a := range h.Acquires {
		if !a.OK || a.Extend == "" {
			continue
		}
		f.Extended++
		f.Renewals += a.Renewals
		if a.Lost >= 0 {
			f.Lost++
		}
		if a.Renewals > 0 && intersectsAny(a.Acquired, a.end(), windows) {
			f.RenewedInFault++
		}
	}
	var lat []time.Duration
	for _, a := range h.Acquires {
		if windows != nil && !inAny(a.Start, windows) {
			continue
		}
		f.FaultAttempts++
		if a.OK {
			f.FaultAcquired++
			lat = append(lat, a.Acquired-a.Start)
		}
	}
	f.P50, f.P99 = percentile(lat, 50), percentile(lat, 99)
	f.MaxGap = maxGap(windows, h.Acquires)
	return f
}

// maxGap is the longest time within a window between the window's start,
// the acquisitions inside it and its end.
func maxGap(ws []window, as []Acquire) time.Duration {
	from, to := longestGap(ws, as)
	return to - from
}

// longestGap returns where maxGap's stretch lies (from == to when ws is
// empty): the first of the longest.
func longestGap(ws []window, as []Acquire) (from, to time.Duration) {
	for _, w := range ws {
		last := w.from
		var in []time.Duration
		for _, a := range as {
			if a.OK && a.Acquired > w.from && a.Acquired < w.to {
				in = append(in, a.Acquired)
			}
		}
		slices.Sort(in)
		for _, t := range append(in, w.to) {
			if t-last > to-from {
				from, to = last, t
			}
			last = t
		}
	}
	return from, to
}

// overlaps finds the pairs of holdings of one key whose windows intersect.
func overlaps(as []Acquire) []Overlap {
	slices.SortFunc(as, func(a, b Acquire) int { return int(a.Acquired - b.Acquired) })
	var out []Overlap
	for i, a := range as {
		for _, b := range as[i+1:] {
			if b.Acquired >= a.end() {
				break // sorted: no later holder starts inside a's window
			}
			if b.end() <= b.Acquired || a.Read && b.Read {
				continue // an empty window, or two readers of an RWMutex
			}
			out = append(out, Overlap{Key: a.Key, First: a.ID, Second: b.ID, From: b.Acquired, To: min(a.end(), b.end())})
		}
	}
	return out
}

type window struct{ from, to time.Duration }

// nodeFaultWindows returns the windows of the faults on masters, or nil when
// there were none.
func nodeFaultWindows(fs []Fault) []window {
	var ws []window
	for _, f := range fs {
		if len(f.Nodes) > 0 {
			ws = append(ws, window{f.At, f.End})
		}
	}
	return ws
}

// intersectsAny reports whether [from, to] meets one of ws.
func intersectsAny(from, to time.Duration, ws []window) bool {
	for _, w := range ws {
		if from <= w.to && to >= w.from {
			return true
		}
	}
	return false
}

func inAny(t time.Duration, ws []window) bool {
	for _, w := range ws {
		if t >= w.from && t <= w.to {
			return true
		}
	}
	return false
}

// percentile is the nearest-rank p-th percentile, 0 for no samples.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}
