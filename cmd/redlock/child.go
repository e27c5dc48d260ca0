package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redlock/redlock"
)

// forwarded are the signals exec passes on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runLocked runs the command while lock is kept, stops it if the lock is lost,
// releases the lock, and returns the exit status.
func runLocked(lock *redlock.Lock, a *execArgs, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	cmd := exec.Command(a.command[0], a.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "REDLOCK_KEY="+lock.Key())
	if lock.Owner() != "" { // not an RWMutex's hold (--read, --write)
		cmd.Env = append(cmd.Env, "REDLOCK_OWNER="+lock.Owner())
	}
	if a.fencing {
		cmd.Env = append(cmd.Env, "REDLOCK_FENCE="+strconv.FormatUint(lock.Fence(), 10))
	}
	// Its own process group, so that a lost lock stops what the command
	// started too, and a terminal's Ctrl-C reaches it once (through us).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	lost, stopKeeping := keepLock(lock)
	if err := cmd.Start(); err != nil {
		stopKeeping()
		unlock(lock, stderr)
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	group := -cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var (
		waitErr  error
		wasLost  bool
		killTime <-chan time.Time
	)
	for done := false; !done; {
		select {
		case waitErr = <-exited:
			done = true
		case s := <-sigs:
			_ = syscall.Kill(group, s.(syscall.Signal))
		case <-lost:
			lost, wasLost = nil, true
			fmt.Fprintf(stderr, "redlock exec: %v; stopping the command: SIGTERM, then SIGKILL after %v\n", context.Cause(lock.Context()), a.grace)
			_ = syscall.Kill(group, syscall.SIGTERM)
			t := time.NewTimer(a.grace)
			defer t.Stop()
			killTime = t.C
		case <-killTime:
			killTime = nil
			_ = syscall.Kill(group, syscall.SIGKILL)
		}
	}
	stopKeeping()
	if wasLost {
		// The lock is gone: whatever the command left running goes too.
		_ = syscall.Kill(group, syscall.SIGKILL)
	}
	if unlock(lock, stderr) {
		wasLost = true
	}
	status := childStatus(waitErr)
	if wasLost {
		fmt.Fprintf(stderr, "redlock exec: the command (status %d) ran without holding lock %q at the end; exiting %d\n", status, lock.Key(), exitLost)
		return exitLost
	}
	return status
}

// childStatus is the command's exit status as a shell reports it.
func childStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return exitCannotRun
		}
		return exitOK
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// signalStatus is the status a shell reports for a process ended by s.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}
