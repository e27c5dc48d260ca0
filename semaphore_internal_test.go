package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The semaphore's three rules, each broken on purpose by a mutant of its
// scripts, and the deterministic scenario that kills it: the scenario
// finds nothing wrong with the real scripts and a violation with the
// mutant's (TestSemaphoreMutantsKilled). The simulation (sim_sem_test.go)
// runs them too.
type semMutant string

const (
	semReal semMutant = ""
	// mutantSlots: a master asked for a slot held elsewhere grants another
	// free slot, and the tally counts it: votes for different slots make
	// one quorum.
	mutantSlots semMutant = "slots"
	// mutantLimit: the stored limit is not checked.
	mutantLimit semMutant = "limit"
	// mutantRollback: a failed attempt's rollback does not release the
	// slot it won on some masters (the partial grant stays).
	mutantRollback semMutant = "rollback"
)

var semMutants = []semMutant{mutantSlots, mutantLimit, mutantRollback}

// mutate swaps the permit scripts for m's until the test ends.
func (m semMutant) mutate(t testing.TB) {
	t.Helper()
	acquire, release := semAcquireLua, semReleaseLua
	edit := func(src, old, new string) string {
		if !strings.Contains(src, old) {
			t.Fatalf("mutant %s: the script no longer has %q", m, old)
		}
		return strings.Replace(src, old, new, 1)
	}
	switch m {
	case semReal:
		return
	case mutantSlots:
		acquire = edit(acquire, "if v and v ~= ARGV[1] then\n", `if v and v ~= ARGV[1] then
  for i = 0, tonumber(ARGV[4]) - 1 do
    if not holder(i) then
      s, v = tostring(i), nil
      break
    end
  end
end
if v and v ~= ARGV[1] then
`)
	case mutantLimit:
		acquire = edit(acquire, "  if live() > 0 then\n", "  if false then\n")
	case mutantRollback:
		release = edit(release, "if redis.pcall('HGET', k, 'v' .. s) ~= ARGV[1] then\n", "if ARGV[4] == '1' or redis.pcall('HGET', k, 'v' .. s) ~= ARGV[1] then\n")
	}
	a, af, ga, gaf, rl := semAcquireSrc, semAcquireFencedSrc, gatedSemAcquireSrc, gatedSemAcqFencedSrc, semReleaseSrc
	semAcquireSrc = script(semLua, semHoldLua, acquire)
	semAcquireFencedSrc = script(fenceLua, semLua, semHoldLua, acquire)
	gatedSemAcquireSrc = script(gateLua, gatedLua, semLua, semHoldLua, acquire)
	gatedSemAcqFencedSrc = script(gateLua, gatedLua, fenceLua, semLua, semHoldLua, acquire)
	semReleaseSrc = script(handonLua, release)
	t.Cleanup(func() {
		semAcquireSrc, semAcquireFencedSrc, gatedSemAcquireSrc, gatedSemAcqFencedSrc, semReleaseSrc = a, af, ga, gaf, rl
	})
}

// cutOff is a master a client cannot reach: every command fails at once.
type cutOff struct{ Node }

func (n cutOff) Exec(ctx context.Context, cmds []*Command) {
	for _, c := range cmds {
		c.Err = errors.New("partitioned away")
	}
}

// reaching is a Redlock over cs that reaches only the masters in reach.
func reaching(t *testing.T, cs []*redis.Client, reach ...int) *Redlock {
	t.Helper()
	nodes := nodesOf(t, cs)
	for i := range nodes {
		cut := true
		for _, j := range reach {
			cut = cut && i != j
		}
		if cut {
			nodes[i] = cutOff{nodes[i]}
		}
	}
	return newRedlock(t, nodes)
}

// semScenarios are the deterministic scenarios, each on fresh keys of
// the test masters; each returns the violation it saw, "" for none.
var semScenarios = map[semMutant]func(t *testing.T) string{
	// Three clients on the majorities {0,1}, {1,2}, {0,2} of 3 masters,
	// 2 permits: at most 2 may hold.
	mutantSlots: func(t *testing.T) string {
		cs := clients(t, masters.Addrs()[:3])
		name := uniqueSemName(t)
		held := 0
		for _, reach := range [][]int{{0, 1}, {1, 2}, {0, 2}} {
			if _, err := reaching(t, cs, reach...).Semaphore(name, 2).TryAcquire(context.Background()); err == nil {
				held++
			}
		}
		if held > 2 {
			return fmt.Sprintf("%d holders of 2 permits", held)
		}
		return ""
	},
	// One permit held under a limit of 1; a call with a limit of 2 must
	// not get a second.
	mutantLimit: func(t *testing.T) string {
		cs := clients(t, masters.Addrs()[:3])
		name := uniqueSemName(t)
		r := newRedlock(t, nodesOf(t, cs))
		if _, err := r.Semaphore(name, 1).TryAcquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Semaphore(name, 2).TryAcquire(context.Background()); err == nil {
			return "a call with a limit of 2 got a permit while one of a limit of 1 was held"
		}
		return ""
	},
	// An attempt that reached one master of 3 won its slot there: its
	// rollback must leave the master as it was.
	mutantRollback: func(t *testing.T) string {
		cs := clients(t, masters.Addrs()[:3])
		name := uniqueSemName(t)
		r := reaching(t, cs, 0)
		if _, err := r.Semaphore(name, 1).TryAcquire(context.Background()); err == nil {
			t.Fatal("TryAcquire on one master of 3 succeeded")
		}
		settle(r)
		f, err := cs[0].HGetAll(context.Background(), kindPermit.base(name)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range f {
			if k[0] == 'v' {
				return fmt.Sprintf("master 0 keeps slot %s = %s of the failed attempt", k[1:], v)
			}
		}
		return ""
	},
}

func uniqueSemName(t *testing.T) string { return strings.ReplaceAll(testKey(t), "/", ":") }

// TestSemaphoreMutantsKilled: each scenario passes on the real scripts and
// catches its mutant.
func TestSemaphoreMutantsKilled(t *testing.T) {
	for _, m := range semMutants {
		// The scenarios' Redlocks are closed (their requests done) at the
		// end of each subtest, before the scripts are swapped.
		t.Run(string(m), func(t *testing.T) {
			if v := semScenarios[m](t); v != "" {
				t.Fatalf("real scripts: %s", v)
			}
		})
		t.Run(string(m)+"/mutant", func(t *testing.T) {
			m.mutate(t)
			if v := semScenarios[m](t); v == "" {
				t.Fatalf("mutant %s not caught", m)
			} else {
				t.Logf("mutant %s caught: %s", m, v)
			}
		})
	}
}

// TestSemaphoreVoteSlotWithinLimit: a master refuses, with an error, a
// vote for a slot at or above the call's limit, whatever the client sent:
// slots 0 to L-1 are the only permits, so at most L hold (see the turn's
// hinted, which never asks for one).
func TestSemaphoreVoteSlotWithinLimit(t *testing.T) {
	c := clients(t, masters.Addrs()[:1])[0]
	ctx := context.Background()
	key := kindPermit.base(testKey(t))
	for _, slot := range []int{2, 3, 63} {
		err := c.Eval(ctx, semAcquireSrc.(string), []string{key, FenceKey(key)}, "v", slot, 30000, "2", 0).Err()
		if err == nil || !strings.Contains(err.Error(), "SLOT") {
			t.Errorf("a vote for slot %d under a limit of 2: %v; want a SLOT error", slot, err)
		}
	}
	// A renewal's repair takes a free slot: not one past the limit either.
	if n, err := c.Eval(ctx, semExtendSrc.(string), []string{key}, "v", 2, 30000, 1, "2").Int(); n != 0 || err != nil {
		t.Errorf("a renewal's repair of slot 2 under a limit of 2: %d, %v; want 0", n, err)
	}
	if n := c.HLen(ctx, key).Val(); n != 0 {
		t.Errorf("the refused votes left %d fields in the semaphore's hash; want none", n)
	}
	if err := c.Eval(ctx, semAcquireSrc.(string), []string{key, FenceKey(key)}, "v", 1, 30000, "2", 0).Err(); err != nil {
		t.Errorf("a vote for slot 1 under a limit of 2: %v", err)
	}
}
