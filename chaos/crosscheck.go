package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The cross-check: every history is also checked for linearizability by
// porcupine, an independent checker, against sequential models of what the
// lock and the fenced resource promise. [Check] explains what it finds;
// porcupine only says whether a history is legal, and the harness fails a
// scenario on which the two disagree.

// crossCheckTimeout bounds each porcupine check; a check that runs out is
// reported as undecided, which fails the scenario too.
const crossCheckTimeout = 20 * time.Second

// CrossCheck is porcupine's verdict on a history, next to ours.
type CrossCheck struct {
	// Lock is porcupine's verdict ("Ok", "Illegal" or "Unknown") against a
	// sequential read-write lock: a write acquire (a mutex's, an RWMutex
	// writer's) succeeds only when the lock is free, a read acquire when no
	// writer holds it, a release only by a holder. An acquire is the call [Start, Acquired]; its
	// release is the moment the holding ended (Unlock, loss or the end of
	// validity, whichever came first).
	Lock porcupine.CheckResult
	// Register, for fenced runs, is porcupine's verdict against a fenced
	// register: a write is accepted exactly when its token is at least the
	// highest accepted before. Empty without fencing.
	Register porcupine.CheckResult `json:",omitempty"`
	// Permits, in a scenario on Semaphores, is porcupine's verdict
	// against a semaphore of that many permits (permitModel).
	Permits porcupine.CheckResult `json:",omitempty"`
	// Disagree says where porcupine and [Check] differ; empty when they agree.
	Disagree []string `json:",omitempty"`
	Took     time.Duration
}

// lockInput is an operation on the sequential lock.
type lockInput struct {
	key     string
	holder  int // Acquire.ID
	read    bool
	release bool
}

// rwState is the sequential read-write lock's state: its writer's
// Acquire.ID (-1: none) and its readers' IDs, sorted, as a string, so that
// states compare with ==.
type rwState struct {
	writer  int
	readers string
}

func (s rwState) readerIDs() []int {
	var ids []int
	for _, f := range strings.Fields(s.readers) {
		id, _ := strconv.Atoi(f)
		ids = append(ids, id)
	}
	return ids
}

func withReaders(w int, ids []int) rwState {
	slices.Sort(ids)
	fs := make([]string, len(ids))
	for i, id := range ids {
		fs[i] = strconv.Itoa(id)
	}
	return rwState{writer: w, readers: strings.Join(fs, " ")}
}

// lockModel is one read-write lock per key: a mutex's holdings are its
// writes, so a history without RWMutexes checks as against a plain lock.
var lockModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(ops, func(op porcupine.Operation) string { return op.Input.(lockInput).key })
	},
	Init: func() any { return rwState{writer: -1} },
	Step: func(state, input, _ any) (bool, any) {
		in, s := input.(lockInput), state.(rwState)
		readers := s.readerIDs()
		switch {
		case in.release && s.writer == in.holder:
			return true, rwState{writer: -1, readers: s.readers}
		case in.release:
			if i := slices.Index(readers, in.holder); i >= 0 {
				return true, withReaders(s.writer, slices.Delete(readers, i, i+1))
			}
			return false, s
		case in.read:
			return s.writer == -1, withReaders(s.writer, append(readers, in.holder))
		}
		return s.writer == -1 && len(readers) == 0, rwState{writer: in.holder, readers: s.readers}
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(lockInput)
		op := "acquire"
		if in.read {
			op = "acquire-read"
		}
		if in.release {
			op = "release"
		}
		return fmt.Sprintf("%s(%s, #%d)", op, in.key, in.holder)
	},
}

// writeInput is a write to the fenced register; its output is whether the
// resource accepted it.
type writeInput struct {
	key   string
	token uint64
}

// registerModel is one fenced register per key; its state is the highest
// token accepted.
var registerModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(ops, func(op porcupine.Operation) string { return op.Input.(writeInput).key })
	},
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		in, highest, accepted := input.(writeInput), state.(uint64), output.(bool)
		if accepted != (in.token >= highest) {
			return false, highest
		}
		return true, max(highest, in.token)
	},
}

func partitionBy(ops []porcupine.Operation, key func(porcupine.Operation) string) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	var keys []string
	for _, op := range ops {
		k := key(op)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	slices.Sort(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// lockOps turns the holdings of h into lock operations. A holding whose
// window is empty (it ended by the time it was acquired) held nothing and
// is left out, as Check leaves it out.
func lockOps(h History) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, a := range h.Acquires {
		if !a.OK || a.end() <= a.Acquired {
			continue
		}
		ops = append(ops,
			porcupine.Operation{ClientId: a.Client, Input: lockInput{key: a.Key, holder: a.ID, read: a.Read},
				Call: int64(a.Start), Return: int64(a.Acquired)},
			porcupine.Operation{ClientId: a.Client, Input: lockInput{key: a.Key, holder: a.ID, read: a.Read, release: true},
				Call: int64(a.end()), Return: int64(a.end())})
	}
	return ops
}

// writeOps turns the writes of h into register operations: each is a
// moment, taken under the resource's lock.
func writeOps(h History) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(h.Writes))
	for _, w := range h.Writes {
		ops = append(ops, porcupine.Operation{ClientId: w.Holder, Input: writeInput{key: w.Key, token: w.Token},
			Output: w.Accepted, Call: int64(w.At), Return: int64(w.At)})
	}
	return ops
}

// crossCheck checks h with porcupine and compares its verdicts with f,
// which Check found in h.
func crossCheck(h History, f Findings, fenced bool) CrossCheck {
	start := time.Now()
	c := CrossCheck{Lock: porcupine.CheckOperationsTimeout(lockModel, lockOps(h), crossCheckTimeout)}
	c.Disagree = append(c.Disagree, compare("lock", c.Lock, len(f.Overlaps) > 0, plural(len(f.Overlaps), "overlap"))...)
	if fenced {
		c.Register = porcupine.CheckOperationsTimeout(registerModel, writeOps(h), crossCheckTimeout)
		c.Disagree = append(c.Disagree, compare("fenced register", c.Register, f.FenceViolations > 0, plural(f.FenceViolations, "fence violation"))...)
	}
	c.Took = time.Since(start)
	return c
}

// compare says how porcupine's verdict r differs from ours (illegal or not,
// described by what).
func compare(model string, r porcupine.CheckResult, illegal bool, what string) []string {
	switch {
	case r == porcupine.Unknown:
		return []string{fmt.Sprintf("porcupine could not decide the %s model within %v", model, crossCheckTimeout)}
	case (r == porcupine.Illegal) != illegal:
		return []string{fmt.Sprintf("porcupine says the %s model is %s; our checker found %s", model, r, what)}
	}
	return nil
}
