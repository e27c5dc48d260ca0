// Command report runs the benchmark suite, feeds it to benchstat, writes the
// results table between the markers in the repository's README.md, and plots
// Lock+Unlock latency against the node count for redlock and its peers.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/report              # -count 6, about 6 minutes
//	go run ./cmd/report -from results/bench.txt  # only re-render
//
// Every figure it writes is a median over the -count runs of one go test
// invocation, so the libraries compared share the masters and the moment.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"image/color"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const (
	beginMarker = "<!-- bench:begin (written by bench/cmd/report; do not edit) -->"
	endMarker   = "<!-- bench:end -->"
)

func main() {
	count := flag.Int("count", 6, "go test -count")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime")
	bench := flag.String("bench", ".", "go test -bench")
	from := flag.String("from", "", "read this go test output instead of running the suite")
	out := flag.String("out", "results", "directory for bench.txt, benchstat.txt and the plots")
	readme := flag.String("readme", "../README.md", "README whose marked section gets the table")
	flag.Parse()
	log.SetFlags(0)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	raw := filepath.Join(*out, "bench.txt")
	cmdline := fmt.Sprintf("go test -run '^$' -bench '%s' -benchmem -benchtime %s -count %d", *bench, *benchtime, *count)
	if *from == "" {
		log.Printf("running: %s", cmdline)
		cmd := exec.Command("go", "test", "-run", "^$", "-bench", *bench, "-benchmem",
			"-benchtime", *benchtime, "-count", strconv.Itoa(*count), "-timeout", "60m")
		var buf bytes.Buffer
		cmd.Stdout = &buf
		cmd.Stderr = os.Stderr
		err := cmd.Run()
		if werr := os.WriteFile(raw, buf.Bytes(), 0o644); werr != nil {
			log.Fatal(werr)
		}
		if err != nil {
			log.Fatalf("go test: %v (output in %s)", err, raw)
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

	stat, err := exec.Command("go", "tool", "benchstat", "-col", "/lib", raw).CombinedOutput()
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
	table := targets(res)
	cpu := cpuLine(raw)
	if err := plotLatency(res, filepath.Join(*out, "latency")); err != nil {
		log.Fatal(err)
	}
	section := render(table, res, cpu, cmdline, *count)
	if err := replaceSection(*readme, section); err != nil {
		log.Fatal(err)
	}
	fmt.Print(section)
}

// results maps "Benchmark/lib=x/nodes=n" and a unit to the samples.
type results map[string]map[string][]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(path string) (results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := results{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fs[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(fs[0], "")
		if res[name] == nil {
			res[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fs); i += 2 {
			v, err := strconv.ParseFloat(fs[i], 64)
			if err != nil {
				continue
			}
			res[name][fs[i+1]] = append(res[name][fs[i+1]], v)
		}
	}
	return res, sc.Err()
}

// median of name's samples in unit; ok false when there are none.
func (r results) median(name, unit string) (float64, bool) {
	vs := append([]float64(nil), r[name][unit]...)
	if len(vs) == 0 {
		return 0, false
	}
	sort.Float64s(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], true
	}
	return (vs[n/2-1] + vs[n/2]) / 2, true
}

func lu(lib string, n int) string { return fmt.Sprintf("BenchmarkLockUnlock/lib=%s/nodes=%d", lib, n) }

// target is one row of the targets table.
type target struct {
	what, measured, goal string
	met, known           bool
}

func targets(r results) []target {
	var ts []target
	ratio := func(what, a, b, unit, goal string, le bool, bound float64) {
		x, ok1 := r.median(a, unit)
		y, ok2 := r.median(b, unit)
		t := target{what: what, goal: goal, known: ok1 && ok2 && y != 0}
		if t.known {
			q := x / y
			t.measured = fmt.Sprintf("%.2f× (%s / %s)", q, human(x, unit), human(y, unit))
			t.met = (le && q <= bound) || (!le && q >= bound)
		}
		ts = append(ts, t)
	}
	ratio("uncontended Lock+Unlock, N=5: redlock / redsync", lu("redlock", 5), lu("redsync", 5), "ns/op", "≤ 0.6×", true, 0.6)
	ratio("one master of 5 slowed by 10 ms: redlock / redsync", "BenchmarkSlowMaster/lib=redlock/nodes=5", "BenchmarkSlowMaster/lib=redsync/nodes=5", "ns/op", "≤ 0.2×", true, 0.2)
	ratio("64 goroutines, distinct keys, N=5: redlock / redsync locks/s", "BenchmarkDistinctKeys/lib=redlock/nodes=5", "BenchmarkDistinctKeys/lib=redsync/nodes=5", "locks/s", "≥ 3×", false, 3)
	ratio("latency N=9 / N=1 (redlock)", lu("redlock", 9), lu("redlock", 1), "ns/op", "≤ 3.0×", true, 3)
	ratio("  the same for redsync (reference)", lu("redsync", 9), lu("redsync", 1), "ns/op", "—", true, 1e9)
	ts[len(ts)-1].goal, ts[len(ts)-1].met = "—", true

	// Allocations: at most floor×N + 2N.
	if floor, ok := r.median("BenchmarkLockUnlock/lib=floor/nodes=1", "allocs/op"); ok {
		t := target{what: "allocs per Lock+Unlock beyond the floor × N (worst N)", goal: "≤ 2 per node", known: true, met: true}
		worst, worstN := -1e9, 0
		for _, n := range []int{1, 3, 5, 7, 9} {
			a, ok := r.median(lu("redlock", n), "allocs/op")
			if !ok {
				continue
			}
			per := (a - floor*float64(n)) / float64(n)
			if per > worst {
				worst, worstN = per, n
			}
		}
		t.measured = fmt.Sprintf("%+.1f per node at N=%d (floor %.0f allocs)", worst, worstN, floor)
		t.met = worst <= 2
		ts = append(ts, t)
	}
	ratio("8 goroutines on one key, N=5: redlock / redsync cs/s", "BenchmarkContended/lib=redlock/nodes=5", "BenchmarkContended/lib=redsync/nodes=5", "cs/s", "≥ 1.5×", false, 1.5)
	if s, ok := r.median("BenchmarkContended/lib=redlock/nodes=5", "maxshare-%"); ok {
		rs, _ := r.median("BenchmarkContended/lib=redsync/nodes=5", "maxshare-%")
		ts = append(ts, target{what: "  largest share of one goroutine (redlock; redsync)", goal: "≤ 25%", known: true,
			measured: fmt.Sprintf("%.1f%% (redsync %.1f%%)", s, rs), met: s <= 25})
	}
	return ts
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

func render(ts []target, r results, cpu, cmdline string, count int) string {
	var b strings.Builder
	fmt.Fprintln(&b, beginMarker)
	fmt.Fprintf(&b, "Medians of %d runs (`%s` in `bench/`), %s, %s; redis-server %s on loopback, all masters on the same 2-core machine as the client.\n\n",
		count, cmdline, time.Now().UTC().Format("2006-01-02"), cpu, redisVersion())
	fmt.Fprintln(&b, "| target | measured | goal | met |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- |")
	for _, t := range ts {
		m := "no"
		switch {
		case !t.known:
			t.measured, m = "not measured", "?"
		case t.goal == "—":
			m = ""
		case t.met:
			m = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.what, t.measured, t.goal, m)
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "Uncontended Lock+Unlock, median per op:")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| nodes | redlock | allocs | redsync | allocs | redislock | floor (go-redis SET NX PX + Lua DEL) |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- | --- | --- |")
	cell := func(name, unit string) string {
		v, ok := r.median(name, unit)
		if !ok {
			return ""
		}
		if unit == "ns/op" {
			return human(v, unit)
		}
		return fmt.Sprintf("%.0f", v)
	}
	for _, n := range []int{1, 3, 5, 7, 9} {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", n,
			cell(lu("redlock", n), "ns/op"), cell(lu("redlock", n), "allocs/op"),
			cell(lu("redsync", n), "ns/op"), cell(lu("redsync", n), "allocs/op"),
			cell(lu("redislock", n), "ns/op"), cell(lu("floor", n), "ns/op"))
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "![Lock+Unlock latency against node count](bench/results/latency.png)")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "The full benchstat tables (fencing, TryLock on a held key, Extend, contention, throughput, a slow master) are in [bench/results/benchstat.txt](bench/results/benchstat.txt), the raw runs in [bench/results/bench.txt](bench/results/bench.txt). Rerun with `cd bench && go run ./cmd/report`.")
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

// plotLatency draws median Lock+Unlock latency against node count and saves
// it as base.svg and base.png.
func plotLatency(r results, base string) error {
	p := plot.New()
	p.Title.Text = "Uncontended Lock+Unlock (median)"
	p.X.Label.Text = "Redis masters (N)"
	p.Y.Label.Text = "latency (µs)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 3, Label: "3"}, {Value: 5, Label: "5"}, {Value: 7, Label: "7"}, {Value: 9, Label: "9"}})
	series := []struct {
		lib   string
		label string
		c     color.RGBA
		shape draw.GlyphDrawer
	}{
		{"redlock", "redlock", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}, draw.CircleGlyph{}},
		{"redsync", "go-redsync/redsync v4", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, draw.SquareGlyph{}},
		{"redislock", "bsm/redislock (1 master)", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255}, draw.TriangleGlyph{}},
		{"floor", "floor: go-redis SET NX + Lua DEL", color.RGBA{A: 255}, draw.CrossGlyph{}},
	}
	for _, s := range series {
		var pts plotter.XYs
		for _, n := range []int{1, 3, 5, 7, 9} {
			if v, ok := r.median(lu(s.lib, n), "ns/op"); ok {
				pts = append(pts, plotter.XY{X: float64(n), Y: v / 1e3})
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = s.c, s.shape, vg.Points(4)
		p.Add(sc)
		p.Legend.Add(s.label, sc)
		if len(pts) > 1 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width = s.c, vg.Points(1.5)
			p.Add(l)
		}
	}
	p.Y.Min = 0
	p.X.Min, p.X.Max = 0.5, 9.5
	for _, ext := range []string{".svg", ".png"} {
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, base+ext); err != nil {
			return err
		}
	}
	return nil
}
