package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The simulation of the Semaphore: permit clients on the real scripts
// (lua/sem*.lua, in internal/sim's Lua), through the simulation's masters,
// network and fault timelines (genSchedule: pauses, kills, restarts empty,
// from a snapshot or with their data, partitions, slow and lossy masters,
// clocks of their own, and the schedules that break an assumption on
// purpose). Each client is a Redlock whose workers loop: take a permit
// (TryAcquire or Acquire with a deadline; fenced, auto-extended or not),
// hold it a few steps (work, Extend, a pause maybe past its validity),
// give it back, claiming [now, Until) at the steps' edges as sim_test.go's
// workers do. A schedule draws the limit L (1 to 3) and, one in five,
// gives one client the limit L+1.
//
// The checker (checkSem) holds the run to:
//   - at no instant do more claims overlap than the smallest limit among
//     them, and never do claims of two limits overlap;
//   - no two holders of one slot have overlapping claims;
//   - fence tokens of one slot strictly increase from holder to holder;
//   - at the end, no master that never restarted holds a permit taken
//     through a connection on which no request failed (checkLeftovers).
//
// TestSimSem takes -sim.schedules, -sim.base, -sim.seed, -sim.soak as
// TestSim does (default defaultSimSemSchedules: few, as TestSim's; make
// test also runs SIM_SEM_SCHEDULES without -race). TestSimSemMutants runs
// the three mutants of semaphore_internal_test.go on seeds until the
// checker reports one, and fails if it never does.
const defaultSimSemSchedules = 40

// semPlan is what a schedule's seed draws for the semaphore.
type semPlan struct {
	permits int
	odd     int // a client that uses permits+1; -1: none
}

func semPlanOf(s *simSchedule) semPlan {
	rng := rand.New(rand.NewPCG(s.Seed, 0x5e3))
	p := semPlan{permits: 1 + rng.IntN(3), odd: -1}
	if rng.IntN(5) == 0 {
		p.odd = rng.IntN(len(s.Clients))
	}
	return p
}

// semHolder is one permit taken, and its claims.
type semHolder struct {
	client, worker int
	name           string
	limit          int
	slot           int
	token          uint64
	started        time.Time
	acquired       time.Time
	claims         []simClaim
}

type semRun struct {
	s       *simSchedule
	plan    semPlan
	start   time.Time
	mu      sync.Mutex
	holders []*semHolder
	errs    []string
	tries   int
}

func (r *semRun) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf("+%v ", time.Since(r.start))+fmt.Sprintf(format, args...))
}

type semResult struct {
	violations []string
	holders    int
	tries      int
}

// runSemSchedule runs s with permit clients in a bubble of its own.
func runSemSchedule(t *testing.T, s *simSchedule) (res semResult) {
	run := &semRun{s: s, plan: semPlanOf(s)}
	defer func() {
		if p := recover(); p != nil {
			res.violations = append(res.violations, fmt.Sprintf("the bubble panicked: %v", p))
		}
	}()
	synctest.Test(t, func(t *testing.T) { simulateSem(run) })
	return semResult{violations: run.errs, holders: len(run.holders), tries: run.tries}
}

func simulateSem(run *semRun) {
	s := run.s
	start := time.Now()
	run.start = start
	// The simulation's masters, network and faults, as simulate makes
	// them; a simRun carries them for fault.
	sr := &simRun{s: s, start: start, closeHanded: map[string]bool{}}
	for i, c := range s.Clocks {
		m := newSimMaster(i, start, c.Offset, c.Rate)
		sr.masters = append(sr.masters, m)
		defer m.StopScripts()
	}
	sr.net = newSimNet(s.Net, sr.masters, len(s.Clients)+1)
	sr.net.seed = s.Seed
	minTTL := slices.Min(s.TTLs)
	type client struct {
		r     *Redlock
		limit int
		plan  simClientPlan
	}
	var clients []*client
	for ci, cp := range s.Clients {
		nodes := make([]Node, s.Masters)
		for mi, m := range sr.masters {
			conn := newSimConn(sr.net, m, ci, rand.New(rand.NewPCG(s.Seed, uint64(1+ci*64+mi))))
			conn.ignoresCtx, conn.readTimeout, conn.reconnects = cp.IgnoresCtx, cp.ReadTimeout, cp.Reconnects
			conn.minTimeout = cp.NodeTimeout
			if conn.minTimeout == 0 {
				conn.minTimeout = max(min(DefaultNodeTimeout, minTTL/10), time.Millisecond)
			}
			nodes[mi] = conn
		}
		opts := []Option{WithBackoff(cp.MinBackoff, cp.MaxBackoff)}
		if s.Gate > 0 {
			opts = append(opts, WithTTL(s.maxTTL()), WithRestartGate(s.Gate))
		}
		if cp.NodeTimeout > 0 {
			opts = append(opts, WithNodeTimeout(cp.NodeTimeout))
		}
		r, err := New(nodes, opts...)
		if err != nil {
			run.violate("New: %v", err)
			return
		}
		var jmu sync.Mutex
		jrng := rand.New(rand.NewPCG(s.Seed, uint64(1<<40+ci)))
		r.randN = func(n time.Duration) time.Duration {
			jmu.Lock()
			defer jmu.Unlock()
			return time.Duration(jrng.Int64N(int64(n)))
		}
		c := &client{r: r, limit: run.plan.permits, plan: cp}
		if ci == run.plan.odd {
			c.limit++
		}
		clients = append(clients, c)
	}
	var faults sync.WaitGroup
	for _, f := range s.Faults {
		faults.Go(func() { sr.fault(f) })
	}
	var workers sync.WaitGroup
	for ci, c := range clients {
		for wi := range max(c.plan.Workers, 2) {
			rng := rand.New(rand.NewPCG(s.Seed, uint64(1<<20+ci*64+wi)))
			workers.Go(func() { run.work(c.r, ci, wi, c.limit, rng) })
		}
	}
	done := make(chan struct{})
	go func() { workers.Wait(); faults.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.Length + time.Minute):
		run.violate("workers or faults still running a minute after the end of the schedule")
		return
	}
	for _, c := range clients {
		c.r.Close()
	}
	sr.net.subsWG.Wait()
	sr.net.inflight.Wait()
	for _, m := range sr.masters {
		for _, err := range m.problems() {
			run.violate("master %d: %v", m.ID(), err)
		}
	}
	run.checkLeftovers(sr.masters)
	run.checkSem()
}

// checkLeftovers: with every permit given back and every request landed,
// a master that never restarted holds no live permit taken through a
// connection on which no request failed, timed out or was lost: every
// release and rollback sent after it reached it.
func (r *semRun) checkLeftovers(masters []*simMaster) {
	for mi, m := range masters {
		if m.Restarted() {
			continue
		}
		held := m.Holding(func(key string) bool { return !strings.HasPrefix(key, "sem:") })
		for _, k := range slices.Sorted(mapKeys(held)) {
			for f, h := range held[k].Holds {
				if by, _ := h.SetBy.(*simConn); by != nil && !by.isTroubled() {
					r.violate("master %d still holds slot %s of %s, taken by client %d, whose connection to it never failed: a release or rollback never reached it", mi, f[1:], k, by.client)
				}
			}
		}
	}
}

// work is one worker's loop.
func (r *semRun) work(rl *Redlock, client, worker, limit int, rng *rand.Rand) {
	s := r.s
	dur := func(lo, hi time.Duration) time.Duration { return uniform(rng, lo, hi) }
	for time.Since(r.start) < s.Length {
		time.Sleep(dur(0, 20*time.Millisecond))
		name := s.key(rng.IntN(min(s.Keys, 2)))
		ttl := s.TTLs[rng.IntN(len(s.TTLs))]
		opts := []Option{WithTTL(ttl)}
		fenced, auto := rng.IntN(3) == 0, rng.IntN(3) == 0
		if fenced {
			opts = append(opts, WithFencing())
		}
		if auto {
			opts = append(opts, WithAutoExtend())
		}
		sem := rl.Semaphore(name, limit)
		h := &semHolder{client: client, worker: worker, name: name, limit: limit, started: time.Now()}
		var l *Lock
		var err error
		if rng.IntN(5) < 2 {
			ctx, cancel := context.WithTimeout(context.Background(), dur(time.Millisecond, 200*time.Millisecond))
			l, err = sem.TryAcquire(ctx, opts...)
			cancel()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), dur(5*time.Millisecond, 1500*time.Millisecond))
			l, err = sem.Acquire(ctx, opts...)
			cancel()
		}
		r.mu.Lock()
		r.tries++
		r.mu.Unlock()
		if err != nil {
			var pe *PermitsError
			if errors.As(err, &pe) && r.plan.odd < 0 {
				r.violate("client %d: %v, with one limit in the run", client, err)
			}
			continue
		}
		h.acquired, h.slot, h.token = time.Now(), int(l.cfg.slot), l.Fence()
		r.mu.Lock()
		r.holders = append(r.holders, h)
		r.mu.Unlock()
		for k := rng.IntN(4); k >= 0; k-- {
			r.claim(h, l)
			ttl := l.TTL()
			switch x := rng.IntN(100); {
			case x < 45:
				time.Sleep(dur(0, ttl/2))
			case x < 75:
				ctx, cancel := context.WithTimeout(context.Background(), dur(time.Millisecond, 300*time.Millisecond))
				r.clip(h)
				_ = l.Extend(ctx, s.TTLs[rng.IntN(len(s.TTLs))])
				cancel()
			case x < 87:
				time.Sleep(dur(ttl/2, 2*ttl)) // a GC pause, maybe past Until
			default:
				time.Sleep(dur(0, ttl/20))
			}
			r.claim(h, l)
		}
		ctx, cancel := context.WithTimeout(context.Background(), dur(time.Millisecond, 500*time.Millisecond))
		r.clip(h)
		_ = l.Unlock(ctx)
		cancel()
	}
}

// claim records that h holds its permit from now to Until, while valid and
// not lost.
func (r *semRun) claim(h *semHolder, l *Lock) {
	now, until := time.Now(), l.Until()
	if !now.Before(until) {
		return
	}
	select {
	case <-l.Done():
		return
	default:
	}
	r.mu.Lock()
	h.claims = append(h.claims, simClaim{now, until})
	r.mu.Unlock()
}

// clip ends h's claims now: it is about to Extend or Unlock.
func (r *semRun) clip(h *semHolder) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range h.claims {
		if h.claims[i].to.After(now) {
			h.claims[i].to = now
		}
	}
}

// checkSem checks the history (see the file's comment).
func (r *semRun) checkSem() {
	type event struct {
		at    time.Time
		start bool
		h     *semHolder
	}
	byName := map[string][]event{}
	for _, h := range r.holders {
		for _, c := range h.claims {
			if c.from.Before(c.to) {
				byName[h.name] = append(byName[h.name], event{c.from, true, h}, event{c.to, false, h})
			}
		}
	}
	for name, evs := range byName {
		slices.SortFunc(evs, func(a, b event) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			if a.start == b.start {
				return 0
			}
			if !a.start {
				return -1 // [from, to): an end before a start at one instant
			}
			return 1
		})
		active := map[*semHolder]int{}
		reported := 0
		for _, e := range evs {
			if !e.start {
				if active[e.h]--; active[e.h] == 0 {
					delete(active, e.h)
				}
				continue
			}
			if active[e.h]++; active[e.h] > 1 {
				continue
			}
			least := e.h.limit
			var who []string
			for h := range active {
				least = min(least, h.limit)
				who = append(who, fmt.Sprintf("client %d worker %d slot %d limit %d", h.client, h.worker, h.slot, h.limit))
				if h != e.h && h.limit != e.h.limit && reported < 3 {
					reported++
					r.violate("%s at +%v: holders of limits %d and %d overlap", name, e.at.Sub(r.start), h.limit, e.h.limit)
				}
				if h != e.h && h.slot == e.h.slot && reported < 3 {
					reported++
					r.violate("%s at +%v: two holders of slot %d overlap", name, e.at.Sub(r.start), h.slot)
				}
			}
			if len(active) > least && reported < 3 {
				reported++
				slices.Sort(who)
				r.violate("%s at +%v: %d holders of %d permits: %s", name, e.at.Sub(r.start), len(active), least, strings.Join(who, "; "))
			}
		}
	}
	// Tokens per slot: a holder whose acquire began after another's
	// returned has a larger token.
	for i, a := range r.holders {
		for _, b := range r.holders[i+1:] {
			if a.token == 0 || b.token == 0 || a.name != b.name || a.slot != b.slot || a.limit != b.limit {
				continue
			}
			first, second := a, b
			if b.acquired.Before(a.started) {
				first, second = b, a
			} else if !a.acquired.Before(b.started) {
				continue
			}
			if second.token <= first.token {
				r.violate("%s slot %d: token %d after %d", a.name, a.slot, second.token, first.token)
			}
		}
	}
}

// simSemSweep runs n schedules from base (or until soak ends); it stops at
// the first violation of a safe schedule and reports it.
func simSemSweep(t *testing.T, base uint64, n int, soak time.Duration) (ran, unsafeCaught, holders, tries int64, failed string) {
	var next, r, u, hs, ts atomic.Int64
	var stop atomic.Bool
	var mu sync.Mutex
	end := time.Now().Add(soak)
	t.Run("sweep", func(t *testing.T) {
		for w := range 2 {
			t.Run(fmt.Sprintf("w%d", w), func(t *testing.T) {
				t.Parallel()
				for !stop.Load() {
					i := next.Add(1) - 1
					if soak > 0 && time.Now().After(end) || soak == 0 && i >= int64(n) {
						return
					}
					s := genSchedule(base + uint64(i))
					res := runSemSchedule(t, s)
					r.Add(1)
					hs.Add(int64(res.holders))
					ts.Add(int64(res.tries))
					if len(res.violations) == 0 {
						continue
					}
					if s.unsafe() {
						u.Add(1)
						continue
					}
					stop.Store(true)
					mu.Lock()
					if failed == "" {
						failed = fmt.Sprintf("seed %d (limit %d, odd client %d):\n  %s", s.Seed, semPlanOf(s).permits, semPlanOf(s).odd, strings.Join(first(res.violations, 10), "\n  "))
					}
					mu.Unlock()
				}
			})
		}
	})
	return r.Load(), u.Load(), hs.Load(), ts.Load(), failed
}

// TestSimSem runs the semaphore's simulation.
func TestSimSem(t *testing.T) {
	if v := simEnv(*simSeedFlag, "REDLOCK_SIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("sim.seed: %v", err)
		}
		s := genSchedule(seed)
		res := runSemSchedule(t, s)
		t.Logf("schedule (limit %d, odd client %d):\n%s", semPlanOf(s).permits, semPlanOf(s).odd, s)
		t.Logf("%d permits taken in %d tries", res.holders, res.tries)
		if len(res.violations) > 0 && !s.unsafe() {
			t.Errorf("violations:\n  %s", strings.Join(res.violations, "\n  "))
		}
		return
	}
	n := defaultSimSemSchedules
	if v := simEnv(strconv.Itoa(*simSchedulesFlag), "REDLOCK_SIM_SCHEDULES"); v != "0" && v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("sim.schedules: %v", err)
		}
	}
	soak := *simSoakFlag
	base := rand.Uint64() >> 16
	if v := simEnv(*simBaseFlag, "REDLOCK_SIM_BASE"); v != "" {
		var err error
		if base, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("sim.base: %v", err)
		}
	}
	began := time.Now()
	ran, unsafe, holders, tries, failed := simSemSweep(t, base, n, soak)
	t.Logf("%d schedules from seed %d in %v: %d permits taken in %d tries; %d schedules that break an assumption were caught unsafe",
		ran, base, time.Since(began).Round(time.Second), holders, tries, unsafe)
	if failed != "" {
		t.Fatalf("violation (rerun with -run TestSimSem -sim.seed=N): %s", failed)
	}
}

// TestSimSemMutants: the simulation's checker catches the mutants of the
// semaphore's safety rules within a few hundred schedules (measured: the
// first few). The rollback mutant breaks no safety rule: its partial
// grants block permits until their TTL, which the schedules' short TTLs
// end long before the end-of-run check (400 schedules did not show one);
// TestSemaphoreMutantsKilled kills it on real masters.
func TestSimSemMutants(t *testing.T) {
	for _, m := range []semMutant{mutantSlots, mutantLimit} {
		t.Run(string(m), func(t *testing.T) {
			m.mutate(t)
			base := uint64(1) << 32
			ran, _, _, _, failed := simSemSweep(t, base, 400, 0)
			if failed == "" {
				t.Fatalf("mutant %s survived %d schedules", m, ran)
			}
			t.Logf("mutant %s caught after %d schedules: %s", m, ran, strings.SplitN(failed, "\n", 3)[0])
		})
	}
}
