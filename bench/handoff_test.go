package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/faultproxy"
)

// BenchmarkHandOff is contenders taking turns on one key over 5 masters,
// each with Lock, an empty critical section and Unlock: as goroutines of one
// Redlock (redlocks=1/goroutines=8: this process's FIFO hands the key on), or
// each with a Redlock of its own (redlocks=R/goroutines=1, as R processes
// would be: the masters' wake-ups hand it on). An op is one critical
// section. It reports critical sections per second, the 99th percentile of
// the wait from calling Lock to holding the lock, the largest share of the
// critical sections one contender ran, and the wasted attempts per hand-off:
// acquire attempts that did not take the key (each followed by a
// rollback): the SET commands the clients sent, per master, less the
// sections that an attempt took (the others were handed over by the
// masters, see redlock's handoff.go).
func BenchmarkHandOff(b *testing.B) {
	for _, c := range []struct{ redlocks, goroutines int }{{1, 8}, {8, 1}, {2, 1}, {32, 1}} {
		b.Run(fmt.Sprintf("redlocks=%d/goroutines=%d/nodes=5", c.redlocks, c.goroutines), func(b *testing.B) {
			libs := make([]*redlockLib, c.redlocks)
			for i := range libs {
				libs[i] = newRedlock(b, countSets(newClients(b, addrs(5))))
			}
			handOff(b, libs, c.goroutines)
		})
	}
}

// BenchmarkHandOffLAN is BenchmarkHandOff's 8-contender cases with every
// master behind internal/faultproxy adding 250 µs to each round trip, as a
// LAN would: there the hand-off's cost is its round trips, where on
// loopback it is the CPU of the socket calls (this machine runs the
// masters, the contenders and the proxies on the same cores).
func BenchmarkHandOffLAN(b *testing.B) {
	for _, c := range []struct{ redlocks, goroutines int }{{1, 8}, {8, 1}} {
		b.Run(fmt.Sprintf("redlocks=%d/goroutines=%d/nodes=5/rtt=250us", c.redlocks, c.goroutines), func(b *testing.B) {
			proxied := make([]string, 5)
			for i, a := range addrs(5) {
				p, err := faultproxy.New(a)
				if err != nil {
					b.Fatal(err)
				}
				p.SetLatency(250 * time.Microsecond)
				b.Cleanup(func() { p.Close() }) // after the Redlocks' Close
				proxied[i] = p.Addr()
			}
			libs := make([]*redlockLib, c.redlocks)
			for i := range libs {
				libs[i] = newRedlock(b, countSets(newClients(b, proxied)))
			}
			handOff(b, libs, c.goroutines)
		})
	}
}

// handOffStats is what one run of contenders measured.
type handOffStats struct {
	Sections int64           // critical sections run
	Waits    []time.Duration // from calling Lock to holding the lock, one per section
	Wins     []int64         // sections per contender
	Handed   int64           // sections the masters handed over (no attempt)
	Sets     int64           // SET commands sent: one per master and attempt
}

// setsSent counts the SET commands (acquire attempts) that go-redis
// clients send; a SET a master runs inside a script (a hand-off) is not one.
var setsSent atomic.Int64

type setHook struct{}

func (setHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (setHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "set" {
			setsSent.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (setHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "set" {
				setsSent.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// countSets adds setsSent's hook to cs.
func countSets(cs []*redis.Client) []*redis.Client {
	for _, c := range cs {
		c.AddHook(setHook{})
	}
	return cs
}

// handed reports whether the masters handed h over to its Lock call rather
// than an attempt taking it: its value is the call's hand-off value, "#"
// and a registration number.
func handed(h held) bool {
	r, ok := h.(redlockHeld)
	return ok && strings.Contains(r.l.Value(), "#")
}

// contend runs goroutines per Redlock of libs on key until left runs out
// (or, with left nil, until stop), checking that no two hold it at once.
func contend(ctx context.Context, libs []*redlockLib, goroutines int, key string, left *atomic.Int64) (handOffStats, error) {
	var (
		mu     sync.Mutex
		st     handOffStats
		inside atomic.Int32
		fail   error
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st.Wins = make([]int64, len(libs)*goroutines)
	for i, l := range libs {
		for g := range goroutines {
			who := i*goroutines + g
			wg.Go(func() {
				var waits []time.Duration
				defer func() {
					mu.Lock()
					st.Waits = append(st.Waits, waits...)
					mu.Unlock()
				}()
				for left == nil || left.Load() > 0 {
					start := time.Now()
					h, err := l.lock(ctx, key)
					if err != nil {
						return // ctx ended
					}
					waits = append(waits, time.Since(start))
					if inside.Add(1) != 1 {
						mu.Lock()
						fail = fmt.Errorf("two holders at once")
						mu.Unlock()
					}
					if left == nil || left.Add(-1) >= 0 {
						mu.Lock()
						st.Wins[who]++
						st.Sections++
						if handed(h) {
							st.Handed++
						}
						mu.Unlock()
					}
					inside.Add(-1)
					if err := h.unlock(context.Background()); err != nil {
						mu.Lock()
						fail = err
						mu.Unlock()
					}
					if left != nil && left.Load() <= 0 {
						cancel() // end the others' waits
					}
				}
			})
		}
	}
	wg.Wait()
	return st, fail
}

func handOff(b *testing.B, libs []*redlockLib, goroutines int) {
	key := newKey(b)
	var left atomic.Int64
	left.Store(int64(b.N))
	before := setsSent.Load()
	b.ResetTimer()
	start := time.Now()
	st, err := contend(context.Background(), libs, goroutines, key, &left)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	st.Sets = setsSent.Load() - before
	reportHandOff(b, st, elapsed)
}

func reportHandOff(b *testing.B, st handOffStats, elapsed time.Duration) {
	slices.Sort(st.Waits)
	p99 := st.Waits[(len(st.Waits)*99)/100]
	b.ReportMetric(float64(st.Sections)/elapsed.Seconds(), "cs/s")
	b.ReportMetric(float64(p99)/1e6, "p99-wait-ms")
	b.ReportMetric(100*float64(slices.Max(st.Wins))/float64(st.Sections), "maxshare-%")
	// Sections the masters did not hand over each took one attempt;
	// Waits has one per section, also past b.N.
	taken := float64(len(st.Waits)) - float64(st.Handed)
	b.ReportMetric((float64(st.Sets)/5-taken)/float64(st.Sections), "wasted/handoff")
	b.ReportMetric(100*float64(st.Handed)/float64(st.Sections), "handed-%")
}

// BenchmarkHandOffProcesses is BenchmarkHandOff with 4 OS processes × 2
// goroutines (this test binary run again as a child, each with one
// Redlock), for 3 s whatever b.N: the figures are its metrics.
func BenchmarkHandOffProcesses(b *testing.B) {
	const procs, goroutines, run = 4, 2, 3 * time.Second
	b.Run("procs=4/goroutines=2/nodes=5", func(b *testing.B) {
		key := newKey(b)
		until := time.Now().Add(500 * time.Millisecond) // the children start meanwhile
		cmds := make([]*exec.Cmd, procs)
		outs := make([]strings.Builder, procs)
		for i := range cmds {
			cmds[i] = exec.Command(os.Args[0], "-test.run", "^TestHandOffChild$", "-test.v")
			cmds[i].Env = append(os.Environ(), "HANDOFF_CHILD="+strings.Join([]string{
				strings.Join(addrs(5), ","), key, strconv.Itoa(goroutines),
				strconv.FormatInt(until.UnixNano(), 10), strconv.FormatInt(until.Add(run).UnixNano(), 10)}, ";"))
			cmds[i].Stdout = &outs[i]
			if err := cmds[i].Start(); err != nil {
				b.Fatal(err)
			}
		}
		var all handOffStats
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				b.Fatalf("child %d: %v\n%s", i, err, outs[i].String())
			}
			var st handOffStats
			line := outs[i].String()
			j := strings.Index(line, "HANDOFF ")
			if j < 0 {
				b.Fatalf("child %d reported nothing:\n%s", i, line)
			}
			if err := json.NewDecoder(strings.NewReader(line[j+len("HANDOFF "):])).Decode(&st); err != nil {
				b.Fatal(err)
			}
			all.Sections += st.Sections
			all.Waits = append(all.Waits, st.Waits...)
			all.Wins = append(all.Wins, st.Wins...)
			all.Handed += st.Handed
			all.Sets += st.Sets
		}
		reportHandOff(b, all, run)
	})
}

// TestHandOffChild is BenchmarkHandOffProcesses's child: it contends from
// the start time given until the end, and prints its stats.
func TestHandOffChild(t *testing.T) {
	arg := os.Getenv("HANDOFF_CHILD")
	if arg == "" {
		t.Skip("run by BenchmarkHandOffProcesses")
	}
	f := strings.Split(arg, ";")
	goroutines, _ := strconv.Atoi(f[2])
	from, _ := strconv.ParseInt(f[3], 10, 64)
	to, _ := strconv.ParseInt(f[4], 10, 64)
	nodes := make([]redlock.Node, 0, 5)
	for _, a := range strings.Split(f[0], ",") {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		defer c.Close()
		c.AddHook(setHook{})
		nodes = append(nodes, redlock.NewNode(c))
	}
	l := redlockOver(t, nodes, nil)
	time.Sleep(time.Until(time.Unix(0, from)))
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, to))
	defer cancel()
	before := setsSent.Load()
	st, err := contend(ctx, []*redlockLib{l}, goroutines, f[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Sets = setsSent.Load() - before
	out, _ := json.Marshal(st)
	fmt.Printf("HANDOFF %s\n", out)
}
