package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// outcome is what a scenario run produced, for its expectations to judge.
type outcome struct {
	Findings
	h      History
	leaked int
	ttl    time.Duration // of the workload's locks
}

// expectation is one property a scenario's run must have.
type expectation struct {
	what string
	ok   func(o *outcome) bool
}

var (
	noOverlap = expectation{"no two holders of a key at once (of a Semaphore: no more than its permits)",
		func(o *outcome) bool { return len(o.Overlaps) == 0 && len(o.OverGrants) == 0 }}
	overlapFound = expectation{"the checker finds two holders of a key at once",
		func(o *outcome) bool { return len(o.Overlaps) > 0 }}
	noUnsafeWrite = expectation{"no late or stale write accepted",
		func(o *outcome) bool { return o.LateAccepted == 0 && o.StaleAccepted == 0 }}
	lateAccepted = expectation{"a late write is accepted (no fencing)",
		func(o *outcome) bool { return o.LateAccepted > 0 }}
	lateRejected = expectation{"every late write is rejected by fencing",
		func(o *outcome) bool { return o.LateRejected > 0 && o.LateAccepted == 0 }}
	staleAccepted = expectation{"a stale write is accepted (no fencing)",
		func(o *outcome) bool { return o.StaleAccepted > 0 }}
	staleRejected = expectation{"every stale write is rejected by fencing",
		func(o *outcome) bool { return o.StaleRejected > 0 && o.StaleAccepted == 0 }}
	available = expectation{"available: locks are acquired while the fault is in force",
		func(o *outcome) bool { return o.acquiredDuringFaults() > 0 }}
	// highlyAvailable is what a minority of failed masters may cost: they
	// leave a quorum, so nearly every call gets the lock and the lock is
	// never out of reach for long. Plain masters (minority-kill) give 100%
	// and a gap of some 15 ms; a cluster master whose key's shard fails must
	// do as well, whichever client (shard-kill, shard-pause).
	highlyAvailable = expectation{fmt.Sprintf("highly available: >= %.0f%% of the calls in faults get the lock, and no stretch of a fault longer than %v without one",
		100*minAvailability, maxFaultGap),
		func(o *outcome) bool { return o.Availability() >= minAvailability && o.MaxGap <= maxFaultGap }}
	noLeak = expectation{"nothing left on the masters once every holder released (LEAKED 0)",
		func(o *outcome) bool { return o.leaked == 0 }}
	renewedInFault = expectation{"a lock renewed (auto-extend or Extend) while held across a fault on masters",
		func(o *outcome) bool { return o.RenewedInFault > 0 }}
	// The kill takes a while on Docker; a renewal that fails while it is
	// under way counts, so the window starts when the kill began.
	endedInFault = expectation{"an extended lock held when the majority was being killed ended (lost, or let go when Extend failed) before the restart",
		func(o *outcome) bool {
			for _, f := range o.h.Faults {
				if len(f.Nodes) == 0 {
					continue
				}
				for _, a := range o.h.Acquires {
					if a.OK && a.Extend != "" && a.Acquired < f.At && a.end() >= f.Began && a.end() <= f.End {
						return true
					}
				}
			}
			return false
		}}
	freeAfterKill = expectation{"after each killed holder, another client gets the lock within 2 TTLs",
		func(o *outcome) bool {
			n := 0
			for _, f := range o.h.Faults {
				if f.Kind != kindHolderKill {
					continue
				}
				n++
				if !slices.ContainsFunc(o.h.Acquires, func(a Acquire) bool {
					return a.OK && a.Acquired > f.At && a.Acquired <= f.At+2*o.ttl
				}) {
					return false
				}
			}
			return n > 0
		}}
	midAcquireFired = expectation{"the mid-acquire trigger fired",
		func(o *outcome) bool { return countFaults(o.h, kindKillMidAcquire) > 0 }}
	failWhileDown = expectation{"no acquire started while a majority was down succeeds before the restart",
		func(o *outcome) bool {
			n := 0
			for _, f := range o.h.Faults {
				if f.Kind != kindKill {
					continue
				}
				for _, a := range o.h.Acquires {
					if a.OK && a.Start >= f.At && a.Acquired <= f.End {
						return false
					}
				}
				n++
			}
			return n > 0
		}}
	availableAfter = expectation{"acquires succeed again after the restart",
		func(o *outcome) bool {
			var end = o.h.Faults
			if len(end) == 0 {
				return false
			}
			last := end[len(end)-1].End
			for _, a := range o.h.Acquires {
				if a.OK && a.Acquired > last {
					return true
				}
			}
			return false
		}}
)

// The bounds of highlyAvailable.
const (
	minAvailability = 0.95
	maxFaultGap     = 100 * time.Millisecond
)

// acquiredDuringFaults counts the acquire calls that both began and got the
// lock while a fault on masters was in force.
func (o *outcome) acquiredDuringFaults() int {
	n := 0
	for _, f := range o.h.Faults {
		if len(f.Nodes) == 0 {
			continue
		}
		for _, a := range o.h.Acquires {
			if a.OK && a.Start >= f.At && a.Acquired <= f.End {
				n++
			}
		}
	}
	return n
}

// Kinds of fault in the history.
const (
	kindKill              = "kill"
	kindKillMidAcquire    = "kill-mid-acquire"
	kindKillShard         = "kill-shard"
	kindPauseShard        = "pause-shard"
	kindMoveSlot          = "move-slot"
	kindFailover          = "failover"
	kindPause             = "pause"
	kindPartition         = "partition"
	kindRestartEmpty      = "restart-empty"
	kindHolderPause       = "holder-pause"
	kindHolderKill        = "holder-kill"
	kindDropSubscriptions = "drop-subscriptions"
)

func countFaults(h History, kind string) int {
	n := 0
	for _, f := range h.Faults {
		if f.Kind == kind {
			n++
		}
	}
	return n
}

// judge returns the expectations o fails.
func judge(o *outcome, want []expectation) []string {
	var failed []string
	for _, e := range want {
		if !e.ok(o) {
			failed = append(failed, e.what)
		}
	}
	return failed
}

// summary says in a few words what happened: safe or not, what fencing
// rejected, and how available the lock was during the faults.
func summary(f Findings) string {
	var unsafe []string
	if n := len(f.Overlaps); n > 0 {
		unsafe = append(unsafe, plural(n, "overlap"))
	}
	if f.LateAccepted > 0 {
		unsafe = append(unsafe, plural(f.LateAccepted, "late write")+" accepted")
	}
	if f.StaleAccepted > 0 {
		unsafe = append(unsafe, plural(f.StaleAccepted, "stale write")+" accepted")
	}
	s := "safe"
	if len(unsafe) > 0 {
		s = "UNSAFE: " + strings.Join(unsafe, ", ")
	}
	if f.Rejected > 0 {
		s += "; fencing rejected " + plural(f.Rejected, "write")
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
