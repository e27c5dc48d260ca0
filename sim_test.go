package redlock

import (
	"context"
	"errors"
	flagpkg "flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/sim"
)

// The simulation: the real coordinator — several Redlocks, as several
// processes would be, calling Lock, TryLock, Do, Extend, Unlock, with
// auto-extend, fencing and watched Done channels — against simulated masters
// (internal/sim), which run the real scripts of lua/ in a Lua
// interpreter, over a simulated network (below), through
// thousands of randomized fault schedules, each in a testing/synctest bubble:
// the Redlocks are made inside it, so their lanes, timers, backoff, node
// timeouts and scheduler run in the bubble's virtual time, and a schedule of
// seconds of faults costs milliseconds of CPU.
//
// A schedule is drawn from a seed (genSchedule): three or five masters, each
// with its own clock (an offset, and a rate within the drift allowance); the
// links' delay distribution and baseline losses; two to four clients, each
// a Redlock with its own options (node timeout, backoff) and its own kind of
// connection (honours contexts or waits for a read timeout, keeps or drops a
// connection that timed out), running one or two workers; and a timeline
// of faults: masters paused, killed and restarted (with their data; or
// empty, or from a snapshot saved earlier in the run — an RDB, which loses
// the writes after it — after more than the largest TTL), partitions
// between clients and masters, slow and lossy masters. A few schedules
// break an assumption on purpose (a clock that jumps or runs fast, a
// restart empty or from a snapshot faster than the largest TTL); their
// violations are reported as unsafe runs, not failures. A quarter of the
// schedules (-sim.gated: all) give every client the restart gate
// (WithRestartGate) and restart masters empty or from a snapshot at once:
// the gate must make that safe.
//
// A worker loops: it takes a key (Lock with a deadline, TryLock, or Do),
// holds it for a few steps — work, Extend to a random TTL (sometimes with a
// context too short for any reply), a pause past its validity (a GC pause) —
// and unlocks it. While it holds a lock it claims it: at the steps' edges it
// reads Until and, when the lock is still valid (and its Done still open),
// records the claim [now, Until). Its claims end when it calls Extend (which
// may shorten the lock) or Unlock. A third of the clients take every lock as
// an owner of their own (WithOwner, shared by the client's workers): their
// workers also nest — take the key again while holding it, with options of
// their own — and release their holds in random order, so nested holds,
// their rollbacks after lost replies, and their extends run against the
// masters' hashes of holds (lua/hold.lua).
//
// Pub/sub is simulated too: the scripts keep the keys' queues of waiting
// Lock calls and hand the key over (lua/release.lua, lua/handoff.lua,
// hold.lua), publishing to the masters' subscribers, and the Redlocks subscribe through their simulated Nodes
// (simConn), so registrations, hand-offs, Unlocks queued behind the
// next holder, adoptions, give-ups and ghost hand-offs happen. Half the
// clients without an owner loop (lock a key again at once after an Unlock)
// and have one more worker; a third of the schedules send some releases
// twice (a go-redis retry on a new connection).
//
// The checker (check) holds the run, in bubble time, to what the library
// promises while the assumptions hold:
//   - no two holders of a key have overlapping claims, unless both hold it
//     as the same owner (a plain holder and an owner's, or two owners', may
//     not overlap);
//   - fence tokens strictly increase from holder to holder: a holder whose
//     acquire began after another's returned has a larger token, and no two
//     holders share one (holds of the same owner excepted);
//   - a watched or auto-extended lock's Done closes by Until plus the node
//     timeout;
//   - at the end, with the faults healed, every request landed and every
//     holder unlocked, no master holds a key (or an owner's hold of it)
//     through a connection on which nothing ever failed (a release or
//     rollback that never came), and a fresh client takes every key at once
//     unless too many masters still hold it (the documented stragglers): a
//     key whose holds were all released is free; no master holds a key it
//     handed (hand#reg) whose hand-off message reached the Redlock over a
//     connection that never failed (except TestSimCloseKeepsHandedKey's
//     known case). The keys' queues (WaitKey) are not locks: they are not
//     leftovers.
//
// Flags (or the environment variables in brackets):
//
//	-sim.seed=N         run only schedule N, print it and its violations [REDLOCK_SIM_SEED]
//	-sim.trace          with -sim.seed: print every request of the run
//	-sim.schedules=N    run N schedules (default defaultSimSchedules; make test also runs SIM_SCHEDULES without -race) [REDLOCK_SIM_SCHEDULES]
//	-sim.soak=DURATION  run schedules until DURATION has passed [REDLOCK_SIM_SOAK]
//	-sim.base=N         the first seed (default: drawn at random and logged) [REDLOCK_SIM_BASE]
//	-sim.gated          every schedule with the restart gate (and its empty and snapshot restarts at once)
//	-sim.keepgoing      do not stop at the first failing schedule: count them all, each in a line
//
// # Reproducibility
//
// A seed fixes the schedule completely: masters, clocks, clients, their
// options, the fault timeline; per connection, in the order requests are
// sent on it, every delay and loss; per worker, every choice of key,
// option, operation, step and pause; per client, the backoff jitter. What
// it does not fix is the order in which goroutines that are runnable at the
// same virtual instant run (the bubble runs them on the real scheduler, in
// parallel, and -race shuffles them on purpose), and so which of two
// requests pushed at the same instant goes out first, which of two workers
// draws the next jitter, which reply a collector counts first. A run
// follows its seed until such a tie goes the other way, and from there it
// may not: a seed reruns the same scenario, and often but not always the
// same interleaving. Measured on the three mutants of issue 18 (the first
// failing seed of 8 sweeps each, each rerun 10 times with -sim.seed, without
// -race): 78, 80 and 77 of 80 reruns failed again (235 of 240); before the
// seed drove the jitter, 43, 33 and 10 of 80. Rerun a failing seed with
// -count=10 before concluding it does not fail.
var (
	simSeedFlag      = flagpkg.String("sim.seed", "", "simulation: run only this seed and print its schedule")
	simTraceFlag     = flagpkg.Bool("sim.trace", false, "simulation: with -sim.seed, print every request")
	simSchedulesFlag = flagpkg.Int("sim.schedules", 0, "simulation: schedules to run (0: the default)")
	simSoakFlag      = flagpkg.Duration("sim.soak", 0, "simulation: run schedules for this long")
	simBaseFlag      = flagpkg.String("sim.base", "", "simulation: the first seed (default: random)")
	simGatedFlag     = flagpkg.Bool("sim.gated", false, "simulation: every schedule with the restart gate on and its empty and snapshot restarts at once")
	simKeepGoingFlag = flagpkg.Bool("sim.keepgoing", false, "simulation: count every failing schedule instead of stopping at the first")
)

// defaultSimSchedules is how many schedules a plain `go test` runs, and so
// the -race run of `make test`. Under -race a schedule costs about 130 ms of
// CPU, ten times its cost without: the -race run is there for data races
// in the library under the simulation's schedules, and a few reach what
// many do (TestSim, TestSimSem and TestSimRW from one seed covered 999 of
// the library's blocks with 60 schedules each, 1004 with 300). For the
// volume `make test` runs the Makefile's SIM_SCHEDULES without -race.
// TestSim logs the rate.
const defaultSimSchedules = 100

// simEnv returns a flag's value, or the environment variable's when the flag
// is unset.
func simEnv(flagVal, env string) string {
	if flagVal != "" {
		return flagVal
	}
	return os.Getenv(env)
}

// TestSim runs the simulation: one seed (-sim.seed), a number of schedules,
// or a soak. It stops at the first schedule that breaks a promise without
// breaking an assumption, and prints its seed and schedule.
func TestSim(t *testing.T) {
	if v := simEnv(*simSeedFlag, "REDLOCK_SIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("sim.seed: %v", err)
		}
		s := genSchedule(seed)
		res := runSchedule(t, s, *simTraceFlag)
		t.Logf("schedule:\n%s", s)
		t.Logf("%s", res.summary())
		if s.Gate > 0 {
			t.Logf("restart gates let votes count early: %v", res.gateEarly)
			for _, f := range res.gateEarly.first {
				t.Logf("  %s", f)
			}
		}
		for _, d := range run0(res) {
			t.Logf("left: %s", d)
		}
		if res.trace != "" {
			t.Logf("trace:\n%s", res.trace)
		}
		if len(res.violations) > 0 {
			if s.unsafe() {
				t.Logf("unsafe (assumption broken on purpose: %s):\n  %s", strings.Join(s.Breaks, "; "), strings.Join(res.violations, "\n  "))
				return
			}
			t.Errorf("violations:\n  %s", strings.Join(res.violations, "\n  "))
		}
		return
	}

	n := defaultSimSchedules
	if v := simEnv(strconv.Itoa(*simSchedulesFlag), "REDLOCK_SIM_SCHEDULES"); v != "0" && v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("sim.schedules: %v", err)
		}
	}
	soak := *simSoakFlag
	if soak == 0 {
		if v := os.Getenv("REDLOCK_SIM_SOAK"); v != "" {
			var err error
			if soak, err = time.ParseDuration(v); err != nil {
				t.Fatalf("REDLOCK_SIM_SOAK: %v", err)
			}
		}
	}
	base := rand.Uint64() >> 16 // seeds stay short enough to type
	if v := simEnv(*simBaseFlag, "REDLOCK_SIM_BASE"); v != "" {
		var err error
		if base, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("sim.base: %v", err)
		}
	}
	if soak > 0 {
		n = 0
		t.Logf("soak for %v from seed %d", soak, base)
	} else {
		t.Logf("%d schedules from seed %d (rerun one with -sim.seed=N)", n, base)
	}
	st := simSweep(t, base, n, soak)
	st.report(t)
	// Runs that break an assumption on purpose must come out unsafe, not
	// pass silently. A quarter of those that break a clock or restart
	// assumption do (the others break it where no client contends), so
	// among 50 or more unsafe runs none would mean the checker sees nothing.
	if u := st.unsafeRuns.Load(); u >= 50 && st.unsafeCaught.Load() == 0 {
		t.Errorf("none of %d schedules that break an assumption was reported unsafe: the checker sees nothing", u)
	}
}

// simStats is a sweep's outcome.
type simStats struct {
	ran          atomic.Int64
	unsafeRuns   atomic.Int64
	unsafeCaught atomic.Int64
	failed       atomic.Int64
	firstFail    atomic.Uint64 // 1 + the index of the first failing schedule
	holders      atomic.Int64
	owned        atomic.Int64 // holders that took the lock as an owner
	nested       atomic.Int64 // of them, taken while the worker held the key
	acquires     atomic.Int64
	requests     atomic.Int64
	virtual      atomic.Int64 // virtual time simulated, ns
	elapsed      time.Duration

	// Wake-ups and hand-offs (see simWakeStats), summed over the runs.
	wakeMu               sync.Mutex
	wake                 simWakeStats
	handed               int64 // holders that took the lock by hand-off
	loops                int64
	adoptable            int64
	leftHanded, leftLost int64
	leftAtClose          int64
	leftSeeds            []uint64 // a few runs that left a handed key whose message came
	delivered            int64    // pub/sub messages delivered
	lostMsgs             int64    // lost on the way
	dups                 int64    // releases sent twice
	base                 uint64
	// The restart gates' votes counted early (simGateEarly), and with
	// -sim.keepgoing the failing schedules by the holes their gates let
	// votes through: A (a snapshot's cache), B (an uptime read high).
	gateEarly                        simGateEarly
	gatedRuns, gatedHoles            int64 // gated schedules; of them, those whose gates let votes through a hole
	failA, failB, failAB, failNoHole int64
	failSeeds                        []uint64

	mu       sync.Mutex
	examples []string // a few unsafe runs' first violation
}

func (st *simStats) report(t *testing.T) {
	n := st.ran.Load()
	rate := float64(n) / st.elapsed.Seconds()
	t.Logf("%d schedules in %v: %.1f schedules/s, %.0f× real time (%v simulated); %d holders, %d acquire calls, %d requests",
		n, st.elapsed.Round(time.Millisecond), rate, float64(st.virtual.Load())/float64(st.elapsed), time.Duration(st.virtual.Load()).Round(time.Second),
		st.holders.Load(), st.acquires.Load(), st.requests.Load())
	t.Logf("%d holders took the lock as an owner, %d of them nested in a hold of theirs", st.owned.Load(), st.nested.Load())
	st.wakeMu.Lock()
	t.Logf("hand-offs: %d registrations, %d keys handed (%d to a registration that found the key free), %d holders took the lock by hand-off; %d Unlocks queued behind; %d wake-ups; %d entries dropped (nobody listened); %d hand-offs given back; pub/sub messages: %d delivered, %d lost; %d releases sent twice",
		st.wake.registrations, st.wake.Handoffs, st.wake.freeHand, st.handed, st.wake.behind, st.wake.Wakes, st.wake.Dropped, st.wake.ghosts, st.delivered, st.lostMsgs, st.dups)
	t.Logf("loops: %d Lock calls again at once after an Unlock, %d of them found a registration to take over; handed keys left at the end: %d whose message reached the Redlock over a connection that never failed (%d of them handed to a registration that Close dropped; seeds %v), %d others",
		st.loops, st.adoptable, st.leftHanded, st.leftAtClose, st.leftSeeds, st.leftLost)
	st.wakeMu.Unlock()
	t.Logf("%d schedules broke an assumption on purpose; %d of them were reported unsafe", st.unsafeRuns.Load(), st.unsafeCaught.Load())
	st.wakeMu.Lock()
	t.Logf("restart gates: %d gated schedules, %d of them let a vote count early through a hole; votes counted early: %v", st.gatedRuns, st.gatedHoles, st.gateEarly)
	if st.gateEarly.holes() > 0 {
		// What the gate holds, checked vote by vote: whether or not a
		// second holder followed, a gate that let a master vote before it
		// had been up the gate is broken.
		t.Errorf("restart gates let %d votes count before their masters had been up the gate: %v", st.gateEarly.holes(), st.gateEarly.first)
	}
	if f := st.failed.Load(); f > 0 && *simKeepGoingFlag {
		t.Logf("%d of %d schedules failed: %d with votes through hole A only (a snapshot's cache), %d through B only (uptime read high), %d through both, %d through neither; seeds %v",
			f, n, st.failA, st.failB, st.failAB, st.failNoHole, st.failSeeds)
	}
	st.wakeMu.Unlock()
	for _, e := range st.examples {
		t.Logf("  unsafe, as it may be: %s", e)
	}
	if f := st.firstFail.Load(); f > 0 {
		t.Logf("first failing schedule: #%d (seed %d)", f, st.base+f-1)
	}
}

// simSweep runs schedules base, base+1, ... on GOMAXPROCS parallel workers:
// n of them, or as many as fit in soak. It stops at the first failure.
func simSweep(t *testing.T, base uint64, n int, soak time.Duration) *simStats {
	st := &simStats{base: base}
	var next atomic.Uint64
	var stop atomic.Bool
	begin := time.Now()
	end := begin.Add(soak)
	t.Run("sweep", func(t *testing.T) {
		for w := range runtime.GOMAXPROCS(0) {
			t.Run(fmt.Sprintf("w%d", w), func(t *testing.T) {
				t.Parallel()
				for !stop.Load() {
					i := next.Add(1) - 1
					if soak > 0 && time.Now().After(end) || soak == 0 && i >= uint64(n) {
						return
					}
					seed := base + i
					s := genSchedule(seed)
					res := runSchedule(t, s, false)
					st.ran.Add(1)
					st.holders.Add(int64(res.holders))
					st.owned.Add(int64(res.owned))
					st.nested.Add(int64(res.nested))
					st.acquires.Add(int64(res.acquires))
					st.requests.Add(int64(res.requests))
					st.virtual.Add(int64(res.virtual))
					st.wakeMu.Lock()
					st.wake.add(res.wake)
					st.handed += int64(res.handed)
					st.loops += int64(res.loops)
					st.adoptable += int64(res.adoptable)
					st.leftHanded += int64(res.leftHanded)
					st.leftLost += int64(res.leftLost)
					st.leftAtClose += int64(res.leftAtClose)
					if res.leftHanded > 0 && len(st.leftSeeds) < 5 {
						st.leftSeeds = append(st.leftSeeds, seed)
					}
					st.delivered += res.delivered
					st.lostMsgs += res.lostMsgs
					st.dups += res.dups
					st.gateEarly.add(res.gateEarly)
					if s.Gate > 0 {
						st.gatedRuns++
						if res.gateEarly.holes() > 0 {
							st.gatedHoles++
						}
					}
					st.wakeMu.Unlock()
					if s.unsafe() {
						st.unsafeRuns.Add(1)
					}
					if len(res.violations) == 0 {
						continue
					}
					if s.unsafe() {
						st.unsafeCaught.Add(1)
						st.mu.Lock()
						if len(st.examples) < 3 {
							st.examples = append(st.examples, fmt.Sprintf("seed %d (%s): %s", seed, strings.Join(s.Breaks, "; "), res.violations[0]))
						}
						st.mu.Unlock()
						continue
					}
					nf := st.failed.Add(1)
					if *simKeepGoingFlag {
						ge := res.gateEarly
						st.wakeMu.Lock()
						switch {
						case ge.snapshot > 0 && ge.rounding > 0:
							st.failAB++
						case ge.snapshot > 0:
							st.failA++
						case ge.rounding > 0:
							st.failB++
						default:
							st.failNoHole++
						}
						if len(st.failSeeds) < 50 {
							st.failSeeds = append(st.failSeeds, seed)
						}
						st.wakeMu.Unlock()
						if nf <= 20 {
							t.Errorf("seed %d (rerun: -sim.seed=%d%s): %d violation(s), first: %s; gates let votes count early: %v", seed, seed, simGatedArg(), len(res.violations), res.violations[0], ge)
						}
						continue
					}
					for {
						f := st.firstFail.Load()
						if f != 0 && f <= i+1 || st.firstFail.CompareAndSwap(f, i+1) {
							break
						}
					}
					stop.Store(true)
					t.Errorf("seed %d (schedule #%d of this run): %d violation(s):\n  %s\n%s\nschedule:\n%s\nrerun: go test -race -run 'TestSim$' -sim.seed=%d%s (add -sim.trace for every request)",
						seed, i+1, len(res.violations), strings.Join(first(res.violations, 10), "\n  "), res.summary(), s, seed, simGatedArg())
				}
			})
		}
	})
	st.elapsed = time.Since(begin)
	return st
}

// simGatedArg is the flag a seed's rerun needs to draw the same schedule.
func simGatedArg() string {
	if *simGatedFlag {
		return " -sim.gated"
	}
	return ""
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}

// simSchedule is everything a seed decides before the run starts.
type simSchedule struct {
	Seed    uint64
	Masters int
	Keys    int
	Length  time.Duration // clients start new acquires until then
	TTLs    []time.Duration
	Clocks  []simClockPlan
	Net     simNetParams
	Clients []simClientPlan
	Faults  []simFault
	Breaks  []string // the assumptions this schedule breaks on purpose
	// Gate, when not 0, is every client's WithRestartGate: then masters
	// restart empty as soon as they like, which must be safe.
	Gate time.Duration
}

type simClockPlan struct {
	Offset time.Duration
	Rate   float64
}

type simClientPlan struct {
	Workers     int
	NodeTimeout time.Duration // 0: the default (min(100ms, TTL/10))
	MinBackoff  time.Duration
	MaxBackoff  time.Duration
	IgnoresCtx  bool
	ReadTimeout time.Duration
	Reconnects  bool
	// ChangesTTL: Extend may ask for another TTL than the lock's. With
	// Reconnects, a PEXPIRE to a shorter TTL that timed out can then land
	// after a later extend to a longer TTL succeeded (on a new connection)
	// and cut the keys short: the case Lock.capTTL handles. Found by the
	// first long sweep (about one schedule in 9000, when such clients were
	// labelled a known bug): an Extend to 40 ms whose request to one master
	// was delayed 33 ms and timed out; a renewal and an Extend to 150 ms on
	// a new connection landed before it and succeeded; the 40 ms PEXPIRE
	// then landed and the keys expired 100 ms before Until.
	ChangesTTL bool
	// Owner, when set, is the owner (WithOwner) of every call its workers
	// make: they share it, so their holds of a key may overlap, and each
	// nests holds (enters again while holding, releases in any order).
	Owner string
	// Loops: the client's workers often Lock the key again at once after
	// an Unlock, plain and with the same TTL (a loop on a contended key):
	// an Unlock that handed the key on left the call queued behind the
	// next holder (request.Behind), and the next Lock takes that
	// registration over (wakeups.adopt). Such a client has one more
	// worker, so that plain Lock calls contend and hand the key over.
	Loops bool
	// RW: the client's workers take RWMutexes of the keys' names, as
	// readers and writers (sim_rw_test.go: simWorker.rwCall).
	RW bool
}

type simFaultKind uint8

const (
	faultPause simFaultKind = iota
	faultKill
	faultPartition
	faultSlow
	faultLossy
	faultJump
)

func (k simFaultKind) String() string {
	return [...]string{"pause", "kill", "partition", "slow", "lossy", "clock-jump"}[k]
}

type simFault struct {
	At      time.Duration
	For     time.Duration
	Kind    simFaultKind
	Masters []int
	Clients []int           // partition: the clients cut off from Masters
	Restart sim.Restart     // kill: what the masters come back with
	SnapAt  time.Duration   // kill from a snapshot: when the masters save it
	Each    []time.Duration // kill: when not nil, each master's own For (For is the largest)
	Amount  time.Duration   // slow: extra reply delay; clock-jump: the jump
	Loss    float64         // lossy: the chance a reply is lost
}

func (f simFault) String() string {
	s := fmt.Sprintf("+%v %v masters %v", f.At.Round(time.Microsecond), f.Kind, f.Masters)
	switch f.Kind {
	case faultKill:
		if f.Each != nil {
			each := make([]string, len(f.Each))
			for i, d := range f.Each {
				each[i] = d.Round(time.Microsecond).String()
			}
			s += fmt.Sprintf(", restart %v after %v", f.Restart, strings.Join(each, ", "))
		} else {
			s += fmt.Sprintf(", restart %v after %v", f.Restart, f.For.Round(time.Microsecond))
		}
		if f.Restart == sim.RestartSnapshot {
			// A master paused or down then takes none, and keeps its last
			// (the run's trace says which).
			s += fmt.Sprintf(" (snapshot asked at +%v)", f.SnapAt.Round(time.Microsecond))
		}
	case faultPartition:
		s += fmt.Sprintf(" from clients %v for %v", f.Clients, f.For.Round(time.Microsecond))
	case faultSlow:
		s += fmt.Sprintf(" +%v per reply for %v", f.Amount.Round(time.Microsecond), f.For.Round(time.Microsecond))
	case faultLossy:
		s += fmt.Sprintf(" lose %.2f of replies for %v", f.Loss, f.For.Round(time.Microsecond))
	case faultJump:
		s += fmt.Sprintf(" jump %v", f.Amount.Round(time.Microsecond))
	default:
		s += fmt.Sprintf(" for %v", f.For.Round(time.Microsecond))
	}
	return s
}

func (s *simSchedule) unsafe() bool { return len(s.Breaks) > 0 }

func (s *simSchedule) maxTTL() time.Duration { return slices.Max(s.TTLs) }

func (s *simSchedule) key(i int) string { return "sim:" + strconv.Itoa(i) }

func (s *simSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  seed %d: %d masters, %d key(s), clients start work for %v, TTLs %v\n", s.Seed, s.Masters, s.Keys, s.Length, s.TTLs)
	for i, c := range s.Clocks {
		fmt.Fprintf(&b, "  master %d clock: offset %v, rate %.5f\n", i, c.Offset.Round(time.Microsecond), c.Rate)
	}
	fmt.Fprintf(&b, "  links: %v\n", s.Net)
	if s.Gate > 0 {
		fmt.Fprintf(&b, "  every client's restart gate: %v\n", s.Gate.Round(time.Microsecond))
	}
	for i, c := range s.Clients {
		fmt.Fprintf(&b, "  client %d: %d worker(s), node timeout %v, backoff %v..%v", i, c.Workers, c.NodeTimeout, c.MinBackoff, c.MaxBackoff)
		if c.IgnoresCtx {
			fmt.Fprintf(&b, ", ignores contexts (read timeout %v)", c.ReadTimeout)
		}
		if c.Reconnects {
			b.WriteString(", drops a connection that timed out")
		}
		if c.ChangesTTL {
			b.WriteString(", extends to other TTLs")
		}
		if c.Owner != "" {
			fmt.Fprintf(&b, ", owner %q (nests holds)", c.Owner)
		}
		if c.Loops {
			b.WriteString(", locks again at once after Unlock")
		}
		b.WriteByte('\n')
	}
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  fault %v\n", f)
	}
	for _, br := range s.Breaks {
		fmt.Fprintf(&b, "  UNSAFE ON PURPOSE: %s\n", br)
	}
	return b.String()
}

// uniform draws a duration from [lo, hi].
func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// subset draws k distinct indexes of n.
func subset(rng *rand.Rand, n, k int) []int {
	s := rng.Perm(n)[:k]
	slices.Sort(s)
	return s
}

// genSchedule draws the schedule of seed. About one in twenty breaks an
// assumption on purpose.
func genSchedule(seed uint64) *simSchedule {
	rng := rand.New(rand.NewPCG(seed, 0x5eed_5eed))
	s := &simSchedule{Seed: seed, Masters: 3, Keys: 1}
	if rng.IntN(5) < 3 {
		s.Masters = 5
	}
	if rng.IntN(4) == 0 {
		s.Keys = 2
	}
	allTTLs := []time.Duration{40 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond}
	for len(s.TTLs) == 0 {
		for _, ttl := range allTTLs {
			if rng.IntN(2) == 0 {
				s.TTLs = append(s.TTLs, ttl)
			}
		}
	}
	s.Length = uniform(rng, 500*time.Millisecond, 2500*time.Millisecond)

	// Clocks: an offset, and a rate within the default drift allowance
	// (a key of TTL T lives T/rate ≥ T − 1%·T − 2 ms).
	for range s.Masters {
		s.Clocks = append(s.Clocks, simClockPlan{
			Offset: uniform(rng, -20*time.Millisecond, 20*time.Millisecond),
			Rate:   1 + (rng.Float64()*2-1)*0.0099,
		})
	}

	s.Net = simNetParams{
		Base:   uniform(rng, 20*time.Microsecond, 500*time.Microsecond),
		Spread: uniform(rng, 10*time.Microsecond, time.Millisecond),
	}
	if rng.IntN(2) == 0 {
		s.Net.TailP = rng.Float64() * 0.05
		s.Net.TailMax = uniform(rng, 5*time.Millisecond, 200*time.Millisecond)
	}
	if rng.IntN(3) == 0 {
		s.Net.DropP = rng.Float64() * 0.03
		s.Net.LoseP = rng.Float64() * 0.03
	}

	nc := 2 + rng.IntN(3)
	for range nc {
		c := simClientPlan{Workers: 1 + rng.IntN(2), MinBackoff: DefaultMinBackoff, MaxBackoff: DefaultMaxBackoff}
		if rng.IntN(3) == 0 {
			c.NodeTimeout = uniform(rng, 2*time.Millisecond, 30*time.Millisecond)
		}
		if rng.IntN(2) == 0 {
			c.MinBackoff = uniform(rng, 2*time.Millisecond, 10*time.Millisecond)
			c.MaxBackoff = c.MinBackoff + uniform(rng, 0, 50*time.Millisecond)
		}
		if rng.IntN(3) == 0 {
			c.IgnoresCtx = true
			c.ReadTimeout = uniform(rng, 50*time.Millisecond, 1500*time.Millisecond)
		}
		c.Reconnects = rng.IntN(2) == 0
		c.ChangesTTL = rng.IntN(4) != 0
		s.Clients = append(s.Clients, c)
	}

	// Owners, from a stream of their own (the rest of a seed's schedule
	// stays as it was before there were owners): a third of the clients
	// take every lock as their own owner.
	orng := rand.New(rand.NewPCG(seed, 0x0a7e_0a7e))
	for i := range s.Clients {
		if orng.IntN(3) == 0 {
			s.Clients[i].Owner = "owner-" + strconv.Itoa(i)
		}
	}
	// Releases sent twice, from a stream of their own: a third of the
	// schedules.
	drng := rand.New(rand.NewPCG(seed, 0xd0b1_d0b1))
	if drng.IntN(3) == 0 {
		s.Net.DupP = drng.Float64() * 0.05
	}
	// Loops, from a stream of their own too: half of the clients without
	// an owner (the hand-off protocol is for plain locks).
	lrng := rand.New(rand.NewPCG(seed, 0x100b_100b))
	for i := range s.Clients {
		if lrng.IntN(2) == 0 && s.Clients[i].Owner == "" {
			s.Clients[i].Loops = true
			s.Clients[i].Workers++
		}
	}

	// The faults. A restart without data waits longer than the largest TTL
	// plus what the masters' clocks may differ by then (the fence tokens'
	// assumption), so only the breaking schedules below restart faster.
	quorum := s.Masters/2 + 1
	maxTTL := s.maxTTL()
	pickMasters := func() []int {
		if rng.IntN(2) == 0 {
			return subset(rng, s.Masters, 1)
		}
		return subset(rng, s.Masters, quorum+rng.IntN(s.Masters-quorum+1))
	}
	downUntil := make([]time.Duration, s.Masters) // no two kills of a master overlap
	nf := rng.IntN(7)
	for range nf {
		f := simFault{At: uniform(rng, 0, s.Length), Masters: pickMasters()}
		if rng.IntN(4) == 0 {
			f.For = uniform(rng, 300*time.Millisecond, 1500*time.Millisecond)
		} else {
			f.For = uniform(rng, 5*time.Millisecond, 300*time.Millisecond)
		}
		switch x := rng.IntN(100); {
		case x < 20:
			f.Kind = faultPause
		case x < 40:
			f.Kind = faultKill
			f.Restart = sim.RestartData
			if rng.IntN(2) != 0 {
				f.Restart = sim.RestartEmpty
				f.For = max(f.For, maxTTL+s.maxSkew(f.At+2*time.Second)+50*time.Millisecond)
			}
			ok := true
			for _, m := range f.Masters {
				ok = ok && downUntil[m] < f.At
			}
			if !ok {
				continue
			}
			for _, m := range f.Masters {
				downUntil[m] = f.At + f.For + time.Millisecond
			}
		case x < 65:
			f.Kind = faultPartition
			f.Clients = subset(rng, nc, 1+rng.IntN(nc))
		case x < 85:
			f.Kind = faultSlow
			f.Amount = uniform(rng, time.Millisecond, 400*time.Millisecond)
		default:
			f.Kind = faultLossy
			f.Loss = 0.1 + rng.Float64()*0.9
		}
		s.Faults = append(s.Faults, f)
	}

	if rng.IntN(20) == 0 {
		s.breakOne(rng)
	}
	// The restart gate, from a stream of its own: a quarter of the
	// schedules, with the largest TTL plus what the masters' clocks may
	// differ by. Their empty restarts come back at once (5 to 300 ms),
	// breaking the delayed-restart rule the gate enforces.
	grng := rand.New(rand.NewPCG(seed, 0x6a7e_6a7e))
	if grng.IntN(4) == 0 || *simGatedFlag {
		s.Gate = maxTTL + s.maxSkew(s.Length+5*time.Second) + 50*time.Millisecond
		for i, f := range s.Faults {
			if f.Kind == faultKill && f.Restart == sim.RestartEmpty {
				s.Faults[i].For = uniform(grng, 5*time.Millisecond, 300*time.Millisecond)
			}
		}
		s.Breaks = slices.DeleteFunc(s.Breaks, func(b string) bool { return strings.Contains(b, "restart empty") })
	}
	s.snapshotRestarts(rand.New(rand.NewPCG(seed, 0x0db0_0db0)))
	if s.Gate > 0 {
		s.restartsBeforeSecond(rand.New(rand.NewPCG(seed, 0x5ec0_5ec0)))
	}
	slices.SortStableFunc(s.Faults, func(a, b simFault) int { return int(a.At - b.At) })
	return s
}

// snapshotRestarts adds kills whose masters restart from a snapshot (an
// RDB) saved before, from a stream of their own (rng): about as many as
// the kills that restart empty (a quarter of the schedules have one). The
// snapshot holds the lock keys, fence counters and restart gates' caches
// (EpochKey) of its time; a restart from it loses every write since. In a
// gated schedule the masters come back at once (5 to 300 ms), which the
// gate must make safe, as it does for empty restarts; otherwise after the
// largest TTL plus what the clocks may differ by (the delayed-restart
// rule, as for empty restarts), except a quarter of them that come back at
// once and break the rule on purpose.
func (s *simSchedule) snapshotRestarts(rng *rand.Rand) {
	quorum := s.Masters/2 + 1
	maxTTL := s.maxTTL()
	for range rng.IntN(7) {
		if rng.IntN(10) != 0 {
			continue
		}
		f := simFault{Kind: faultKill, Restart: sim.RestartSnapshot, At: uniform(rng, 0, s.Length)}
		if rng.IntN(2) == 0 {
			f.Masters = subset(rng, s.Masters, 1)
		} else {
			f.Masters = subset(rng, s.Masters, quorum+rng.IntN(s.Masters-quorum+1))
		}
		f.SnapAt = uniform(rng, f.At/4, f.At)
		f.For = uniform(rng, 5*time.Millisecond, 300*time.Millisecond)
		breaks := false
		switch {
		case s.Gate > 0:
		case rng.IntN(4) == 0:
			breaks = true
			f.For = uniform(rng, time.Millisecond, maxTTL)
		default:
			f.For = max(f.For, maxTTL+s.maxSkew(f.At+2*time.Second)+50*time.Millisecond)
		}
		if s.killOverlaps(f, -1) { // no two kills of a master overlap
			continue
		}
		s.Faults = append(s.Faults, f)
		if breaks {
			s.Breaks = append(s.Breaks, fmt.Sprintf("masters %v restart from a snapshot of +%v at +%v, %v after their kill, sooner than the largest TTL %v",
				f.Masters, f.SnapAt.Round(time.Microsecond), (f.At+f.For).Round(time.Microsecond), f.For.Round(time.Microsecond), maxTTL))
		}
	}
}

// killOverlaps reports whether kill f, from its kill to a ms after its
// restart, overlaps a kill of one of its masters among s.Faults other than
// s.Faults[self].
func (s *simSchedule) killOverlaps(f simFault, self int) bool {
	for j, o := range s.Faults {
		if j != self && o.Kind == faultKill && f.At <= o.At+o.For+time.Millisecond && o.At <= f.At+f.For+time.Millisecond &&
			slices.ContainsFunc(o.Masters, func(m int) bool { return slices.Contains(f.Masters, m) }) {
			return true
		}
	}
	return false
}

// restartsBeforeSecond moves half the gated schedule's kills whose
// masters lose writes (restart empty, or from a snapshot), so that each
// master restarts a few ms before a whole second of its clock, still as
// soon after the kill as it did; from a stream of its own (rng). There the
// master's INFO soon reads an uptime of 1 s (Redis counts it in whole
// seconds of the clock: uptime_in_seconds is the seconds of now less the
// seconds of the start), and a restart gate that trusts it (lua/gate.lua)
// may let the master vote at once. A restart at a random instant meets it
// only as often as its first gated vote comes late in its second (the
// masters restart in no time here; a real one loads its data and its
// clients reconnect, with its start time taken before both). The masters'
// clocks differ by tens of ms, so each master of the kill restarts on its
// own (simFault.Each), the first the kill's For after it. The clocks count
// from the bubble's start, midnight UTC, a whole second. A kill that would
// move into another kill of its masters stays as it was.
func (s *simSchedule) restartsBeforeSecond(rng *rand.Rand) {
	sec := float64(time.Second)
	for i, f := range s.Faults {
		if f.Kind != faultKill || f.Restart == sim.RestartData || rng.IntN(2) == 0 {
			continue
		}
		// The whole second nearest the restart, on the first master's
		// clock (the first, at +1s, at least).
		c0 := s.Clocks[f.Masters[0]]
		k := max(math.Round((float64(c0.Offset)+float64(f.At+f.For)*c0.Rate)/sec), 1) * sec
		// Each master's restart: a few ms before k on its clock, in
		// bubble time.
		at := make([]time.Duration, len(f.Masters))
		for j, m := range f.Masters {
			c := s.Clocks[m]
			before := uniform(rng, 50*time.Microsecond, 5*time.Millisecond)
			at[j] = time.Duration((k - float64(before) - float64(c.Offset)) / c.Rate)
		}
		kill := slices.Min(at) - f.For
		f.SnapAt = max(f.SnapAt+kill-f.At, 0)
		f.At = kill
		f.Each = make([]time.Duration, len(f.Masters))
		for j := range at {
			f.Each[j] = at[j] - kill
		}
		f.For = slices.Max(f.Each)
		if f.At >= 0 && !s.killOverlaps(f, i) {
			s.Faults[i] = f
		}
	}
}

// maxSkew bounds how far two masters' clocks are apart by bubble time at.
func (s *simSchedule) maxSkew(at time.Duration) time.Duration {
	lo, hi := time.Duration(1<<62), time.Duration(-1<<62)
	for _, c := range s.Clocks {
		v := c.Offset + time.Duration(float64(at)*(c.Rate-1))
		lo, hi = min(lo, v), max(hi, v)
	}
	return hi - lo
}

// breakOne makes s break one assumption on purpose, on a majority of the
// masters.
func (s *simSchedule) breakOne(rng *rand.Rand) {
	quorum := s.Masters/2 + 1
	maxTTL := s.maxTTL()
	majority := subset(rng, s.Masters, quorum)
	at := uniform(rng, s.Length/4, s.Length*3/4)
	switch rng.IntN(3) {
	case 0:
		s.Faults = append(s.Faults, simFault{At: at, Kind: faultKill, Masters: majority, For: uniform(rng, time.Millisecond, maxTTL/4)})
		s.Breaks = append(s.Breaks, fmt.Sprintf("masters %v restart empty at +%v, sooner than the largest TTL %v", majority, at.Round(time.Microsecond), maxTTL))
	case 1:
		j := uniform(rng, maxTTL/2, 2*maxTTL)
		s.Faults = append(s.Faults, simFault{At: at, Kind: faultJump, Masters: majority, Amount: j})
		s.Breaks = append(s.Breaks, fmt.Sprintf("the clocks of masters %v jump %v forward at +%v", majority, j.Round(time.Microsecond), at.Round(time.Microsecond)))
	default:
		for _, m := range majority {
			s.Clocks[m].Rate = 1.05 + rng.Float64()*0.3
		}
		s.Breaks = append(s.Breaks, fmt.Sprintf("the clocks of masters %v run 5%% to 35%% fast, beyond the 1%% drift allowance", majority))
	}
}

// simResult is one run's outcome.
type simResult struct {
	violations  []string
	holders     int
	owned       int // holders that took the lock as an owner
	readers     int // holders that took an RWMutex as a reader
	nested      int // of them, nested in a hold of their worker
	acquires    int
	requests    int
	virtual     time.Duration
	trace       string
	wake        simWakeStats // the masters' queues, summed
	loops       int
	adoptable   int
	leftHanded  int
	leftLost    int
	leftDetails []string
	leftAtClose int
	handed      int          // holders that took the lock by hand-off
	dups        int64        // releases sent twice
	delivered   int64        // pub/sub messages delivered
	lostMsgs    int64        // and lost on the way
	gateEarly   simGateEarly // the masters' restart gates' early votes, summed
}

func (r *simResult) summary() string {
	return fmt.Sprintf("  %d acquire calls, %d holders (%d by hand-off), %d requests, %v simulated\n  queues: %+v; messages delivered %d, lost %d",
		r.acquires, r.holders, r.handed, r.requests, r.virtual.Round(time.Millisecond), r.wake, r.delivered, r.lostMsgs)
}

// runSchedule runs s in a bubble of its own.
func runSchedule(t *testing.T, s *simSchedule, trace bool) (res simResult) {
	run := &simRun{s: s, closeHanded: map[string]bool{}}
	defer func() {
		// A bubble whose goroutines are all blocked for good panics
		// (deadlock); report it with the seed, the stage the run was in
		// and where the bubble's goroutines are stuck.
		if p := recover(); p != nil {
			run.mu.Lock()
			stage := run.stage
			run.mu.Unlock()
			res.violations = append(res.violations, fmt.Sprintf("the bubble panicked while %s: %v\n%s", stage, p, simStacks()))
		}
	}()
	synctest.Test(t, func(t *testing.T) { res = simulate(run, trace) })
	return res
}

// simStacks returns the stacks of the goroutines of the bubble that ran
// simulate for run (a deadlocked bubble's goroutines stay blocked).
func simStacks() string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	gs := strings.Split(string(buf), "\n\n")
	bubbles := map[string]bool{}
	for _, g := range gs {
		if strings.Contains(g, "redlock.simulate(") {
			if i := strings.Index(g, "synctest bubble "); i >= 0 {
				j := strings.IndexByte(g[i:], ']')
				bubbles[g[i:i+j]] = true
			}
		}
	}
	var b strings.Builder
	for _, g := range gs {
		if i := strings.Index(g, "synctest bubble "); i >= 0 {
			j := strings.IndexByte(g[i:], ']')
			if bubbles[g[i:i+j]] {
				b.WriteString(g)
				b.WriteString("\n\n")
			}
		}
	}
	return b.String()
}

// simRun is one run in progress.
type simRun struct {
	s       *simSchedule
	net     *simNet
	masters []*simMaster
	start   time.Time

	mu         sync.Mutex
	stage      string
	holders    []*simHolder
	violations []string
	acquires   int
	loops      int // Lock calls again at once after an Unlock (Loops)
	adoptable  int // of them, those that found a registration to take over
	// Keys handed (hand#reg) left on a master at the end: the hand-off
	// message reached the Redlock and its connection to the master never
	// failed, or else.
	leftHanded, leftHandLost int
	leftDetails              []string
	leftAtClose              int             // of leftHanded, those of a registration Close dropped
	closeHanded              map[string]bool // hand-off values of such registrations
	clients                  []*simClient
}

// simHolder is one successful acquire and what its holder saw.
type simHolder struct {
	id             int
	client, worker int
	key, value     string
	owner          string // WithOwner: holders of one owner may overlap
	token          uint64
	fenced, do     bool
	nested         bool      // taken while the worker held the key already
	reader         bool      // an RWMutex's reader: readers' holds may overlap
	byHand         bool      // handed to the call (its value is hand#reg)
	loop           bool      // a Lock again at once after an Unlock (Loops)
	started        time.Time // the acquire call began
	acquired       time.Time // it returned
	claims         []simClaim
	// until is the latest Until the worker read, or that its Extend to a
	// shorter TTL left: only such an Extend may move Until earlier
	// (checkUntil).
	until time.Time
}

type simClaim struct{ from, to time.Time }

func (r *simRun) at(t time.Time) time.Duration { return t.Sub(r.start) }

func (r *simRun) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, fmt.Sprintf("+%v ", time.Since(r.start))+fmt.Sprintf(format, args...))
}

func (r *simRun) setStage(stage string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stage = fmt.Sprintf("%s (at +%v)", stage, time.Since(r.start))
}

func (r *simRun) addHolder(h *simHolder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.id = len(r.holders)
	r.holders = append(r.holders, h)
}

func (r *simRun) claim(h *simHolder, from, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.claims = append(h.claims, simClaim{from, to})
}

// clip ends h's claims now: it is about to Extend (which may shorten the
// lock) or Unlock. It claims again after an Extend, from the new Until.
func (r *simRun) clip(h *simHolder) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range h.claims {
		if h.claims[i].to.After(now) {
			h.claims[i].to = now
		}
	}
}

type simClient struct {
	id    int
	plan  simClientPlan
	r     *Redlock
	conns []*simConn
}

// simulate runs s inside the calling bubble and checks it.
func simulate(run *simRun, trace bool) (res simResult) {
	start := time.Now()
	s := run.s
	run.start = start
	run.setStage("running the schedule")
	defer func() {
		if p := recover(); p != nil {
			run.violations = append(run.violations, fmt.Sprintf("panic in the simulation: %v", p))
		}
		res.violations = run.violations
		res.holders = len(run.holders)
		for _, h := range run.holders {
			if h.owner != "" {
				res.owned++
			}
			if h.nested {
				res.nested++
			}
			if h.reader {
				res.readers++
			}
		}
		res.acquires = run.acquires
		res.loops, res.adoptable = run.loops, run.adoptable
		res.leftHanded, res.leftLost = run.leftHanded, run.leftHandLost
		res.leftDetails = run.leftDetails
		res.leftAtClose = run.leftAtClose
		res.virtual = time.Since(start)
		if run.net != nil {
			res.trace = run.net.trace.String()
			res.delivered, res.lostMsgs = run.net.delivered.Load(), run.net.lost.Load()
			res.dups = run.net.dups.Load()
		}
		for _, m := range run.masters {
			res.wake.add(m.wakeStats())
			m.Lock()
			res.gateEarly.add(m.gateEarly)
			m.Unlock()
		}
		for _, h := range run.holders {
			if h.byHand {
				res.handed++
			}
		}
	}()
	for i, c := range s.Clocks {
		m := newSimMaster(i, start, c.Offset, c.Rate)
		run.masters = append(run.masters, m)
		defer m.StopScripts()
	}
	run.net = newSimNet(s.Net, run.masters, len(s.Clients)+1)
	run.net.seed = s.Seed
	if trace {
		run.net.trace = &simTrace{start: start}
	}
	minTTL := slices.Min(s.TTLs)

	clients := make([]*simClient, len(s.Clients))
	for ci, cp := range s.Clients {
		c := &simClient{id: ci, plan: cp}
		nodes := make([]Node, s.Masters)
		for mi, m := range run.masters {
			conn := newSimConn(run.net, m, ci, rand.New(rand.NewPCG(s.Seed, uint64(1+ci*64+mi))))
			conn.ignoresCtx, conn.readTimeout, conn.reconnects = cp.IgnoresCtx, cp.ReadTimeout, cp.Reconnects
			conn.minTimeout = cp.NodeTimeout
			if conn.minTimeout == 0 {
				conn.minTimeout = max(min(DefaultNodeTimeout, minTTL/10), time.Millisecond)
			}
			c.conns = append(c.conns, conn)
			nodes[mi] = conn
		}
		opts := []Option{WithBackoff(cp.MinBackoff, cp.MaxBackoff)}
		if s.Gate > 0 { // New checks it against its TTL, the calls' default
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
		// The backoff jitter from the seed too, so that a rerun pauses
		// alike.
		var jmu sync.Mutex
		jrng := rand.New(rand.NewPCG(s.Seed, uint64(1<<40+ci)))
		r.randN = func(n time.Duration) time.Duration {
			jmu.Lock()
			defer jmu.Unlock()
			return time.Duration(jrng.Int64N(int64(n)))
		}
		c.r = r
		clients[ci] = c
	}
	run.clients = clients

	// The faults, each applied and healed on time; all are healed when
	// faultsDone closes.
	var faults sync.WaitGroup
	for _, f := range s.Faults {
		faults.Go(func() { run.fault(f) })
	}

	var workers sync.WaitGroup
	for _, c := range clients {
		for wi := range c.plan.Workers {
			w := &simWorker{run: run, c: c, id: wi, rng: rand.New(rand.NewPCG(s.Seed, uint64(1<<20+c.id*64+wi)))}
			workers.Go(w.loop)
		}
	}
	// A worker that does not come back within a minute of virtual time is
	// stuck: report it (the bubble then panics, which runSchedule reports).
	done := make(chan struct{})
	go func() { workers.Wait(); faults.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.Length + time.Minute):
		run.violate("workers or faults still running a minute after the end of the schedule: a call that never returns")
		return
	}
	run.setStage("closing the Redlocks")
	for _, c := range clients {
		// A registration an Unlock left queued (wakeups.stay) that masters
		// handed the key to: Close drops it without giving the key back
		// (wakeups.close), so those masters hold it for its TTL.
		wk := c.r.wake
		wk.handsMu.Lock()
		for _, m := range wk.marks {
			h := m.h
			if h == nil {
				continue
			}
			h.mu.Lock()
			if h.count > 0 {
				run.closeHanded[h.value] = true
			}
			h.mu.Unlock()
		}
		wk.handsMu.Unlock()
		c.r.Close()
	}
	run.setStage("waiting for the requests in flight")
	run.net.subsWG.Wait()
	run.net.inflight.Wait()
	for _, c := range clients {
		for _, conn := range c.conns {
			res.requests += int(conn.sent.Load())
		}
	}

	run.setStage("checking for leftover keys")
	run.checkLeftovers()
	run.setStage("taking every key with a fresh client")
	run.checkFreeAtOnce()
	run.checkRWFreeAtOnce() // sim_rw_test.go
	run.net.subsWG.Wait()
	run.net.inflight.Wait()
	run.setStage("checking the masters")
	for _, m := range run.masters {
		// A request the shim could not run as Redis would, or a script
		// that raised: the run did not test what it claims to.
		for _, err := range m.problems() {
			run.violate("master %d: %v", m.ID(), err)
		}
	}
	run.setStage("checking the history")
	run.check()
	return res
}

// fault applies f at its time and heals it after its duration.
func (r *simRun) fault(f simFault) {
	if f.Kind == faultKill && f.Restart == sim.RestartSnapshot {
		time.Sleep(f.SnapAt - time.Since(r.start))
		for _, m := range f.Masters {
			if !r.masters[m].Save() {
				r.net.trace.logf("master %d is paused or down: it takes no snapshot, and keeps its last", m)
			}
		}
	}
	time.Sleep(f.At - time.Since(r.start))
	n := r.net
	switch f.Kind {
	case faultPause:
		for _, m := range f.Masters {
			r.masters[m].Pause()
		}
		time.Sleep(f.For)
		for _, m := range f.Masters {
			r.masters[m].Resume()
		}
	case faultKill:
		for _, m := range f.Masters {
			r.masters[m].Kill()
		}
		if f.Each == nil {
			time.Sleep(f.For)
			for _, m := range f.Masters {
				r.masters[m].Restart(f.Restart)
			}
			break
		}
		order := make([]int, len(f.Masters))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int { return int(f.Each[i] - f.Each[j]) })
		for _, i := range order {
			time.Sleep(f.At + f.Each[i] - time.Since(r.start))
			r.masters[f.Masters[i]].Restart(f.Restart)
		}
	case faultPartition:
		n.mu.Lock()
		for _, c := range f.Clients {
			for _, m := range f.Masters {
				n.cutN[c][m]++
			}
		}
		n.mu.Unlock()
		time.Sleep(f.For)
		n.mu.Lock()
		for _, c := range f.Clients {
			for _, m := range f.Masters {
				n.cutN[c][m]--
			}
		}
		n.mu.Unlock()
	case faultSlow:
		n.mu.Lock()
		for _, m := range f.Masters {
			n.slow[m] += f.Amount
		}
		n.mu.Unlock()
		time.Sleep(f.For)
		n.mu.Lock()
		for _, m := range f.Masters {
			n.slow[m] -= f.Amount
		}
		n.mu.Unlock()
	case faultLossy:
		n.mu.Lock()
		for _, m := range f.Masters {
			n.loss[m] += f.Loss
		}
		n.mu.Unlock()
		time.Sleep(f.For)
		n.mu.Lock()
		for _, m := range f.Masters {
			n.loss[m] -= f.Loss
		}
		n.mu.Unlock()
	case faultJump:
		for _, m := range f.Masters {
			r.masters[m].Jump(f.Amount)
		}
	}
}

// simWorker is one goroutine of a client taking and holding locks.
type simWorker struct {
	run   *simRun
	c     *simClient
	id    int
	rng   *rand.Rand
	again *simAgain // Lock this again at once (a Loops client)
}

func (w *simWorker) dur(lo, hi time.Duration) time.Duration { return uniform(w.rng, lo, hi) }

func (w *simWorker) loop() {
	s := w.run.s
	for time.Since(w.run.start) < s.Length {
		if again := w.again; again != nil {
			// A loop on the key: Lock it again at once, plain, with the
			// same TTL.
			w.again = nil
			auto := w.rng.IntN(3) == 0
			opts := []Option{WithTTL(again.ttl)}
			if auto {
				opts = append(opts, WithAutoExtend())
			}
			h := &simHolder{client: w.c.id, worker: w.id, key: again.key, loop: true}
			wk := w.c.r.wake
			wk.handsMu.Lock()
			st := wk.marks[again.key].h
			wk.handsMu.Unlock()
			w.run.mu.Lock()
			w.run.loops++
			if st != nil && st.ttl == again.ttl {
				w.run.adoptable++ // an Unlock left the call queued: this Lock takes it over
			}
			w.run.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), w.dur(5*time.Millisecond, 1500*time.Millisecond))
			h.started = time.Now()
			l, err := w.c.r.Lock(ctx, again.key, opts...)
			cancel()
			w.acquired(h, l, err, auto)
			w.loopAgain(again.key, again.ttl, err)
			continue
		}
		if w.c.plan.RW {
			w.rwCall()
			continue
		}
		time.Sleep(w.dur(0, 20*time.Millisecond))
		key := s.key(w.rng.IntN(s.Keys))
		ttl := s.TTLs[w.rng.IntN(len(s.TTLs))]
		opts := []Option{WithTTL(ttl)}
		fenced := w.rng.IntN(3) == 0
		if w.c.plan.Loops && w.rng.IntN(2) == 0 {
			fenced = false // plain Lock calls contend more
		}
		if fenced {
			opts = append(opts, WithFencing())
		}
		auto := w.rng.IntN(3) == 0
		if auto {
			opts = append(opts, WithAutoExtend())
		}
		if w.c.plan.Owner != "" {
			opts = append(opts, WithOwner(w.c.plan.Owner))
		}
		h := &simHolder{client: w.c.id, worker: w.id, key: key, fenced: fenced, owner: w.c.plan.Owner}
		var ctx context.Context
		var cancel context.CancelFunc
		switch x := w.rng.IntN(100); {
		case x < 12:
			ctx, cancel = context.WithTimeout(context.Background(), w.dur(10*time.Millisecond, 2*time.Second))
			w.do(ctx, h, ttl, opts)
			cancel()
			continue
		case x < 45:
			ctx, cancel = context.WithTimeout(context.Background(), w.dur(time.Millisecond, 200*time.Millisecond))
			h.started = time.Now()
			l, err := w.c.r.TryLock(ctx, key, opts...)
			cancel()
			w.acquired(h, l, err, auto)
		default:
			ctx, cancel = context.WithTimeout(context.Background(), w.dur(5*time.Millisecond, 1500*time.Millisecond))
			h.started = time.Now()
			l, err := w.c.r.Lock(ctx, key, opts...)
			cancel()
			w.acquired(h, l, err, auto)
			if !fenced {
				w.loopAgain(key, ttl, err)
			}
		}
	}
}

// loopAgain makes a worker of a Loops client Lock key again at once, most
// times, after a plain Lock of it that succeeded (and so was unlocked).
func (w *simWorker) loopAgain(key string, ttl time.Duration, err error) {
	if w.c.plan.Loops && w.c.plan.Owner == "" && err == nil && w.rng.IntN(3) != 0 {
		w.again = &simAgain{key, ttl}
	}
}

type simAgain struct {
	key string
	ttl time.Duration
}

// simHeld is a lock a worker holds.
type simHeld struct {
	h       *simHolder
	l       *Lock
	watched bool
}

// acquired holds l, if the acquire succeeded, and unlocks it. A worker of
// an owner's client also nests: it takes the key again while holding it,
// and releases its holds in any order.
func (w *simWorker) acquired(h *simHolder, l *Lock, err error, auto bool) {
	w.run.mu.Lock()
	w.run.acquires++
	w.run.mu.Unlock()
	if err != nil {
		return
	}
	held := []*simHeld{w.took(h, l, auto)}
	owned := w.c.plan.Owner != ""
	steps := 1 + w.rng.IntN(5)
	if owned {
		steps += w.rng.IntN(5)
	}
	for range steps {
		if len(held) == 0 {
			break
		}
		hl := held[0]
		if len(held) > 1 {
			hl = held[w.rng.IntN(len(held))]
		}
		if owned {
			switch x := w.rng.IntN(100); {
			case x < 25:
				if n := w.nest(h.key); n != nil {
					held = append(held, n)
				}
				continue
			case x < 35:
				w.unlock(hl)
				held = slices.DeleteFunc(held, func(o *simHeld) bool { return o == hl })
				continue
			}
		}
		w.step(hl)
	}
	for _, i := range w.rng.Perm(len(held)) {
		w.unlock(held[i])
	}
}

// took records the holder of a lock just acquired and watches its Done.
func (w *simWorker) took(h *simHolder, l *Lock, auto bool) *simHeld {
	h.acquired = time.Now()
	h.value, h.token = l.Value(), l.Fence()
	h.until = l.Until()
	h.byHand = l.h != nil && strings.Contains(h.value, "#")
	if h.fenced && h.token == 0 {
		w.run.violate("client %d: fenced lock %s acquired without a token", h.client, h.key)
	}
	if l.Owner() != h.owner {
		w.run.violate("client %d: lock %s taken as owner %q reports owner %q", h.client, h.key, h.owner, l.Owner())
	}
	w.run.addHolder(h)
	watched := auto || w.rng.IntN(3) > 0
	if watched {
		done := l.Done()
		go w.run.watch(h, l, done)
	}
	return &simHeld{h, l, watched}
}

// nest takes key again as the client's owner, with options of its own, and
// returns the nested hold, or nil when the acquire failed.
func (w *simWorker) nest(key string) *simHeld {
	s := w.run.s
	opts := []Option{WithTTL(s.TTLs[w.rng.IntN(len(s.TTLs))]), WithOwner(w.c.plan.Owner)}
	h := &simHolder{client: w.c.id, worker: w.id, key: key, owner: w.c.plan.Owner, nested: true}
	if w.rng.IntN(3) == 0 {
		h.fenced = true
		opts = append(opts, WithFencing())
	}
	auto := w.rng.IntN(3) == 0
	if auto {
		opts = append(opts, WithAutoExtend())
	}
	var l *Lock
	var err error
	h.started = time.Now()
	if w.rng.IntN(2) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), w.dur(time.Millisecond, 200*time.Millisecond))
		l, err = w.c.r.TryLock(ctx, key, opts...)
		cancel()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), w.dur(5*time.Millisecond, 500*time.Millisecond))
		l, err = w.c.r.Lock(ctx, key, opts...)
		cancel()
	}
	w.run.mu.Lock()
	w.run.acquires++
	w.run.mu.Unlock()
	if err != nil {
		return nil
	}
	return w.took(h, l, auto)
}

// step holds hl for a step: work, Extend, a GC pause.
func (w *simWorker) step(hl *simHeld) {
	h, l, watched := hl.h, hl.l, hl.watched
	w.claim(h, l, watched)
	ttl := l.TTL()
	switch x := w.rng.IntN(100); {
	case x < 45:
		time.Sleep(w.dur(0, ttl/2))
	case x < 75:
		ttl2 := w.run.s.TTLs[w.rng.IntN(len(w.run.s.TTLs))]
		if !w.c.plan.ChangesTTL {
			ttl2 = ttl
		}
		d := w.dur(5*time.Millisecond, 300*time.Millisecond)
		if w.rng.IntN(3) == 0 {
			d = w.dur(0, 3*time.Millisecond) // the outcome stays unknown
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		w.run.clip(h)
		shorter := ttl2 < l.TTL()
		w.checkUntil(h, l, "before Extend")
		err := l.Extend(ctx, ttl2)
		cancel()
		if shorter {
			h.until = l.Until()
		} else {
			w.checkUntil(h, l, fmt.Sprintf("Extend(%v) of a lock of TTL %v (%v)", ttl2, ttl, err))
		}
	case x < 87:
		time.Sleep(w.dur(ttl/2, 2*ttl)) // a GC pause, maybe past Until
	default:
		time.Sleep(w.dur(0, ttl/20))
	}
	w.claim(h, l, watched)
}

// unlock releases hl, sometimes with a context too short for any reply.
func (w *simWorker) unlock(hl *simHeld) {
	d := w.dur(10*time.Millisecond, 500*time.Millisecond)
	if w.rng.IntN(5) == 0 {
		d = w.dur(0, 2*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	w.run.clip(hl.h)
	_ = hl.l.Unlock(ctx)
	cancel()
}

// checkUntil checks that l's Until has not moved earlier than the last one
// the worker saw (after: what ran since), and records it: only an Extend
// to a TTL shorter than the lock's may move it back (Lock.Until), not a
// renewal, nor an extend to the lock's TTL or longer, whatever its outcome.
func (w *simWorker) checkUntil(h *simHolder, l *Lock, after string) {
	u := l.Until()
	if u.Before(h.until) {
		w.run.violate("client %d worker %d, holder #%d of %s (value %.6s): Until moved back %v, to +%v, %s",
			h.client, h.worker, h.id, h.key, h.value, h.until.Sub(u), w.run.at(u), after)
	}
	h.until = u // each move back reported once
}

// claim records that h holds its lock from now to Until, if it is valid.
func (w *simWorker) claim(h *simHolder, l *Lock, watched bool) {
	w.checkUntil(h, l, "since the last step (a renewal?)")
	now := time.Now()
	until := l.Until()
	if !now.Before(until) {
		return
	}
	if watched {
		select {
		case <-l.Done():
			return
		default:
		}
	}
	w.run.claim(h, now, until)
}

// do takes the key with Redlock.Do; fn claims the lock at instants while
// its context is alive (Do hides the Lock, so there is no Until to claim
// to).
func (w *simWorker) do(ctx context.Context, h *simHolder, ttl time.Duration, opts []Option) {
	h.do = true
	h.started = time.Now()
	steps := 1 + w.rng.IntN(5)
	pauses := make([]time.Duration, steps)
	for i := range pauses {
		pauses[i] = w.dur(0, ttl)
	}
	_ = w.c.r.Do(ctx, h.key, func(fctx context.Context) error {
		h.acquired = time.Now()
		w.run.addHolder(h)
		for _, p := range pauses {
			if fctx.Err() == nil {
				now := time.Now()
				w.run.claim(h, now, now.Add(time.Nanosecond))
			}
			time.Sleep(p)
		}
		return nil
	}, opts...)
	w.run.mu.Lock()
	w.run.acquires++
	w.run.mu.Unlock()
}

// watch checks that l's Done closes by Until plus the node timeout.
func (r *simRun) watch(h *simHolder, l *Lock, done <-chan struct{}) {
	nt := l.cfg.nodeTimeout
	for {
		u := l.Until()
		t := time.NewTimer(time.Until(u.Add(nt)) + time.Nanosecond)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
		if l.Until().After(u) {
			continue // extended meanwhile
		}
		select {
		case <-done:
			return
		default:
		}
		r.violate("client %d worker %d, holder #%d of %s (value %.6s): Done still open %v after Until (+%v), past the node timeout %v",
			h.client, h.worker, h.id, h.key, h.value, time.Since(u), r.at(u), nt)
		<-done
		return
	}
}

// checkLeftovers: once every request has landed, a master may hold a key
// only through a connection on which something failed (a release or
// rollback that failed, or that the lane may have skipped) or after a
// restart with data.
func (r *simRun) checkLeftovers() {
	for _, m := range r.masters {
		if m.Restarted() {
			continue
		}
		keys := m.holding()
		names := slices.Sorted(mapKeys(keys))
		for _, k := range names {
			e := keys[k]
			for _, v := range slices.Sorted(mapKeys(e.Holds)) {
				by, _ := e.Holds[v].SetBy.(*simConn)
				if by == nil || by.isTroubled() {
					continue
				}
				r.violate("master %d still holds %s for %s (hold %.6s...), entered by client %d, whose connection to it never failed: a release or rollback never reached it",
					m.ID(), k, e.Owner, v, by.client)
			}
			setBy, _ := e.SetBy.(*simConn)
			if e.Owner == "" && setBy == nil && strings.Contains(e.Value, "#") {
				// Handed by the master: its Redlock releases it (or holds
				// it), unless the message never reached it.
				hand, reg, _ := strings.Cut(e.Value, "#")
				who, troubled := -1, false
				for _, c := range r.clients {
					if e.HandTo == c.r.wake.channel || strings.HasPrefix(e.HandTo, c.r.wake.channel+"/") {
						who, troubled = c.id, c.conns[m.ID()].isTroubled()
					}
				}
				if !troubled && r.net.handDelivered(m.ID(), "h"+hand+"|"+reg+"|"+k) {
					r.leftHanded++
					if r.closeHanded[hand] {
						r.leftAtClose++ // see TestSimCloseKeepsHandedKey
					}
					r.violate("master %d still holds %s = %s, handed to client %d, whose Redlock got the hand-off over a connection that never failed: nobody took it or gave it back",
						m.ID(), k, e.Value, who)
					r.leftDetails = append(r.leftDetails, fmt.Sprintf("master %d holds %s = %s (handed to client %d, its connection troubled: %v), %v left",
						m.ID(), k, e.Value, who, troubled, time.Duration(e.ExpireAt-m.Clock())))
				} else {
					r.leftHandLost++
				}
				continue
			}
			if e.Owner != "" || setBy == nil || setBy.isTroubled() {
				continue
			}
			r.violate("master %d still holds %s = %.6s..., set by client %d, whose connection to it never failed: a release or rollback never reached it",
				m.ID(), k, e.Value, setBy.client)
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkFreeAtOnce: with the faults healed and every holder gone, a fresh
// client takes each key at its first attempt, unless so many masters still
// hold it (stragglers, failed releases) that no quorum is free.
func (r *simRun) checkFreeAtOnce() {
	s := r.s
	nodes := make([]Node, s.Masters)
	for mi, m := range r.masters {
		c := newSimConn(r.net, m, len(s.Clients), rand.New(rand.NewPCG(s.Seed, uint64(1<<30+mi))))
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
		key := s.key(k)
		held := 0
		for _, m := range r.masters {
			if _, ok := m.holding()[key]; ok {
				held++
			}
		}
		l, err := rl.TryLock(context.Background(), key)
		if err != nil {
			if held <= s.Masters-rl.Quorum() {
				r.violate("after the run, a fresh client could not take %s although only %d of %d masters hold it: %v", key, held, s.Masters, err)
			}
			continue
		}
		if err := l.Unlock(context.Background()); err != nil {
			r.violate("after the run, a fresh client's Unlock of %s: %v", key, err)
		}
	}
}

// check holds the run's history to the promises.
func (r *simRun) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := map[string][]*simHolder{}
	for _, h := range r.holders {
		byKey[h.key] = append(byKey[h.key], h)
	}
	for _, key := range slices.Sorted(mapKeys(byKey)) {
		hs := byKey[key]
		r.checkExclusive(key, hs)
		r.checkTokens(key, hs)
	}
}

// checkExclusive: no two holders' claims overlap.
func (r *simRun) checkExclusive(key string, hs []*simHolder) {
	type iv struct {
		simClaim
		h *simHolder
	}
	var all []iv
	for _, h := range hs {
		for _, c := range h.claims {
			if c.from.Before(c.to) {
				all = append(all, iv{c, h})
			}
		}
	}
	slices.SortFunc(all, func(a, b iv) int { return a.from.Compare(b.from) })
	var open []iv // claims that may still overlap the next ones
	reported := map[[2]int]bool{}
	for _, c := range all {
		keep := open[:0]
		for _, o := range open {
			if o.to.After(c.from) {
				keep = append(keep, o)
			}
		}
		open = keep
		for _, o := range open {
			if o.h == c.h || reported[[2]int{o.h.id, c.h.id}] || sameOwner(o.h, c.h) || o.h.reader && c.h.reader {
				continue
			}
			reported[[2]int{o.h.id, c.h.id}] = true
			r.violations = append(r.violations, fmt.Sprintf("two holders of %s at once: %s claimed it [+%v, +%v), %s claimed it [+%v, +%v)",
				key, r.describe(o.h), r.at(o.from), r.at(o.to), r.describe(c.h), r.at(c.from), r.at(c.to)))
		}
		open = append(open, c)
	}
}

// sameOwner reports whether a and b are holds of one owner, which may
// overlap (WithOwner).
func sameOwner(a, b *simHolder) bool { return a.owner != "" && a.owner == b.owner }

func (r *simRun) describe(h *simHolder) string {
	how := "Lock/TryLock"
	if h.do {
		how = "Do"
	}
	if strings.HasPrefix(h.key, "rw:") {
		how = map[bool]string{true: "RWMutex reader", false: "RWMutex writer"}[h.reader]
	}
	if h.owner != "" {
		how += fmt.Sprintf(" as %s", h.owner)
		if h.nested {
			how += ", nested"
		}
	}
	s := fmt.Sprintf("holder #%d (client %d worker %d, %s, value %.6s, acquire +%v..+%v", h.id, h.client, h.worker, how, h.value, r.at(h.started), r.at(h.acquired))
	if h.fenced {
		s += fmt.Sprintf(", token %d", h.token)
	}
	return s + ")"
}

// checkTokens: a fenced holder whose acquire began after another's returned
// has the larger token, and no two fenced holders share a token, unless
// both are holds of one owner (they share the owner's token, or a later one
// is larger when a master lost the owner's holds).
func (r *simRun) checkTokens(key string, hs []*simHolder) {
	var fenced []*simHolder
	for _, h := range hs {
		if h.fenced && !h.do {
			fenced = append(fenced, h)
		}
	}
	for i, a := range fenced {
		for _, b := range fenced[i+1:] {
			switch {
			case sameOwner(a, b):
			case a.token == b.token:
				r.violations = append(r.violations, fmt.Sprintf("two holders of %s with token %d: %s and %s", key, a.token, r.describe(a), r.describe(b)))
			case !a.acquired.After(b.started) && a.token > b.token:
				r.violations = append(r.violations, fmt.Sprintf("fence token went down on %s: %s, then %s", key, r.describe(a), r.describe(b)))
			case !b.acquired.After(a.started) && b.token > a.token:
				r.violations = append(r.violations, fmt.Sprintf("fence token went down on %s: %s, then %s", key, r.describe(b), r.describe(a)))
			}
		}
	}
}

func run0(res simResult) []string { return res.leftDetails }

// TestSimCloseKeepsHandedKey: a liveness gap of the hand-off protocol that
// the simulation found (seed 1784, about every run; seeds 20026, 20219,
// 20356, 20601 and 21082 too), fixed since (review had found it too): an
// Unlock that handed the key on leaves its call queued behind the next
// holder (wakeups.stay); when that holder releases, every master hands the
// key to the queued call (hand#reg) and tells its Redlock, which waits
// standWindow (10 ms) for a Lock call to take the registration over. A
// Close meanwhile dropped the registration without giving the key back:
// every master that handed it kept hand#reg for its full TTL though nobody
// held the lock. Close now gives it back (wakeups.close).
func TestSimCloseKeepsHandedKey(t *testing.T) {
	for range 5 {
		s := genSchedule(1784)
		res := runSchedule(t, s, false)
		if res.leftAtClose > 0 {
			t.Fatalf("seed 1784: %d master(s) still hold a key handed to a registration Close dropped:\n  %s", res.leftAtClose, strings.Join(res.leftDetails, "\n  "))
		}
	}
}

// The simulated masters are only worth what their semantics are: these
// tests run the same requests on a real redis-server (through NewNode) and
// on a simMaster, and hold the two to the same replies and the same
// keyspace, value by value. internal/sim's own tests hold its Lua and its
// INFO to redis-server (TestSimLuaAgreesWithRedis, TestSimInfoAgreesWithRedis).

// simAgreeSlack is how far apart two clock readings of the same step may
// be on redis and on the sim (TTLs, tokens and hold expiries are readings
// of each master's own clock), beyond the time the step itself took.
const simAgreeSlack = 5 * time.Millisecond

// simAgreement compares a redis-server and a simMaster after each step.
type simAgreement struct {
	t     *testing.T
	ctx   context.Context
	c     *redis.Client
	sim   *simMaster
	start time.Time     // the current step's
	worst time.Duration // the longest step so far
}

// begin marks the start of a step: it runs on redis first, then on the
// sim, so their clocks read it apart by at most the time since then.
func (a *simAgreement) begin() { a.start = time.Now() }

// tol is how far apart two clock readings may be: the slack, plus the
// longest step so far (a counter or a hold may date from an earlier one).
func (a *simAgreement) tol() time.Duration {
	a.worst = max(a.worst, time.Since(a.start))
	return simAgreeSlack + a.worst
}

// sameNumber reports whether redis's value r and the sim's s are equal,
// or are both the same clock reading give or take tol: µs (TIME-based
// fence tokens) or ms (hold expiries).
func (a *simAgreement) sameNumber(r, s string) bool {
	if r == s {
		return true
	}
	rn, err1 := strconv.ParseInt(r, 10, 64)
	sn, err2 := strconv.ParseInt(s, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	d := max(rn-sn, sn-rn)
	switch {
	case rn > 1e14: // µs since 1970
		return d <= a.tol().Microseconds()
	case rn > 1e11: // ms since 1970
		return d <= a.tol().Milliseconds()
	}
	return false
}

// redisView is key name on redis-server as the sim's View shows it, read
// in one MULTI/EXEC: a key that expires between separate reads was once
// seen as a hash by TYPE and HGETALL and gone by PTTL, under load in CI
// (TestSimMasterAgreesWithRedis, "redis hash ... pttl -2ms" against the
// sim's none). The reads of the other types answer WRONGTYPE, unused.
func (a *simAgreement) redisView(name string) sim.KeyView {
	a.t.Helper()
	var typ *redis.StatusCmd
	var str *redis.StringCmd
	var hash *redis.MapStringStringCmd
	var zset *redis.ZSliceCmd
	var pttl *redis.DurationCmd
	_, err := a.c.TxPipelined(a.ctx, func(p redis.Pipeliner) error {
		typ = p.Type(a.ctx, name)
		str = p.Get(a.ctx, name)
		hash = p.HGetAll(a.ctx, name)
		zset = p.ZRangeWithScores(a.ctx, name, 0, -1)
		pttl = p.PTTL(a.ctx, name)
		return nil
	})
	if err != nil && err != redis.Nil && typ.Err() != nil {
		a.t.Fatal(err)
	}
	v := sim.KeyView{Kind: typ.Val()}
	switch v.Kind {
	case "string":
		v.Str, err = str.Result()
	case "hash":
		v.Hash, err = hash.Result()
	case "zset":
		v.Zset, err = zset.Result()
	default:
		err = nil
	}
	if err == nil {
		err = pttl.Err()
	}
	if err != nil {
		a.t.Fatal(err)
	}
	pt := pttl.Val()
	v.PTTLMs = pt.Milliseconds()
	if pt < 0 {
		v.PTTLMs = int64(pt / time.Nanosecond) // go-redis keeps -1 and -2 as they are
	}
	return v
}

// keys checks that redis and the sim hold the same in each key of names:
// the type; the value of a string, the fields and values of a hash, the
// members and scores of a sorted set, in order; and the remaining TTL.
func (a *simAgreement) keys(what string, names ...string) {
	a.t.Helper()
	for _, name := range names {
		r, s := a.redisView(name), a.sim.View(name)
		bad := r.Kind != s.Kind || !a.sameNumber(r.Str, s.Str) || len(r.Hash) != len(s.Hash) || !slices.Equal(r.Zset, s.Zset)
		for f, rv := range r.Hash {
			sv, ok := s.Hash[f]
			bad = bad || !ok || !a.sameNumber(rv, sv)
		}
		switch {
		case r.PTTLMs < 0 || s.PTTLMs < 0:
			bad = bad || r.PTTLMs != s.PTTLMs
		default:
			bad = bad || max(r.PTTLMs-s.PTTLMs, s.PTTLMs-r.PTTLMs) > a.tol().Milliseconds()
		}
		if bad {
			a.t.Fatalf("after %s: %s differs (clock tolerance %v):\n  redis %v\n  sim   %v", what, name, a.tol(), r, s)
		}
	}
}

// noProblems fails the test for what the sim could not simulate and for
// scripts that raised.
func (a *simAgreement) noProblems() {
	a.t.Helper()
	if ps := a.sim.problems(); len(ps) > 0 {
		a.t.Fatalf("the sim met problems: %v", ps)
	}
}

func newSimAgreement(t *testing.T) *simAgreement {
	c := clients(t, masters.Addrs()[:1])[0]
	sim := newSimMaster(0, time.Now(), 0, 1)
	t.Cleanup(sim.StopScripts)
	return &simAgreement{t: t, ctx: context.Background(), c: c, sim: sim, start: time.Now()}
}

// TestSimMasterAgreesWithRedis runs the same random requests, plain and
// owned (WithOwner: lua/hold.lua), on a real redis-server and on a
// simMaster, and checks after each that they answered alike (OK, Woke,
// the error or none, the fence token within the clocks' tolerance) and
// hold the same key, fence counter and queue (simAgreement.keys); and that
// the owner's fence field moves alike (kept, new, or the token confirmed).
func TestSimMasterAgreesWithRedis(t *testing.T) {
	a := newSimAgreement(t)
	ctx, c, sim := a.ctx, a.c, a.sim
	rn := NewNode(c)
	rng := rand.New(rand.NewPCG(18, 18))
	keys := []string{testKey(t), testKey(t)}
	values := []string{"a", "b", "c"}
	owners := []string{"", "", "o1", "o2"}
	// fences reads the owner's fence field on redis and on the sim (0: none).
	fences := func(key string) (rf, sf uint64) {
		t.Helper()
		if v, err := c.HGet(ctx, key, "fence").Result(); err == nil {
			if rf, err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("%s fence field %q", key, v)
			}
		}
		if v, ok := sim.View(key).Hash["fence"]; ok {
			var err error
			if sf, err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("sim %s fence field %q", key, v)
			}
		}
		return rf, sf
	}
	step := func(q request) uint64 {
		t.Helper()
		rPrev, sPrev := fences(q.Key)
		a.begin()
		r, s := q, q
		execRequests(ctx, rn, &r)
		sim.do(&s)
		what := fmt.Sprintf("%v %s=%s owner %q ttl %v token %d", q.Op, q.Key, q.Value, q.Owner, q.TTL, q.Token)
		if r.OK != s.OK || (r.Err == nil) != (s.Err == nil) || r.Woke != s.Woke ||
			!a.sameNumber(strconv.FormatUint(r.Fence, 10), strconv.FormatUint(s.Fence, 10)) {
			t.Fatalf("%s: redis ok=%v fence=%d woke=%v err=%v, sim ok=%v fence=%d woke=%v err=%v",
				what, r.OK, r.Fence, r.Woke, r.Err, s.OK, s.Fence, s.Woke, s.Err)
		}
		a.keys(what, q.Key, FenceKey(q.Key), WaitKey(q.Key))
		if sim.View(q.Key).Kind == "hash" {
			// The tokens differ (each master's clock), not what a step
			// does with them: keep the owner's, take a new one, or
			// store the one confirmed.
			rf, sf := fences(q.Key)
			if (rf == rPrev) != (sf == sPrev) || (rf == q.Token) != (sf == q.Token) || (r.Fence == rf) != (s.Fence == sf) {
				t.Fatalf("after %s: redis fence field %d (was %d, reply %d), sim %d (was %d, reply %d)", what, rf, rPrev, r.Fence, sf, sPrev, s.Fence)
			}
		}
		return r.Fence
	}
	var tokens []uint64
	for range 1500 {
		q := request{Op: reqKind(1 + rng.IntN(5)), Key: keys[rng.IntN(len(keys))], Value: values[rng.IntN(len(values))], Owner: owners[rng.IntN(len(owners))]}
		switch q.Op {
		case reqAcquire, reqAcquireFenced, reqExtend:
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
		case reqRaiseFence:
			if len(tokens) > 0 {
				q.Token = tokens[rng.IntN(len(tokens))] + uint64(rng.IntN(3))
			}
		}
		if f := step(q); f > 0 {
			tokens = append(tokens, f)
		}
	}
	// Expiry and a PEXPIRE that shortens a key, by the master's clock.
	for _, o := range owners[1:] {
		for _, v := range values {
			step(request{Op: reqRelease, Key: keys[0], Value: v, Owner: o})
		}
	}
	step(request{Op: reqRelease, Key: keys[0], Value: "a"})
	step(request{Op: reqRelease, Key: keys[0], Value: "b"})
	step(request{Op: reqRelease, Key: keys[0], Value: "c"})
	step(request{Op: reqAcquire, Key: keys[0], Value: "x", TTL: 5 * time.Second})
	step(request{Op: reqExtend, Key: keys[0], Value: "x", TTL: 30 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	step(request{Op: reqExtend, Key: keys[0], Value: "x", TTL: 5 * time.Second}) // gone: not re-created
	step(request{Op: reqAcquireFenced, Key: keys[0], Value: "y", TTL: 30 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	step(request{Op: reqRaiseFence, Key: keys[0], Value: "y", Token: 1})
	step(request{Op: reqRelease, Key: keys[0], Value: "z"})
	// Owned holds expire one by one; the key goes with the last.
	step(request{Op: reqAcquireFenced, Key: keys[0], Value: "x", TTL: 30 * time.Millisecond, Owner: "o1"})
	step(request{Op: reqAcquire, Key: keys[0], Value: "y", TTL: 5 * time.Second, Owner: "o1"})
	step(request{Op: reqAcquire, Key: keys[0], Value: "w", TTL: 5 * time.Second, Owner: "o2"}) // refused
	// y outlives x by far more than the steps between take under load: at
	// 60 ms, y was gone on redis-server by the raise-fence below in a CI
	// run, the sim's at its last millisecond (pttl 0), and they differed.
	step(request{Op: reqExtend, Key: keys[0], Value: "y", TTL: 300 * time.Millisecond, Owner: "o1"})
	time.Sleep(40 * time.Millisecond)
	step(request{Op: reqExtend, Key: keys[0], Value: "x", TTL: 5 * time.Second, Owner: "o1"}) // expired
	step(request{Op: reqRaiseFence, Key: keys[0], Value: "x", Token: 1, Owner: "o1"})         // expired
	step(request{Op: reqAcquire, Key: keys[0], Value: "z", TTL: 5 * time.Second})             // plain: refused
	time.Sleep(300 * time.Millisecond)
	step(request{Op: reqAcquire, Key: keys[0], Value: "w", TTL: 5 * time.Second, Owner: "o2"}) // all expired: free
	step(request{Op: reqAcquire, Key: keys[0], Value: "v", TTL: 5 * time.Second, Owner: "o2"})
	step(request{Op: reqRelease, Key: keys[0], Value: "w", Owner: "o2"})
	step(request{Op: reqRelease, Key: keys[0], Value: "v", Owner: "o2"}) // the last: the key goes
	step(request{Op: reqAcquire, Key: keys[0], Value: "z", TTL: 5 * time.Second})
	// A fence counter changed by hand: both refuse it alike.
	for _, owner := range []string{"", "o1"} {
		k := testKey(t)
		if err := c.Set(ctx, FenceKey(k), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		sim.Lock()
		sim.ExecLocked([]any{"set", FenceKey(k), "x"})
		sim.Unlock()
		step(request{Op: reqAcquireFenced, Key: k, Value: "a", TTL: time.Second, Owner: owner})
	}
	a.noProblems()
}

// simRecorder records what a master publishes to a channel's subscriber.
type simRecorder struct{ got *[]string }

func (r simRecorder) Deliver(channel, payload string) {
	*r.got = append(*r.got, channel+" "+payload)
}

// TestSimMasterQueuesAgreeWithRedis runs random releases that use the
// key's queue — plain releases, registrations for a hand-off or a wake-up
// (various Reg, Place, Behind, TTL), Unlocks and give-ups of hand-off calls,
// owned releases — with subscribers coming and going, on a real
// redis-server and on a simMaster, and checks that they answer alike (OK,
// Woke), publish the same messages to the same channels, and hold the
// same key, queue (members, scores) and TTLs (simAgreement.keys).
func TestSimMasterQueuesAgreeWithRedis(t *testing.T) {
	a := newSimAgreement(t)
	ctx, c, sim := a.ctx, a.c, a.sim
	rn := NewNode(c)
	rng := rand.New(rand.NewPCG(19, 19))
	base := testKey(t)
	keys := []string{base + ":a", base + ":b"}
	chans := []string{base + ":ch0", base + ":ch1", base + ":ch2", ""}
	hands := []string{"h1", "h2", "h3"}
	owners := []string{"o1", "o2"}
	subs := map[string]*redis.PubSub{} // real subscriptions, by channel
	var published []string             // the sim's, this step
	rec := map[string]simRecorder{}
	for _, ch := range chans[:3] {
		rec[ch] = simRecorder{&published}
	}
	defer func() {
		for _, ps := range subs {
			ps.Close()
		}
	}()
	toggle := func(ch string) {
		t.Helper()
		if ps := subs[ch]; ps != nil {
			if err := ps.Unsubscribe(ctx, ch); err != nil {
				t.Fatal(err)
			}
			if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			ps.Close()
			delete(subs, ch)
			sim.Lock()
			sim.UnsubscribeLocked(ch, rec[ch])
			sim.Unlock()
			return
		}
		ps := c.Subscribe(ctx, ch)
		if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		subs[ch] = ps
		sim.Lock()
		sim.SubscribeLocked(ch, rec[ch])
		sim.Unlock()
	}
	// drain returns what redis published to the subscribed channels since
	// the last call, sorted (a step publishes once at most).
	drain := func() []string {
		t.Helper()
		var got []string
		for ch, ps := range subs {
			if err := ps.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := ps.ReceiveTimeout(ctx, 2*time.Second)
				if err != nil {
					t.Fatalf("receive on %s: %v", ch, err)
				}
				if msg, ok := m.(*redis.Message); ok {
					got = append(got, msg.Channel+" "+msg.Payload)
				}
				if _, ok := m.(*redis.Pong); ok {
					break
				}
			}
		}
		slices.Sort(got)
		return got
	}
	counts := map[string]int{}
	places := []int64{0, 100, 200, 200, 300, 400}
	pick := func(ss []string) string { return ss[rng.IntN(len(ss))] }
	for i := range 3000 {
		if rng.IntN(15) == 0 {
			toggle(chans[rng.IntN(3)])
			continue
		}
		key := pick(keys)
		q := request{Op: reqRelease, Key: key, Waiter: pick(chans)}
		if q.Waiter == "" && rng.IntN(2) == 0 {
			q.Waiter = chans[0]
		}
		kind := ""
		switch x := rng.IntN(100); {
		case x < 15:
			kind = "acquire"
			q = request{Op: reqAcquire, Key: key, Value: pick([]string{"v1", "v2"}), TTL: time.Duration(5+rng.IntN(5)) * time.Second}
		case x < 20:
			kind = "owned acquire"
			q = request{Op: reqAcquire, Key: key, Value: pick([]string{"v1", "v2"}), Owner: pick(owners), TTL: time.Duration(5+rng.IntN(5)) * time.Second}
		case x < 30:
			kind = "owned release"
			q.Value, q.Owner = pick([]string{"v1", "v2"}), pick(owners)
		case x < 45:
			kind = "release"
			q.Value = pick([]string{"v1", "v2", "", "h1#1", "h2#2", "h3#1"})
		case x < 75:
			kind = "registration"
			q.Value = pick([]string{"v1", "v2", "x"})
			q.Hand, q.Reg = pick(hands), uint64(1+rng.IntN(4))
			q.Place = places[1+rng.IntN(len(places)-1)]
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
			if rng.IntN(3) == 0 {
				q.TTL = 0 // a fenced or owned lock's call: woken, not handed the key
			}
			q.Queued = q.Place
			if rng.IntN(4) == 0 {
				q.Place = 0 // a rollback that does not queue again
			}
		case x < 88:
			kind = "unlock behind"
			q.Hand, q.Reg, q.Behind = pick(hands), uint64(1+rng.IntN(4)), true
			q.Value = q.Hand + "#" + strconv.Itoa(1+rng.IntN(4))
			q.Place = 500 + int64(rng.IntN(3))*100
			q.Queued = places[1+rng.IntN(len(places)-1)] // where it waited before
			q.TTL = time.Duration(5+rng.IntN(5)) * time.Second
		default:
			kind = "give-up"
			q.Hand, q.Place = pick(hands), places[1+rng.IntN(len(places)-1)]
			q.Queued = q.Place
			if rng.IntN(2) == 0 {
				q.Value = q.Hand + "#" + strconv.Itoa(1+rng.IntN(4)) // an Unlock of a hand-off without Behind
			}
		}
		counts[kind]++
		what := fmt.Sprintf("step %d %s %+v", i, kind, q)
		a.begin()
		r, s := q, q
		execRequests(ctx, rn, &r)
		published = published[:0]
		sim.do(&s)
		if r.OK != s.OK || r.Woke != s.Woke || (r.Err == nil) != (s.Err == nil) {
			t.Fatalf("%s: redis ok=%v woke=%v err=%v, sim ok=%v woke=%v err=%v", what, r.OK, r.Woke, r.Err, s.OK, s.Woke, s.Err)
		}
		want := slices.Sorted(slices.Values(published))
		if got := drain(); !slices.Equal(got, want) {
			t.Fatalf("%s: redis published %q, sim %q", what, got, want)
		}
		a.keys(what, key, WaitKey(key), FenceKey(key))
	}
	st := sim.wakeStats()
	t.Logf("steps %v; sim: %+v", counts, st)
	if st.Handoffs == 0 || st.Wakes == 0 || st.behind == 0 || st.freeHand == 0 || st.Dropped == 0 || st.registrations == 0 {
		t.Errorf("some paths were not exercised: %+v", st)
	}
	a.noProblems()
}

// The simulated network between the simulation's clients (sim_test.go) and
// its masters (internal/sim), in bubble time.
//
// Each client reaches each master through a simConn, the [Node] its
// Redlock gets for that master. A request's trip: Exec draws its delays and
// its fate from the connection's own generator (seeded from the run's seed,
// the client and the master, and drawn in the order the requests are sent);
// the request travels for its forward delay, first-in first-out on its
// connection (a request never lands before one sent before it on the same
// connection); at the master it is dropped (a partition, a lossy link),
// refused (the master is down), held (the master is paused: it lands when
// the master resumes), or applied; its reply travels back for the return
// delay (plus a slow master's extra), again in order, and is lost if the
// link is cut by then or the master restarted meanwhile. Exec returns when
// every reply is in, or — outcome unknown for the rest — when ctx ends (a
// client that honours contexts) or at the read timeout (one that does not,
// as a go-redis client without ContextTimeoutEnabled).
//
// A connection whose Exec gave up may be dropped (reconnects, as go-redis
// drops a connection that timed out): its requests still in flight land in
// their own time, and the requests sent next go on a new connection that
// may overtake them — the documented straggler case.
type simNet struct {
	params  simNetParams
	masters []*simMaster

	mu sync.Mutex
	// cutN[c][m] > 0: client c cannot reach master m, either way (a count
	// of the partitions in force).
	cutN [][]int
	// slow[m]: extra delay of master m's replies; loss[m]: the chance that
	// a reply of master m is lost.
	slow []time.Duration
	loss []float64

	inflight *sync.WaitGroup // requests not yet landed or answered
	seed     uint64          // the run's, for the subscriptions' draws
	subsWG   sync.WaitGroup  // the subscriptions' goroutines (until Close and after)

	// Pub/sub: messages delivered to subscriptions and lost on the way,
	// (re)subscriptions confirmed.
	delivered, lost, resubscribed atomic.Int64
	dups                          atomic.Int64 // releases sent twice
	handsMu                       sync.Mutex
	hands                         map[string]bool // hand-off messages delivered, by master and payload

	trace *simTrace // nil unless tracing
}

// simNetParams is the delay distribution and the baseline faults of the
// links: a one-way delay is base + an exponential with mean spread; with
// chance tailP it is drawn instead uniformly from [0, tailMax] (a
// retransmission, a stall). dropP is the chance a request is lost on the
// way, loseP that its reply is.
type simNetParams struct {
	Base, Spread time.Duration
	TailP        float64
	TailMax      time.Duration
	DropP, LoseP float64
	// DupP is the chance that a release (a rollback that registers a
	// hand-off call, an Unlock, a give-up) of a client that drops timed-out
	// connections is sent twice: the copy goes on a connection of its own,
	// up to 50 ms later, and may land before or after the original and
	// the requests sent after it, as a go-redis retry on a new connection
	// would (a registration that lands twice or late).
	DupP float64
}

func (p simNetParams) String() string {
	s := fmt.Sprintf("delay %v+exp(%v), tail %.3f up to %v, drop %.3f, lose reply %.3f",
		p.Base, p.Spread, p.TailP, p.TailMax, p.DropP, p.LoseP)
	if p.DupP > 0 {
		s += fmt.Sprintf(", releases sent twice %.3f", p.DupP)
	}
	return s
}

func newSimNet(p simNetParams, masters []*simMaster, clients int) *simNet {
	n := &simNet{
		params:   p,
		masters:  masters,
		cutN:     make([][]int, clients),
		slow:     make([]time.Duration, len(masters)),
		loss:     make([]float64, len(masters)),
		inflight: new(sync.WaitGroup),
	}
	for c := range n.cutN {
		n.cutN[c] = make([]int, len(masters))
	}
	return n
}

func (n *simNet) isCut(client, master int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cutN[client][master] > 0
}

func (n *simNet) slowOf(master int) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.slow[master]
}

func (n *simNet) lossOf(master int) float64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.loss[master]
}

// delay draws a one-way delay.
func (p simNetParams) delay(rng *rand.Rand) time.Duration {
	if p.TailP > 0 && rng.Float64() < p.TailP {
		return time.Duration(rng.Int64N(int64(p.TailMax) + 1))
	}
	return p.Base + time.Duration(rng.ExpFloat64()*float64(p.Spread))
}

var (
	errSimRefused     = errors.New("sim: connection refused (master down)")
	errSimReset       = errors.New("sim: connection reset (master restarted)")
	errSimReadTimeout = errors.New("sim: read timeout")
)

// simConn is one client's connection to one master: the Node its Redlock
// uses for that master.
type simConn struct {
	net    *simNet
	m      *simMaster
	client int

	ignoresCtx  bool          // waits for replies until readTimeout, whatever ctx says
	readTimeout time.Duration // ignoresCtx: when Exec gives up
	reconnects  bool          // an Exec that gave up drops the connection
	clean       bool          // the end-of-run client: no drops, losses or tails
	// minTimeout is the shortest node timeout the client may use: an Exec
	// that lasts longer may make the lane skip a request queued behind it.
	minTimeout time.Duration

	sent atomic.Int64  // requests sent
	subs atomic.Uint64 // subscriptions made

	mu  sync.Mutex
	rng *rand.Rand
	w   *simWire
	// troubled: some request of this connection failed, was dropped, lost
	// its reply or waited so long that the lane may have skipped a request
	// behind it; the end-of-run check excuses the keys it left on the master.
	troubled bool
}

func newSimConn(n *simNet, m *simMaster, client int, rng *rand.Rand) *simConn {
	c := &simConn{net: n, m: m, client: client, rng: rng}
	c.w = newSimWire(c)
	return c
}

func (c *simConn) Name() string { return c.m.Name() }

func (c *simConn) trouble() {
	c.mu.Lock()
	c.troubled = true
	c.mu.Unlock()
}

func (c *simConn) isTroubled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.troubled
}

// flight is one request on its way; its reply fields are written before
// done is closed.
type flight struct {
	req                request // the request the command carries, for the checker and the trace
	args               []any   // the command as sent (the core reuses its own)
	reply              any     // the master's reply, or
	rerr               error   // its error reply, or the failure the client sees
	woke               bool
	op                 reqKind
	key, value, owner  string
	ttl                time.Duration
	token              uint64
	arrive             time.Time
	back               time.Duration
	drop, lose         bool
	ok                 bool
	fence              uint64
	err                error
	done               chan struct{}
	seq                int // for traces
	fromClient, master int
}

// simWire is one connection's path to the master, both ways first-in
// first-out. One runner goroutine, started when requests are sent and gone
// when nothing is left in flight, lands the requests at their arrival
// times and hands back the replies at theirs.
type simWire struct {
	c *simConn
	// guarded by c.mu
	queue      []*flight // sent, not landed yet, in arrival order
	running    bool
	lastArrive time.Time
	kick       chan struct{} // capacity 1: a request was queued
	// the runner's alone
	replies   []simReply // answered, on their way back, in order
	lastReply time.Time
	timer     *time.Timer
}

type simReply struct {
	f   *flight
	at  time.Time
	inc int // the master's incarnation when it answered
}

func newSimWire(c *simConn) *simWire {
	return &simWire{c: c, kick: make(chan struct{}, 1)}
}

func (c *simConn) Exec(ctx context.Context, cmds []*Command) {
	if err := ctx.Err(); err != nil && !c.ignoresCtx {
		for _, cmd := range cmds {
			cmd.Reply, cmd.Err = nil, err
		}
		c.trouble()
		return
	}
	began := time.Now()
	c.sent.Add(int64(len(cmds)))
	p := c.net.params
	if c.clean {
		p = simNetParams{Base: p.Base, Spread: p.Spread}
	}
	fs := make([]*flight, len(cmds))
	var dups []*flight
	c.mu.Lock()
	w := c.w
	for i, cmd := range cmds {
		q := cmd.req
		if q == nil {
			q = &request{} // a WAIT: the simulation has no replicas
		}
		f := &flight{
			req: request{Op: q.Op, Key: q.Key, Value: q.Value, TTL: q.TTL, Token: q.Token, Owner: q.Owner,
				Waiter: q.Waiter, Place: q.Place, Hand: q.Hand, Reg: q.Reg, Behind: q.Behind, Queued: q.Queued, Repair: q.Repair,
				Gate: q.Gate},
			args: slices.Clone(cmd.Args),
			op:   q.Op, key: q.Key, value: q.Value, owner: q.Owner, ttl: q.TTL, token: q.Token,
			done: make(chan struct{}), fromClient: c.client, master: c.m.ID(),
		}
		f.arrive = began.Add(p.delay(c.rng))
		if !f.arrive.After(w.lastArrive) {
			f.arrive = w.lastArrive.Add(time.Nanosecond) // in order on the connection
		}
		w.lastArrive = f.arrive
		f.back = p.delay(c.rng)
		f.drop = p.DropP > 0 && c.rng.Float64() < p.DropP
		f.lose = p.LoseP > 0 && c.rng.Float64() < p.LoseP
		w.queue = append(w.queue, f)
		fs[i] = f
		if p.DupP > 0 && c.reconnects && q.Op == reqRelease && c.rng.Float64() < p.DupP {
			dup := *f
			dup.done = make(chan struct{})
			dup.arrive = began.Add(p.delay(c.rng) + time.Duration(c.rng.Int64N(int64(50*time.Millisecond))))
			c.troubled = true
			dups = append(dups, &dup)
		}
	}
	c.net.inflight.Add(len(fs))
	start := !w.running
	w.running = true
	c.mu.Unlock()
	if start {
		go w.run()
	} else {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	c.net.trace.sent(fs)
	for _, d := range dups {
		// Its own connection: nobody waits for its reply.
		sw := newSimWire(c)
		sw.queue, sw.running, sw.lastArrive = []*flight{d}, true, d.arrive
		c.net.inflight.Add(1)
		c.net.dups.Add(1)
		go sw.run()
	}

	var ctxDone <-chan struct{}
	var timeout <-chan time.Time
	if c.ignoresCtx {
		t := time.NewTimer(c.readTimeout)
		defer t.Stop()
		timeout = t.C
	} else {
		ctxDone = ctx.Done()
	}
	for i, f := range fs {
		var err error
		select {
		case <-f.done:
			cmds[i].Reply, cmds[i].Err = f.reply, f.rerr
			if f.err != nil {
				c.trouble()
			}
			continue
		case <-ctxDone:
			err = ctx.Err()
		case <-timeout:
			err = errSimReadTimeout
		}
		for _, cmd := range cmds[i:] {
			cmd.Reply, cmd.Err = nil, err
		}
		c.mu.Lock()
		c.troubled = true
		if c.reconnects && c.w == w {
			c.w = newSimWire(c)
		}
		c.mu.Unlock()
		return
	}
	if c.minTimeout > 0 && time.Since(began) >= c.minTimeout {
		c.trouble()
	}
}

// run lands requests and delivers replies, each at its time.
func (w *simWire) run() {
	c := w.c
	for {
		c.mu.Lock()
		var next *flight
		if len(w.queue) > 0 {
			next = w.queue[0]
		}
		if next == nil && len(w.replies) == 0 {
			// The timer is stopped before the next runner may use it.
			if w.timer != nil {
				w.timer.Stop()
			}
			w.running = false
			w.queue = nil
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		now := time.Now()
		if len(w.replies) > 0 && (next == nil || w.replies[0].at.Before(next.arrive)) {
			rp := w.replies[0]
			if rp.at.After(now) {
				w.sleep(rp.at.Sub(now), true)
				continue // a request may have been queued meanwhile
			}
			w.replies = w.replies[1:]
			w.reply(rp)
			continue
		}
		if next.arrive.After(now) {
			w.sleep(next.arrive.Sub(now), false)
			continue
		}
		c.mu.Lock()
		w.queue[0] = nil
		w.queue = w.queue[1:]
		c.mu.Unlock()
		w.land(next)
	}
}

// sleep waits for d or, when kickable, until a request is queued.
func (w *simWire) sleep(d time.Duration, kickable bool) {
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	var kick chan struct{}
	if kickable {
		kick = w.kick
	}
	select {
	case <-w.timer.C:
	case <-kick:
		w.timer.Stop()
	}
}

// land delivers f to its master and queues its reply.
func (w *simWire) land(f *flight) {
	c, m := w.c, w.c.m
	if w.dropped(f) {
		return
	}
	m.Lock()
	resumed := false
	for m.StateLocked() == sim.Paused {
		// Requests wait at a frozen master; replies already on their way
		// still arrive.
		ch := m.ChangedLocked()
		m.Unlock()
		w.waitChanged(ch)
		m.Lock()
		resumed = true
	}
	w.applyLocked(f)
	// A stopped Redis that runs again reads each connection's input whole
	// and runs every request in it before it turns to the next connection
	// (processInputBuffer): the requests that reached it while it was
	// stopped run one connection at a time, each connection's in its order,
	// never interleaved with another's.
	for resumed {
		c.mu.Lock()
		var next *flight
		if len(w.queue) > 0 && !w.queue[0].arrive.After(time.Now()) {
			next = w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
		}
		c.mu.Unlock()
		if next == nil {
			break
		}
		if !w.dropped(next) {
			w.applyLocked(next)
		}
	}
	m.Unlock()
}

// dropped reports whether f never reaches its master (dropped on the way,
// or the link is cut), and accounts for it then.
func (w *simWire) dropped(f *flight) bool {
	n := w.c.net
	if f.drop || n.isCut(w.c.client, w.c.m.ID()) {
		n.trace.event(f, "dropped on the way")
		n.inflight.Done()
		return true
	}
	return false
}

// applyLocked runs f on its master (its lock held) and schedules its reply,
// unless the master is down or the reply is lost.
func (w *simWire) applyLocked(f *flight) {
	n, m := w.c.net, w.c.m
	inc := m.IncarnationLocked()
	if m.StateLocked() == sim.Down {
		f.err, f.rerr = errSimRefused, errSimRefused
		n.trace.event(f, "refused: master down")
	} else {
		q := f.req
		f.reply, f.rerr = m.applyLocked(&q, f.args, w.c)
		f.ok, f.fence, f.woke, f.err = q.OK, q.Fence, q.Woke, q.Err
		n.trace.applied(f, m.ClockLocked())
		if f.lose || (n.lossOf(m.ID()) > 0 && w.lossDraw() < n.lossOf(m.ID())) {
			n.trace.event(f, "reply lost")
			n.inflight.Done()
			return
		}
	}
	at := time.Now().Add(f.back + n.slowOf(m.ID()))
	if !at.After(w.lastReply) {
		at = w.lastReply.Add(time.Nanosecond) // replies in order too
	}
	w.lastReply = at
	w.replies = append(w.replies, simReply{f, at, inc})
}

func (w *simWire) waitChanged(ch <-chan struct{}) {
	for len(w.replies) > 0 {
		rp := w.replies[0]
		if d := time.Until(rp.at); d > 0 {
			if w.timer == nil {
				w.timer = time.NewTimer(d)
			} else {
				w.timer.Reset(d)
			}
			select {
			case <-ch:
				w.timer.Stop()
				return
			case <-w.timer.C:
			}
		}
		w.replies = w.replies[1:]
		w.reply(rp)
	}
	<-ch
}

// lossDraw draws from the connection's generator for a lossy master.
func (w *simWire) lossDraw() float64 {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.rng.Float64()
}

// reply hands f's reply to its Exec, unless the link is cut now (the reply
// is lost) or the master restarted since it answered (the connection broke:
// outcome unknown).
func (w *simWire) reply(rp simReply) {
	c, n, m, f := w.c, w.c.net, w.c.m, rp.f
	defer n.inflight.Done()
	if n.isCut(c.client, m.ID()) {
		n.trace.event(f, "reply dropped: link cut")
		return
	}
	m.Lock()
	if m.IncarnationLocked() != rp.inc && f.err == nil {
		f.ok, f.fence, f.woke, f.err = false, 0, false, errSimReset
		f.reply, f.rerr = nil, errSimReset
	}
	m.Unlock()
	n.trace.replied(f)
	close(f.done)
}

// simTrace records a run's requests for a failing seed's report (-sim.trace).
type simTrace struct {
	mu    sync.Mutex
	start time.Time
	b     strings.Builder
	seq   int
	lines int
}

const maxTraceLines = 20000

func (t *simTrace) logf(format string, args ...any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lines++; t.lines > maxTraceLines {
		return
	}
	fmt.Fprintf(&t.b, "%12v ", time.Since(t.start))
	fmt.Fprintf(&t.b, format, args...)
	t.b.WriteByte('\n')
}

func (t *simTrace) sent(fs []*flight) {
	if t == nil {
		return
	}
	for _, f := range fs {
		t.mu.Lock()
		t.seq++
		f.seq = t.seq
		t.mu.Unlock()
		q := f.req
		wait := ""
		if q.Waiter != "" || q.Hand != "" {
			wait = fmt.Sprintf(" waiter=%s place=%d hand=%.6s reg=%d behind=%v", strings.TrimPrefix(q.Waiter, "redlock:wake:")[:min(len(q.Waiter), 4)], q.Place, q.Hand, q.Reg, q.Behind)
		}
		if q.Repair {
			wait += " repair"
		}
		t.logf("c%d→m%d #%d send %v %s %.6s ttl=%v tok=%d%s (lands at +%v)", f.fromClient, f.master, f.seq, f.op, f.key, f.value, f.ttl, f.token, wait, time.Until(f.arrive))
	}
}

func (t *simTrace) event(f *flight, what string) {
	if t == nil {
		return
	}
	t.logf("c%d→m%d #%d %s", f.fromClient, f.master, f.seq, what)
}

func (t *simTrace) applied(f *flight, masterClock int64) {
	if t == nil {
		return
	}
	t.logf("c%d→m%d #%d applied: ok=%v fence=%d woke=%v err=%v (master clock %d)", f.fromClient, f.master, f.seq, f.ok, f.fence, f.woke, f.err, masterClock)
}

func (t *simTrace) replied(f *flight) {
	if t == nil {
		return
	}
	t.logf("c%d←m%d #%d reply ok=%v fence=%d err=%v", f.fromClient, f.master, f.seq, f.ok, f.fence, f.err)
}

func (t *simTrace) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.b.String()
	if t.lines > maxTraceLines {
		s += fmt.Sprintf("... %d more lines\n", t.lines-maxTraceLines)
	}
	return s
}

// Pub/sub. A simulated Node is a subscriber (Node.Subscribe): the Redlock's
// channel is subscribed on each master through a simSub, which behaves as
// a go-redis PubSub does. Its SUBSCRIBE travels to the master with the
// link's delay (it waits at a paused master; it fails when the master is
// down or the link cut, and is tried again at once, then every 100 ms, as
// go-redis reconnects); the master then counts it for PUBLISH, and the
// *redis.Subscription confirmation travels back. Each message published
// travels back with the link's delay, in order, and is lost when the link
// is cut when it arrives, by the links' loss rate or a lossy master's, or
// when the master restarted meanwhile. A killed master forgets its
// subscribers (sim.Master.Kill): the client learns it one delay later and
// subscribes again, as go-redis does; a restarted master has none until
// then. Close unsubscribes one delay later (the connection's close
// travels), so a publish meanwhile counts a subscriber that drops the
// message: a hand-off nobody takes.

var errSimSubClosed = errors.New("sim: pubsub closed")

// Subscribe reads the simulated subscription as the go-redis Node reads a
// *redis.PubSub (listen).
func (c *simConn) Subscribe(ctx context.Context, channel string, deliver func(Message)) (Subscription, error) {
	return listen(ctx, c.subscribe(channel), deliver)
}

// Traits: one server; the simulation's lanes never run on their caller.
func (c *simConn) Traits() Traits { return Traits{} }

func (c *simConn) subscribe(channel string) pubsub {
	n := c.net
	s := &simSub{c: c, channel: channel, closeCh: make(chan struct{}), ready: make(chan struct{}, 1),
		kick: make(chan struct{}, 1), out: make(chan any, 100),
		rng: rand.New(rand.NewPCG(n.seed, uint64(1<<50+c.client*64+c.m.ID())+c.subs.Add(1)<<32))}
	s.inc = -1
	inc := s.first()
	n.subsWG.Add(1)
	go s.run(inc)
	return s
}

var _ Node = (*simConn)(nil)

// simSub is one subscription of a Redlock's channel on one master.
type simSub struct {
	c       *simConn
	channel string
	closeCh chan struct{}
	ready   chan struct{} // capacity 1: items or err changed
	kick    chan struct{} // capacity 1: a message is in flight
	out     chan any      // ChannelWithSubscriptions'

	mu       sync.Mutex
	rng      *rand.Rand
	closed   bool
	pumping  bool
	items    []any     // arrived, not read yet
	err      error     // the latest failure to subscribe, for Receive
	inflight []simPub  // published, on their way
	last     time.Time // the latest arrival time drawn
	inc      int       // the master's incarnation it is subscribed in; -1: none
}

type simPub struct {
	payload string
	at      time.Time
	lose    bool
	inc     int
}

// deliver is the master's PUBLISH to this subscription (m.mu held).
func (s *simSub) Deliver(channel, payload string) {
	p := s.c.net.params
	if s.c.clean {
		p = simNetParams{Base: p.Base, Spread: p.Spread}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	at := time.Now().Add(p.delay(s.rng) + s.c.net.slowOf(s.c.m.ID()))
	if !at.After(s.last) {
		at = s.last.Add(time.Nanosecond)
	}
	s.last = at
	lose := p.LoseP > 0 && s.rng.Float64() < p.LoseP
	if l := s.c.net.lossOf(s.c.m.ID()); l > 0 && s.rng.Float64() < l {
		lose = true
	}
	s.inflight = append(s.inflight, simPub{payload, at, lose, s.c.m.IncarnationLocked()})
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *simSub) push(x any, err error) {
	s.mu.Lock()
	if x != nil {
		s.items = append(s.items, x)
	} else {
		s.err = err
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *simSub) draw() time.Duration {
	p := s.c.net.params
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.Base + time.Duration(s.rng.ExpFloat64()*float64(p.Spread))
}

// sleep waits d, or until Close; it reports false on Close.
func (s *simSub) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.closeCh:
		return false
	}
}

// first is the first SUBSCRIBE, made at once: wakeups.start waits for
// its confirmation holding a mutex that the Redlock's other Lock calls
// wait for, and a bubble does not advance its clock while a goroutine waits
// for a mutex (not a durable block), so the confirmation may not take bubble
// time. It lands when the master is up and the link not cut, else it fails
// (a paused master too: go-redis would wait for the node timeout), and
// run tries again with the link's delays. It returns the master's
// incarnation subscribed in, or -1.
func (s *simSub) first() int {
	c, n, m := s.c, s.c.net, s.c.m
	m.Lock()
	defer m.Unlock()
	if m.StateLocked() != sim.Up || n.isCut(c.client, m.ID()) {
		s.push(nil, errSimRefused)
		return -1
	}
	s.mu.Lock()
	s.inc = m.IncarnationLocked()
	s.mu.Unlock()
	m.SubscribeLocked(s.channel, s)
	n.resubscribed.Add(1)
	s.push(&redis.Subscription{Kind: "subscribe", Channel: s.channel, Count: 1}, nil)
	return m.IncarnationLocked()
}

// run delivers the messages, and subscribes again after the master
// restarted (or after the first SUBSCRIBE failed), until Close.
func (s *simSub) run(inc int) {
	c, n, m := s.c, s.c.net, s.c.m
	defer n.subsWG.Done()
	fails := 0
	defer func() {
		// Close: the master forgets the subscription once the close
		// reaches it.
		time.Sleep(s.draw())
		m.Lock()
		s.mu.Lock()
		if s.inc == m.IncarnationLocked() {
			m.UnsubscribeLocked(s.channel, s)
		}
		s.inc = -1
		s.mu.Unlock()
		m.Unlock()
	}()
	if inc >= 0 {
		m.Lock()
		changed := m.ChangedLocked()
		restarted := m.IncarnationLocked() != inc
		m.Unlock()
		if !restarted && !s.pump(inc, changed) {
			return
		}
	}
	fails = 1
	for {
		if fails > 1 && !s.sleep(100*time.Millisecond) {
			return
		}
		if !s.sleep(s.draw()) { // SUBSCRIBE on its way
			return
		}
		m.Lock()
		for m.StateLocked() == sim.Paused {
			ch := m.ChangedLocked()
			m.Unlock()
			select {
			case <-ch:
			case <-s.closeCh:
				return
			}
			m.Lock()
		}
		if m.StateLocked() == sim.Down || n.isCut(c.client, m.ID()) {
			m.Unlock()
			fails++
			s.push(nil, errSimRefused)
			continue
		}
		inc := m.IncarnationLocked()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			m.Unlock()
			return
		}
		s.inc = inc
		s.mu.Unlock()
		m.SubscribeLocked(s.channel, s)
		changed := m.ChangedLocked()
		m.Unlock()
		fails = 0
		// The confirmation travels back like a message.
		s.mu.Lock()
		at := time.Now().Add(s.c.net.params.Base)
		if !at.After(s.last) {
			at = s.last.Add(time.Nanosecond)
		}
		s.last = at
		s.inflight = append(s.inflight, simPub{payload: "\x00subscribe", at: at, inc: inc})
		s.mu.Unlock()
		if !s.pump(inc, changed) {
			return
		}
		fails = 1 // the connection broke: reconnect at once, then every 100 ms
	}
}

// pump delivers the messages in flight at their times while the master
// stays in incarnation inc; it returns false on Close, true when the
// master restarted (the connection broke: the messages in flight are lost).
func (s *simSub) pump(inc int, changed <-chan struct{}) bool {
	c, n, m := s.c, s.c.net, s.c.m
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		var next *simPub
		if len(s.inflight) > 0 {
			next = &s.inflight[0]
		}
		s.mu.Unlock()
		var due <-chan time.Time
		if next != nil {
			if d := time.Until(next.at); d > 0 {
				t.Reset(d)
				due = t.C
			} else {
				s.mu.Lock()
				p := s.inflight[0]
				s.inflight = s.inflight[1:]
				s.mu.Unlock()
				switch {
				case p.payload == "\x00subscribe":
					n.resubscribed.Add(1)
					s.push(&redis.Subscription{Kind: "subscribe", Channel: s.channel, Count: 1}, nil)
				case p.lose || p.inc != inc || n.isCut(c.client, m.ID()):
					n.lost.Add(1)
				default:
					n.delivered.Add(1)
					if strings.HasPrefix(p.payload, "h") {
						n.handsMu.Lock()
						if n.hands == nil {
							n.hands = map[string]bool{}
						}
						n.hands[strconv.Itoa(m.ID())+" "+p.payload] = true
						n.handsMu.Unlock()
					}
					s.push(&redis.Message{Channel: s.channel, Payload: p.payload}, nil)
				}
				continue
			}
		}
		select {
		case <-due:
		case <-s.kick:
			t.Stop()
		case <-changed:
			t.Stop()
			m.Lock()
			restarted := m.IncarnationLocked() != inc
			changed = m.ChangedLocked()
			m.Unlock()
			if restarted {
				// The client learns it one delay later; what was in
				// flight is lost.
				if !s.sleep(s.draw()) {
					return false
				}
				s.mu.Lock()
				n.lost.Add(int64(len(s.inflight)))
				s.inflight = nil
				s.inc = -1
				s.mu.Unlock()
				return true
			}
		case <-s.closeCh:
			return false
		}
	}
}

// Receive returns the next message or subscription, or the latest failure
// to subscribe, as (*redis.PubSub).Receive does.
func (s *simSub) Receive(ctx context.Context) (any, error) {
	for {
		s.mu.Lock()
		if len(s.items) > 0 {
			x := s.items[0]
			s.items = s.items[1:]
			s.mu.Unlock()
			return x, nil
		}
		if err := s.err; err != nil {
			s.err = nil
			s.mu.Unlock()
			return nil, err
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errSimSubClosed
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closeCh:
		}
	}
}

// ChannelWithSubscriptions returns the channel of messages and
// (re)subscriptions, closed by Close.
func (s *simSub) ChannelWithSubscriptions(...redis.ChannelOption) <-chan any {
	s.mu.Lock()
	start := !s.pumping
	s.pumping = true
	s.mu.Unlock()
	if start {
		s.c.net.subsWG.Add(1)
		go func() {
			defer s.c.net.subsWG.Done()
			defer close(s.out)
			for {
				s.mu.Lock()
				s.err = nil // go-redis's channel logs failures, it does not deliver them
				if len(s.items) > 0 {
					x := s.items[0]
					s.items = s.items[1:]
					s.mu.Unlock()
					select {
					case s.out <- x:
					case <-s.closeCh:
						return
					}
					continue
				}
				s.mu.Unlock()
				select {
				case <-s.ready:
				case <-s.closeCh:
					return
				}
			}
		}()
	}
	return s.out
}

func (s *simSub) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errSimSubClosed
	}
	s.closed = true
	s.mu.Unlock()
	close(s.closeCh)
	return nil
}

// handDelivered reports whether master's hand-off message payload reached
// its subscriber.
func (n *simNet) handDelivered(master int, payload string) bool {
	n.handsMu.Lock()
	defer n.handsMu.Unlock()
	return n.hands[strconv.Itoa(master)+" "+payload]
}

// The simulated masters (internal/sim) as the simulation's clients reach
// them: each request the core built runs there as its command, its reply
// read as the core reads it (decode), and the master keeps, for the
// checker, which connection's acquire set a key or entered a hold, and
// counts what the requests did.

// simMaster is a sim.Master with what the simulation counts of the
// requests it ran; the Master's lock guards those too.
type simMaster struct {
	*sim.Master
	stats simWakeStats
	// gateEarly counts the gated votes the restart gate let count while the
	// master had been up less than the gate, by why (simGateEarly).
	gateEarly simGateEarly
	// shimErrs: what a request needed that internal/sim does not
	// simulate; luaErrs: scripts that raised an error (a bug in the script
	// when nobody changes keys by hand, as in the simulation). Both are
	// reported, never ignored; at most maxSimErrs of each are kept.
	shimErrs, luaErrs []error
}

const maxSimErrs = 10

func newSimMaster(id int, epoch time.Time, offset time.Duration, rate float64) *simMaster {
	return &simMaster{Master: sim.NewMaster(id, epoch, offset, rate)}
}

// simWakeStats counts what the release scripts did with the queues, as
// seen from the commands they ran.
type simWakeStats struct {
	sim.WakeStats     // the PUBLISHes: hand-offs, wake-ups, dropped
	registrations int // hand-off registrations that landed (Hand, Reg and Place set)
	behind        int // Unlocks (Behind) that queued their call again after a subscriber was told
	freeHand      int // registrations that freed nothing but handed the key
	ghosts        int // plain releases of exactly a hand-off value (hand#reg)
}

func (s *simWakeStats) add(o simWakeStats) {
	s.WakeStats.Add(o.WakeStats)
	s.registrations += o.registrations
	s.behind += o.behind
	s.freeHand += o.freeHand
	s.ghosts += o.ghosts
}

// wakeStats returns the master's counts.
func (m *simMaster) wakeStats() simWakeStats {
	m.Lock()
	st := m.stats
	m.Unlock()
	st.WakeStats = m.Master.Stats()
	return st
}

// holding returns the live lock keys and their entries at the end of a
// run (sim.Master.Holding), without the fence counters and the queues.
func (m *simMaster) holding() map[string]sim.Entry {
	return m.Holding(func(key string) bool {
		_, _, derived := derivedFrom(key)
		return derived
	})
}

// problems returns what the master could not simulate, and the scripts
// that raised errors.
func (m *simMaster) problems() []error {
	m.Lock()
	defer m.Unlock()
	return append(append([]error(nil), m.shimErrs...), m.luaErrs...)
}

// applyLocked runs args, the command of q, on the master (its lock held,
// master up), returns its reply, and keeps what the checker needs: which
// connection's acquire set a key or entered a hold.
func (m *simMaster) applyLocked(q *request, args []any, c *simConn) (reply any, err error) {
	reply, err = m.execLocked(q, args)
	if q.OK && q.Op == reqExtend && q.Repair {
		m.MarkLocked(q.Key, q.Value, c, true) // set by extend.lua's renew: released as an acquired key is
	}
	if q.OK && (q.Op == reqAcquire || q.Op == reqAcquireFenced || q.Kind == kindPermit && q.Op == reqExtend && q.Repair) {
		if q.Kind == kindPermit { // a hash of slots: the slot's end field is its hold (sim_sem_test.go)
			m.MarkLocked(q.Key, "e"+strconv.Itoa(int(q.Slot)), c, false)
		} else {
			m.MarkLocked(q.Key, q.Value, c, false)
		}
	}
	return reply, err
}

// do runs q as a client of the master.
func (m *simMaster) do(q *request) {
	m.Lock()
	defer m.Unlock()
	m.execLocked(q, nil)
}

// execLocked runs q on the master as the production Node would have it
// run (its lock held, master up): args, the command the core built for q
// (nil: built here, as the core builds it), run on the keyspace (a script
// in Lua), its reply read as the core reads it (decode). It returns the
// reply the client gets.
func (m *simMaster) execLocked(q *request, args []any) (reply any, rerr error) {
	var cmd Command
	if args == nil {
		if !encode(q, &cmd) {
			return nil, q.Err // an unknown Op: encode failed q
		}
		args = cmd.Args
	}
	// A gated vote is one script, the gate's check in front.
	var cache *simGateCache // the gate's cache when the vote came
	if gated(q) {
		// The cache gates before issue 31 kept; none now.
		if v, born, ok := m.KeyLocked(derivedKey(q.Key, "epoch")); ok {
			cache = &simGateCache{v, born}
		}
	}
	x := m.ExecLocked(args)
	cmd.Reply, cmd.Err = x.Reply, x.Err
	decode(q, &cmd)
	if gated(q) {
		m.noteGateLocked(q, x.Now, cache)
	}
	if x.ShimErr != nil {
		if len(m.shimErrs) < maxSimErrs {
			m.shimErrs = append(m.shimErrs, fmt.Errorf("%v: %w", q.Op, x.ShimErr))
		}
		q.OK, q.Fence, q.Woke, q.Err = false, 0, false, x.ShimErr
		cmd.Reply, cmd.Err = nil, x.ShimErr
	}
	if x.LuaErr != nil && len(m.luaErrs) < maxSimErrs {
		m.luaErrs = append(m.luaErrs, fmt.Errorf("%v: %w", q.Op, x.LuaErr))
	}
	if q.Op == reqRelease {
		st := &m.stats
		if q.Hand != "" && q.Reg != 0 && q.Place != 0 {
			st.registrations++
		}
		if q.Hand != "" && q.Woke && !q.OK {
			st.freeHand++
		}
		if q.Behind && x.Requeued {
			st.behind++
		}
		if q.Hand == "" && q.Owner == "" && q.OK && strings.Contains(q.Value, "#") {
			st.ghosts++
		}
	}
	return cmd.Reply, cmd.Err
}

// simGateCache is the restart gate's cache (before issue 31) as a vote
// found it: the start it held, and the incarnation that wrote it.
type simGateCache struct {
	str  string
	born int
}

// simGateEarly counts the gated votes that a master's restart gate let
// count before the master had been up for the gate (by its own clock), by
// why the gate thought it had:
//   - snapshot: its cache (EpochKey) holds the start of an earlier
//     incarnation, loaded from the snapshot this one restarted from —
//     issue 31's hole (A): the lock keys written after the snapshot are
//     lost, and the gate trusts the old start;
//   - rounding: its cache was made in this incarnation, from an
//     uptime_in_seconds that read high (Redis counts it in whole seconds
//     of the clock, not of the time up) — hole (B);
//   - data: its cache holds an earlier incarnation's start, kept by a
//     restart with its data (AOF): no write was lost, so no hole.
type simGateEarly struct {
	snapshot, rounding, data int
	first                    []string // the first of each cause, described
}

func (g *simGateEarly) add(o simGateEarly) {
	g.snapshot += o.snapshot
	g.rounding += o.rounding
	g.data += o.data
	for _, f := range o.first {
		if len(g.first) < 6 {
			g.first = append(g.first, f)
		}
	}
}

// holes is how many early votes came through issue 31's holes.
func (g *simGateEarly) holes() int { return g.snapshot + g.rounding }

func (g simGateEarly) String() string {
	return fmt.Sprintf("%d through a cache from a snapshot (A), %d through an uptime that read high (B), %d through a cache kept by a restart with data (no loss)",
		g.snapshot, g.rounding, g.data)
}

// noteGateLocked counts q's vote in m.gateEarly when the restart gate (the
// gated vote's reply) let it run before the master had been up q.Gate
// at now (its clock, ns); cache was the gate's cache (nil: none) when the
// gate ran.
func (m *simMaster) noteGateLocked(q *request, now int64, cache *simGateCache) {
	startedAt, inc := m.StartedAtLocked(), m.IncarnationLocked()
	up := time.Duration(now - startedAt)
	// The gate counts in whole ms: a vote less than a ms early is its
	// arithmetic's, not a hole. A vote with an error did not get past the
	// gate (a refusal, or a script that failed before the vote).
	if q.Err != nil || up+time.Millisecond >= q.Gate {
		return
	}
	why, n := "rounding", &m.gateEarly.rounding
	if cache != nil && cache.born < inc {
		why, n = "data", &m.gateEarly.data
		if m.StartedFromLocked() == sim.RestartSnapshot {
			why, n = "snapshot", &m.gateEarly.snapshot
		}
	}
	if *n == 0 {
		what := "no cache: made now from INFO"
		if cache != nil {
			what = fmt.Sprintf("cached start %q, made in incarnation %d", cache.str, cache.born)
		}
		m.gateEarly.first = append(m.gateEarly.first, fmt.Sprintf("%s: +%v master %d (incarnation %d, restarted %v) let a %v of %s count %v after its restart, gate %v (%s; uptime_in_seconds now %d)",
			why, time.Since(m.Epoch()), m.ID(), inc, m.StartedFromLocked(), q.Op, q.Key, up, q.Gate, what, now/int64(time.Second)-startedAt/int64(time.Second)))
	}
	*n++
}

// TestSimPausedMasterRunsConnectionsWhole: a stopped Redis that runs again
// reads each connection's input whole and runs all of it before the next
// connection's, so the requests that reached a paused simulated master
// run connection by connection (issue 43, item 7). Connection A sends
// two requests around one of connection B's while the master is paused;
// when it resumes, A's two run one after the other, before or after B's,
// never around it. Each request counts where it ran. (Which of the two
// runs first is the goroutines' order, not epoll's: both are orders Redis
// may give.) Without -race the runtime rarely interleaves the wires; under
// -race (make test) the old wire did in about 1 run of 40.
func TestSimPausedMasterRunsConnectionsWhole(t *testing.T) {
	const count = "local n = (tonumber(redis.call('hget', 'c', 'n')) or 0) + 1; redis.call('hset', 'c', 'n', n); return n"
	interleaved := 0
	for run := range 200 {
		synctest.Test(t, func(t *testing.T) {
			m := newSimMaster(0, time.Now(), 0, 1)
			defer m.StopScripts()
			n := newSimNet(simNetParams{Base: time.Millisecond}, []*simMaster{m}, 2)
			a := newSimConn(n, m, 0, rand.New(rand.NewPCG(uint64(run), 1)))
			b := newSimConn(n, m, 1, rand.New(rand.NewPCG(uint64(run), 2)))
			m.Pause()
			var cmds [3]*Command // A's first, B's, A's second
			for i := range cmds {
				cmds[i] = &Command{Args: []any{"eval", count, int64(0)}}
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			for i, c := range []*simConn{a, b, a} {
				wg.Go(func() { c.Exec(ctx, cmds[i:i+1]) })
				time.Sleep(100 * time.Microsecond)
			}
			time.Sleep(10 * time.Millisecond) // every request waits at the paused master
			m.Resume()
			wg.Wait()
			a1, _ := cmds[0].Reply.(int64)
			a2, _ := cmds[2].Reply.(int64)
			if a1 == 0 || a2 == 0 {
				t.Fatalf("replies %v, %v, %v (%v, %v, %v)", cmds[0].Reply, cmds[1].Reply, cmds[2].Reply, cmds[0].Err, cmds[1].Err, cmds[2].Err)
			}
			if a2 != a1+1 {
				interleaved++
			}
		})
	}
	if interleaved > 0 {
		t.Errorf("in %d of 200 runs, B's request ran between A's two after the master resumed", interleaved)
	}
}
