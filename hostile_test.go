package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// outcome is what one Node call returned, in words: "true", "false", "token
// N", "bad" (an error wrapping ErrBadReply) or "error" (any other error).
func outcome(ok bool, token uint64, isFence bool, err error) string {
	switch {
	case errors.Is(err, ErrBadReply):
		return "bad"
	case err != nil:
		return "error"
	case isFence:
		return fmt.Sprint("token ", token)
	}
	return fmt.Sprint(ok)
}

// nodeOutcomes calls every Node method once, each on a Node of its own from
// newNode (so each starts on a fresh connection), and describes each result.
// A failed call must not also report success.
func nodeOutcomes(t *testing.T, newNode func() Node, timeout time.Duration) (acq, fenced, flags string) {
	t.Helper()
	call := func(op func(ctx context.Context, n Node) (bool, uint64, error), isFence bool) string {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		ok, token, err := op(ctx, newNode())
		if err != nil && (ok || token != 0) {
			t.Errorf("a call returned success (%v, %d) together with the error %v", ok, token, err)
		}
		return outcome(ok, token, isFence, err)
	}
	acq = call(func(ctx context.Context, n Node) (bool, uint64, error) {
		ok, err := n.Acquire(ctx, "k", "v", time.Second)
		return ok, 0, err
	}, false)
	fenced = call(func(ctx context.Context, n Node) (bool, uint64, error) {
		token, err := n.AcquireFenced(ctx, "k", "v", time.Second)
		return false, token, err
	}, true)
	var fl []string
	for _, op := range []func(ctx context.Context, n Node) (bool, error){
		func(ctx context.Context, n Node) (bool, error) { return n.RaiseFence(ctx, "k", "v", 5) },
		func(ctx context.Context, n Node) (bool, error) { return n.Extend(ctx, "k", "v", time.Second) },
		func(ctx context.Context, n Node) (bool, error) { return n.Release(ctx, "k", "v") },
	} {
		fl = append(fl, call(func(ctx context.Context, n Node) (bool, uint64, error) {
			ok, err := op(ctx, n)
			return ok, 0, err
		}, false))
	}
	// The three 0/1 scripts read their reply the same way.
	if fl[0] != fl[1] || fl[1] != fl[2] {
		t.Errorf("RaiseFence, Extend, Release disagree on one reply: %q", fl)
	}
	return acq, fenced, fl[0]
}

// TestHostileReplies: whatever a master answers, each Node call returns a
// clean result or an error — a wrong type or an out-of-range value is
// ErrBadReply, never a success.
func TestHostileReplies(t *testing.T) {
	for _, tc := range []struct {
		name, reply        string
		hangUp             bool
		acq, fenced, flags string
		says               string // in every error, when set
	}{
		{"integer 1", ":1\r\n", false, "bad", "token 1", "true", ""},
		{"integer 0", ":0\r\n", false, "bad", "token 0", "false", ""},
		{"integer 7", ":7\r\n", false, "bad", "token 7", "bad", ""},
		{"bulk string 1", "$1\r\n1\r\n", false, "bad", "bad", "bad", ""},
		{"status OK", "+OK\r\n", false, "true", "bad", "bad", ""},
		{"status QUEUED", "+QUEUED\r\n", false, "bad", "bad", "bad", ""},
		{"nil", "$-1\r\n", false, "false", "bad", "bad", ""},
		{"error reply", "-ERR boom\r\n", false, "error", "error", "error", "boom"},
		{"NOPERM", "-NOPERM this user has no permissions\r\n", false, "error", "error", "error", "NOPERM"},
		{"negative token", ":-5\r\n", false, "bad", "bad", "bad", ""},
		{"token above 2^53", ":1152921504606846976\r\n", false, "bad", "bad", "bad", ""},
		{"integer overflow", ":99999999999999999999999\r\n", false, "bad", "error", "error", ""},
		{"array", "*2\r\n:1\r\n:1\r\n", false, "error", "bad", "bad", ""},
		{"not RESP", "garbage\r\n", false, "error", "error", "error", ""},
		{"truncated, hang up", "$10\r\nabc", true, "error", "error", "error", ""},
		{"truncated, stay silent", "$10\r\nabc", false, "error", "error", "error", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, []byte(tc.reply), tc.hangUp)
			start := time.Now()
			acq, fenced, flags := nodeOutcomes(t, f.node(t), 200*time.Millisecond)
			if acq != tc.acq || fenced != tc.fenced || flags != tc.flags {
				t.Errorf("Acquire %s, AcquireFenced %s, 0/1 scripts %s; want %s, %s, %s",
					acq, fenced, flags, tc.acq, tc.fenced, tc.flags)
			}
			if tc.says != "" {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				if _, err := NewNode(f.client(t)).Release(ctx, "k", "v"); err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("Release: err %v, want the master's error saying %q", err, tc.says)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("five calls took %v; each should end by its 200ms deadline", took)
			}
		})
	}
}

// TestHostileMasterCountsAsFailed: masters that answer garbage count as
// failed in the quorum, by name, never as successes.
func TestHostileMasterCountsAsFailed(t *testing.T) {
	cs := clients(t, masters.Addrs()[:1])
	ctx := context.Background()

	// One garbage master of three: the two real ones still make a quorum.
	bad := startFake(t, []byte("$1\r\n1\r\n"), false)
	r := newRedlock(t, []Node{NewNode(cs[0]), NewNode(bad.client(t)), NewNode(clients(t, masters.Addrs()[1:2])[0])})
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with one garbage master: %v", err)
	}

	// Two garbage masters of three: no quorum, and the counts say why.
	for _, opts := range [][]Option{nil, {WithFencing()}} {
		bad2 := startFake(t, []byte(":1152921504606846976\r\n"), false)
		r := newRedlock(t, []Node{NewNode(cs[0]), NewNode(bad.client(t)), NewNode(bad2.client(t))}, opts...)
		_, err := r.TryLock(ctx, testKey(t))
		var qe *QuorumError
		if !errors.As(err, &qe) || !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrBadReply) {
			t.Fatalf("err %v: want a QuorumError wrapping ErrNotObtained and ErrBadReply", err)
		}
		// The real master's success may still be in flight at the decision.
		if qe.Succeeded > 1 || qe.Failed != 2 || qe.Refused != 0 {
			t.Errorf("counts %d succeeded, %d refused, %d failed; want at most 1, 0, 2", qe.Succeeded, qe.Refused, qe.Failed)
		}
		for _, addr := range []string{bad.Addr(), bad2.Addr()} {
			if !strings.Contains(err.Error(), addr) {
				t.Errorf("error %q does not name the garbage master %s", err, addr)
			}
		}
	}
}
