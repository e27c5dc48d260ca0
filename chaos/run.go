package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/chaos/cluster"
)

// Backends.
const (
	BackendDocker  = "docker"  // one container per master ([cluster.NewDocker])
	BackendProcess = "process" // local processes behind fault proxies ([cluster.NewProcess])
)

// maxProcClients caps the client processes of a scenario: each is two
// processes (redlock exec and its writer), started afresh for every
// acquisition.
const maxProcClients = 4

// Defaults of Config.
const (
	DefaultNodes    = 5
	DefaultClients  = 8
	DefaultKeys     = 1
	DefaultDuration = 10 * time.Second
	DefaultTTL      = time.Second
	DefaultSoak     = 10000 // acquisitions per scenario of "redlock chaos --soak"
)

// Config says what to run. The zero value runs every scenario with the
// defaults on the best backend available.
type Config struct {
	// Backend is BackendDocker or BackendProcess. Default: Docker when an
	// engine answers ([cluster.DockerAvailable]), else process.
	Backend string
	// Scenarios are the names to run, in this order. Default (or "all"):
	// every one ([ScenarioNames]).
	Scenarios []string
	// Nodes is the number of masters (default 5), Clients the number of
	// contending clients (default 8), Keys the number of keys they contend
	// on (default 1).
	Nodes, Clients, Keys int
	// Duration is how long each scenario's workload runs. Default 10 s. A
	// scenario plays at least one round of its faults in full, so one whose
	// script needs longer (a few TTLs, slow Docker operations) runs longer.
	Duration time.Duration
	// TTL is the lock TTL of the workload (scripted holders in the restart
	// scenarios use twice it). Default 1 s.
	TTL time.Duration
	// Soak, when more than 0, runs each scenario's workload until at least
	// this many locks were acquired (and at least Duration), its faults
	// repeating meanwhile. Only scenarios that must stay safe soak; the
	// default list is then those ([SafeScenarioNames]).
	Soak int
	// Adapter is what the clients reach the masters through:
	// AdapterGoRedis (the default), AdapterRueidis, or AdapterMixed, where
	// client i uses go-redis when i is even and rueidis when it is odd, on
	// one lock (workload, extending clients and scripted holders are
	// numbered in the order they are made). Client processes (the process-*
	// scenarios) are redlock exec, which uses go-redis, whatever it says.
	Adapter string
	// Redlock is the path of the redlock binary, which the process-client
	// scenarios run ("redlock exec" around "redlock chaos writer"). Required
	// when one of them runs; the "redlock chaos" command passes itself.
	Redlock string
	// Progress, when not nil, is called a few times a second while a
	// scenario runs, from one goroutine at a time.
	Progress func(Progress)
	// Finished, when not nil, is called with each scenario's report as
	// soon as the scenario is over, from the goroutine that called Run.
	Finished func(index, total int, s ScenarioReport)
}

// Progress is a snapshot of the scenario running.
type Progress struct {
	Scenario          string
	Index, Total      int // 1-based
	Elapsed, Duration time.Duration
	Acquired          int
	Attempts          int
	Faults            int
}

// ScenarioNames lists every scenario, in the order Run runs them.
func ScenarioNames() []string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return names
}

// SafeScenarioNames lists the scenarios that must stay safe (no overlap,
// no late or stale write accepted): the ones a soak runs.
func SafeScenarioNames() []string {
	var names []string
	for _, s := range scenarios {
		if s.safe() {
			names = append(names, s.name)
		}
	}
	return names
}

// safe reports whether the scenario must find no two holders at once and
// no unsafe write.
func (s scenario) safe() bool {
	has := func(x expectation) bool {
		return slices.ContainsFunc(s.want, func(e expectation) bool { return e.what == x.what })
	}
	return has(noOverlap) && has(noUnsafeWrite)
}

// resolved fills in the defaults and checks c.
func (c Config) resolved() (Config, []scenario, error) {
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Clients == 0 {
		c.Clients = DefaultClients
	}
	if c.Keys == 0 {
		c.Keys = DefaultKeys
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Adapter == "" {
		c.Adapter = AdapterGoRedis
	}
	switch {
	case c.Nodes < 3:
		return c, nil, fmt.Errorf("chaos: nodes = %d: need at least 3 masters, so that one reply cannot decide a quorum", c.Nodes)
	case c.Clients < 1:
		return c, nil, fmt.Errorf("chaos: clients = %d: need at least 1", c.Clients)
	case c.Keys < 1:
		return c, nil, fmt.Errorf("chaos: keys = %d: need at least 1", c.Keys)
	case c.Duration < 0:
		return c, nil, fmt.Errorf("chaos: duration = %v: must be positive", c.Duration)
	case c.TTL < 100*time.Millisecond:
		return c, nil, fmt.Errorf("chaos: TTL = %v: need at least 100ms", c.TTL)
	case !slices.Contains(Adapters(), c.Adapter):
		return c, nil, fmt.Errorf("chaos: adapter %q: want one of %s", c.Adapter, strings.Join(Adapters(), ", "))
	}
	if c.Backend == "" {
		c.Backend = BackendProcess
		if cluster.DockerAvailable() == nil {
			c.Backend = BackendDocker
		}
	}
	if c.Backend != BackendDocker && c.Backend != BackendProcess {
		return c, nil, fmt.Errorf("chaos: backend %q: want %q or %q", c.Backend, BackendDocker, BackendProcess)
	}
	names := c.Scenarios
	if len(names) == 0 || slices.Equal(names, []string{"all"}) {
		names = ScenarioNames()
		if c.Soak > 0 {
			names = SafeScenarioNames()
		}
	}
	if c.Soak < 0 {
		return c, nil, fmt.Errorf("chaos: soak = %d: want 0 (off) or the acquisitions per scenario", c.Soak)
	}
	var run []scenario
	for _, name := range names {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
		if i < 0 {
			return c, nil, fmt.Errorf("chaos: no scenario %q; there are: all, %s", name, strings.Join(ScenarioNames(), ", "))
		}
		run = append(run, scenarios[i])
	}
	for _, sc := range run {
		if c.Soak > 0 && !sc.safe() {
			return c, nil, fmt.Errorf("chaos: scenario %s must find unsafety and ends when it has: it does not soak; the safe ones are: %s", sc.name, strings.Join(SafeScenarioNames(), ", "))
		}
		if sc.procs && c.Redlock == "" {
			return c, nil, fmt.Errorf("chaos: scenario %s runs client processes: Config.Redlock must name the redlock binary", sc.name)
		}
	}
	c.Scenarios = names
	return c, run, nil
}

// Run starts the masters, runs the scenarios one after another on them
// (every master brought back and emptied in between), removes the masters,
// and reports what each scenario found. A scenario that could not play out
// (a fault failed to apply) is reported with its error and counts as
// unexpected. Run returns an error when the configuration is invalid, the
// masters cannot be started, brought back or removed, or ctx ended; the
// report then holds the scenarios that finished.
func Run(ctx context.Context, cfg Config) (_ Report, err error) {
	cfg, run, err := cfg.resolved()
	rep := Report{Backend: cfg.Backend, Adapter: cfg.Adapter, Nodes: cfg.Nodes, Clients: cfg.Clients, Keys: cfg.Keys, TTL: cfg.TTL, Duration: cfg.Duration}
	if err != nil {
		return rep, err
	}
	cl, err := newCluster(ctx, cfg.Backend, cfg.Nodes)
	if err != nil {
		return rep, fmt.Errorf("chaos: start %d masters (%s): %w", cfg.Nodes, cfg.Backend, err)
	}
	defer func() { err = errors.Join(err, cl.Close()) }()
	for i, sc := range run {
		on, err := cl, error(nil)
		switch {
		case sc.shards > 0:
			on, err = cluster.NewShards(cluster.Options{N: cfg.Nodes}, sc.shards)
			if err != nil {
				return rep, fmt.Errorf("chaos: %s: start %d Redis Clusters of %d shards: %w", sc.name, cfg.Nodes, sc.shards, err)
			}
		case sc.sentinels:
			on, err = cluster.NewSentinels(cluster.Options{N: cfg.Nodes})
			if err != nil {
				return rep, fmt.Errorf("chaos: %s: start %d Sentinel-managed masters: %w", sc.name, cfg.Nodes, err)
			}
		}
		sr, err := runScenario(ctx, on, cfg, sc, i+1, len(run))
		if on != cl {
			err = errors.Join(err, on.Close())
		}
		rep.Scenarios = append(rep.Scenarios, sr)
		if cfg.Finished != nil {
			cfg.Finished(i+1, len(run), sr)
		}
		if err != nil {
			return rep, fmt.Errorf("chaos: %s: %w", sc.name, err)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	return rep, nil
}

// newCluster starts the backend's masters.
func newCluster(ctx context.Context, backend string, n int) (cluster.Cluster, error) {
	if backend == BackendDocker {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return cluster.NewDocker(ctx, cluster.Options{N: n})
	}
	return cluster.NewProcess(cluster.Options{N: n})
}

// runScenario runs one scenario on cl, which it first empties. The error
// is for a cluster that cannot be brought back to health; what goes wrong
// inside the scenario is in the report.
func runScenario(ctx context.Context, cl cluster.Cluster, cfg Config, sc scenario, index, total int) (ScenarioReport, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := reset(rctx, cl); err != nil {
		return ScenarioReport{Name: sc.name, Err: err.Error()}, err
	}
	rec := newRecorder()
	e := &env{
		cl: cl, n: cfg.Nodes, quorum: cfg.Nodes/2 + 1, ttl: cfg.TTL, fencing: sc.fencing, rw: sc.rw, permits: sc.permits, adapter: cfg.Adapter,
		rec: rec, res: newResource(rec, sc.fencing), faulted: make([]bool, cfg.Nodes),
		hold: 4 * time.Millisecond, soak: cfg.Soak,
	}
	e.confirm, e.companions = sc.confirm, sc.companions
	if sc.gated {
		e.restartGate = immediateHolderTTLs * cfg.TTL
		if err := upFor(ctx, cl, e.restartGate); err != nil {
			return ScenarioReport{Name: sc.name, Err: err.Error()}, err
		}
	}
	for k := range cfg.Keys {
		e.keys = append(e.keys, fmt.Sprintf("%s%d", keyPrefix, k))
	}
	if sc.midAcquire {
		e.trig = newTrigger(cfg.Nodes)
	}
	d := cfg.Duration
	sr := ScenarioReport{Name: sc.name, About: sc.about, Fencing: sc.fencing}
	for _, w := range sc.want {
		sr.Expect = append(sr.Expect, w.what)
	}

	var errs []error
	var wrap func(int, redlock.Node) redlock.Node
	if e.trig != nil {
		wrap = e.trig.wrap
	}
	var workers []*client
	var procClients int
	for range cfg.Clients {
		if sc.procs {
			break
		}
		c, err := e.newClient(wrap)
		if err != nil {
			errs = append(errs, err)
			break
		}
		workers = append(workers, c)
	}
	var extending []*client
	for i := 0; sc.extend && i < extenders && len(errs) == 0; i++ {
		c, err := e.newClient(wrap)
		if err != nil {
			errs = append(errs, err)
			break
		}
		extending = append(extending, c)
	}
	if len(errs) == 0 {
		if err := e.warmUp(ctx, append(slices.Clone(workers), extending...)); err != nil {
			errs = append(errs, err)
		}
		// Before any goroutine that records: the resource's HTTP handlers
		// (newProcs) and the workload read the recorder's clock unlocked.
		rec.rebase()
	}
	if sc.procs && len(errs) == 0 {
		p, err := newProcs(e, cfg.Redlock)
		if err != nil {
			errs = append(errs, err)
		} else {
			e.procs = p
			procClients = min(cfg.Clients, maxProcClients)
		}
	}
	start := time.Now()
	e.end = start.Add(d)
	if len(errs) == 0 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, c := range workers {
			wg.Go(func() { e.work(ctx, stop, c) })
		}
		for i := range procClients {
			wg.Go(func() { e.procs.work(ctx, stop, i) })
		}
		for i, c := range extending {
			kind := extendAuto
			if i%2 == 1 {
				kind = extendManual
			}
			wg.Go(func() { e.extendWork(ctx, stop, c, kind) })
		}
		if cfg.Progress != nil {
			wg.Go(func() { progress(stop, cfg.Progress, e, sc.name, index, total, d) })
		}
		errs = append(errs, sc.script(ctx, e))
		// The workload runs at least d, and a soak until its acquisitions.
		for e.left() > 0 && sleep(ctx, min(e.left(), 100*time.Millisecond)) {
		}
		close(stop)
		wg.Wait()
	}
	if e.trig != nil {
		e.trig.wait()
	}
	if e.procs != nil {
		errs = append(errs, e.procs.close())
	}
	restoreErr := e.restore()
	errs = append(errs, restoreErr, e.closeClients())
	sr.Took = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		sr.Err = err.Error()
	}

	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer lcancel()
	leaked, err := e.leaked(lctx)
	if err != nil && sr.Err == "" {
		sr.Err = err.Error()
	}
	h := rec.history()
	o := &outcome{Findings: Check(h), h: h, leaked: len(leaked), ttl: cfg.TTL}
	var pf PermitFindings
	if sc.permits > 0 {
		pf = CheckPermits(h, sc.permits)
		o.OverGrants = pf.Over
	}
	sr.Findings, sr.Faults, sr.Leaked, sr.LeakedKeys, sr.History = o.Findings, h.Faults, len(leaked), leaked, h
	sr.Outcome = summary(o.Findings)
	if cfg.Adapter == AdapterMixed && !sc.procs {
		sr.ByAdapter = acquiredBy(h)
	}
	sr.Failed = judge(o, sc.want)
	sr.CrossCheck = crossCheck(h, o.Findings, sc.fencing)
	if sc.permits > 0 {
		var d []string
		sr.CrossCheck.Permits, d = crossCheckPermits(h, sc.permits, pf)
		sr.CrossCheck.Disagree = append(sr.CrossCheck.Disagree, d...)
	}
	for _, d := range sr.CrossCheck.Disagree {
		sr.Failed = append(sr.Failed, "porcupine and our checker agree: "+d)
	}
	if sr.Err != "" {
		sr.Failed = append(sr.Failed, "the scenario ran to the end: "+sr.Err)
	}
	sr.Expected = len(sr.Failed) == 0
	return sr, restoreErr
}

// progress calls report every 200ms until stop closes.
func progress(stop <-chan struct{}, report func(Progress), e *env, name string, index, total int, d time.Duration) {
	start := time.Now()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		acquired, attempts, faults := e.rec.counts()
		report(Progress{Scenario: name, Index: index, Total: total, Elapsed: time.Since(start), Duration: d,
			Acquired: acquired, Attempts: attempts, Faults: faults})
	}
}

// acquiredBy counts the locks acquired in h by each adapter.
func acquiredBy(h History) map[string]int {
	by := make(map[string]int)
	for _, a := range h.Acquires {
		if a.OK {
			by[a.Adapter]++
		}
	}
	return by
}
