// Command report runs the benchmark suite, feeds it to benchstat, writes the
// targets and results tables between the markers in the repository's
// docs/benchmarks.md, and plots Lock+Unlock latency against the node count for redlock
// (over go-redis clients through NewNode, and over rueidis clients through
// redlockrueidis.NewNode), its peers, and the floors.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/report              # 6 passes, about 6 minutes
//	go run ./cmd/report -from results/bench.txt  # only re-render
//	go run ./cmd/report -from new.txt -out /tmp/r -readme ''  # render, leave docs/benchmarks.md alone
//
// The suite runs as -passes interleaved passes of -count 1, each pass running
// every benchmark of every library once, and the outputs are concatenated.
// Running -count 6 instead would measure a sub-benchmark six times in a row,
// so the drift of a shared machine between one sub-benchmark and the next
// would bias every ratio; interleaved, the samples of one pass were taken
// within a minute of each other. Each ratio shown is therefore the median of
// the per-pass ratios, next to the medians of the two figures compared.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

const (
	beginMarker = "<!-- bench:begin (written by bench/cmd/report; do not edit) -->"
	endMarker   = "<!-- bench:end -->"
)

func main() {
	passes := flag.Int("passes", 6, "interleaved passes of the suite, each with go test -count 1")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime")
	bench := flag.String("bench", ".", "go test -bench")
	from := flag.String("from", "", "read this go test output instead of running the suite")
	out := flag.String("out", "results", "directory for bench.txt, benchstat.txt and the plots")
	readme := flag.String("readme", "../docs/benchmarks.md", "page whose marked section gets the tables (empty: write none, only print the section)")
	flag.Parse()
	log.SetFlags(0)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	raw := filepath.Join(*out, "bench.txt")
	cmdline := fmt.Sprintf("go test -run '^$' -bench '%s' -benchmem -benchtime %s -count 1", *bench, *benchtime)
	if *from == "" {
		if err := runPasses(raw, *passes, *bench, *benchtime); err != nil {
			log.Fatal(err)
		}
	} else if *from != raw {
		b, err := os.ReadFile(*from)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(raw, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}

	// redsync first, so that benchstat's "vs base" compares each library with it.
	stat, err := exec.Command("go", "tool", "benchstat", "-col", "/lib@(redsync redlock rueidis redislock floor wire)", raw).CombinedOutput()
	if err != nil {
		log.Fatalf("benchstat: %v\n%s", err, stat)
	}
	if err := os.WriteFile(filepath.Join(*out, "benchstat.txt"), stat, 0o644); err != nil {
		log.Fatal(err)
	}

	res, err := parse(raw)
	if err != nil {
		log.Fatal(err)
	}
	if err := plotLatency(res, filepath.Join(*out, "latency")); err != nil {
		log.Fatal(err)
	}
	section := render(res, cpuLine(raw), cmdline)
	if *readme != "" {
		if err := replaceSection(*readme, section); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Print(section)
}

// runPasses builds the test binary once and runs it passes times with
// -count 1, appending each pass's output to raw as it completes (so a failed
// pass leaves the earlier ones on disk).
func runPasses(raw string, passes int, bench, benchtime string) error {
	tmp, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bench.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go test -c: %v", err)
	}
	if err := os.WriteFile(raw, nil, 0o644); err != nil {
		return err
	}
	start := time.Now()
	for i := 1; i <= passes; i++ {
		t := time.Now()
		cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", bench, "-test.benchmem",
			"-test.benchtime", benchtime, "-test.count", "1", "-test.timeout", "30m")
		var buf bytes.Buffer
		cmd.Stdout = &buf
		cmd.Stderr = os.Stderr
		runErr := cmd.Run()
		f, err := os.OpenFile(raw, os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, werr := f.Write(buf.Bytes())
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
		if runErr != nil {
			return fmt.Errorf("pass %d: %v (output in %s)", i, runErr, raw)
		}
		log.Printf("pass %d/%d: %s", i, passes, time.Since(t).Round(time.Second))
	}
	log.Printf("suite: %s", time.Since(start).Round(time.Second))
	return nil
}

// sample is one measurement; pass and rep identify the run it came from, so
// that figures of different benchmarks from the same pass can be paired.
type sample struct {
	pass, rep int
	v         float64
}

// results maps "Benchmark/lib=x/nodes=n" and a unit to the samples.
type results map[string]map[string][]sample

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads go test output. Each pass starts with its own "goos:" header;
// within a pass, the k-th line of a benchmark is its rep k (only output run
// with -count > 1 has more than one).
func parse(path string) (results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := results{}
	pass := 0
	reps := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 0 && fs[0] == "goos:" {
			pass++
			clear(reps)
			continue
		}
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fs[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(fs[0], "")
		if res[name] == nil {
			res[name] = map[string][]sample{}
		}
		rep := reps[name]
		reps[name]++
		for i := 2; i+1 < len(fs); i += 2 {
			v, err := strconv.ParseFloat(fs[i], 64)
			if err != nil {
				continue
			}
			res[name][fs[i+1]] = append(res[name][fs[i+1]], sample{pass, rep, v})
		}
	}
	return res, sc.Err()
}

func median(vs []float64) float64 {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func (r results) values(name, unit string) []float64 {
	var vs []float64
	for _, s := range r[name][unit] {
		vs = append(vs, s.v)
	}
	return vs
}

// median of name's samples in unit; ok false when there are none.
func (r results) median(name, unit string) (float64, bool) {
	vs := r.values(name, unit)
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}

// ratio is the median over the passes of a's figure divided by b's in the
// same pass; n is the number of passes that measured both.
func (r results) ratio(a, b, unit string) (q float64, n int) {
	bs := r.byPass(b, unit)
	var qs []float64
	for _, s := range r[a][unit] {
		if y, ok := bs[[2]int{s.pass, s.rep}]; ok && y != 0 {
			qs = append(qs, s.v/y)
		}
	}
	if len(qs) == 0 {
		return 0, 0
	}
	return median(qs), len(qs)
}

// byPass is name's figures in unit by the pass and rep they come from.
func (r results) byPass(name, unit string) map[[2]int]float64 {
	m := map[[2]int]float64{}
	for _, s := range r[name][unit] {
		m[[2]int{s.pass, s.rep}] = s.v
	}
	return m
}

func (r results) passes() int {
	n := 0
	for _, units := range r {
		for _, ss := range units {
			n = max(n, len(ss))
		}
	}
	return n
}

func lu(lib string, n int) string { return fmt.Sprintf("BenchmarkLockUnlock/lib=%s/nodes=%d", lib, n) }

func bn(bench, lib string, n int) string {
	return fmt.Sprintf("Benchmark%s/lib=%s/nodes=%d", bench, lib, n)
}

var nodeCounts = []int{1, 3, 5, 7, 9}

// target is one row of the targets table: redlock's figure (over go-redis
// clients through NewNode) against its goal.
type target struct {
	what, goal string
	measured   string
	met, known bool
}

// ratioOf is the median per-pass ratio of a's figure to b's with the two
// medians, as a cell; empty when not measured.
func ratioOf(r results, a, b, unit string) string {
	q, n := r.ratio(a, b, unit)
	x, ok1 := r.median(a, unit)
	y, ok2 := r.median(b, unit)
	if n == 0 || !ok1 || !ok2 {
		return ""
	}
	return fmt.Sprintf("%.2f× (%s / %s)", q, human(x, unit), human(y, unit))
}

func targets(r results) []target {
	var ts []target
	// ratio is a target on the median per-pass ratio of a's figure to b's:
	// at most bound if le, at least bound otherwise.
	ratio := func(what, goal, a, b, unit string, le bool, bound float64) {
		t := target{what: what, goal: goal, measured: ratioOf(r, a, b, unit)}
		if t.known = t.measured != ""; t.known {
			q, _ := r.ratio(a, b, unit)
			t.met = (le && q <= bound) || (!le && q >= bound)
		}
		ts = append(ts, t)
	}
	for _, n := range []int{5, 9} {
		ratio(fmt.Sprintf("uncontended Lock+Unlock, N=%d: ÷ wire floor at N=%d", n, n), "≤ 1.10×",
			lu("redlock", n), lu("wire", n), "ns/op", true, 1.10)
	}
	ratio("uncontended Lock+Unlock, N=5: ÷ redsync", "≤ 0.70×",
		lu("redlock", 5), lu("redsync", 5), "ns/op", true, 0.70)
	ratio("one master (N=1): Lock+Unlock ÷ floor (go-redis SET NX PX + Lua DEL)", "≤ 1.05×",
		lu("redlock", 1), lu("floor", 1), "ns/op", true, 1.05)
	ratio("one master (N=1): Lock+Unlock ÷ redislock", "≤ 1.00×",
		lu("redlock", 1), lu("redislock", 1), "ns/op", true, 1.00)
	ratio("64 goroutines, distinct keys, N=5: locks/s ÷ redsync", "≥ 7×",
		bn("DistinctKeys", "redlock", 5), bn("DistinctKeys", "redsync", 5), "locks/s", false, 7)

	// Allocations: at most the floor's (what go-redis itself allocates for
	// one master's SET NX PX and Lua DEL) × N plus 2 per master, at every N;
	// shown as the worst N's allocations per master beyond the floor's.
	t := target{what: "allocs per Lock+Unlock per master beyond go-redis's own (worst N)", goal: "≤ floor × N + 2 per master"}
	floor, floorOK := r.median(lu("floor", 1), "allocs/op")
	t.known = floorOK
	worst, worstN, all := math.Inf(-1), 0, []string{}
	for _, n := range nodeCounts {
		a, ok := r.median(lu("redlock", n), "allocs/op")
		if !ok {
			t.known = false
			break
		}
		all = append(all, fmt.Sprintf("%.0f", a))
		if per := (a - floor*float64(n)) / float64(n); per > worst {
			worst, worstN = per, n
		}
	}
	if t.known {
		t.met = worst <= 2
		t.measured = fmt.Sprintf("%+.1f per master at N=%d (%s allocs/op at N=1…9; floor %.0f per master)", worst, worstN, strings.Join(all, "/"), floor)
	}
	ts = append(ts, t)

	for _, n := range []int{1, 5} {
		t := target{what: fmt.Sprintf("restart gate, N=%d: gated ÷ ungated Lock+Unlock (pairs)", n), goal: "≤ 1.05×"}
		if q, ok := r.median(bn("GateCost", "redlock", n), "gated/ungated"); ok {
			t.known, t.met = true, q <= 1.05
			t.measured = fmt.Sprintf("%.2f×", q)
		}
		ts = append(ts, t)
	}

	ratio("one master of 5 slowed by 10 ms: Lock+Unlock ÷ redsync", "≤ 0.05×",
		bn("SlowMaster", "redlock", 5), bn("SlowMaster", "redsync", 5), "ns/op", true, 0.05)
	ratio("8 goroutines on one key, N=5: cs/s ÷ redsync", "≥ 2×",
		bn("Contended", "redlock", 5), bn("Contended", "redsync", 5), "cs/s", false, 2)
	t = target{what: "  largest share of wins of one goroutine (worst pass)", goal: "≤ 25%"}
	if vs := r.values(bn("Contended", "redlock", 5), "maxshare-%"); len(vs) > 0 {
		worst := slices.Max(vs)
		t.known = true
		t.measured = fmt.Sprintf("%.1f%% (median %.1f%%)", worst, median(vs))
		t.met = worst <= 25
	}
	ts = append(ts, t)
	return append(ts, rwTargets(r)...)
}

// spread is the least and the largest of name's figures in unit over the
// passes, as a cell; empty when not measured.
func spread(r results, name, unit string) string {
	vs := r.values(name, unit)
	if len(vs) == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f–%.2f", slices.Min(vs), slices.Max(vs))
}

func human(v float64, unit string) string {
	switch unit {
	case "ns/op":
		return time.Duration(v).Round(time.Microsecond / 10).String()
	case "locks/s", "cs/s":
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.3g %s", v, unit)
}

func cpuLine(path string) string {
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu: ") {
			return strings.TrimPrefix(l, "cpu: ")
		}
	}
	return "unknown CPU"
}

func render(r results, cpu, cmdline string) string {
	var b strings.Builder
	fmt.Fprintln(&b, beginMarker)
	fmt.Fprintf(&b, "%d interleaved passes, each running every benchmark of every library once (`%s` in `bench/`), %s, %s; redis-server %s on loopback, all masters on the same 2-core machine as the client. Figures are medians over the passes; a ratio is the median of the %d per-pass ratios, each comparing figures measured within the same minute.\n\n",
		r.passes(), cmdline, time.Now().UTC().Format("2006-01-02"), cpu, redisVersion(), r.passes())

	fmt.Fprintln(&b, "| target | goal | redlock (go-redis Node) | met |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- |")
	for _, t := range targets(r) {
		switch {
		case !t.known:
			fmt.Fprintf(&b, "| %s | %s | not measured | ? |\n", t.what, t.goal)
		case t.met:
			fmt.Fprintf(&b, "| %s | %s | %s | yes |\n", t.what, t.goal, t.measured)
		default:
			fmt.Fprintf(&b, "| %s | %s | %s | **no** |\n", t.what, t.goal, t.measured)
		}
	}
	var ref []string
	if q, n := r.ratio(lu("redlock", 9), lu("redlock", 1), "ns/op"); n > 0 {
		ref = append(ref, fmt.Sprintf("redlock's Lock+Unlock N=9 ÷ N=1 is %.2f×", q))
	}
	if q, n := r.ratio(lu("wire", 9), lu("wire", 1), "ns/op"); n > 0 {
		ref = append(ref, fmt.Sprintf("the wire floor's %.2f×", q))
	}
	if q, n := r.ratio(lu("redsync", 9), lu("redsync", 1), "ns/op"); n > 0 {
		ref = append(ref, fmt.Sprintf("redsync's %.2f×", q))
	}
	// What the floors leave for a target against redsync: no client does
	// less than the wire floor, and no go-redis client much less than the
	// go-redis floor.
	for _, n := range []int{5, 9} {
		if q, k := r.ratio(lu("wire", n), lu("redsync", n), "ns/op"); k > 0 {
			ref = append(ref, fmt.Sprintf("at N=%d the wire floor ÷ redsync is %.2f×", n, q))
		}
		if q, k := r.ratio(lu("floor", n), lu("redsync", n), "ns/op"); k > 0 {
			ref = append(ref, fmt.Sprintf("the go-redis floor ÷ redsync %.2f×", q))
		}
	}
	if vs := r.values(bn("Contended", "redsync", 5), "maxshare-%"); len(vs) > 0 {
		ref = append(ref, fmt.Sprintf("redsync's largest share of wins on one key %.1f%% (median %.1f%%)", slices.Max(vs), median(vs)))
	}
	if len(ref) > 0 {
		fmt.Fprintf(&b, "\nFor reference, %s.\n", strings.Join(ref, "; "))
	}

	cell := func(name, unit string) string {
		v, ok := r.median(name, unit)
		if !ok {
			return ""
		}
		switch unit {
		case "ns/op":
			return human(v, unit)
		case "allocs/op", "locks/s", "cs/s":
			return fmt.Sprintf("%.0f", v)
		case "gated/ungated", "permit/mutex":
			return fmt.Sprintf("%.2f×", v)
		case "in-use":
			return fmt.Sprintf("%.2f", v)
		}
		return fmt.Sprintf("%.3g", v)
	}
	ratioCell := func(a, b, unit string) string {
		q, n := r.ratio(a, b, unit)
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("%.2f×", q)
	}

	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "Uncontended Lock+Unlock, median per op (redlock over go-redis clients through NewNode; each ratio the median of the per-pass ratios):")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| nodes | redlock | allocs | redsync | allocs | redlock ÷ redsync | redislock | floor (go-redis SET NX PX + Lua DEL, a goroutine per master) | allocs | wire floor | redlock ÷ wire floor |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range nodeCounts {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n,
			cell(lu("redlock", n), "ns/op"), cell(lu("redlock", n), "allocs/op"),
			cell(lu("redsync", n), "ns/op"), cell(lu("redsync", n), "allocs/op"),
			ratioCell(lu("redlock", n), lu("redsync", n), "ns/op"),
			cell(lu("redislock", n), "ns/op"),
			cell(lu("floor", n), "ns/op"), cell(lu("floor", n), "allocs/op"),
			cell(lu("wire", n), "ns/op"), ratioCell(lu("redlock", n), lu("wire", n), "ns/op"))
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "![Lock+Unlock latency against node count](../bench/results/latency.png)")
	fmt.Fprintln(&b)

	fmt.Fprintln(&b, "The other benchmarks, medians (redsync over the same masters; redislock on one master):")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| benchmark | redlock | redsync | redislock (N=1) |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- |")
	others := []struct {
		what, bench string
		n           int
		unit        string
	}{
		{"Lock+Unlock with fencing, N=1, per op", "LockUnlockFenced", 1, "ns/op"},
		{"Lock+Unlock with fencing, N=5, per op", "LockUnlockFenced", 5, "ns/op"},
		{"Lock+Unlock with fencing, N=9, per op", "LockUnlockFenced", 9, "ns/op"},
		{"Lock+Unlock with the restart gate, N=1, per op", "LockUnlockGated", 1, "ns/op"},
		{"Lock+Unlock with the restart gate, N=5, per op", "LockUnlockGated", 5, "ns/op"},
		{"Lock+Unlock with an owner (first hold), N=5, per op", "LockUnlockOwned", 5, "ns/op"},
		{"nested Lock+Unlock by the owner, N=1, per op", "NestedEnter", 1, "ns/op"},
		{"nested Lock+Unlock by the owner, N=5, per op", "NestedEnter", 5, "ns/op"},
		{"nested Lock+Unlock by the owner, N=9, per op", "NestedEnter", 9, "ns/op"},
		{"TryLock of a held key, N=5, per op", "TryLockHeld", 5, "ns/op"},
		{"Extend, N=5, per op", "Extend", 5, "ns/op"},
		{"8 goroutines on one key, N=5", "Contended", 5, "cs/s"},
		{"64 goroutines, distinct keys, N=5", "DistinctKeys", 5, "locks/s"},
		{"64 goroutines, distinct keys, N=5: this process's CPU per lock", "DistinctKeys", 5, "client-cpu-µs/op"},
		{"64 goroutines, distinct keys, N=5: the 5 masters' CPU per lock", "DistinctKeys", 5, "masters-cpu-µs/op"},
		{"one master of 5 slowed by 10 ms, per Lock+Unlock", "SlowMaster", 5, "ns/op"},
	}
	for _, o := range others {
		u := ""
		if o.unit != "ns/op" {
			u = " (" + o.unit + ")"
		}
		fmt.Fprintf(&b, "| %s%s | %s | %s | %s |\n", o.what, u,
			cell(bn(o.bench, "redlock", o.n), o.unit),
			cell(bn(o.bench, "redsync", o.n), o.unit), cell(bn(o.bench, "redislock", 1), o.unit))
	}
	fmt.Fprintln(&b)
	if t := rwmutexTable(r); t != "" {
		fmt.Fprintln(&b, t)
	}
	fmt.Fprintln(&b, "The restart gate's cost (WithRestartGate: every vote is one script with the gate's check in front: `LASTSAVE` and `TIME` on the master, `INFO server` after a save within the gate), gated against ungated Lock+Unlock. Time from BenchmarkGateCost, pairs of one ungated and one gated Lock+Unlock timed op by op (the ratio of the sums, median over the passes); the A/A row has the gate on both sides. Allocations from BenchmarkLockUnlockGated and BenchmarkLockUnlock:")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| nodes | time, gated ÷ ungated (pairs) | per pass | allocs gated | allocs ungated |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- |")
	for _, n := range []int{1, 5} {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", n,
			cell(bn("GateCost", "redlock", n), "gated/ungated"), spread(r, bn("GateCost", "redlock", n), "gated/ungated"),
			cell(bn("LockUnlockGated", "redlock", n), "allocs/op"), cell(lu("redlock", n), "allocs/op"))
	}
	fmt.Fprintf(&b, "| 1, A/A | %s | %s | | |\n",
		cell(bn("GateCost", "redlock", 1)+"/gate=both", "gated/ungated"), spread(r, bn("GateCost", "redlock", 1)+"/gate=both", "gated/ungated"))
	fmt.Fprintln(&b)
	fmt.Fprint(&b, semaphoreTable(r, cell))
	fmt.Fprintln(&b)
	fmt.Fprint(&b, rueidisTable(r))
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, handOffTable(r))
	fmt.Fprintln(&b, "The full benchstat tables (with B/op and allocs/op) are in [bench/results/benchstat.txt](../bench/results/benchstat.txt), the raw passes in [bench/results/bench.txt](../bench/results/bench.txt). Rerun with `cd bench && go run ./cmd/report`.")
	fmt.Fprintln(&b, endMarker)
	return b.String()
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "?"
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "v=") {
			return strings.TrimPrefix(f, "v=")
		}
	}
	return strings.TrimSpace(string(out))
}

func replaceSection(path, section string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q ... %q section", path, beginMarker, endMarker)
	}
	s = s[:i] + section + s[j+len(endMarker)+1:]
	return os.WriteFile(path, []byte(s), 0o644)
}

// plotLatency draws median Lock+Unlock latency against node count, with the
// range over the passes as error bars, and saves it as base.svg and base.png.
func plotLatency(r results, base string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Uncontended Lock+Unlock: median, bars min–max of %d passes", r.passes())
	p.X.Label.Text = "Redis masters (N)"
	p.Y.Label.Text = "latency (µs)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.Padding = vg.Points(2)
	p.Legend.YOffs = -vg.Points(6)
	p.Legend.XOffs = vg.Points(4)
	p.Add(plotter.NewGrid())
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 3, Label: "3"}, {Value: 5, Label: "5"}, {Value: 7, Label: "7"}, {Value: 9, Label: "9"}})
	series := []struct {
		lib, label string
		c          color.RGBA
		shape      draw.GlyphDrawer
		dashes     []vg.Length
		dx         float64 // x offset, so that the error bars do not overlap
	}{
		{"redlock", "redlock (go-redis Node)", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}, draw.CircleGlyph{}, nil, -0.1},
		{"rueidis", "redlock (rueidis Node)", color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 255}, draw.RingGlyph{}, nil, -0.2},
		{"redsync", "go-redsync/redsync v4", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, draw.SquareGlyph{}, nil, 0},
		{"wire", "wire floor: the round trips alone", color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 255}, draw.PlusGlyph{}, []vg.Length{vg.Points(2), vg.Points(2)}, 0.1},
		{"redislock", "bsm/redislock (1 master)", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255}, draw.TriangleGlyph{}, nil, 0.2},
		{"floor", "go-redis floor: SET NX + Lua DEL", color.RGBA{A: 255}, draw.CrossGlyph{}, nil, 0.3},
	}
	for _, s := range series {
		var pts plotter.XYs
		var errs plotter.YErrors
		for _, n := range nodeCounts {
			vs := r.values(lu(s.lib, n), "ns/op")
			if len(vs) == 0 {
				continue
			}
			m := median(vs) / 1e3
			pts = append(pts, plotter.XY{X: float64(n) + s.dx, Y: m})
			errs = append(errs, struct{ Low, High float64 }{m - slices.Min(vs)/1e3, slices.Max(vs)/1e3 - m})
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = s.c, s.shape, vg.Points(3.5)
		p.Add(sc)
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{pts, errs})
		if err != nil {
			return err
		}
		eb.Color, eb.Width, eb.CapWidth = s.c, vg.Points(1), vg.Points(5)
		p.Add(eb)
		if len(pts) > 1 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width, l.Dashes = s.c, vg.Points(1.5), s.dashes
			p.Add(l)
			p.Legend.Add(s.label, l, sc)
		} else {
			p.Legend.Add(s.label, sc)
		}
	}
	p.Y.Min = 0
	p.X.Min, p.X.Max = 0.5, 9.5
	w, h := 18*vg.Centimeter, 11*vg.Centimeter
	if err := p.Save(w, h, base+".svg"); err != nil {
		return err
	}
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144))}
	p.Draw(draw.New(c))
	f, err := os.Create(base + ".png")
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// rueidisTable compares redlock over rueidis clients (lib=rueidis, through
// redlockrueidis.NewNode) with redlock over go-redis clients (lib=redlock)
// on the benchmarks that measure both; empty when none did.
func rueidisTable(r results) string {
	rows := []struct {
		what, bench string
		n           int
		unit        string
	}{
		{"uncontended Lock+Unlock, N=1, per op", "LockUnlock", 1, "ns/op"},
		{"uncontended Lock+Unlock, N=5, per op", "LockUnlock", 5, "ns/op"},
		{"uncontended Lock+Unlock, N=9, per op", "LockUnlock", 9, "ns/op"},
		{"uncontended Lock+Unlock, N=1", "LockUnlock", 1, "allocs/op"},
		{"uncontended Lock+Unlock, N=5", "LockUnlock", 5, "allocs/op"},
		{"uncontended Lock+Unlock, N=9", "LockUnlock", 9, "allocs/op"},
		{"64 goroutines, distinct keys, N=5", "DistinctKeys", 5, "locks/s"},
		{"64 goroutines, distinct keys, N=5: this process's CPU per lock", "DistinctKeys", 5, "client-cpu-µs/op"},
		{"64 goroutines, distinct keys, N=5: the 5 masters' CPU per lock", "DistinctKeys", 5, "masters-cpu-µs/op"},
	}
	var b strings.Builder
	for _, o := range rows {
		x, ok := r.median(bn(o.bench, "rueidis", o.n), o.unit)
		y, ok2 := r.median(bn(o.bench, "redlock", o.n), o.unit)
		if !ok || !ok2 {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintln(&b, "redlock over rueidis clients (`redlockrueidis.NewNode`, clients as docs/masters.md makes them) next to redlock over go-redis clients, medians; the ratio is the median of the per-pass ratios:")
			fmt.Fprintln(&b)
			fmt.Fprintln(&b, "| benchmark | go-redis Node | rueidis Node | rueidis ÷ go-redis |")
			fmt.Fprintln(&b, "| --- | --- | --- | --- |")
		}
		q, _ := r.ratio(bn(o.bench, "rueidis", o.n), bn(o.bench, "redlock", o.n), o.unit)
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f× |\n", o.what, human(y, o.unit), human(x, o.unit), q)
	}
	return b.String()
}

// handOffTable is the hand-off section: contenders taking turns on one key,
// as goroutines of one Redlock or as Redlocks (processes) of their own.
func handOffTable(r results) string {
	var b strings.Builder
	fmt.Fprintln(&b, "Hand-off on one key, N=5, empty critical section (medians; handed: sections the masters handed over without an acquire; wasted: acquire attempts that did not take the key, per critical section; LAN: every master behind a proxy adding 250 µs per round trip):")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| contenders | cs/s | p99 wait | largest share | handed | wasted per hand-off |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- | --- |")
	rows := []struct{ what, name string }{
		{"1 Redlock × 8 goroutines", "BenchmarkHandOff/redlocks=1/goroutines=8/nodes=5"},
		{"2 Redlocks × 1", "BenchmarkHandOff/redlocks=2/goroutines=1/nodes=5"},
		{"8 Redlocks × 1", "BenchmarkHandOff/redlocks=8/goroutines=1/nodes=5"},
		{"32 Redlocks × 1", "BenchmarkHandOff/redlocks=32/goroutines=1/nodes=5"},
		{"4 processes × 2 goroutines", "BenchmarkHandOffProcesses/procs=4/goroutines=2/nodes=5"},
		{"LAN: 1 Redlock × 8 goroutines", "BenchmarkHandOffLAN/redlocks=1/goroutines=8/nodes=5/rtt=250us"},
		{"LAN: 8 Redlocks × 1", "BenchmarkHandOffLAN/redlocks=8/goroutines=1/nodes=5/rtt=250us"},
		{"8 Redlocks × 1, single servers (same run as the next row)", "BenchmarkHandOffClusters/master=redis/redlocks=8/goroutines=1/nodes=5"},
		{"8 Redlocks × 1, masters that are Redis Clusters of 3 shards", "BenchmarkHandOffClusters/master=cluster/shards=3/redlocks=8/goroutines=1/nodes=5"},
	}
	num := func(name, unit, format string) string {
		v, ok := r.median(name, unit)
		if !ok {
			return ""
		}
		return fmt.Sprintf(format, v)
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", row.what,
			num(row.name, "cs/s", "%.0f"), num(row.name, "p99-wait-ms", "%.1f ms"),
			num(row.name, "maxshare-%", "%.1f%%"), num(row.name, "handed-%", "%.0f%%"),
			num(row.name, "wasted/handoff", "%.3f"))
	}
	if q, n := r.ratio(rows[2].name, rows[0].name, "cs/s"); n > 0 {
		fmt.Fprintf(&b, "\n8 Redlocks × 1 ÷ 1 Redlock × 8, cs/s: %.2f× on loopback", q)
		if q, n := r.ratio(rows[6].name, rows[5].name, "cs/s"); n > 0 {
			fmt.Fprintf(&b, ", %.2f× on the LAN", q)
		}
		fmt.Fprintln(&b, " (medians of the per-pass ratios).")
	}
	// Cluster masters hand off by sharded pub/sub (issue 42's aim: within
	// 1.3× of single servers in cs/s and p99 wait).
	if q, n := r.ratio(rows[7].name, rows[8].name, "cs/s"); n > 0 {
		p, _ := r.ratio(rows[8].name, rows[7].name, "p99-wait-ms")
		fmt.Fprintf(&b, "\nCluster masters against single servers, 8 Redlocks × 1 (BenchmarkHandOffClusters, medians of the per-pass ratios): cs/s single ÷ cluster %.2f×, p99 wait cluster ÷ single %.2f× (aim: at most 1.3× each).\n", q, p)
	}
	return b.String()
}

// rwGoal is one of issue 40's goals for the read-write lock (RWMutex) at
// one node count: a figure q of a reader or a writer against the mutex, or
// of readers against writers, and the bound on it.
type rwGoal struct {
	what, goal string // what names the goal in the targets table, the same at every n
	label      string // what, shorter, in the RWMutex's own table
	n          int
	q, bound   float64
	le         bool   // the goal is q ≤ bound; q ≥ bound otherwise
	short      string // q alone, as a cell
	measured   string // q with the figures it comes from
	perPass    string // the least and the largest q over the passes
	known, met bool
}

// rwGoals measures the RWMutex against its goals: an uncontended reader's
// and writer's Lock+Unlock against the mutex's, in time (BenchmarkRWMutexCost,
// whose per-pass figure is already a ratio) and in allocations per master
// (BenchmarkRWMutexLockUnlock, the more of the reader's and the writer's,
// per pass), at N = 1, 5 and 9; and 8 readers on one key against 8 writers
// on one key (BenchmarkRWMutexContended).
func rwGoals(r results) []rwGoal {
	var gs []rwGoal
	add := func(g rwGoal, qs []float64) {
		if g.known = len(qs) > 0; g.known {
			g.q = median(qs)
			g.met = (g.le && g.q <= g.bound) || (!g.le && g.q >= g.bound)
		}
		gs = append(gs, g)
	}
	lockUnlock := func(kind string, n int) string {
		return fmt.Sprintf("BenchmarkRWMutexLockUnlock/kind=%s/nodes=%d", kind, n)
	}
	for _, n := range []int{1, 5, 9} {
		cost := fmt.Sprintf("BenchmarkRWMutexCost/nodes=%d", n)
		for _, kind := range []string{"reader", "writer"} {
			op := map[string]string{"reader": "RLock+Unlock", "writer": "writer Lock+Unlock"}[kind]
			g := rwGoal{what: "RWMutex: uncontended " + op + " ÷ the mutex's Lock+Unlock (op by op)",
				label: op + " ÷ mutex, time", goal: "≤ 1.15×", n: n, bound: 1.15, le: true}
			qs := r.values(cost, kind+"/mutex")
			if len(qs) > 0 {
				g.short = fmt.Sprintf("%.2f×", median(qs))
				g.measured, g.perPass = g.short, spread(r, cost, kind+"/mutex")
			}
			add(g, qs)
		}

		g := rwGoal{what: "RWMutex: allocs per Lock+Unlock per master beyond the mutex's (reader or writer)",
			label: "allocs per master beyond the mutex's, reader or writer", goal: "≤ +3 per master", n: n, bound: 3, le: true}
		mutex, reader, writer := r.byPass(lockUnlock("mutex", n), "allocs/op"), r.byPass(lockUnlock("reader", n), "allocs/op"), r.byPass(lockUnlock("writer", n), "allocs/op")
		var qs []float64
		for k, m := range mutex {
			rd, ok1 := reader[k]
			wr, ok2 := writer[k]
			if ok1 && ok2 {
				qs = append(qs, max(rd-m, wr-m)/float64(n))
			}
		}
		if len(qs) > 0 {
			am, _ := r.median(lockUnlock("mutex", n), "allocs/op")
			ar, _ := r.median(lockUnlock("reader", n), "allocs/op")
			aw, _ := r.median(lockUnlock("writer", n), "allocs/op")
			g.short = fmt.Sprintf("%+.1f", median(qs))
			g.measured = fmt.Sprintf("%s per master (allocs/op: mutex %.0f, reader %.0f, writer %.0f)", g.short, am, ar, aw)
			if g.perPass = fmt.Sprintf("%+.1f", slices.Min(qs)); slices.Max(qs) > slices.Min(qs) {
				g.perPass += fmt.Sprintf(" to %+.1f", slices.Max(qs))
			}
		}
		add(g, qs)
	}

	c := "BenchmarkRWMutexContended/nodes=5"
	g := rwGoal{what: "RWMutex: 8 readers ÷ 8 writers, each on one key: cs/s",
		label: "8 readers' cs/s ÷ 8 writers', each on one key", goal: "≥ 5×", n: 5, bound: 5}
	qs := r.values(c, "readers/writers")
	if len(qs) > 0 {
		rd, _ := r.median(c, "reader-cs/s")
		wr, _ := r.median(c, "writer-cs/s")
		g.short = fmt.Sprintf("%.2f×", median(qs))
		g.measured = fmt.Sprintf("%s (%s / %s)", g.short, human(rd, "cs/s"), human(wr, "cs/s"))
		g.perPass = spread(r, c, "readers/writers")
	}
	add(g, qs)
	return gs
}

// rwTargets are the RWMutex's rows of the targets table: each goal at its
// worst node count, next to its figure at every node count.
func rwTargets(r results) []target {
	gs := rwGoals(r)
	var whats []string
	for _, g := range gs {
		if !slices.Contains(whats, g.what) {
			whats = append(whats, g.what)
		}
	}
	var ts []target
	for _, what := range whats {
		var group []rwGoal
		for _, g := range gs {
			if g.what == what {
				group = append(group, g)
			}
		}
		ts = append(ts, rwTarget(group))
	}
	return ts
}

// rwTarget is one goal's row of the targets table from its figures at
// each node count: met if met at every one, measured at the worst.
func rwTarget(group []rwGoal) target {
	t := target{what: group[0].what, goal: group[0].goal, known: true, met: true}
	if len(group) == 1 {
		g := group[0]
		t.what = fmt.Sprintf("%s, N=%d", g.what, g.n)
		t.known, t.met, t.measured = g.known, g.met, g.measured
		return t
	}
	var worst rwGoal
	var ns, shorts []string
	for i, g := range group {
		if !g.known {
			return target{what: t.what, goal: t.goal}
		}
		t.met = t.met && g.met
		if i == 0 || (g.le && g.q > worst.q) || (!g.le && g.q < worst.q) {
			worst = g
		}
		ns = append(ns, strconv.Itoa(g.n))
		shorts = append(shorts, g.short)
	}
	t.what += ", worst of N=" + strings.Join(ns, ", ")
	t.measured = fmt.Sprintf("%s at N=%d (%s at N=%s)", worst.short, worst.n, strings.Join(shorts, " / "), strings.Join(ns, " / "))
	return t
}

// rwmutexTable is the RWMutex's rows: each of its goals at each node count,
// the median over the passes and the range of the passes.
func rwmutexTable(r results) string {
	gs := rwGoals(r)
	known := false
	for _, g := range gs {
		known = known || g.known
	}
	if !known {
		return ""
	}
	var b strings.Builder
	fmt.Fprintln(&b, "The read-write lock (RWMutex) against the mutex, and its readers against its writers (issue 40's goals). Time from BenchmarkRWMutexCost: the mutex's, a reader's (RLock) and a writer's (Lock) uncontended Lock+Unlock timed op by op in turn, each round starting one op later; its figure per pass is the median over windows of 201 rounds of the ratio of the sums. Allocations from BenchmarkRWMutexLockUnlock: per pass, the more of the reader's and the writer's allocs/op beyond the mutex's, per master. Readers against writers from BenchmarkRWMutexContended: 8 goroutines on one key as readers, then 8 on another as writers, N=5, each critical section 2 ms; its figure per pass is the ratio of the two rates. Medians over the passes:")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| figure | nodes | median | per pass | goal | met |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- | --- |")
	for _, g := range gs {
		switch {
		case !g.known:
			fmt.Fprintf(&b, "| %s | %d | not measured | | %s | ? |\n", g.label, g.n, g.goal)
		case g.met:
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | yes |\n", g.label, g.n, g.measured, g.perPass, g.goal)
		default:
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | **no** |\n", g.label, g.n, g.measured, g.perPass, g.goal)
		}
	}
	return b.String()
}

// semaphoreTable is the Semaphore's rows: a permit's uncontended
// Acquire+Unlock against the mutex's Lock+Unlock, with all 4 permits free
// and with 3 held elsewhere, and 8 clients cycling through 4 permits.
func semaphoreTable(r results, cell func(name, unit string) string) string {
	var b strings.Builder
	fmt.Fprintln(&b, "The Semaphore (4 permits): a permit's uncontended Acquire+Unlock against the mutex's Lock+Unlock, with every permit free (taken 0) and with 3 held by another client (taken 3). Time from BenchmarkSemaphoreCost, pairs of one Lock+Unlock and one Acquire+Unlock timed op by op (the ratio of the sums, median over the passes); allocations from BenchmarkAcquireUnlock and BenchmarkLockUnlock:")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| nodes | taken | time, permit ÷ mutex (pairs) | per pass | allocs permit | allocs mutex |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- | --- |")
	for _, n := range []int{1, 5, 9} {
		for _, taken := range []string{"0", "3"} {
			cost := bn("SemaphoreCost", "redlock", n) + "/taken=" + taken
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", n, taken,
				cell(cost, "permit/mutex"), spread(r, cost, "permit/mutex"),
				cell(bn("AcquireUnlock", "redlock", n)+"/taken="+taken, "allocs/op"), cell(lu("redlock", n), "allocs/op"))
		}
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "8 clients (a Redlock each) cycling through 4 permits over 5 masters, each holding a permit 10 ms or 50 ms (BenchmarkSemaphoreContended): permits in use on average (4 at most), permits taken per second, and the scripts each master ran per permit taken (INFO commandstats):")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| hold | in use | permits/s | scripts per permit and master |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- |")
	for _, hold := range []string{"10ms", "50ms"} {
		name := bn("SemaphoreContended", "redlock", 5) + "/clients=8/permits=4/hold=" + hold
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", hold, cell(name, "in-use"), cell(name, "permits/s"), cell(name, "scripts/permit/master"))
	}
	return b.String()
}
