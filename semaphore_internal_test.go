package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
		const refuse = "if v and v ~= ARGV[1] and (ARGV[6] == '' or v:sub(1, #ARGV[6] + 1) ~= ARGV[6] .. '#') then\n"
		acquire = edit(acquire, refuse, `if v and v ~= ARGV[1] then
  for i = 0, tonumber(ARGV[4]) - 1 do
    if not holder(i) then
      s, v = tostring(i), nil
      break
    end
  end
end
`+refuse)
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
	semReleaseSrc = script(handonLua, semLua, semGiveLua, release)
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

// TestSemaphoreSplitHandOffs: releases of three slots reach five masters
// in three different orders while three calls wait. Each master hands a
// release's slot only to a call that waits for that slot (or wakes the
// first call, naming it), so no call is handed different slots by
// different masters with none on a quorum: every call gets a permit
// soon, and the masters never hold more than 3 (a quorum of each permit's
// slot, distinct slots).
func TestSemaphoreSplitHandOffs(t *testing.T) {
	const permits = 3
	addrs := masters.Addrs()[:5]
	cs := clients(t, addrs)
	name := uniqueSemName(t)
	ctx := context.Background()
	hr := newRedlock(t, nodesOf(t, clients(t, addrs)))
	held := make([]*Lock, permits)
	for i := range held {
		l, err := hr.Semaphore(name, permits).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, permits)
	var waiters []*Redlock
	for range permits {
		w := newRedlock(t, nodesOf(t, clients(t, addrs)), WithBackoff(5*time.Second, 10*time.Second))
		waiters = append(waiters, w)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			l, err := w.Semaphore(name, permits).Acquire(ctx)
			got <- result{l, err}
		}()
		waitQueued(t, w, kindPermit.base(name))
		time.Sleep(50 * time.Millisecond) // its registration on every master: one after another
	}
	// Master i sees the releases in the order orders[i].
	orders := [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {1, 0, 2}}
	channel, _ := hr.wake.name()
	deadline := time.Now().Add(time.Second)
	for i, order := range orders {
		for _, j := range order {
			q := held[j].request(reqRelease, 0, 0)
			q.Waiter = channel
			hr.sendTo(i, deadline, q)
		}
	}
	var ls []*Lock
	for range permits {
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatalf("a waiting Acquire after the releases: %v", r.err)
			}
			ls = append(ls, r.l)
		case <-time.After(3 * time.Second):
			t.Fatalf("%d of %d waiting Acquires got a permit within 3s of the releases", len(ls), permits)
		}
	}
	slots := map[uint8]bool{}
	for _, l := range ls {
		if slots[l.cfg.slot] {
			t.Errorf("two permits of slot %d", l.cfg.slot)
		}
		slots[l.cfg.slot] = true
		n := 0
		for i, c := range cs {
			v, err := c.HGet(ctx, kindPermit.base(name), fmt.Sprintf("v%d", l.cfg.slot)).Result()
			if err != nil && err != redis.Nil {
				t.Fatalf("master %d: %v", i, err)
			}
			if v == l.value {
				n++
			}
		}
		if n < 3 {
			t.Errorf("the permit of slot %d is held on %d masters; want a quorum", l.cfg.slot, n)
		}
	}
	for _, l := range ls {
		_ = l.Unlock(ctx)
	}
	for _, w := range waiters {
		settle(w)
	}
}

// TestSemaphoreHintWithinLimit: masters that wake a waiting permit call
// name a free slot as a hint, which may be one of permits given under
// another limit; the call's next attempt never asks for a slot outside its
// own limit (a simulation schedule once saw two holders of 1 permit, the
// second on slot 1), and a master refuses such a vote.
func TestSemaphoreHintWithinLimit(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters.Addrs()[:3])))
	cfg := config{kind: kindPermit, permits: 1, ttl: time.Second}
	h := &handoff{r: r, kind: kindPermit, permits: 1, ttl: time.Second, wake: make(chan struct{}, 1),
		seen: make([]bool, 3), slots: make([]int8, 3), hints: make([]int8, 3)}
	reg := h.register(time.Now().Add(time.Second))
	for i := range 3 {
		h.handed(reg, i, true, false, 1)
	}
	if l, _, now := h.take(&cfg); l != nil || !now {
		t.Fatalf("woken by every master: take = %v, now %v; want no lock, and try now", l, now)
	}
	if cfg.slot != 0 {
		t.Errorf("a call of 1 permit woken with the hint of slot 1 tries slot %d; want 0", cfg.slot)
	}
	name := uniqueSemName(t)
	q := request{Op: reqAcquire, Kind: kindPermit, Key: kindPermit.base(name), Value: newValue(), TTL: time.Second, Slot: 1, Permits: 1}
	p := r.startPhase(context.Background(), time.Now().Add(time.Second), true, q)
	_ = p.collect(context.Background())
	settle(r)
	if tl := p.tallies[0]; tl.succeeded != 0 || tl.failed < 2 {
		t.Errorf("a vote for slot 1 of 1 permit: %d succeeded, %d failed of 3; want the masters to refuse it with an error", tl.succeeded, tl.failed)
	}
	for i, c := range clients(t, masters.Addrs()[:3]) {
		if n, err := c.Exists(context.Background(), kindPermit.base(name)).Result(); err != nil || n != 0 {
			t.Errorf("master %d after a vote for slot 1 of 1 permit: the semaphore exists (%d, %v); want nothing written", i, n, err)
		}
	}
}
