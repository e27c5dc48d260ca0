package redlock

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The direct_*_test.go files test DirectNode on its own terms: its options,
// its handshake, what it does when its master dies, stalls or loses its
// scripts, many goroutines sharing its one connection, and Close. The rest
// of the root package's tests also run on DirectNodes with
// REDLOCK_TEST_NODE=direct (see nodesOf); hostile_test.go and FuzzNodeReply
// feed them garbage.
//
// A DirectNode's methods called with a context that has a Done channel go
// through a reader goroutine; called with one that has none (Background,
// WithoutCancel), the caller reads its own reply when the connection is idle
// (wire.call). The tests try both ways where they differ.

// newDirect returns a DirectNode for o, closed at the end of the test.
func newDirect(t testing.TB, o *redis.Options) *DirectNode {
	t.Helper()
	d, err := NewDirectNode(o)
	if err != nil {
		t.Fatalf("NewDirectNode: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// within returns a context that ends after d, or at the end of the test.
func within(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// callers are the two ways a DirectNode's method is called: with a context
// whose Done channel a reader goroutine watches, and with one without, whose
// caller reads its reply itself.
var callers = []struct {
	name string
	ctx  func(t testing.TB) context.Context
}{
	{"reader goroutine", func(t testing.TB) context.Context { return within(t, 5*time.Second) }},
	{"caller reads", func(testing.TB) context.Context { return context.Background() }},
}

// clientIDs returns the ids of the master's connections named name.
func clientIDs(t testing.TB, admin *redis.Client, name string) []string {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		fields := strings.Fields(line)
		for _, f := range fields {
			if f == "name="+name {
				ids = append(ids, strings.TrimPrefix(fields[0], "id="))
			}
		}
	}
	return ids
}

// oneClient waits until the master has exactly one connection named name
// (a connection we closed may take a moment to go) and returns its id.
func oneClient(t testing.TB, admin *redis.Client, name string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids := clientIDs(t, admin, name)
		if len(ids) == 1 {
			return ids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("master has connections %q named %s; want one", ids, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// infoInt returns the integer field of the master's INFO section.
func infoInt(t testing.TB, admin *redis.Client, section, field string) int {
	t.Helper()
	info, err := admin.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			v = strings.TrimPrefix(v, "count=") // errorstat_NOSCRIPT:count=3
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO %s: %s is %q", section, field, v)
			}
			return n
		}
	}
	return 0 // errorstats lists an error once it happened
}

// wireGoroutines returns the stacks of the goroutines running, or started
// by, a wire's code.
func wireGoroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "redlock.(*wire).") {
			out = append(out, g)
		}
	}
	return out
}

// noWireGoroutines fails t if goroutines of a wire remain after the
// DirectNodes were closed. Close waits for them, but one may still be
// returning from its last call when Close does: a short grace, far below
// the deadlines that would end a leaked one.
func noWireGoroutines(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		left := wireGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of a closed DirectNode remain:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// bounded runs f and fails t if it has not returned within limit: a test
// of something that must not hang fails instead of stalling the run. It
// returns how long f took.
func bounded(t testing.TB, limit time.Duration, what string, f func()) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("%s has not returned after %v", what, limit)
		return 0
	}
}
