package chaos

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// TestMixedAdapters: clients of both kinds, go-redis and rueidis, contend
// for one lock (issue #34: "a chaos run with one client of each kind")
// while a minority of masters is killed in the middle of an acquire. The
// scenario must reach its verdict (safe and available, the trigger fired),
// and each kind must have taken the contended key, also while the masters
// were down: a run whose rueidis clients never won would show nothing about
// them.
func TestMixedAdapters(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "minority-kill-mid-acquire"
	// Three rounds of the fault, not one: in a cold test binary under -race
	// on a loaded machine, the first acquires (of either kind) can take
	// longer than the first round lasts.
	rep, err := Run(ctx, Config{Backend: BackendProcess, Adapter: AdapterMixed, Scenarios: []string{name},
		Duration: 8 * time.Second, Clients: testClients})
	var b strings.Builder
	rep.WriteTable(&b)
	t.Log("\n" + b.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	s := rep.Scenarios[0]
	if !s.Expected {
		logMissed(t, s.History)
		t.Errorf("%s: %s; not shown: %s", s.Name, s.Outcome, strings.Join(s.Failed, "; "))
	}
	if len(s.Overlaps) > 0 || s.LateAccepted > 0 || s.StaleAccepted > 0 {
		t.Errorf("%s: %d overlaps, %d late and %d stale writes accepted", s.Name, len(s.Overlaps), s.LateAccepted, s.StaleAccepted)
	}
	inFault := func(at time.Duration) bool {
		for _, f := range s.Faults {
			if f.At <= at && (f.End < 0 || at <= f.End) {
				return true
			}
		}
		return false
	}
	won := make(map[string]int)      // the contended key acquired, by adapter
	wonDown := make(map[string]int)  // of those, while masters were down
	clients := make(map[string]bool) // adapters of the clients that tried
	for _, a := range s.History.Acquires {
		clients[a.Adapter] = true
		if a.OK && a.Key == keyPrefix+"0" {
			won[a.Adapter]++
			if inFault(a.Acquired) {
				wonDown[a.Adapter]++
			}
		}
	}
	t.Logf("acquired %s by adapter: %v, while masters were down: %v; all acquisitions: %v", keyPrefix+"0", won, wonDown, s.ByAdapter)
	for _, a := range []string{AdapterGoRedis, AdapterRueidis} {
		if won[a] == 0 || wonDown[a] == 0 {
			t.Errorf("%s clients acquired %s %d times, %d of them while masters were down: want both above 0", a, keyPrefix+"0", won[a], wonDown[a])
		}
	}
	if len(clients) != 2 {
		t.Errorf("clients of adapters %v; want go-redis and rueidis only", clients)
	}
}

// TestAdapterNodes: a client's masters are reached through the Node its
// adapter names, and a mixed run alternates the adapters by client id (the
// history's Adapter says which a client was given; this says it is what
// it got).
func TestAdapterNodes(t *testing.T) {
	addrs := redistest.StartT(t, 3, redistest.Options{}).Addrs()
	const goredis, rueidis = "github.com/redlock/redlock", "github.com/redlock/redlock/redlockrueidis"
	for id, want := range []string{goredis, rueidis, goredis, rueidis} {
		var got string // the package of the Node's type
		c, err := newClient(id, adapterOf(AdapterMixed, id), addrs, func(i int, n redlock.Node) redlock.Node {
			got = reflect.TypeOf(n).Elem().PkgPath()
			return n
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		l, err := c.rl.Lock(ctx, "k")
		if err == nil {
			err = l.Unlock(ctx)
		}
		cancel()
		if cerr := c.close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Errorf("client %d (%s): %v", id, c.adapter, err)
		}
		if got != want {
			t.Errorf("client %d of a mixed run (%s): its masters' Nodes are of package %s, want %s", id, c.adapter, got, want)
		}
	}
}
