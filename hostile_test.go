package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// nodeOutcomes sends one request of every kind, each on a Node of its own
// from newNode (so each starts on a fresh connection), and describes each
// reply. A failed request must not also report success.
func nodeOutcomes(t *testing.T, newNode func() Node, timeout time.Duration) (acq, fenced, flags string) {
	t.Helper()
	call := func(q request) string {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		q.Key, q.Value = "k", "v"
		execRequests(ctx, newNode(), &q)
		if q.Err != nil && (q.OK || q.Fence != 0) {
			t.Errorf("%v returned success (%v, %d) together with the error %v", q.Op, q.OK, q.Fence, q.Err)
		}
		return outcome(q.OK, q.Fence, q.Op == reqAcquireFenced, q.Err)
	}
	acq = call(request{Op: reqAcquire, TTL: time.Second})
	fenced = call(request{Op: reqAcquireFenced, TTL: time.Second})
	fl := []string{
		call(request{Op: reqRaiseFence, Token: 5}),
		call(request{Op: reqExtend, TTL: time.Second}),
		call(request{Op: reqRelease}),
	}
	// The 0/1 scripts read their reply the same way; so does release,
	// except that it also takes 2 and 3 (bit 2: it woke a waiting Redlock).
	if fl[0] != fl[1] || (fl[1] != fl[2] && !(fl[1] == "bad" && (fl[2] == "true" || fl[2] == "false"))) {
		t.Errorf("raise-fence, extend, release disagree on one reply: %q", fl)
	}
	return acq, fenced, fl[0]
}

// outcomes are nodeOutcomes' three results.
type outcomes struct{ acq, fenced, flags string }

// TestHostileReplies: whatever a master answers, each request's reply is a
// clean result or an error — a wrong type or an out-of-range value is
// ErrBadReply, never a success.
func TestHostileReplies(t *testing.T) {
	bad := outcomes{"bad", "bad", "bad"}
	for _, tc := range []struct {
		name, reply string
		hangUp      bool
		want        outcomes
		says        string // in every error, when set
	}{
		{"integer 1", ":1\r\n", false, outcomes{"bad", "token 1", "true"}, ""},
		{"integer 0", ":0\r\n", false, outcomes{"bad", "token 0", "false"}, ""},
		{"integer 7", ":7\r\n", false, outcomes{"bad", "token 7", "bad"}, ""},
		{"bulk string 1", "$1\r\n1\r\n", false, bad, ""},
		{"bulk string OK", "$2\r\nOK\r\n", false, outcomes{"true", "bad", "bad"}, ""},
		{"status OK", "+OK\r\n", false, outcomes{"true", "bad", "bad"}, ""},
		{"status QUEUED", "+QUEUED\r\n", false, bad, ""},
		{"nil", "$-1\r\n", false, outcomes{"false", "bad", "bad"}, ""},
		{"nil array", "*-1\r\n", false, outcomes{"false", "bad", "bad"}, ""},
		{"error reply", "-ERR boom\r\n", false, outcomes{"error", "error", "error"}, "boom"},
		{"NOPERM", "-NOPERM this user has no permissions\r\n", false, outcomes{"error", "error", "error"}, "NOPERM"},
		// A real master answers NOSCRIPT to EVALSHA only, which we never
		// send: such a reply is an error like any other.
		{"NOSCRIPT to every command", "-NOSCRIPT No matching script\r\n", false, outcomes{"error", "error", "error"}, "NOSCRIPT"},
		{"negative token", ":-5\r\n", false, bad, ""},
		{"token above 2^53", ":1152921504606846976\r\n", false, bad, ""},
		// go-redis cannot read the integer: an error for every command.
		{"integer overflow", ":99999999999999999999999\r\n", false, outcomes{"error", "error", "error"}, ""},
		{"array", "*2\r\n:1\r\n:1\r\n", false, bad, ""},
		{"not RESP", "garbage\r\n", false, outcomes{"error", "error", "error"}, ""},
		{"truncated, hang up", "$10\r\nabc", true, outcomes{"error", "error", "error"}, ""},
		{"truncated, stay silent", "$10\r\nabc", false, outcomes{"error", "error", "error"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the silent rows wait for their deadlines
			const timeout = 200 * time.Millisecond
			f := startFake(t, []byte(tc.reply), tc.hangUp)
			start := time.Now()
			acq, fenced, flags := nodeOutcomes(t, f.node(t), timeout)
			if got := (outcomes{acq, fenced, flags}); got != tc.want {
				t.Errorf("acquire %s, fenced acquire %s, 0/1 scripts %s; want %s, %s, %s",
					acq, fenced, flags, tc.want.acq, tc.want.fenced, tc.want.flags)
			}
			if tc.says != "" {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				q := &request{Op: reqRelease, Key: "k", Value: "v"}
				execRequests(ctx, f.node(t)(), q)
				if q.Err == nil || !strings.Contains(q.Err.Error(), tc.says) {
					t.Errorf("release: err %v, want the master's error saying %q", q.Err, tc.says)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("six requests took %v; each should end by its %v deadline", took, timeout)
			}
		})
	}
}

// TestHostileMasterCountsAsFailed: masters that answer garbage count as
// failed in the quorum, by name, never as successes.
func TestHostileMasterCountsAsFailed(t *testing.T) {
	node := func(t *testing.T, addr string) Node {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
			DialTimeout: time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return NewNode(c)
	}
	ctx := context.Background()
	real0, real1 := node(t, masters.Addrs()[0]), node(t, masters.Addrs()[1])

	// One garbage master of three: the two real ones still make a quorum.
	bad := startFake(t, []byte("$1\r\n1\r\n"), false)
	r := newRedlock(t, []Node{real0, node(t, bad.Addr()), real1})
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
		r := newRedlock(t, []Node{real0, node(t, bad.Addr()), node(t, bad2.Addr())}, opts...)
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
