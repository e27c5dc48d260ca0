package faultproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestBlackholeTimesOutHealRecovers(t *testing.T) {
	p := newProxy(t)
	old := newClient(t, p.Addr())
	timePing(t, old) // an open connection, from before the partition

	p.Blackhole()
	ctx := context.Background()
	if err := old.Ping(ctx).Err(); !isTimeout(err) {
		t.Errorf("PING on an open connection after Blackhole = %v; want a timeout", err)
	}
	if err := newClient(t, p.Addr()).Ping(ctx).Err(); !isTimeout(err) {
		t.Errorf("PING on a new connection after Blackhole = %v; want a timeout", err)
	}
	held, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial during Blackhole: %v; want it accepted", err)
	}
	defer held.Close()
	if _, err := held.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, p, held)

	p.Heal()
	if err := newClient(t, p.Addr()).Ping(ctx).Err(); err != nil {
		t.Errorf("PING on a new connection after Heal = %v", err)
	}
	// The blackholed connection lost bytes: Heal closes it.
	held.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := held.Read(make([]byte, 64)); err == nil || isTimeout(err) {
		t.Errorf("read on a blackholed connection after Heal = %d bytes, %v; want it closed", n, err)
	}
}

func TestResetFailsAtOnce(t *testing.T) {
	p := newProxy(t)
	old := newClient(t, p.Addr())
	timePing(t, old)
	open, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	pingRaw(t, open)

	p.Reset()
	for name, dial := range map[string]func() (net.Conn, error){
		"open": func() (net.Conn, error) { return open, nil },
		"new":  func() (net.Conn, error) { return net.Dial("tcp", p.Addr()) },
	} {
		begin := time.Now()
		err := pingAfterReset(dial)
		if took := time.Since(begin); err == nil || isTimeout(err) || took > 100*time.Millisecond {
			t.Errorf("PING on a %s connection after Reset: %v after %v; want an error at once", name, err, took)
		}
	}
	ctx := context.Background()
	for name, c := range map[string]*redis.Client{"open": old, "new": newClient(t, p.Addr())} {
		if err := c.Ping(ctx).Err(); err == nil || isTimeout(err) {
			t.Errorf("go-redis PING on a %s connection after Reset = %v; want a connection error", name, err)
		}
	}

	p.Heal()
	if err := newClient(t, p.Addr()).Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Heal = %v", err)
	}
}

// pingAfterReset dials, sends PING and reads the answer, returning the
// first error: the dial itself may see the reset.
func pingAfterReset(dial func() (net.Conn, error)) error {
	conn, err := dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.Write([]byte("PING\r\n")) // may fail already; the read will too
	conn.SetReadDeadline(time.Now().Add(time.Second))
	n, err := conn.Read(make([]byte, 64))
	if err == nil {
		return fmt.Errorf("read %d bytes", n)
	}
	return err
}

// pingRaw sends PING on conn and fails the test unless +PONG comes back.
func pingRaw(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetDeadline(time.Now().Add(time.Second))
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING on a raw connection: %q, %v", buf, err)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	p, err := New(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, p.Addr())
	timePing(t, c)
	p.SetLatency(time.Hour) // a request stuck in the queue
	if err := c.Ping(context.Background()).Err(); !isTimeout(err) {
		t.Errorf("PING with an hour of latency = %v; want a timeout", err)
	}
	p.Blackhole()
	held, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return within 2s")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if conn, err := net.Dial("tcp", p.Addr()); err == nil {
		conn.Close()
		t.Error("dial after Close succeeded")
	}
	held.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("read on a connection after Close = %v; want it closed", err)
	}
}

func TestNewRejectsBadTarget(t *testing.T) {
	if p, err := New("no-port"); err == nil {
		p.Close()
		t.Error("New(\"no-port\") succeeded")
	}
}
