package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// process is one run of redis-server, from start until it is reaped.
type process struct {
	cmd    *exec.Cmd
	pid    int
	exited chan struct{} // closed by the reaping goroutine once cmd.Wait returned
	err    error         // cmd.Wait's result; read it only after exited is closed
	paused bool          // SIGSTOP sent and no SIGCONT since; guarded by Server.mu

	// reapMu is held while the process group is signalled and while the
	// process is reaped, so that a signal never reaches a group whose id
	// was freed by the reaping and reused by some other process.
	reapMu sync.Mutex
	reaped bool // guarded by reapMu
}

// spawn starts binary with args in its own process group, with stdout and
// stderr appended to stdio (redis-server reports configuration errors there,
// not in its log file), and starts the goroutine that reaps it.
func spawn(binary string, args []string, stdio string) (*process, error) {
	out, err := os.OpenFile(stdio, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: open %s: %w", stdio, err)
	}
	// The child gets its own copy of the descriptor; ours is not needed
	// after Start. An *os.File also spares exec its copying goroutines.
	defer out.Close()

	cmd := exec.Command(binary, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal's Ctrl-C reaches the test binary
		// only, which then stops the servers itself.
		Setpgid: true,
		// Die with the test binary if it is killed before it can Stop.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redistest: start %s: %w", binary, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go p.reap()
	return p, nil
}

// reap waits for the process to exit, reaps it and closes p.exited.
func (p *process) reap() {
	// Wait for the exit without reaping, so that the pid stays reserved
	// until reapMu is held.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	p.reapMu.Lock()
	p.err = p.cmd.Wait()
	p.reaped = true
	p.reapMu.Unlock()
	close(p.exited)
}

// alive reports whether the process has not exited yet.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signalGroup sends sig to the whole process group (redis-server and any
// snapshot or rewrite child it forked). It is a no-op once the process is
// reaped, because the group id could then name some other group.
func (p *process) signalGroup(sig syscall.Signal) error {
	p.reapMu.Lock()
	defer p.reapMu.Unlock()
	if p.reaped {
		return nil
	}
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// kill sends SIGKILL to the process group and waits until it is reaped.
func (p *process) kill() error {
	if err := p.signalGroup(syscall.SIGKILL); err != nil {
		return fmt.Errorf("redistest: kill pid %d: %w", p.pid, err)
	}
	<-p.exited
	return nil
}

// terminate asks redis-server to shut down (resuming it first, since a
// stopped process cannot act on SIGTERM) and kills it if it is still
// running after grace. It returns once the process is reaped.
func (p *process) terminate(grace time.Duration) error {
	if err := p.signalGroup(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redistest: resume pid %d: %w", p.pid, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: terminate pid %d: %w", p.pid, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
		return p.kill()
	}
}
