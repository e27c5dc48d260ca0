package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process clients: each is a loop that runs
//
//	redlock exec --fencing --masters ... --ttl TTL --wait TTL KEY -- redlock chaos writer ...
//
// as separate OS processes, the writer sending its writes to the fenced
// resource that the harness serves over HTTP on loopback. The harness does
// not see the lock calls inside exec; a holding is what the writer reports:
// from its "begin" to its "end" (or, for a writer killed with its exec,
// to when every connection it sent requests on has closed: its last write
// may still be on its way when it dies).
// That window lies inside exec's real holding (exec acquires before it
// starts the writer and releases after the writer exits), so an overlap of
// two windows is an overlap of two holdings. Until is the window's end:
// the harness cannot see exec's validity, so no write counts as late;
// fencing and the stale writes are what these scenarios judge.

// Process-client timing: writes per critical section and the pause
// between them.
const (
	procWrites = 3
	procHold   = 20 * time.Millisecond
)

// procHolder is a process holding as the harness sees it.
type procHolder struct {
	id         int // Acquire.ID
	client     int
	key        string
	token      uint64
	pid, pgid  int // the writer's
	execPgid   int // redlock exec's process group (its pid)
	writes     int
	open       int // connections to the resource that carried its requests, not yet closed
	ended      bool
	launchedAt time.Duration
}

// procs is the harness's side of the process clients: the HTTP resource
// and the holdings in progress. It is safe for concurrent use.
type procs struct {
	e      *env
	bin    string // the redlock binary
	srv    *http.Server
	ln     net.Listener
	served chan struct{}

	mu       sync.Mutex // guards the fields below
	holders  map[int]*procHolder
	launches map[int]launch   // client -> its exec running now
	connOf   map[net.Conn]int // open connection -> the holding whose requests it carried
}

// connKey carries a request's connection in its context.
type connKey struct{}

// launch is one run of redlock exec by a process client.
type launch struct {
	at   time.Duration
	pgid int
}

// newProcs serves the resource on a loopback port.
func newProcs(e *env, bin string) (*procs, error) {
	if bin == "" {
		return nil, errors.New("process clients need the redlock binary (Config.Redlock): none given")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("process clients: resource: %w", err)
	}
	p := &procs{e: e, bin: bin, ln: ln, served: make(chan struct{}),
		holders: make(map[int]*procHolder), launches: make(map[int]launch), connOf: make(map[net.Conn]int)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /begin", p.begin)
	mux.HandleFunc("POST /write", p.write)
	mux.HandleFunc("POST /end", p.end)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ConnState:   p.connState}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln) // ErrServerClosed after close
	}()
	return p, nil
}

func (p *procs) url() string { return "http://" + p.ln.Addr().String() }

// close stops the resource and waits for its handlers.
func (p *procs) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	<-p.served
	return err
}

func formInt(r *http.Request, name string) (int, error) {
	v, err := strconv.Atoi(r.FormValue(name))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// begin records a holding: the writer started under exec's lock.
func (p *procs) begin(w http.ResponseWriter, r *http.Request) {
	now := p.e.rec.now()
	client, err1 := formInt(r, "client")
	pid, err2 := formInt(r, "pid")
	pgid, err3 := formInt(r, "pgid")
	token, err4 := strconv.ParseUint(r.FormValue("token"), 10, 64)
	key := r.FormValue("key")
	if err := errors.Join(err1, err2, err3, err4); err != nil || key == "" {
		http.Error(w, fmt.Sprintf("bad begin: %v (key %q)", err, key), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.launches[client]
	if !ok {
		http.Error(w, fmt.Sprintf("client %d has no exec running", client), http.StatusBadRequest)
		return
	}
	id := p.e.rec.acquire(Acquire{Client: client, Key: key, Read: r.FormValue("read") == "1", OK: true, Start: l.at, Acquired: now,
		Until: math.MaxInt64, Released: -1, Lost: -1, Token: token})
	h := &procHolder{id: id, client: client, key: key, token: token, pid: pid, pgid: pgid, execPgid: l.pgid, launchedAt: l.at}
	p.holders[id] = h
	p.carried(r, h)
	fmt.Fprintln(w, id)
}

// write makes a holder's write to the fenced resource.
func (p *procs) write(w http.ResponseWriter, r *http.Request) {
	id, err := formInt(r, "id")
	p.mu.Lock()
	h := p.holders[id]
	if h != nil {
		h.writes++
		p.carried(r, h)
	}
	p.mu.Unlock()
	if err != nil || h == nil {
		http.Error(w, fmt.Sprintf("bad write: holder %q unknown", r.FormValue("id")), http.StatusBadRequest)
		return
	}
	if p.e.res.write(id, h.key, h.token) {
		fmt.Fprintln(w, "accepted")
	} else {
		fmt.Fprintln(w, "rejected")
	}
}

// end records the end of a holding: the writer is about to exit.
func (p *procs) end(w http.ResponseWriter, r *http.Request) {
	id, err := formInt(r, "id")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.finish(id)
	fmt.Fprintln(w, "ok")
}

// finish ends holding id now, unless it had ended.
func (p *procs) finish(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.holders[id]
	if h == nil || h.ended {
		return
	}
	h.ended = true
	now := p.e.rec.now()
	p.e.rec.released(id, now)
	p.e.rec.renewed(id, now)
}

// carried notes that r's connection carried a request of h. p.mu is held.
func (p *procs) carried(r *http.Request, h *procHolder) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if _, seen := p.connOf[c]; c != nil && !seen {
		p.connOf[c] = h.id
		h.open++
	}
}

// connState forgets a connection once the server is done with it: every
// request it carried has been handled.
func (p *procs) connState(c net.Conn, s http.ConnState) {
	if s != http.StateClosed && s != http.StateHijacked {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.connOf[c]; ok {
		delete(p.connOf, c)
		p.holders[id].open--
	}
}

// exited ends holding id once its exec has exited (the writer's "end"
// has ended it already, unless the harness killed both). A killed
// writer's last request may still be on its way, or its handler not yet
// run on a loaded machine: the holding ends once the server has closed
// every connection that carried its requests, which the kernel closes
// when the writer dies. (Its HTTP client keeps one connection alive, so
// a request on a connection not yet seen is not expected.) It waits at
// most 10 s for them, then ends the holding anyway.
func (p *procs) exited(id int) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.mu.Lock()
		h := p.holders[id]
		open := h != nil && !h.ended && h.open > 0
		p.mu.Unlock()
		if !open {
			break
		}
	}
	p.finish(id)
}

// active returns a holding in progress that has made exactly one write of
// its procWrites (so that it has writes left when it wakes), or nil.
func (p *procs) active() *procHolder {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holders {
		if !h.ended && h.writes == 1 {
			c := *h
			return &c
		}
	}
	return nil
}

// waitActive polls for an active holding until d passed or ctx ended.
func (p *procs) waitActive(ctx context.Context, d time.Duration) *procHolder {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if h := p.active(); h != nil {
			return h
		}
		if !sleep(ctx, time.Millisecond) {
			return nil
		}
	}
	return nil
}

// signal sends sig to the holder's exec and to its writer's group.
func (h *procHolder) signal(sig syscall.Signal) error {
	return errors.Join(syscall.Kill(-h.execPgid, sig), syscall.Kill(-h.pgid, sig))
}

// work is a process client's loop until stop closes: run redlock exec
// around the writer, again and again. A run in progress when stop closes
// runs to its end.
func (p *procs) work(ctx context.Context, stop <-chan struct{}, client int) {
	var masters []string
	for _, a := range p.e.cl.Addrs() {
		if !strings.Contains(a, "://") {
			a = "redis://" + a
		}
		masters = append(masters, a)
	}
	for !stopped(ctx, stop) {
		p.e.gate.RLock()
		key := p.e.keys[rand.IntN(len(p.e.keys))]
		p.run(client, key, strings.Join(masters, ","))
		p.e.gate.RUnlock()
		time.Sleep(rand.N(5 * time.Millisecond))
	}
}

// run runs exec once for client and records an attempt that got no lock.
func (p *procs) run(client int, key, masters string) {
	ttl := p.e.ttl.String()
	// On RWMutexes (env.rw), odd clients are readers (exec --read, around
	// a writer that only holds), the others its writers.
	mode, writer := []string{"--fencing"}, []string{}
	switch {
	case p.e.permits > 0:
		mode, writer = []string{"--permits", strconv.Itoa(p.e.permits)}, []string{"--read"}
	case p.e.rw && client%2 == 1:
		mode, writer = []string{"--read"}, []string{"--read"}
	case p.e.rw:
		mode = []string{"--write", "--fencing"}
	}
	args := append(append([]string{"exec"}, mode...), "--masters", masters, "--ttl", ttl, "--wait", ttl, key, "--",
		p.bin, "chaos", "writer", "--resource", p.url(), "--client", strconv.Itoa(client),
		"--writes", strconv.Itoa(procWrites), "--hold", procHold.String())
	cmd := exec.Command(p.bin, append(args, writer...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := p.e.rec.now()
	p.mu.Lock()
	err := cmd.Start()
	if err == nil {
		p.launches[client] = launch{at: start, pgid: cmd.Process.Pid}
	}
	p.mu.Unlock()
	if err != nil {
		p.e.rec.acquire(Acquire{Client: client, Key: key, Start: start, Err: "start redlock exec: " + err.Error()})
		return
	}
	err = cmd.Wait()
	p.mu.Lock()
	delete(p.launches, client)
	var began *procHolder
	for _, h := range p.holders {
		if h.client == client && h.launchedAt == start {
			began = h
		}
	}
	p.mu.Unlock()
	if began != nil {
		if err != nil {
			p.e.rec.unlockFailed(began.id, fmt.Errorf("redlock exec: %v: %s", err, lastLine(out.String())))
		}
		p.exited(began.id)
		return
	}
	msg := "redlock exec: " + lastLine(out.String())
	if err != nil {
		msg = fmt.Sprintf("redlock exec: %v: %s", err, lastLine(out.String()))
	}
	p.e.rec.acquire(Acquire{Client: client, Key: key, Start: start, Err: msg})
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// procPause freezes a client process mid-critical-section — redlock exec
// and its writer's process group, with SIGSTOP — until another client has
// taken the lock (its validity ran out: the frozen exec could not renew
// it) and written; then SIGCONT. The woken exec finds its lock lost and
// sends the writer SIGTERM; the writer's last write carries the old token.
func procPause(ctx context.Context, e *env) error {
	if !sleep(ctx, e.warm()) {
		return nil
	}
	for first := true; first || e.left() > 4*e.ttl; first = false {
		h, err := e.stopActive(ctx)
		if h == nil || err != nil {
			return err
		}
		f := e.rec.faultBegin(kindHolderPause, nil, fmt.Sprintf("holder #%d: redlock exec (pid %d) and its writer (pid %d) SIGSTOPped", h.id, h.execPgid, h.pid))
		e.res.waitNewerWrote(ctx.Done(), h.key, h.id, 4*e.ttl)
		e.rec.faultEnd(f)
		if err := h.signal(syscall.SIGCONT); err != nil {
			return fmt.Errorf("SIGCONT holder #%d: %w", h.id, err)
		}
		if !sleep(ctx, e.settle()) {
			return nil
		}
	}
	return nil
}

// procKill kills a client process mid-critical-section: SIGSTOP (as it
// finds one), then SIGKILL to exec and its writer. The holding ends when
// run sees exec exit and the writer's connections close (exited), so a
// write on its way when the writer died lands inside it. The lock stays on
// the masters until its TTL runs out; then another client must get it.
func procKill(ctx context.Context, e *env) error {
	if !sleep(ctx, e.warm()) {
		return nil
	}
	for first := true; first || e.left() > 3*e.ttl; first = false {
		h, err := e.stopActive(ctx)
		if h == nil || err != nil {
			return err
		}
		f := e.rec.faultBegin(kindHolderKill, nil, fmt.Sprintf("holder #%d: redlock exec (pid %d) and its writer (pid %d) SIGKILLed", h.id, h.execPgid, h.pid))
		e.rec.faultEnd(f)
		if err := h.signal(syscall.SIGKILL); err != nil {
			return fmt.Errorf("SIGKILL holder #%d: %w", h.id, err)
		}
		if !sleep(ctx, 2*e.ttl) {
			return nil
		}
	}
	return nil
}

// stopActive waits for a client process in a critical section and
// SIGSTOPs it. It returns nil, nil when ctx ended first.
func (e *env) stopActive(ctx context.Context) (*procHolder, error) {
	for range 20 {
		h := e.procs.waitActive(ctx, 2*e.ttl)
		if h == nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, fmt.Errorf("no client process was in a critical section for %v", 2*e.ttl)
		}
		if err := h.signal(syscall.SIGSTOP); err != nil {
			// It exited in between: let it go and take another.
			if err := h.signal(syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				return nil, fmt.Errorf("SIGCONT holder #%d: %w", h.id, err)
			}
			continue
		}
		return h, nil
	}
	return nil, errors.New("20 client processes in turn exited before they could be stopped")
}
