package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Two reads of an RWMutex may overlap; a read beside a write may not. Our
// checker and porcupine's read-write lock model agree on both.
func TestReadsShareWritesExclude(t *testing.T) {
	ms := time.Millisecond
	hold := func(id int, read bool, from, to time.Duration) Acquire {
		return Acquire{ID: id, Client: id, Key: "k", Read: read, OK: true, Start: from - ms, Acquired: from, Until: 10 * to, Released: to, Lost: -1}
	}
	for _, c := range []struct {
		name    string
		as      []Acquire
		overlap bool
	}{
		{"two reads", []Acquire{hold(0, true, 10*ms, 50*ms), hold(1, true, 20*ms, 60*ms)}, false},
		{"a read beside a write", []Acquire{hold(0, true, 10*ms, 50*ms), hold(1, false, 20*ms, 60*ms)}, true},
		{"a write beside a read", []Acquire{hold(0, false, 10*ms, 50*ms), hold(1, true, 20*ms, 60*ms)}, true},
		{"a write after reads", []Acquire{hold(0, true, 10*ms, 50*ms), hold(1, true, 20*ms, 60*ms), hold(2, false, 70*ms, 90*ms)}, false},
	} {
		h := History{Acquires: c.as}
		f := Check(h)
		if got := len(f.Overlaps) > 0; got != c.overlap {
			t.Errorf("%s: overlaps %v, want %v", c.name, f.Overlaps, c.overlap)
		}
		if ok := porcupine.CheckOperations(lockModel, lockOps(h)); ok == c.overlap {
			t.Errorf("%s: porcupine says linearizable %v, want %v", c.name, ok, !c.overlap)
		}
	}
}
