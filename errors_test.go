package redlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock"
)

// deadAddr returns a loopback address where nothing listens: a dial to it
// is refused at once.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestQuorumErrorNamesEveryMaster: a failed acquire's error names each
// master with its part, also the one the decision did not wait for, on one
// line; its Masters field says the same.
func TestQuorumErrorNamesEveryMaster(t *testing.T) {
	silent := startFake(t, nil, false) // accepts, never answers
	addrs := []string{deadAddr(t), deadAddr(t), silent.Addr()}
	r := newRedlock(t, nodesOf(t, clients(t, addrs)), redlock.WithNodeTimeout(time.Second))

	_, err := r.TryLock(context.Background(), testKey(t))
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryLock = %v; want a *QuorumError that is ErrNotObtained", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines:\n%s", msg)
	}
	names := r.Nodes()
	for _, n := range names[:2] {
		if !strings.Contains(msg, n.Name()+" failed: ") {
			t.Errorf("error %q does not say master %s failed", msg, n.Name())
		}
	}
	if !strings.Contains(msg, "2 failed, 1 not awaited of 3 masters") || !strings.Contains(msg, names[2].Name()+" not awaited") {
		t.Errorf("error %q does not name master %s as not awaited", msg, names[2].Name())
	}
	if len(qe.Masters) != 3 {
		t.Fatalf("Masters = %+v; want one entry per master", qe.Masters)
	}
	for i, want := range []redlock.Outcome{redlock.Failed, redlock.Failed, redlock.Pending} {
		if m := qe.Masters[i]; m.Node != names[i].Name() || m.Outcome != want || (want == redlock.Failed) != (m.Err != nil) {
			t.Errorf("Masters[%d] = %+v; want %s %v", i, m, names[i].Name(), want)
		}
	}
}

// TestQuorumErrorSaysWhatRefusedMeans: masters that refused are named, and
// the error says what a refusal is.
func TestQuorumErrorSaysWhatRefusedMeans(t *testing.T) {
	cs := clients(t, masters().Addrs()[:3])
	r := newRedlock(t, nodesOf(t, cs))
	key := testKey(t)
	for _, c := range cs[:2] {
		if err := c.Set(context.Background(), key, foreign, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.TryLock(context.Background(), key)
	msg := err.Error()
	if !strings.Contains(msg, "2 refused (held by another owner)") {
		t.Errorf("error %q does not say what refused means", msg)
	}
	for _, n := range r.Nodes()[:2] {
		if !strings.Contains(msg, n.Name()+" refused") {
			t.Errorf("error %q does not name master %s as refusing", msg, n.Name())
		}
	}
}

// TestErrorsOnOneLine: an acquire that ctx ended, and several bad URLs, are
// each one line, and errors.Is and errors.As still reach every part.
func TestErrorsOnOneLine(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, []string{deadAddr(t), deadAddr(t), deadAddr(t)})))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := r.Lock(ctx, testKey(t))
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &qe) {
		t.Errorf("Lock = %v; want ErrNotObtained, DeadlineExceeded and a *QuorumError", err)
	}
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("Lock's error spans lines:\n%s", err)
	}

	_, err = redlock.NewFromURLs([]string{"ftp://h:1", "redis://h:1/x"})
	var ce *redlock.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "ftp://h:1") || !strings.Contains(err.Error(), "redis://h:1/x") {
		t.Errorf("NewFromURLs = %v; want a *ConfigError naming both URLs", err)
	}
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("NewFromURLs's error spans lines:\n%s", err)
	}
}
