package redlockrueidis_test

import (
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/redlockrueidis"
	"github.com/redlock/redlock/redlocktest"
)

// TestConformance runs the conformance kit on the rueidis Node: one
// server (a client made as the README configures it) and a Redis Cluster,
// over RESP3 (what rueidis speaks to Redis 6 and later).
func TestConformance(t *testing.T) {
	redlocktest.Run(t, adapter(false))
}

// TestConformanceRESP2: the same over RESP2 (AlwaysRESP2), where rueidis
// reads replies, and subscribes, its other way.
func TestConformanceRESP2(t *testing.T) {
	redlocktest.Run(t, adapter(true))
}

// TestConformanceOptions runs the kit on Nodes of one server made with
// the ClientOptions that change how rueidis sends a batch (see
// connPromise): pipelined on several connections with a flush delay, on a
// connection its pool lends (BlockingPipeline, DisableAutoPipelining with
// ConnLifetime), and ConnLifetime alone, where the Node does not declare
// Traits.OneConnection and the kit skips those checks, saying why.
func TestConformanceOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(*rueidis.ClientOption)
	}{
		{"pipelined", func(o *rueidis.ClientOption) {
			o.AlwaysPipelining, o.PipelineMultiplex, o.MaxFlushDelay = true, 3, 20*time.Microsecond
		}},
		{"BlockingPipeline 2", func(o *rueidis.ClientOption) { o.BlockingPipeline = 2 }},
		{"DisableAutoPipelining with ConnLifetime", func(o *rueidis.ClientOption) {
			o.DisableAutoPipelining, o.ConnLifetime = true, 300*time.Millisecond
		}},
		{"ConnLifetime", func(o *rueidis.ClientOption) { o.ConnLifetime = 300 * time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redlocktest.Run(t, redlocktest.Adapter{Node: func(tb testing.TB, addr string) redlock.Node {
				opt := serverOption(addr)
				tc.opt(&opt)
				return newNode(tb, opt)
			}})
		})
	}
}

func adapter(resp2 bool) redlocktest.Adapter {
	return redlocktest.Adapter{
		Node: func(tb testing.TB, addr string) redlock.Node {
			opt := serverOption(addr)
			opt.AlwaysRESP2 = resp2
			return newNode(tb, opt)
		},
		ClusterNode: func(tb testing.TB, addrs []string) redlock.Node {
			// AlwaysRESP2 needs DisableCache (client-side caching needs RESP3).
			opt := rueidis.ClientOption{InitAddress: addrs, AlwaysRESP2: resp2, DisableCache: resp2,
				Dialer: net.Dialer{Timeout: time.Second}}
			return newNode(tb, opt)
		},
	}
}

// serverOption is the ClientOption of a client for the one server at addr,
// as the README gives it: ForceSingleClient (NewClient returns a client,
// with the dial's error, also when the master is down), DisableCache (the
// Node never reads through the client-side cache, and the ACL rule does
// not grant CLIENT TRACKING), a dial timeout.
func serverOption(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true,
		Dialer: net.Dialer{Timeout: time.Second}}
}

// newNode makes a client with opt and its Node, closed at the end of the
// test. A client made with ForceSingleClient is returned with the dial's
// error when its server is down: it dials again on use.
func newNode(tb testing.TB, opt rueidis.ClientOption) redlock.Node {
	tb.Helper()
	c, err := rueidis.NewClient(opt)
	if c == nil {
		tb.Fatalf("rueidis.NewClient(%v): %v", opt.InitAddress, err)
	}
	tb.Cleanup(c.Close)
	return redlockrueidis.NewNode(c, opt)
}
