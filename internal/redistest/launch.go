package redistest

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// errPortInUse means that the process could not bind its port.
var errPortInUse = errors.New("port in use")

// launch starts a redis-server on port and waits until it answers PING. On
// failure it kills the process and returns an error with the tail of what
// it logged; the error wraps errPortInUse if the port was taken.
func (s *Server) launch(port int) (*process, error) {
	addr := hostPort(port)
	logAt, stdioAt := fileSize(s.logFile), fileSize(s.stdioFile)
	p, err := spawn(s.binary, s.opts.args(port, s.dataDir, s.logFile, s.confFile), s.stdioFile)
	if err != nil {
		return nil, err
	}
	fail := func(cause error) (*process, error) {
		killErr := p.kill()
		tail := logTail(s.stdioFile, stdioAt) + logTail(s.logFile, logAt)
		if strings.Contains(tail, "Address already in use") && !errors.Is(cause, errPortInUse) {
			cause = fmt.Errorf("%w: %w", errPortInUse, cause)
		}
		err := fmt.Errorf("redistest: start redis-server on %s: %w", addr, cause)
		return nil, errors.Join(err, killErr, fmt.Errorf("log tail:\n%s", tail))
	}

	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	var last error
	for {
		// Check for an exit first: select picks at random among ready cases.
		select {
		case <-p.exited:
			return fail(fmt.Errorf("exited during startup: %v", p.err))
		default:
		}
		last = probe(addr, p.pid, s.tlsConf)
		if last == nil {
			return p, nil
		}
		if errors.Is(last, errForeign) {
			return fail(fmt.Errorf("%w: %w", errPortInUse, last))
		}
		select {
		case <-p.exited:
			return fail(fmt.Errorf("exited during startup: %v", p.err))
		case <-deadline.C:
			return fail(fmt.Errorf("no PONG within %v: %w", startTimeout, last))
		case <-tick.C:
		}
	}
}
