package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// TestRollbackSkipsRefusals: a failed attempt rolls back every master where
// its SET landed or may have, but a DirectNode that refused is left alone (it
// sends each request once, so a refusal means our SET is not there), while a
// go-redis Node is rolled back whatever it answered (its client may retry a
// SET whose first try landed).
func TestRollbackSkipsRefusals(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartT(t, 3, redistest.Options{})
	admins := clients(t, c.Addrs())
	directs := make([]Node, 3)
	gonodes := make([]Node, 3)
	for i, a := range c.Addrs() {
		directs[i] = newDirect(t, &redis.Options{Addr: a})
		gonodes[i] = NewNode(clients(t, []string{a})[0])
	}
	for _, tc := range []struct {
		name     string
		nodes    []Node
		releases int // release scripts the failed attempt runs
	}{
		// Masters 1 and 2 hold the key for someone else; master 0 is free,
		// so the attempt lands there only, and fails.
		{"DirectNode", directs, 1},
		{"go-redis Node", gonodes, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := testKey(t)
			for _, a := range admins[1:] {
				if err := a.Set(ctx, key, "someone-else", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			r := newRedlock(t, tc.nodes)
			before := scriptCalls(t, admins)
			_, err := r.TryLock(ctx, key)
			var qe *QuorumError
			if !errors.As(err, &qe) || qe.Refused != 2 {
				t.Fatalf("TryLock: %v; want 2 refused", err)
			}
			settle(r)
			if got := scriptCalls(t, admins) - before; got != tc.releases {
				t.Errorf("the rollback ran %d scripts on the masters, want %d", got, tc.releases)
			}
			if n := admins[0].Exists(ctx, key).Val(); n != 0 {
				t.Errorf("the key is still on master 0, where the attempt's SET landed")
			}
			for i, a := range admins[1:] {
				if v := a.Get(ctx, key).Val(); v != "someone-else" {
					t.Errorf("master %d: key holds %q, want the other holder's value", i+1, v)
				}
			}
		})
	}
}

// scriptCalls is the count of EVAL and EVALSHA calls that ran a script, over
// the masters.
func scriptCalls(t *testing.T, admins []*redis.Client) int {
	t.Helper()
	n := 0
	for _, a := range admins {
		stats, err := a.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(stats, "\n") {
			for _, cmd := range []string{"cmdstat_eval:", "cmdstat_evalsha:"} {
				rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd)
				if !ok {
					continue
				}
				// calls=3,usec=...,rejected_calls=0,failed_calls=1: a
				// NOSCRIPT reply (go-redis's first EVALSHA) ran nothing.
				for _, f := range strings.Split(rest, ",") {
					k, v, _ := strings.Cut(f, "=")
					sign := map[string]int{"calls": 1, "rejected_calls": -1, "failed_calls": -1}[k]
					if sign == 0 {
						continue
					}
					x, err := strconv.Atoi(v)
					if err != nil {
						t.Fatalf("%s%s", cmd, rest)
					}
					n += sign * x
				}
			}
		}
	}
	return n
}
