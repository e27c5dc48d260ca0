package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/redlock/redlock/chaos/cluster"
	"github.com/redlock/redlock/internal/cliflag"
)

// Command is "redlock chaos": it parses args (the flags after "chaos"),
// runs the scenarios on masters of its own, prints a line per scenario and
// a table to stdout (and a live progress line when stdout is a terminal),
// and returns the exit status: 0 when every verdict was the expected one
// (and for -h, whose help goes to stdout), 1 when one was not, 2 for bad
// flags or a run that could not be made (ctx cancelled included). Every
// container and process it started is removed before it returns.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "writer" {
		// The process clients' critical section, run by redlock exec.
		return runWriter(args[1:], stderr)
	}
	fs := flag.NewFlagSet("redlock chaos", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	backend := fs.String("backend", "", "where the masters run, `NAME` docker (containers) or process (local processes); default: docker when an engine answers, else process")
	scenario := fs.String("scenario", "all", "`NAMES` of scenarios, comma-separated, or all: "+strings.Join(ScenarioNames(), ", "))
	nodes := fs.Int("nodes", DefaultNodes, "`N` Redis masters")
	clients := fs.Int("clients", DefaultClients, "`N` contending clients")
	keys := fs.Int("keys", DefaultKeys, "`N` keys they contend on")
	adapter := fs.String("adapter", AdapterGoRedis, "the clients' Redis `CLIENT`: go-redis, rueidis (redlockrueidis), or mixed: client i uses go-redis when i is even, rueidis when odd, on the same locks (client processes use go-redis)")
	duration := cliflag.Duration(fs, "duration", DefaultDuration, "workload time per scenario (scenarios that need a few TTLs more take them)")
	ttl := cliflag.Duration(fs, "ttl", DefaultTTL, "lock TTL of the workload")
	soak := fs.Bool("soak", false, "run every safe scenario until it has acquired --soak-min locks, on both backends unless --backend is given")
	soakMin := fs.Int("soak-min", DefaultSoak, "`N` acquisitions per scenario in a soak")
	jsonFile := fs.String("json", "", "also write the full report, with every fault, as JSON to `FILE`, and a timeline picture per scenario next to it (FILE without .json, then .SCENARIO.svg)")
	png := fs.Bool("png", false, "with --json, also write each timeline as PNG (.SCENARIO.png; needs rsvg-convert, from Debian's librsvg2-bin)")
	wide := fs.Bool("wide", false, "print every column of the table (about 190 columns wide): also GAP, EXTENDED, p50, p99, PORCUPINE and the outcome in words")
	usage := func(w io.Writer) {
		fmt.Fprint(w, "Usage: redlock chaos [flags]\n\nRuns Redlock against real masters while killing, pausing, partitioning and\nrestarting them, and checks the history for overlapping holders and stale\nwrites. Exit status: 0 when every scenario's verdict was the expected one, 1\nwhen one was not, 2 for bad flags or a run that could not be made.\n\nFlags:\n")
		cliflag.PrintDefaults(w, fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "redlock chaos: %v\nRun 'redlock chaos -h' for usage.\n", cliflag.Error(err))
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "redlock chaos: unexpected arguments %q; flags only\nRun 'redlock chaos -h' for usage.\n", fs.Args())
		return 2
	}
	if *png {
		if *jsonFile == "" {
			fmt.Fprintln(stderr, "redlock chaos: --png needs --json FILE (the pictures go next to it)")
			return 2
		}
		if _, err := exec.LookPath(rsvgConvert); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: --png: %v; install it with: apt-get install librsvg2-bin\n", err)
			return 2
		}
	}
	if *backend == BackendDocker {
		if err := cluster.DockerAvailable(); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: --backend docker: %v\n", err)
			return 2
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "redlock chaos: cannot find this binary for the process clients: %v\n", err)
		return 2
	}
	if *soak && *soakMin < 1 {
		fmt.Fprintf(stderr, "redlock chaos: --soak-min %d: want at least 1\n", *soakMin)
		return 2
	}
	if !slices.Contains(Adapters(), *adapter) {
		fmt.Fprintf(stderr, "redlock chaos: --adapter %q: want one of %s\n", *adapter, strings.Join(Adapters(), ", "))
		return 2
	}
	cfg := Config{Redlock: self, Backend: *backend, Adapter: *adapter, Scenarios: strings.Split(*scenario, ","), Nodes: *nodes, Clients: *clients, Keys: *keys, Duration: *duration, TTL: *ttl}
	backends := []string{*backend}
	if *soak {
		cfg.Soak = *soakMin
		if *scenario == "all" {
			cfg.Scenarios = nil // the safe ones
		}
		if *backend == "" {
			backends = []string{BackendProcess}
			if cluster.DockerAvailable() == nil {
				backends = append(backends, BackendDocker)
			}
		}
	}
	live := isTerminal(stdout)
	if live {
		cfg.Progress = func(p Progress) {
			fmt.Fprintf(stdout, "\r\033[K[%d/%d] %s %v/%v: %d of %d acquire calls got the lock, %s",
				p.Index, p.Total, p.Scenario, p.Elapsed.Round(100*time.Millisecond), p.Duration, p.Acquired, p.Attempts, plural(p.Faults, "fault"))
		}
	}
	cfg.Finished = func(index, total int, s ScenarioReport) {
		if live {
			fmt.Fprint(stdout, "\r\033[K")
		}
		writeWrapped(stdout, "", "    ", s.progressLine(index, total))
	}
	var bad []string
	for _, b := range backends {
		cfg.Backend = b
		file := *jsonFile
		if file != "" && len(backends) > 1 {
			file = strings.TrimSuffix(file, ".json") + "." + b + ".json"
		}
		rep, code := runReport(ctx, cfg, file, *png, *wide, live, stdout, stderr)
		if code != 0 {
			return code
		}
		bad = append(bad, rep.Unexpected()...)
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "redlock chaos: unexpected verdict: %s\n", strings.Join(bad, ", "))
		return 1
	}
	return 0
}

// runReport runs cfg, prints the table (every column when wide), writes the JSON report and the
// timelines to jsonFile when it is not empty, and returns the report and
// 0, or 2 when the run or the writing failed.
func runReport(ctx context.Context, cfg Config, jsonFile string, png, wide, live bool, stdout, stderr io.Writer) (Report, int) {
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if live {
		fmt.Fprint(stdout, "\r\033[K")
	}
	if len(rep.Scenarios) > 0 {
		fmt.Fprintln(stdout)
		write := rep.WriteTable
		if wide {
			write = rep.WriteWideTable
		}
		if werr := write(stdout); werr != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", werr)
		}
		fmt.Fprintf(stdout, "%d scenarios in %v\n", len(rep.Scenarios), time.Since(start).Round(time.Second))
	}
	if jsonFile != "" {
		if werr := writeJSON(jsonFile, rep); werr != nil {
			fmt.Fprintf(stderr, "redlock chaos: --json: %v\n", werr)
			return rep, 2
		}
		if werr := writeTimelines(jsonFile, rep, png); werr != nil {
			fmt.Fprintf(stderr, "redlock chaos: --json: timelines: %v\n", werr)
			return rep, 2
		}
		fmt.Fprintf(stdout, "report in %s; timelines in %s\n", jsonFile, timelineName(jsonFile, "*"))
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
		return rep, 2
	}
	return rep, 0
}

func writeJSON(name string, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(name, append(b, '\n'), 0o644)
}

// timelineName is the timeline picture of scenario next to the JSON
// report jsonFile.
func timelineName(jsonFile, scenario string) string {
	return strings.TrimSuffix(jsonFile, ".json") + "." + scenario + ".svg"
}

// writeTimelines writes each scenario's timeline next to the JSON report,
// and with png a PNG of it too.
func writeTimelines(jsonFile string, rep Report, png bool) error {
	for _, s := range rep.Scenarios {
		var b strings.Builder
		if err := s.WriteTimeline(&b); err != nil {
			return err
		}
		svg := timelineName(jsonFile, s.Name)
		if err := os.WriteFile(svg, []byte(b.String()), 0o644); err != nil {
			return err
		}
		if png {
			out := strings.TrimSuffix(svg, ".svg") + ".png"
			if msg, err := exec.Command(rsvgConvert, "--background-color", "white", "-o", out, svg).CombinedOutput(); err != nil {
				return fmt.Errorf("%s %s: %w: %s", rsvgConvert, svg, err, strings.TrimSpace(string(msg)))
			}
		}
	}
	return nil
}

// rsvgConvert renders the SVG timelines as PNG (librsvg's command).
const rsvgConvert = "rsvg-convert"

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
