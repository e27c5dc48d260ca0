package redlock

import (
	"context"
	flagpkg "flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The simulation of the RWMutex: the schedules of TestSim (faults, clocks,
// networks) with every client's workers taking RWMutexes of the keys'
// names as readers and writers, on the real scripts. The checker
// (simRun.check) holds them to the RWMutex's promises: no reader's claim
// overlaps a writer's, no two writers' claims overlap, and writers' fence
// tokens grow. The deterministic tests below show that it sees the
// mutant of each rule.

var simRWSchedulesFlag = flagpkg.Int("sim.rw.schedules", 40, "simulation of the RWMutex: schedules to run")

// rwCall is one call of a worker of an RW client: a reader (most times) or
// a writer, Try or waiting, fenced (writers) and auto-extended at random;
// the lock it takes is held, extended and unlocked as a mutex's is
// (simWorker.acquired). Its holders' key is "rw:" and the name, so that
// they are checked apart from the mutex of the same name.
func (w *simWorker) rwCall() {
	s := w.run.s
	time.Sleep(w.dur(0, 20*time.Millisecond))
	name := s.key(w.rng.IntN(s.Keys))
	ttl := s.TTLs[w.rng.IntN(len(s.TTLs))]
	reader := w.rng.IntN(3) != 0
	opts := []Option{WithTTL(ttl)}
	fenced := !reader && w.rng.IntN(2) == 0
	if fenced {
		opts = append(opts, WithFencing())
	}
	auto := w.rng.IntN(3) == 0
	if auto {
		opts = append(opts, WithAutoExtend())
	}
	h := &simHolder{client: w.c.id, worker: w.id, key: "rw:" + name, fenced: fenced, reader: reader}
	m := w.c.r.RWMutex(name)
	try := w.rng.IntN(3) == 0
	d := w.dur(5*time.Millisecond, 1500*time.Millisecond)
	if try {
		d = w.dur(time.Millisecond, 200*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	h.started = time.Now()
	var l *Lock
	var err error
	switch {
	case reader && try:
		l, err = m.TryRLock(ctx, opts...)
	case reader:
		l, err = m.RLock(ctx, opts...)
	case try:
		l, err = m.TryLock(ctx, opts...)
	default:
		l, err = m.Lock(ctx, opts...)
	}
	cancel()
	w.acquired(h, l, err, auto)
}

// rwSchedule makes s a schedule of RW clients: the same faults, clocks and
// network, every client's workers on RWMutexes (without owners: an
// RWMutex's holds have none).
func rwSchedule(s *simSchedule) *simSchedule {
	for i := range s.Clients {
		c := &s.Clients[i]
		c.RW, c.Owner, c.Loops = true, "", false
	}
	return s
}

// TestSimRW runs -sim.rw.schedules schedules of RW clients from -sim.base
// (default: random), or the one -sim.seed names.
func TestSimRW(t *testing.T) {
	if v := simEnv(*simSeedFlag, "REDLOCK_SIM_SEED"); v != "" {
		var seed uint64
		if _, err := fmt.Sscan(v, &seed); err != nil {
			t.Fatalf("sim.seed: %v", err)
		}
		s := rwSchedule(genSchedule(seed))
		res := runSchedule(t, s, *simTraceFlag)
		t.Logf("schedule:\n%s\n%s", s, res.summary())
		if res.trace != "" {
			t.Logf("trace:\n%s", res.trace)
		}
		if len(res.violations) > 0 && !s.unsafe() {
			t.Errorf("violations:\n  %s", strings.Join(res.violations, "\n  "))
		}
		return
	}
	base := rand.Uint64() >> 16
	if v := simEnv(*simBaseFlag, "REDLOCK_SIM_BASE"); v != "" {
		if _, err := fmt.Sscan(v, &base); err != nil {
			t.Fatalf("sim.base: %v", err)
		}
	}
	n := *simRWSchedulesFlag
	var next, ran, unsafeRuns, caught, holders, readers atomic.Int64
	var stop atomic.Bool
	begin := time.Now()
	t.Run("sweep", func(t *testing.T) {
		for w := range runtime.GOMAXPROCS(0) {
			t.Run(fmt.Sprintf("w%d", w), func(t *testing.T) {
				t.Parallel()
				for !stop.Load() {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					seed := base + uint64(i)
					s := rwSchedule(genSchedule(seed))
					res := runSchedule(t, s, false)
					ran.Add(1)
					holders.Add(int64(res.holders))
					readers.Add(int64(res.readers))
					if s.unsafe() {
						unsafeRuns.Add(1)
						if len(res.violations) > 0 {
							caught.Add(1)
						}
						continue
					}
					if len(res.violations) > 0 {
						stop.Store(true)
						t.Errorf("seed %d: %d violation(s):\n  %s\n%s\nschedule:\n%s\nrerun: go test -race -run 'TestSimRW$' -sim.seed=%d",
							seed, len(res.violations), strings.Join(first(res.violations, 10), "\n  "), res.summary(), s, seed)
					}
				}
			})
		}
	})
	el := time.Since(begin)
	t.Logf("%d RW schedules from seed %d in %v (%.1f/s): %d holders (%d readers); %d broke an assumption on purpose, %d of them caught",
		ran.Load(), base, el.Round(time.Millisecond), float64(ran.Load())/el.Seconds(), holders.Load(), readers.Load(), unsafeRuns.Load(), caught.Load())
}

// rwMutant swaps rw_acquire.lua for the scripts of the test, with old
// replaced by new (which must be there), until the test ends.
func rwMutant(t *testing.T, old, new string) {
	t.Helper()
	if !strings.Contains(rwAcquireLua, old) {
		t.Fatalf("rw_acquire.lua has no %q to mutate", old)
	}
	mutated := strings.Replace(rwAcquireLua, old, new, 1)
	saved := rwAcquireSrc
	rwAcquireSrc = script(rwStateLua, rwClaimLua, mutated)
	t.Cleanup(func() { rwAcquireSrc = saved })
}

// simRWScene runs fn in a bubble on masters simulated masters, with one
// Redlock per client (no faults, a 1 ms network), then checks the
// history fn recorded (simRun.check) and returns its violations.
func simRWScene(t *testing.T, masters, clients int, fn func(run *simRun, rls []*Redlock)) []string {
	t.Helper()
	s := &simSchedule{Seed: 1, Masters: masters, Keys: 1, TTLs: []time.Duration{time.Second}}
	run := &simRun{s: s, closeHanded: map[string]bool{}}
	synctest.Test(t, func(t *testing.T) {
		run.start = time.Now()
		for i := range masters {
			m := newSimMaster(i, run.start, 0, 1)
			run.masters = append(run.masters, m)
			defer m.StopScripts()
		}
		run.net = newSimNet(simNetParams{Base: time.Millisecond}, run.masters, clients)
		rls := make([]*Redlock, clients)
		for c := range rls {
			nodes := make([]Node, masters)
			for mi, m := range run.masters {
				conn := newSimConn(run.net, m, c, rand.New(rand.NewPCG(1, uint64(c*64+mi))))
				conn.clean, conn.minTimeout = true, 50*time.Millisecond
				nodes[mi] = conn
			}
			r, err := New(nodes, WithNodeTimeout(50*time.Millisecond), WithBackoff(5*time.Millisecond, 40*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			rls[c] = r
		}
		fn(run, rls)
		for _, r := range rls {
			r.Close()
		}
		run.net.subsWG.Wait()
		run.net.inflight.Wait()
	})
	run.check()
	return run.violations
}

// simHold records l, taken at started by a reader or a writer, as held from
// now for d (at most to its Until), then unlocks it.
func simHold(run *simRun, l *Lock, reader bool, started time.Time, d time.Duration) {
	h := &simHolder{key: "rw:x", value: l.Value(), reader: reader, started: started, acquired: time.Now()}
	run.addHolder(h)
	now := time.Now()
	to := now.Add(d)
	if u := l.Until(); u.Before(to) {
		to = u
	}
	run.claim(h, now, to)
	time.Sleep(d)
	_ = l.Unlock(context.Background())
}

// TestSimRWMutantReaderBesideWriter: a reader and a writer that each reach
// a different majority of 3 masters; the mutant that admits a reader beside
// a writer on one master lets both hold, and the checker says so.
func TestSimRWMutantReaderBesideWriter(t *testing.T) {
	scene := func(run *simRun, rls []*Redlock) {
		run.net.cutN[0][2], run.net.cutN[1][0] = 1, 1
		ctx := context.Background()
		start := time.Now()
		w, err := rls[1].RWMutex("x").TryLock(ctx, WithTTL(time.Second))
		if err != nil {
			run.violate("writer: %v", err)
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() { simHold(run, w, false, start, 300*time.Millisecond) })
		if r, err := rls[0].RWMutex("x").TryRLock(ctx, WithTTL(time.Second)); err == nil {
			simHold(run, r, true, start, 100*time.Millisecond)
		}
		wg.Wait()
	}
	if v := simRWScene(t, 3, 2, scene); len(v) != 0 {
		t.Fatalf("the real scripts: %v", v)
	}
	rwMutant(t, "role == 'r' and (w or c > 0)", "role == 'r' and (c > 0)")
	if v := simRWScene(t, 3, 2, scene); len(v) == 0 {
		t.Fatal("the checker did not see a reader beside a writer (the mutant's)")
	}
}

// TestSimRWMutantSharedReaderTTL: a reader's expiry is its own; the mutant
// that gives every reader the latest reader's TTL ends a 2 s reader's hold
// at a 200 ms reader's, and lets a writer in beside it.
func TestSimRWMutantSharedReaderTTL(t *testing.T) {
	scene := func(run *simRun, rls []*Redlock) {
		ctx := context.Background()
		start := time.Now()
		long, err := rls[0].RWMutex("x").TryRLock(ctx, WithTTL(2*time.Second))
		if err != nil {
			run.violate("reader: %v", err)
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() { simHold(run, long, true, start, 1500*time.Millisecond) })
		if _, err := rls[1].RWMutex("x").TryRLock(ctx, WithTTL(200*time.Millisecond)); err != nil {
			run.violate("short reader: %v", err) // it crashes: never unlocked
		}
		time.Sleep(400 * time.Millisecond)
		if w, err := rls[1].RWMutex("x").TryLock(ctx, WithTTL(time.Second)); err == nil {
			simHold(run, w, false, start, 100*time.Millisecond)
		}
		wg.Wait()
	}
	if v := simRWScene(t, 3, 2, scene); len(v) != 0 {
		t.Fatalf("the real scripts: %v", v)
	}
	rwMutant(t, "C('HSET', k, f, ms)\n",
		"C('HSET', k, f, ms)\n"+
			"for _, g in ipairs(C('HKEYS', k)) do if g:sub(1, 1) == 'r' then C('HSET', k, g, ms) end end\n")
	if v := simRWScene(t, 3, 2, scene); len(v) == 0 {
		t.Fatal("the checker did not see a writer beside a reader whose hold a shared TTL cut short (the mutant's)")
	}
}

// TestSimRWMutantNoClaimCheck: a writer behind 4 looping readers with
// overlapping holds gets in within a few holds; the mutant whose readers
// ignore the waiting writer's claim starves it.
func TestSimRWMutantNoClaimCheck(t *testing.T) {
	var waited time.Duration
	scene := func(run *simRun, rls []*Redlock) {
		const hold = 100 * time.Millisecond
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * hold / 4)
				for ctx.Err() == nil {
					start := time.Now()
					if l, err := rls[i].RWMutex("x").RLock(ctx, WithTTL(time.Second)); err == nil {
						simHold(run, l, true, start, hold)
					}
				}
			})
		}
		time.Sleep(2 * hold)
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w, err := rls[4].RWMutex("x").Lock(wctx, WithTTL(time.Second))
		cancel()
		waited = time.Since(start)
		if err == nil {
			simHold(run, w, false, start, hold)
		}
		stop()
		wg.Wait()
	}
	if v := simRWScene(t, 3, 5, scene); len(v) != 0 || waited > time.Second {
		t.Fatalf("the real scripts: the writer waited %v; %v", waited, v)
	}
	rwMutant(t, "role == 'r' and (w or c > 0)", "role == 'r' and (w)")
	if v := simRWScene(t, 3, 5, scene); len(v) != 0 || waited < 3*time.Second {
		t.Fatalf("the mutant without the claim check: the writer waited only %v behind looping readers; %v", waited, v)
	}
}

// checkRWFreeAtOnce: with the faults healed and every holder gone, a fresh
// client takes each RWMutex as its writer at its first attempt, unless so
// many masters still keep a live reader, writer or claim of it (left by a
// connection that failed) that no quorum is free. A claim that a writer's
// give-up or Unlock failed to take away where its connection never failed
// is reported by name.
func (r *simRun) checkRWFreeAtOnce() {
	s := r.s
	if !slices.ContainsFunc(s.Clients, func(c simClientPlan) bool { return c.RW }) {
		return
	}
	nodes := make([]Node, s.Masters)
	for mi, m := range r.masters {
		c := newSimConn(r.net, m, len(s.Clients), rand.New(rand.NewPCG(s.Seed, uint64(1<<31+mi))))
		c.clean = true
		nodes[mi] = c
	}
	rl, err := New(nodes, WithTTL(time.Second))
	if err != nil {
		r.violate("New: %v", err)
		return
	}
	defer rl.Close()
	for k := range s.Keys {
		name := s.key(k)
		key := RWMutexKey(name)
		held := 0
		for _, m := range r.masters {
			e, ok := m.Holding(func(n string) bool { return n != key })[key]
			if !ok {
				continue
			}
			held++
			for f := range e.Holds {
				if f[0] == 'c' && !m.Restarted() && !r.claimTroubled(m.ID()) {
					r.violate("master %d still keeps claim %.8s... of %s after the run, and no client's connection to it failed: a writer's give-up or Unlock never took it away", m.ID(), f, key)
				}
			}
		}
		l, err := rl.RWMutex(name).TryLock(context.Background())
		if err != nil {
			if held <= s.Masters-rl.Quorum() {
				r.violate("after the run, a fresh writer could not take %s although only %d of %d masters keep entries of it: %v", key, held, s.Masters, err)
			}
			continue
		}
		if err := l.Unlock(context.Background()); err != nil {
			r.violate("after the run, a fresh writer's Unlock of %s: %v", key, err)
		}
	}
}

// claimTroubled reports whether some client's connection to master i
// failed: a claim's withdrawal may then not have reached it.
func (r *simRun) claimTroubled(i int) bool {
	for _, c := range r.clients {
		if c.conns[i].isTroubled() {
			return true
		}
	}
	return false
}
