package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultproxy"
)

// TestDirectNodeClose: Close ends the node's goroutines before it returns —
// a lingering reader, readers waiting on a master that never answers, a
// dial that does not end — and fails the requests it cuts short, and every
// request after it, with an error saying the node is closed.
func TestDirectNodeClose(t *testing.T) {
	const slack = 500 * time.Millisecond
	closeNow := func(t *testing.T, d *DirectNode) {
		t.Helper()
		if took := bounded(t, 10*time.Second, "Close", func() { d.Close() }); took > slack {
			t.Errorf("Close took %v", took)
		}
		noWireGoroutines(t)
	}
	// cutShort starts the calls, lets them reach the connection (they
	// would wait a minute there), closes d and checks how they ended.
	cutShort := func(t *testing.T, d *DirectNode, started <-chan struct{}) {
		t.Helper()
		noDeadline, cancel := context.WithCancel(context.Background())
		defer cancel()
		const calls = 8
		errs := make(chan error, calls)
		for i := range calls {
			ctx := context.Background() // the caller reads, once it can
			if i%2 == 1 {
				ctx = noDeadline // the reader goroutine reads
			}
			go func() {
				_, err := d.Acquire(ctx, testKey(t), "v", time.Minute)
				errs <- err
			}()
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the node did not start dialling")
		}
		time.Sleep(100 * time.Millisecond)
		closeNow(t, d)
		for range calls {
			select {
			case err := <-errs:
				if err == nil || !strings.Contains(err.Error(), "node closed") {
					t.Errorf("a request cut short by Close: %v; want an error saying the node is closed", err)
				}
			case <-time.After(slack):
				t.Fatal("a request cut short by Close has not returned")
			}
		}
	}

	t.Run("lingering reader", func(t *testing.T) {
		d := newDirect(t, &redis.Options{Addr: masters.Addrs()[0]})
		if ok, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		if len(wireGoroutines()) == 0 {
			t.Fatal("no reader lingers after the reply: nothing for Close to end")
		}
		closeNow(t, d) // well before the linger would end
	})

	// Connections to a black hole are accepted and never answered: the
	// requests wait for their replies, and with a password the handshake's
	// reader waits for AUTH's.
	for _, password := range []string{"", "pw"} {
		t.Run(fmt.Sprintf("requests in flight, password %q", password), func(t *testing.T) {
			p, err := faultproxy.New(masters.Addrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.Blackhole()
			dialed := make(chan struct{}, 1)
			d := newDirect(t, &redis.Options{Addr: p.Addr(), Password: password, ReadTimeout: time.Minute,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					select {
					case dialed <- struct{}{}:
					default:
					}
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}})
			cutShort(t, d, dialed)
		})
	}

	// A dial that has no answer (a SYN into a black hole) ends when the
	// node is closed, not at its timeout.
	t.Run("dial in progress", func(t *testing.T) {
		dialing := make(chan struct{}, 1)
		d := newDirect(t, &redis.Options{Addr: "192.0.2.1:6379", DialTimeout: time.Minute, ReadTimeout: time.Minute,
			Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
				dialing <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}})
		cutShort(t, d, dialing)
	})

	t.Run("after Close", func(t *testing.T) {
		d := newDirect(t, &redis.Options{Addr: masters.Addrs()[0]})
		if ok, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		closeNow(t, d)
		for _, c := range callers {
			for _, op := range []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"Acquire", func(ctx context.Context) error { _, err := d.Acquire(ctx, "k", "v", time.Minute); return err }},
				{"AcquireFenced", func(ctx context.Context) error { _, err := d.AcquireFenced(ctx, "k", "v", time.Minute); return err }},
				{"RaiseFence", func(ctx context.Context) error { _, err := d.RaiseFence(ctx, "k", "v", 1); return err }},
				{"Extend", func(ctx context.Context) error { _, err := d.Extend(ctx, "k", "v", time.Minute); return err }},
				{"Release", func(ctx context.Context) error { _, err := d.Release(ctx, "k", "v"); return err }},
				{"ExtendBatch", func(ctx context.Context) error {
					_, errs := d.ExtendBatch(ctx, []ExtendRequest{{"k", "v", time.Minute}})
					return errs[0]
				}},
			} {
				var err error
				took := bounded(t, 10*time.Second, op.name, func() { err = op.call(c.ctx(t)) })
				if err == nil || !strings.Contains(err.Error(), "node closed") || took > slack {
					t.Errorf("%s: %s after Close: %v after %v; want at once an error saying the node is closed", c.name, op.name, err, took)
				}
			}
		}
		_, err := newRedlock(t, []Node{d}).TryLock(context.Background(), testKey(t))
		var ne *NodeError
		if !errors.As(err, &ne) || !strings.Contains(ne.Error(), "node closed") {
			t.Errorf("TryLock on a closed DirectNode: %v; want a NodeError saying it is closed", err)
		}
		if err := d.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		noWireGoroutines(t)
	})
}

// TestDirectNodeIdleCheck: a connection that has been idle for idleCheck
// with no goroutine reading it is checked before its next use; one the
// master closed meanwhile (CLIENT KILL here; a restart or the master's
// idle timeout alike) is dropped and the request goes on a new one, so it
// succeeds instead of failing on the dead one. Without a reader, nothing
// else would notice: the request would be written and get EOF.
func TestDirectNodeIdleCheck(t *testing.T) {
	tlsServers, conf := tlsMasters(t, 1)
	for _, tc := range []struct {
		name     string
		addr     string
		tls      *tls.Config
		ctx      func(testing.TB) context.Context
		readerOn time.Duration // how long a reader goroutine reads on after a reply
	}{
		{"caller reads", masters.Addrs()[0], nil, callers[1].ctx, 0},
		{"reader goroutine", masters.Addrs()[0], nil, callers[0].ctx, linger},
		{"TLS, caller reads", tlsServers.Addrs()[0], conf, callers[1].ctx, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits for the check
			admin := redis.NewClient(&redis.Options{Addr: tc.addr, TLSConfig: tc.tls})
			t.Cleanup(func() { admin.Close() })
			name := fmt.Sprintf("redlock-idle-%d", keySeq.Add(1))
			d := newDirect(t, &redis.Options{Addr: tc.addr, TLSConfig: tc.tls, ClientName: name})
			// On a new connection a reader goroutine reads the first reply;
			// a caller that reads its own takes over from the next.
			for range 3 {
				if ok, err := d.Acquire(tc.ctx(t), testKey(t), "v", time.Minute); !ok || err != nil {
					t.Fatalf("Acquire: %v, %v", ok, err)
				}
			}
			time.Sleep(tc.readerOn + 100*time.Millisecond) // no reader would see the kill
			id := oneClient(t, admin, name)
			if err := admin.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(idleCheck + 100*time.Millisecond)
			if ok, err := d.Acquire(tc.ctx(t), testKey(t), "v", time.Minute); !ok || err != nil {
				t.Fatalf("Acquire on a connection the master closed while it was idle: %v, %v; want a new connection and success", ok, err)
			}
			if now := oneClient(t, admin, name); now == id {
				t.Errorf("still on connection %s, which the master closed", id)
			}
		})
	}
}
