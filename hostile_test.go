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

// outcomes are nodeOutcomes' three results.
type outcomes struct{ acq, fenced, flags string }

// TestHostileReplies: whatever a master answers, each Node call returns a
// clean result or an error — a wrong type or an out-of-range value is
// ErrBadReply, never a success. Each reply goes to a go-redis Node and to a
// DirectNode, both through a reader goroutine and read by the caller itself
// (inlineNode). A DirectNode reads strictly: a reply that is not RESP2 (a
// RESP3 type, a bulk string not ended by CRLF, a length over its bounds) is a
// protocol error, which matches ErrBadReply.
func TestHostileReplies(t *testing.T) {
	bad := outcomes{"bad", "bad", "bad"}
	for _, tc := range []struct {
		name, reply string
		hangUp      bool
		redis       outcomes // go-redis's; zero: not tried (it would allocate what the reply declares)
		direct      outcomes // a DirectNode's, when they differ from go-redis's
		says        string   // in every error, when set
	}{
		{"integer 1", ":1\r\n", false, outcomes{"bad", "token 1", "true"}, outcomes{}, ""},
		{"integer 0", ":0\r\n", false, outcomes{"bad", "token 0", "false"}, outcomes{}, ""},
		{"integer 7", ":7\r\n", false, outcomes{"bad", "token 7", "bad"}, outcomes{}, ""},
		{"bulk string 1", "$1\r\n1\r\n", false, bad, outcomes{}, ""},
		{"bulk string OK", "$2\r\nOK\r\n", false, outcomes{"true", "bad", "bad"}, outcomes{}, ""},
		{"status OK", "+OK\r\n", false, outcomes{"true", "bad", "bad"}, outcomes{}, ""},
		{"status QUEUED", "+QUEUED\r\n", false, bad, outcomes{}, ""},
		{"nil", "$-1\r\n", false, outcomes{"false", "bad", "bad"}, outcomes{}, ""},
		{"nil array", "*-1\r\n", false, outcomes{"false", "bad", "bad"}, outcomes{}, ""},
		{"error reply", "-ERR boom\r\n", false, outcomes{"error", "error", "error"}, outcomes{}, "boom"},
		{"NOPERM", "-NOPERM this user has no permissions\r\n", false, outcomes{"error", "error", "error"}, outcomes{}, "NOPERM"},
		// A real master answers NOSCRIPT to EVALSHA only: the EVAL sent
		// again must not be sent again and again.
		{"NOSCRIPT to every command", "-NOSCRIPT No matching script\r\n", false, outcomes{"error", "error", "error"}, outcomes{}, "NOSCRIPT"},
		{"negative token", ":-5\r\n", false, bad, outcomes{}, ""},
		{"token above 2^53", ":1152921504606846976\r\n", false, bad, outcomes{}, ""},
		{"integer overflow", ":99999999999999999999999\r\n", false, outcomes{"bad", "error", "error"}, bad, ""},
		{"array", "*2\r\n:1\r\n:1\r\n", false, outcomes{"error", "bad", "bad"}, bad, ""},
		{"not RESP", "garbage\r\n", false, outcomes{"error", "error", "error"}, bad, ""},
		{"truncated, hang up", "$10\r\nabc", true, outcomes{"error", "error", "error"}, outcomes{}, ""},
		{"truncated, stay silent", "$10\r\nabc", false, outcomes{"error", "error", "error"}, outcomes{}, ""},
		// DirectNode only: go-redis would take the first as OK (it does not
		// check the CRLF after a payload) and allocate what the others
		// declare, or read RESP3 in a RESP2 conversation.
		{"bulk OK without CRLF", "$2\r\nOKxx", true, outcomes{}, bad, ""},
		{"RESP3 null", "_\r\n", false, outcomes{}, bad, ""},
		{"RESP3 map", "%1\r\n:1\r\n:1\r\n", false, outcomes{}, bad, ""},
		{"huge bulk string", "$99999999\r\n", false, outcomes{}, bad, ""},
		{"huge array", "*99999999\r\n", false, outcomes{}, bad, ""},
		{"bulk string over 64 KiB", "$65537\r\n", false, outcomes{}, bad, ""},
		{"array over 64", "*65\r\n", false, outcomes{}, bad, ""},
		{"arrays 5 deep", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", false, outcomes{}, bad, ""},
		{"line over 4 KiB", "+" + strings.Repeat("A", 5000) + "\r\n", false, outcomes{}, bad, ""},
		{"line without CR", "+OK\n", false, outcomes{}, bad, ""},
		{"negative bulk length", "$-7\r\n", false, outcomes{}, bad, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the silent rows wait for their deadlines
			const timeout = 200 * time.Millisecond
			f := startFake(t, []byte(tc.reply), tc.hangUp)
			direct := tc.direct
			if direct == (outcomes{}) {
				direct = tc.redis
			}
			for _, n := range []struct {
				name string
				want outcomes
				node func() Node
			}{
				{"go-redis", tc.redis, f.node(t)},
				{"DirectNode", direct, f.direct(t, false, timeout)},
				{"DirectNode read by the caller", direct, f.direct(t, true, timeout)},
			} {
				if n.want == (outcomes{}) {
					continue
				}
				start := time.Now()
				acq, fenced, flags := nodeOutcomes(t, n.node, timeout)
				if got := (outcomes{acq, fenced, flags}); got != n.want {
					t.Errorf("%s: Acquire %s, AcquireFenced %s, 0/1 scripts %s; want %s, %s, %s",
						n.name, acq, fenced, flags, n.want.acq, n.want.fenced, n.want.flags)
				}
				if tc.says != "" {
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel()
					if _, err := n.node().Release(ctx, "k", "v"); err == nil || !strings.Contains(err.Error(), tc.says) {
						t.Errorf("%s: Release: err %v, want the master's error saying %q", n.name, err, tc.says)
					}
				}
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("%s: six calls took %v; each should end by its %v deadline", n.name, took, timeout)
				}
			}
		})
	}
}

// TestHostileMasterCountsAsFailed: masters that answer garbage count as
// failed in the quorum, by name, never as successes; through go-redis and
// through DirectNodes alike.
func TestHostileMasterCountsAsFailed(t *testing.T) {
	for _, kind := range []struct {
		name string
		node func(t *testing.T, addr string) Node
	}{
		{"go-redis", func(t *testing.T, addr string) Node {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
				DialTimeout: time.Second, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return NewNode(c)
		}},
		{"DirectNode", func(t *testing.T, addr string) Node {
			return newDirect(t, &redis.Options{Addr: addr, DialTimeout: time.Second})
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			real0, real1 := kind.node(t, masters.Addrs()[0]), kind.node(t, masters.Addrs()[1])

			// One garbage master of three: the two real ones still make a quorum.
			bad := startFake(t, []byte("$1\r\n1\r\n"), false)
			r := newRedlock(t, []Node{real0, kind.node(t, bad.Addr()), real1})
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
				r := newRedlock(t, []Node{real0, kind.node(t, bad.Addr()), kind.node(t, bad2.Addr())}, opts...)
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
		})
	}
}
