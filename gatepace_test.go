package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// TestRefusedWaitersKeepBackoffPace: while a quorum of masters refuses
// every vote for a reason of their own — their restart gates are closed,
// or their replicas do not confirm — each attempt's SET still lands, and
// its rollback frees the key and wakes the next waiting call. Such a
// wake-up says nothing about whether the votes will count: 2 and 8 waiting
// calls (each in a Redlock of its own) make at most one attempt per
// backoff interval each, counted on the masters (INFO commandstats).
func TestRefusedWaitersKeepBackoffPace(t *testing.T) {
	const window = 3 * time.Second
	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Second
	for _, why := range []string{"gate", "replicas"} {
		for _, k := range []int{2, 8} {
			t.Run(fmt.Sprintf("%s/waiters=%d", why, k), func(t *testing.T) {
				var cs []*redis.Client
				var opts []Option
				switch why {
				case "gate":
					c := redistest.StartT(t, 3, redistest.Options{})
					cs = gateClients(t, c)
					// Fresh masters: every gate is closed for a minute.
					opts = []Option{WithTTL(time.Second), WithRestartGate(time.Minute)}
				case "replicas":
					cs = frozenReplicas(t, 3)
					opts = []Option{WithTTL(time.Second), WithReplicaConfirm(1), WithNodeTimeout(200 * time.Millisecond)}
				}
				opts = append(opts, WithBackoff(minBackoff, maxBackoff))
				ctx := context.Background()
				key := testKey(t)
				before, err := redistest.Calls(ctx, cs, "set")
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, window)
				defer cancel()
				done := make(chan error, k)
				for range k {
					nodes := make([]Node, len(cs))
					for i, c := range cs {
						own := redis.NewClient(c.Options())
						t.Cleanup(func() { own.Close() })
						nodes[i] = NewNode(own)
					}
					w := newRedlock(t, nodes, opts...)
					go func() {
						l, err := w.Lock(wctx, key)
						if err == nil {
							_ = l.Unlock(ctx)
							err = errors.New("got the lock")
						}
						done <- err
					}()
				}
				for range k {
					if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("a waiting call ended with %v; want the deadline", err)
					}
				}
				after, err := redistest.Calls(ctx, cs, "set")
				if err != nil {
					t.Fatal(err)
				}
				// An attempt is one SET per master: at once, then one per
				// backoff interval (at least minBackoff), and one more that
				// may be on the wire at the deadline.
				attempts, most := (after-before)/int64(len(cs)), int64(k)*int64(window/minBackoff+2)
				t.Logf("%d waiting calls made %d attempts in %v", k, attempts, window)
				if attempts > most {
					t.Errorf("%d waiting calls made %d attempts in %v; want at most %d (one per backoff interval each)", k, attempts, window, most)
				}
			})
		}
	}
}

// frozenReplicas starts n masters, each a primary with one replica that is
// in sync and then frozen (SIGSTOP): WAIT on them confirms nothing. It
// returns the primaries' clients.
func frozenReplicas(t *testing.T, n int) []*redis.Client {
	t.Helper()
	ctx := context.Background()
	cs := make([]*redis.Client, n)
	for i := range cs {
		// hz 100: the master ends a WAIT whose timeout passed within 10 ms;
		// no delay before the replica's first sync (5 s by default).
		p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--repl-diskless-sync-delay", "0"}})
		host, port, _ := net.SplitHostPort(p.Addr())
		r := redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
		cs[i] = redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { cs[i].Close() })
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if n, err := cs[i].Do(ctx, "wait", 1, 100).Int64(); err == nil && n == 1 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the replica of master %d is not in sync after 10 s", i)
			}
		}
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Resume() })
	}
	return cs
}
