package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Errors returned by [Server] methods, to be checked with errors.Is.
var (
	// ErrNotRunning means the server has no running process: it was
	// killed, stopped, or exited on its own.
	ErrNotRunning = errors.New("redistest: server not running")
	// ErrStopped means the server was stopped for good by [Server.Stop].
	ErrStopped = errors.New("redistest: server stopped")
)

const (
	startTimeout  = 5 * time.Second       // for one process to answer PING
	startAttempts = 5                     // ports tried by StartServer
	restartWait   = 2 * time.Second       // Restart's patience for a busy port
	stopGrace     = 2 * time.Second       // between SIGTERM and SIGKILL
	probeInterval = 5 * time.Millisecond  // between readiness probes
	portRetryWait = 50 * time.Millisecond // between Restart's attempts
)

// Server is one redis-server process, on a loopback port that stays the same
// across restarts, with its own temporary directory for data and logs.
//
// Its methods are safe for concurrent use; they are serialised by a mutex,
// so one that waits for the process (Restart, Stop) holds up the others.
type Server struct {
	// Fixed at start.
	binary    string
	opts      Options
	addr      string
	port      int
	root      string      // temporary directory, removed by Stop
	dataDir   string      // redis-server --dir, inside root
	logFile   string      // redis-server --logfile, inside root
	stdioFile string      // the process's stdout and stderr, inside root
	confFile  string      // a Sentinel's configuration file, inside root
	tlsConf   *tls.Config // the readiness probe's, when opts.TLS is set

	mu      sync.Mutex // guards proc and stopped: the process state
	proc    *process   // the current process; nil after Kill or Stop
	stopped bool       // Stop was called
}

// StartServer starts a redis-server on a free loopback port in a new
// temporary directory and waits until it answers PING. If the port is taken
// before the server binds it, it tries a few other ports. Call [Server.Stop]
// when done.
func StartServer(opts Options) (*Server, error) {
	return startServer(opts, freePort)
}

// startServer is StartServer with the port picker as a parameter, for tests.
func startServer(opts Options, pickPort func() (int, error)) (*Server, error) {
	binary, err := opts.binary()
	if err != nil {
		return nil, err
	}
	opts.Args = slices.Clone(opts.Args)
	var tlsConf *tls.Config
	if opts.TLS != nil {
		if tlsConf, err = opts.TLS.ClientConfig(); err != nil {
			return nil, err
		}
	}
	root, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{
		binary:    binary,
		opts:      opts,
		root:      root,
		dataDir:   filepath.Join(root, "data"),
		logFile:   filepath.Join(root, "redis.log"),
		stdioFile: filepath.Join(root, "stdio.log"),
		confFile:  filepath.Join(root, "sentinel.conf"),
		tlsConf:   tlsConf,
	}
	if err := os.Mkdir(s.dataDir, 0o755); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("redistest: %w", err)
	}
	if opts.Sentinel != nil {
		if err := os.WriteFile(s.confFile, []byte(opts.sentinelConf()), 0o644); err != nil {
			os.RemoveAll(root)
			return nil, fmt.Errorf("redistest: %w", err)
		}
	}
	for range startAttempts {
		port, perr := pickPort()
		if perr != nil {
			err = fmt.Errorf("redistest: pick a port: %w", perr)
			break
		}
		var p *process
		p, err = s.launch(port)
		if err == nil {
			s.port = port
			s.addr = hostPort(port)
			s.proc = p
			return s, nil
		}
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	os.RemoveAll(root)
	return nil, err
}

// StartServerT starts a server like [StartServer], registers Stop with
// tb.Cleanup, and fails tb if it does not start.
func StartServerT(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := StartServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Stop() })
	return s
}

// Addr returns the server's address, "127.0.0.1:PORT". It stays the same
// across restarts.
func (s *Server) Addr() string { return s.addr }

// Dir returns the server's data directory (redis-server --dir). Stop
// removes it.
func (s *Server) Dir() string { return s.dataDir }

// Pid returns the process id of the running redis-server, or 0 if there is
// none.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return 0
	}
	return s.proc.pid
}

// Running reports whether the server's process is alive (a paused process
// counts as alive).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running()
}

// running is Running with s.mu held.
func (s *Server) running() bool { return s.proc != nil && s.proc.alive() }

// notRunning returns the error for a method that needs a live process, and
// forgets a process that exited on its own.
func (s *Server) notRunning() error {
	if s.stopped {
		return fmt.Errorf("%w: %s", ErrStopped, s.addr)
	}
	if p := s.proc; p != nil {
		s.proc = nil
		return fmt.Errorf("%w: %s (exited on its own: %v)", ErrNotRunning, s.addr, p.err)
	}
	return fmt.Errorf("%w: %s", ErrNotRunning, s.addr)
}

// Kill sends SIGKILL to the server and waits until the process is reaped.
// Nothing is flushed: without AppendOnly all data is lost, with it the data
// written so far survives a Restart(true). It returns an error wrapping
// ErrNotRunning if no process is running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return s.notRunning()
	}
	if err := s.proc.kill(); err != nil {
		return err
	}
	s.proc = nil
	return nil
}

// Pause stops the server with SIGSTOP: connections stay open but nothing is
// answered until Resume (clients see timeouts, not errors).
func (s *Server) Pause() error {
	return s.setPaused(true, syscall.SIGSTOP)
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	return s.setPaused(false, syscall.SIGCONT)
}

func (s *Server) setPaused(paused bool, sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return s.notRunning()
	}
	if err := s.proc.signalGroup(sig); err != nil {
		return fmt.Errorf("redistest: %v %s: %w", sig, s.addr, err)
	}
	s.proc.paused = paused
	return nil
}

// Paused reports whether the server is paused by Pause.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running() && s.proc.paused
}

// Restart kills the server if it is running and starts it again on the same
// port, waiting until it answers PING. With keepData false it first deletes
// the data directory's content (AOF and RDB files), so the server comes back
// empty; with keepData true it comes back with what it persisted, which is
// everything written before the kill under AppendOnly and nothing without.
// If the port is briefly taken, it retries for about two seconds.
func (s *Server) Restart(keepData bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return fmt.Errorf("%w: %s", ErrStopped, s.addr)
	}
	if s.proc != nil {
		if err := s.proc.kill(); err != nil {
			return err
		}
		s.proc = nil
	}
	if !keepData {
		if err := clearDir(s.dataDir); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(restartWait)
	for {
		p, err := s.launch(s.port)
		if err == nil {
			s.proc = p
			return nil
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(portRetryWait)
	}
}

// Stop stops the server for good: SIGTERM (after SIGCONT, in case it is
// paused), SIGKILL if it has not exited two seconds later, then it reaps the
// process and removes the temporary directory. Calling it again does
// nothing and returns nil.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	var errs []error
	if s.proc != nil {
		errs = append(errs, s.proc.terminate(stopGrace))
		s.proc = nil
	}
	if err := os.RemoveAll(s.root); err != nil {
		errs = append(errs, fmt.Errorf("redistest: %w", err))
	}
	return errors.Join(errs...)
}

// clearDir removes everything inside dir. Redis 7 keeps its append-only
// files in a subdirectory (appendonlydir), so this removes trees.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func hostPort(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
