package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The semaphore's checks: a history whose Acquires are permits of
// semaphores (Key: the semaphore's name) of a limit of permits holds at
// most that many at once per name. CheckPermits is ours; permitModel is
// porcupine's sequential semaphore, the independent check. A holding
// counts from Acquired to end(), as Check counts a lock's.

// PermitFindings is what CheckPermits found.
type PermitFindings struct {
	Acquired int
	// Most is the most permits of one name held at once.
	Most int
	// Over lists the moments more than the limit were held: the name, when,
	// and the holders (Acquire.IDs).
	Over []string `json:",omitempty"`
}

// CheckPermits checks that at no moment more than permits holdings of one
// name overlap.
func CheckPermits(h History, permits int) PermitFindings {
	var f PermitFindings
	type event struct {
		at    time.Duration
		start bool
		id    int
	}
	byKey := map[string][]event{}
	for _, a := range h.Acquires {
		if !a.OK || a.end() <= a.Acquired {
			continue
		}
		f.Acquired++
		byKey[a.Key] = append(byKey[a.Key], event{a.Acquired, true, a.ID}, event{a.end(), false, a.ID})
	}
	for _, key := range slices.Sorted(mapKeys(byKey)) {
		evs := byKey[key]
		slices.SortFunc(evs, func(a, b event) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			if a.start == b.start {
				return 0
			}
			if !a.start {
				return -1 // [Acquired, end): an end before a start at one moment
			}
			return 1
		})
		in := map[int]bool{}
		for _, e := range evs {
			if !e.start {
				delete(in, e.id)
				continue
			}
			in[e.id] = true
			f.Most = max(f.Most, len(in))
			if len(in) > permits {
				ids := slices.Sorted(mapKeys(in))
				f.Over = append(f.Over, fmt.Sprintf("%s at %v: %d holders of %d permits: %v", key, e.at, len(in), permits, ids))
			}
		}
	}
	return f
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// permitModel is porcupine's semaphore of permits permits per key: its
// state is the holders' IDs, sorted, as a string; an acquire is legal
// while fewer than permits hold, a release only by a holder.
func permitModel(permits int) porcupine.Model {
	return porcupine.Model{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			return partitionBy(ops, func(op porcupine.Operation) string { return op.Input.(lockInput).key })
		},
		Init: func() any { return "" },
		Step: func(state, input, _ any) (bool, any) {
			in := input.(lockInput)
			var ids []int
			for _, f := range strings.Fields(state.(string)) {
				id, _ := strconv.Atoi(f)
				ids = append(ids, id)
			}
			i, held := slices.BinarySearch(ids, in.holder)
			switch {
			case in.release && !held, !in.release && (held || len(ids) >= permits):
				return false, state
			case in.release:
				ids = slices.Delete(ids, i, i+1)
			default:
				ids = slices.Insert(ids, i, in.holder)
			}
			var b strings.Builder
			for _, id := range ids {
				fmt.Fprintf(&b, "%d ", id)
			}
			return true, b.String()
		},
		DescribeOperation: lockModel.DescribeOperation,
	}
}

// crossCheckPermits checks h with porcupine's semaphore and says where its
// verdict differs from f, CheckPermits' findings.
func crossCheckPermits(h History, permits int, f PermitFindings) (porcupine.CheckResult, []string) {
	r := porcupine.CheckOperationsTimeout(permitModel(permits), lockOps(h), crossCheckTimeout)
	return r, compare("semaphore", r, len(f.Over) > 0, plural(len(f.Over), "over-grant"))
}
