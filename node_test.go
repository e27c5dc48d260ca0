package redlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// primaryWithReplica starts a primary with one replica, in sync, and
// returns the primary's address and the replica.
func primaryWithReplica(t *testing.T) (string, *redistest.Server) {
	t.Helper()
	// hz 100: a WAIT whose timeout passed ends within 10 ms.
	p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
	host, port, _ := net.SplitHostPort(p.Addr())
	r := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--replicaof", host, port}})
	c := clients(t, []string{p.Addr()})[0]
	ctx := context.Background()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// A write, then WAIT on the same connection (see startReplicated).
		pipe := c.Pipeline()
		pipe.Set(ctx, "sync", "1", 0)
		wait := pipe.Do(ctx, "wait", 1, 100)
		if _, err := pipe.Exec(ctx); err == nil {
			if n, _ := wait.Int64(); n == 1 {
				return p.Addr(), r
			}
		}
		if time.Now().After(end) {
			t.Fatal("the replica is not in sync after 10 s")
		}
	}
}

// pooledFunc is a NodeFunc named name whose do takes one of two dedicated
// connections to addr in turn for each command: a client's pool, as a
// NodeFunc over a client without pipelines usually has.
func pooledFunc(t *testing.T, name, addr string) redlock.Node {
	t.Helper()
	c := clients(t, []string{addr})[0]
	conns := []*redis.Conn{c.Conn(), c.Conn()}
	for _, cn := range conns {
		t.Cleanup(func() { cn.Close() })
	}
	var next atomic.Int64
	return redlock.NodeFunc(name, func(ctx context.Context, cmd *redlock.Command) {
		cn := conns[next.Add(1)%int64(len(conns))]
		cmd.Reply, cmd.Err = cn.Do(ctx, cmd.Args...).Result()
		if errors.Is(cmd.Err, redis.Nil) {
			cmd.Reply, cmd.Err = nil, nil
		}
	})
}

// oneConnFunc is a NodeFunc named name whose do runs every command on one
// dedicated connection to addr, and says so (NodeWithTraits).
func oneConnFunc(t *testing.T, name, addr string) redlock.Node {
	t.Helper()
	cn := clients(t, []string{addr})[0].Conn()
	t.Cleanup(func() { cn.Close() })
	do := func(ctx context.Context, cmd *redlock.Command) {
		cmd.Reply, cmd.Err = cn.Do(ctx, cmd.Args...).Result()
		if errors.Is(cmd.Err, redis.Nil) {
			cmd.Reply, cmd.Err = nil, nil
		}
	}
	// One connection serves one command at a time: the lane never runs
	// two Execs of one Node at once, and this test has one Redlock.
	return redlock.NodeWithTraits(redlock.NodeFunc(name, do), redlock.Traits{OneConnection: true})
}

// wantReplicaRefusal checks that err is the *ConfigError on
// WithReplicaConfirm that names the master and says why (want).
func wantReplicaRefusal(t *testing.T, what string, err error, master, want string) {
	t.Helper()
	var ce *redlock.ConfigError
	if !errors.As(err, &ce) || ce.Field != "WithReplicaConfirm" || !strings.Contains(ce.Reason, master) || !strings.Contains(ce.Reason, want) {
		t.Errorf("%s = %v; want a *ConfigError on WithReplicaConfirm naming %s and saying %q", what, err, master, want)
	}
}

// TestReplicaConfirmNeedsOneConnection: a vote's WAIT confirms the writes
// of its own connection only, so WithReplicaConfirm needs a Node that
// promises that each batch takes one connection and is never sent again
// (Traits.OneConnection). A NodeFunc that takes a pooled connection per
// command promised nothing, yet was accepted (issue 39): with the replica
// frozen, its WAIT ran on the other connection, answered at once, and the
// unconfirmed vote counted. New and the calls now refuse it, as they do a
// go-redis client that retries a failed pipeline on a new connection; a
// NodeFunc on one connection that declares so, and a go-redis client
// without retries, are accepted and confirm.
func TestReplicaConfirmNeedsOneConnection(t *testing.T) {
	addr, replica := primaryWithReplica(t)
	ctx := context.Background()

	t.Run("pooled NodeFunc", func(t *testing.T) {
		n := pooledFunc(t, "pooled", addr)
		_, err := redlock.New([]redlock.Node{n}, redlock.WithReplicaConfirm(1))
		wantReplicaRefusal(t, "New", err, "pooled", "NodeWithTraits")
		r := newRedlock(t, []redlock.Node{n})
		_, err = r.TryLock(ctx, testKey(t), redlock.WithReplicaConfirm(1))
		wantReplicaRefusal(t, "TryLock", err, "pooled", "NodeWithTraits")
	})
	t.Run("go-redis with retries", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		_, err := redlock.New([]redlock.Node{redlock.NewNode(c)}, redlock.WithReplicaConfirm(1))
		wantReplicaRefusal(t, "New", err, addr, "MaxRetries")
	})
	for _, tc := range []struct {
		name string
		node func() redlock.Node
	}{
		{"NodeFunc on one connection", func() redlock.Node { return oneConnFunc(t, "one", addr) }},
		{"go-redis without retries", func() redlock.Node { return redlock.NewNode(clients(t, []string{addr})[0]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The WAIT is bounded by the node timeout: 3 s, since a replica
			// on a loaded machine (CI's, load 10) once acked later than 1 s.
			r := newRedlock(t, []redlock.Node{tc.node()}, redlock.WithReplicaConfirm(1), redlock.WithNodeTimeout(3*time.Second))
			l, err := r.TryLock(ctx, testKey(t))
			if err != nil {
				t.Fatalf("TryLock with the replica in sync: %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
			if err := replica.Pause(); err != nil {
				t.Fatal(err)
			}
			defer replica.Resume()
			if l, err := r.TryLock(ctx, testKey(t)); !errors.Is(err, redlock.ErrNotReplicated) {
				if l != nil {
					l.Unlock(ctx)
				}
				t.Fatalf("TryLock with the replica frozen = %v; want ErrNotReplicated", err)
			}
		})
	}
}
