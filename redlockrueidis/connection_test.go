package redlockrueidis_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlockrueidis"
)

// TestConnectionPromise: the Node declares Traits.OneConnection (each
// batch on one connection, never sent again) under every ClientOption of
// one server or a Sentinel-managed primary, except those under which
// rueidis sends commands of a batch again, where its ConnectionHint names
// the option and what to set instead; a cluster client never promises it.
func TestConnectionPromise(t *testing.T) {
	server := func(o rueidis.ClientOption) rueidis.ClientOption {
		o.InitAddress = []string{"10.0.0.1:6379"}
		return o
	}
	for _, tc := range []struct {
		what string
		mode rueidis.ClientMode
		opt  rueidis.ClientOption
		hint string // "": the Node promises it
	}{
		{"the README's options", rueidis.ClientModeStandalone, serverOption("10.0.0.1:6379"), ""},
		{"retries, with their delays", rueidis.ClientModeStandalone, server(rueidis.ClientOption{RetryDelay: func(int, rueidis.Completed, error) time.Duration { return 0 }}), ""},
		{"DisableRetry", rueidis.ClientModeStandalone, server(rueidis.ClientOption{DisableRetry: true}), ""},
		{"pipelining options", rueidis.ClientModeStandalone, server(rueidis.ClientOption{PipelineMultiplex: 3, AlwaysPipelining: true,
			MaxFlushDelay: 20 * time.Microsecond, BlockingPipeline: 2, ConnWriteTimeout: time.Second}), ""},
		{"DisableAutoPipelining", rueidis.ClientModeStandalone, server(rueidis.ClientOption{DisableAutoPipelining: true}), ""},
		{"replicas for reads", rueidis.ClientModeStandalone, server(rueidis.ClientOption{Standalone: rueidis.StandaloneOption{ReplicaAddress: []string{"10.0.0.2:6379"}},
			SendToReplicas: func(c rueidis.Completed) bool { return c.IsReadOnly() }}), ""},
		{"ConnLifetime", rueidis.ClientModeStandalone, server(rueidis.ClientOption{ConnLifetime: time.Minute}), "ConnLifetime"},
		{"ConnLifetime with AlwaysPipelining", rueidis.ClientModeStandalone, server(rueidis.ClientOption{ConnLifetime: time.Minute, AlwaysPipelining: true}), "ConnLifetime"},
		{"ConnLifetime with DisableAutoPipelining", rueidis.ClientModeStandalone, server(rueidis.ClientOption{ConnLifetime: time.Minute, DisableAutoPipelining: true}), ""},
		{"EnableRedirect", rueidis.ClientModeStandalone, server(rueidis.ClientOption{Standalone: rueidis.StandaloneOption{EnableRedirect: true}}), "EnableRedirect"},
		{"a Sentinel-managed primary", rueidis.ClientModeSentinel, rueidis.ClientOption{InitAddress: []string{"s1:26379"}, Sentinel: rueidis.SentinelOption{MasterSet: "m"}}, ""},
		{"a Sentinel-managed primary with ConnLifetime", rueidis.ClientModeSentinel, rueidis.ClientOption{InitAddress: []string{"s1:26379"}, ConnLifetime: time.Minute,
			Sentinel: rueidis.SentinelOption{MasterSet: "m"}}, "ConnLifetime"},
		{"a cluster", rueidis.ClientModeCluster, rueidis.ClientOption{InitAddress: []string{"10.0.0.1:7000"}}, "cluster"},
	} {
		tr := redlockrueidis.NewNode(modeClient{mode: tc.mode}, tc.opt).Traits()
		if want := tc.hint == ""; tr.OneConnection != want || !strings.Contains(tr.ConnectionHint, tc.hint) || want != (tr.ConnectionHint == "") {
			t.Errorf("%s: OneConnection %v, ConnectionHint %q; want %v, with a hint that names %q when false", tc.what, tr.OneConnection, tr.ConnectionHint, want, tc.hint)
		}
	}
}

// TestConnLifetime: with ConnLifetime, rueidis sends the unanswered
// commands of a batch again on a new connection when the batch's
// connection reaches the end of its lifetime while the master runs it (it
// lets the connection finish for a second): a WAIT that blocks longer runs
// again, on a connection whose writes are not the batch's (rueidis
// v1.0.79, client.go, singleClient.DoMulti). It does so wherever it
// pipelines (AlwaysPipelining here, and any connection that served two
// calls at once); a connection its pool lends (DisableAutoPipelining) has
// no lifetime until given back, and the batch runs on it once.
func TestConnLifetime(t *testing.T) {
	for _, tc := range []struct {
		what  string
		opt   func(*rueidis.ClientOption)
		again bool
	}{
		{"AlwaysPipelining", func(o *rueidis.ClientOption) { o.AlwaysPipelining = true }, true},
		{"DisableAutoPipelining", func(o *rueidis.ClientOption) { o.DisableAutoPipelining = true }, false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			s := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
			opt := serverOption(s.Addr())
			opt.ConnLifetime = 200 * time.Millisecond
			tc.opt(&opt)
			n, admin := newNode(t, opt), newNode(t, serverOption(s.Addr()))
			if tr := n.Traits(); tr.OneConnection == tc.again {
				t.Errorf("ConnLifetime with %s: Traits().OneConnection %v; want %v", tc.what, tr.OneConnection, !tc.again)
			}
			// WAIT 1 on a master without replicas blocks for its timeout.
			cmds := []*redlock.Command{command(0, "client", "id"), command(0, "wait", int64(1), int64(1500)), command(0, "client", "id")}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			n.Exec(ctx, cmds)
			cancel()
			waits := calls(t, admin, "wait")
			t.Logf("ConnLifetime 200ms, %s: the master ran the batch's WAIT %d times; replies %v %v, %v %v, %v %v", tc.what, waits,
				cmds[0].Reply, cmds[0].Err, cmds[1].Reply, cmds[1].Err, cmds[2].Reply, cmds[2].Err)
			if tc.again {
				if waits < 2 {
					t.Errorf("the master ran the batch's WAIT %d times; want it sent again, on a new connection", waits)
				}
				return
			}
			if waits != 1 || cmds[1].Err != nil || cmds[1].Reply != int64(0) || cmds[0].Err != nil || cmds[0].Reply != cmds[2].Reply {
				t.Errorf("the master ran the batch's WAIT %d times, and the batch answered %v %v, %v %v, %v %v; want WAIT once, answering 0, between two CLIENT IDs of one connection", waits,
					cmds[0].Reply, cmds[0].Err, cmds[1].Reply, cmds[1].Err, cmds[2].Reply, cmds[2].Err)
			}
		})
	}
}

// calls is how many times the master behind n ran command (INFO
// commandstats).
func calls(t *testing.T, n redlock.Node, command string) int {
	t.Helper()
	info := &redlock.Command{Args: []any{"info", "commandstats"}}
	do(n, info)
	s, _ := info.Reply.(string)
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^cmdstat_%s:calls=(\d+),`, command)).FindStringSubmatch(s)
	if info.Err != nil || m == nil {
		t.Fatalf("INFO commandstats: %v, no count of %s in %q", info.Err, command, s)
	}
	c, _ := strconv.Atoi(m[1])
	return c
}
