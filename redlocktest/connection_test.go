package redlocktest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/redlocktest"
)

// brokenEnv names, in the environment of the process TestKitCatches starts,
// the Node that TestBrokenPromise runs the kit on.
const brokenEnv = "REDLOCKTEST_BROKEN_NODE"

// broken are Nodes that declare Traits.OneConnection and do not keep it,
// each with the checks of the kit it must fail (subtest paths under Run's
// test, as go test prints them) and no other.
var broken = map[string]struct {
	node  func(tb testing.TB, addr string) redlock.Node
	fails []string
}{
	// A NodeFunc whose do takes one of two connections in turn for each
	// command, as a client's pool hands them out (issue 39): its batches
	// take two connections, and a WAIT after a write runs on the other
	// one, where it counts a replica that did not acknowledge the write.
	"pooled NodeFunc": {
		node: func(tb testing.TB, addr string) redlock.Node {
			// Each connection is a client with a pool of one: it serves
			// one command at a time, and a new connection replaces one
			// that broke.
			conns := make([]*redis.Client, 2)
			for i := range conns {
				o := goredisOptions(addr)
				o.PoolSize = 1
				conns[i] = redis.NewClient(o)
				tb.Cleanup(func() { conns[i].Close() })
			}
			var next atomic.Int64
			do := func(ctx context.Context, cmd *redlock.Command) {
				cn := conns[next.Add(1)%int64(len(conns))]
				cmd.Reply, cmd.Err = cn.Do(ctx, cmd.Args...).Result()
				if errors.Is(cmd.Err, redis.Nil) {
					cmd.Reply, cmd.Err = nil, nil
				}
			}
			return redlock.NodeWithTraits(redlock.NodeFunc(addr, do), redlock.Traits{OneConnection: true})
		},
		fails: []string{"one_connection/WAIT", "one_connection/a_batch", "one_connection/concurrent_batches", "one_connection/never_sent_again"},
	},
	// The go-redis Node of a client with retries (MaxRetries 3, go-redis's
	// default): it sends a pipeline whose connection broke again, whole,
	// on a new connection.
	"go-redis with retries": {
		node: func(tb testing.TB, addr string) redlock.Node {
			o := goredisOptions(addr)
			o.MaxRetries = 3
			c := redis.NewClient(o)
			tb.Cleanup(func() { c.Close() })
			return redlock.NodeWithTraits(redlock.NewNode(c), redlock.Traits{OneConnection: true, KeepsDeadlines: true})
		},
		fails: []string{"one_connection/never_sent_again"},
	},
}

// TestKitCatches: the kit fails a Node that declares Traits.OneConnection
// and does not keep it, in the checks that show it and in no other. Each
// runs in a process of its own (this test binary, running
// TestBrokenPromise), whose failures it reads.
func TestKitCatches(t *testing.T) {
	failed := regexp.MustCompile(`--- FAIL: TestBrokenPromise/(\S+)`)
	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenPromise$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the kit passed a %s that declares OneConnection:\n%s", name, out)
			}
			var got []string
			for _, m := range failed.FindAllStringSubmatch(string(out), -1) {
				got = append(got, m[1])
			}
			// The checks that failed, without the tests that hold them.
			leaves := slices.DeleteFunc(slices.Clone(got), func(f string) bool {
				return slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, f+"/") })
			})
			slices.Sort(leaves)
			if !slices.Equal(leaves, b.fails) {
				t.Errorf("the kit failed a %s in %q; want %q:\n%s", name, leaves, b.fails, out)
			}
		})
	}
}

// TestBrokenPromise runs the kit on the broken Node TestKitCatches names
// in its environment, and is skipped without it.
func TestBrokenPromise(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("run by TestKitCatches, in a process of its own")
	}
	b, ok := broken[name]
	if !ok {
		t.Fatalf("no broken Node named %q", name)
	}
	redlocktest.Run(t, redlocktest.Adapter{Node: b.node})
}
