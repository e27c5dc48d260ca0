package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestKillRefusesConnections(t *testing.T) {
	s := start(t, Options{})
	c := newClient(t, s.Addr())
	mustSet(t, c, "k", "v")
	pid := s.Pid()

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() || s.Pid() != 0 {
		t.Errorf("after Kill: Running() = %v, Pid() = %d; want false, 0", s.Running(), s.Pid())
	}
	if !pidGone(pid) {
		t.Errorf("pid %d still exists after Kill", pid)
	}
	err := c.Ping(context.Background()).Err()
	if err == nil || isTimeout(err) {
		t.Errorf("PING after Kill = %v; want a connection error", err)
	}
	if err := s.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Kill = %v; want ErrNotRunning", err)
	}
}

func TestRestartKeepsAppendOnlyData(t *testing.T) {
	s := start(t, Options{AppendOnly: true})
	addr, pid := s.Addr(), s.Pid()
	c := newClient(t, addr)
	mustSet(t, c, "k", "survives")

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr || s.Pid() == pid || s.Pid() == 0 {
		t.Errorf("after Restart: Addr %s, Pid %d; want %s and a new pid (old %d)", s.Addr(), s.Pid(), addr, pid)
	}
	mustGet(t, c, "k", "survives")
}

func TestRestartWithoutDataComesBackEmpty(t *testing.T) {
	s := start(t, Options{AppendOnly: true})
	c := newClient(t, s.Addr())
	mustSet(t, c, "k", "v")

	// Restart kills the running process itself.
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	mustMissing(t, c, "k")
	if n, err := c.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE = %d, %v; want 0", n, err)
	}
}

func TestRestartWithoutAppendOnlyLosesData(t *testing.T) {
	s := start(t, Options{})
	c := newClient(t, s.Addr())
	mustSet(t, c, "k", "v")
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	mustMissing(t, c, "k")
}

func TestRestartAfterCrash(t *testing.T) {
	s := start(t, Options{})
	if err := syscall.Kill(s.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for s.Running() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.Running() {
		t.Fatal("Running() still true 2s after the process was killed from outside")
	}
	if err := s.Pause(); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "exited on its own") {
		t.Errorf("Pause of a crashed server = %v; want ErrNotRunning, exited on its own", err)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if err := newClient(t, s.Addr()).Ping(context.Background()).Err(); err != nil {
		t.Errorf("PING after Restart = %v", err)
	}
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	s := start(t, Options{})
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("take the killed server's port: %v", err)
	}
	const busy = 300 * time.Millisecond
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(busy)
		l.Close()
	}()
	begin := time.Now()
	err = s.Restart(false)
	<-released
	if err != nil {
		t.Fatalf("Restart with the port busy for %v: %v", busy, err)
	}
	if took := time.Since(begin); took < busy {
		t.Errorf("Restart took %v while the port was busy for %v", took, busy)
	}
	if err := newClient(t, s.Addr()).Ping(context.Background()).Err(); err != nil {
		t.Errorf("PING after Restart = %v", err)
	}
}

func TestPauseTimesOutResumeAnswers(t *testing.T) {
	s := start(t, Options{})
	c := newClient(t, s.Addr())
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if !s.Paused() || !s.Running() {
		t.Errorf("after Pause: Paused() = %v, Running() = %v; want true, true", s.Paused(), s.Running())
	}
	if err := c.Ping(ctx).Err(); !isTimeout(err) {
		t.Errorf("PING to a paused server = %v; want a timeout", err)
	}

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if s.Paused() {
		t.Error("Paused() = true after Resume")
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Resume = %v", err)
	}
}

func TestStopPausedServer(t *testing.T) {
	s := start(t, Options{})
	pid := s.Pid()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	// SIGTERM must work, not the SIGKILL fallback after stopGrace.
	if took := time.Since(begin); took >= stopGrace {
		t.Errorf("Stop of a paused server took %v; SIGTERM was not acted on", took)
	}
	if !pidGone(pid) {
		t.Errorf("pid %d still exists after Stop", pid)
	}
}

func TestStopIsIdempotent(t *testing.T) {
	s, err := StartServer(Options{AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := s.Pid(), s.Dir()
	for i := range 2 {
		if err := s.Stop(); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if !pidGone(pid) {
		t.Errorf("pid %d still exists after Stop", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data dir %s after Stop: %v; want it removed", dir, err)
	}
	if s.Running() {
		t.Error("Running() = true after Stop")
	}
	for name, f := range map[string]func() error{
		"Restart": func() error { return s.Restart(true) },
		"Kill":    s.Kill,
		"Pause":   s.Pause,
		"Resume":  s.Resume,
	} {
		if err := f(); !errors.Is(err, ErrStopped) {
			t.Errorf("%s after Stop = %v; want ErrStopped", name, err)
		}
	}
}

func TestStartErrorShowsLog(t *testing.T) {
	_, err := StartServer(Options{Args: []string{"--no-such-directive", "x"}})
	if err == nil || !strings.Contains(err.Error(), "Bad directive") {
		t.Errorf("StartServer with a bad directive = %v; want the server's complaint", err)
	}
}

func TestStartBadBinary(t *testing.T) {
	_, err := StartServer(Options{Binary: "/nonexistent/redis-server"})
	if err == nil || !strings.Contains(err.Error(), "REDIS_SERVER") {
		t.Errorf("StartServer with a missing binary = %v; want an error that says how to set it", err)
	}
}

func TestStartTriesAnotherPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	picks := 0
	s, err := startServer(Options{}, func() (int, error) {
		picks++
		if picks == 1 {
			return busy, nil
		}
		return freePort()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if picks != 2 || s.Addr() == hostPort(busy) {
		t.Errorf("picked %d ports, got %s; want 2 picks and not the busy port %d", picks, s.Addr(), busy)
	}
}

func TestStartRejectsForeignRedis(t *testing.T) {
	other := start(t, Options{})
	_, port, _ := net.SplitHostPort(other.Addr())
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	picks := 0
	s, err := startServer(Options{}, func() (int, error) {
		picks++
		if picks == 1 {
			return p, nil // a port where another redis-server answers
		}
		return freePort()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if picks != 2 || s.Addr() == other.Addr() {
		t.Errorf("picked %d ports, got %s; want 2 picks and not %s, which another server holds", picks, s.Addr(), other.Addr())
	}
}
