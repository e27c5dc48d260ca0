package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

// TestDirectNodeRestart: a DirectNode needs no master to start, and takes a
// master up again after it died and came back, with or without its data.
//
// The contract, as found here: a connection whose master died is given up
// as soon as a goroutine reading it sees the end of the stream (a reader
// goroutine lingers for a second after the last reply, see linger), or,
// once it has been idle for idleCheck with no reader, by the check before
// its next use (TestDirectNodeIdleCheck). So a master that dies and comes
// back costs nothing, except when it died within idleCheck of a reply that
// no reader followed (one master, or a context without Done channel: the
// caller read it) or of the end of a reader's linger: then the next request
// is written to the dead connection and fails (EOF, reset), one failed
// phase, and the one after it dials again. Lock, which retries, succeeds.
func TestDirectNodeRestart(t *testing.T) {
	for _, aof := range []bool{false, true} {
		t.Run(fmt.Sprintf("appendonly=%v", aof), func(t *testing.T) {
			t.Parallel()
			c := redistest.StartT(t, 3, redistest.Options{AppendOnly: aof})
			s := c.Servers[0]
			cs := clients(t, c.Addrs())
			ctx := context.Background()
			restart := func() {
				t.Helper()
				if err := s.Kill(); err != nil {
					t.Fatal(err)
				}
				if err := s.Restart(true); err != nil {
					t.Fatal(err)
				}
			}

			// Down at the start: the node is made, the request fails
			// naming the master, the next one after it is back dials again.
			if err := s.Kill(); err != nil {
				t.Fatal(err)
			}
			nodes := make([]Node, 3)
			for i, a := range c.Addrs() {
				nodes[i] = newDirect(t, &redis.Options{Addr: a, DialTimeout: time.Second})
			}
			_, err := nodes[0].Acquire(within(t, time.Second), testKey(t), "v", time.Minute)
			if err == nil || !strings.Contains(err.Error(), "dial "+s.Addr()) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("Acquire from a master that is down: %v; want the dial's refusal, naming the master", err)
			}
			if err := s.Restart(true); err != nil {
				t.Fatal(err)
			}
			if ok, err := nodes[0].Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
				t.Fatalf("Acquire once the master is up: %v, %v", ok, err)
			}

			// Three masters: each connection's reader lingers after the
			// replies, and sees the killed master's connection end.
			r := newRedlock(t, nodes, WithNodeTimeout(time.Second))
			replied := time.Now() // before the replies: the lingers end later than a second after it
			kept, err := r.TryLock(ctx, testKey(t))
			if err != nil {
				t.Fatal(err)
			}
			settle(r)
			if err := s.Kill(); err != nil {
				t.Fatal(err)
			}
			killedIn := time.Since(replied)
			if err := s.Restart(true); err != nil {
				t.Fatal(err)
			}
			l, err := r.TryLock(ctx, testKey(t))
			if err != nil {
				t.Fatalf("TryLock after the restart: %v", err)
			}
			settle(r)
			if vs := holders(t, cs, l.Key()); killedIn < linger && count(vs, l.Value()) != 3 {
				t.Errorf("masters hold %q; want the lock's value on all three, the restarted one included", vs)
			}
			want := ""
			if aof {
				want = kept.Value() // the append-only file kept the lock
			}
			if v := holders(t, cs[:1], kept.Key())[0]; v != want {
				t.Errorf("restarted master holds %q for the lock taken before, want %q", v, want)
			}
			for _, l := range []*Lock{kept, l} {
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}

			// One master: the caller reads its own reply, and nobody reads
			// the connection between requests. Three locks get there: the
			// first dials (its reader lingers), the second's reply ends that
			// reader, the third is read by its caller.
			r1 := newRedlock(t, []Node{newDirect(t, &redis.Options{Addr: s.Addr(), DialTimeout: time.Second})}, WithNodeTimeout(time.Second))
			for range 3 {
				if _, err := r1.TryLock(ctx, testKey(t)); err != nil {
					t.Fatal(err)
				}
			}
			// The connection is idle from the reply on: from between these two.
			before := time.Now()
			if _, err := r1.TryLock(ctx, testKey(t)); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			restart()
			atLeast := time.Since(after)
			_, err = r1.TryLock(ctx, testKey(t))
			switch atMost := time.Since(before); {
			case atMost < idleCheck: // always, unless the restart took a second
				var ne *NodeError
				if !errors.As(err, &ne) || !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "broken pipe") {
					t.Errorf("TryLock %v after the last reply, the master restarted since: %v; want the one failure of a request written to the dead connection", atMost, err)
				}
			case atLeast >= idleCheck:
				if err != nil {
					t.Errorf("TryLock %v after the last reply, the master restarted since: %v; want the check before use to replace the connection", atLeast, err)
				}
			}
			if _, err := r1.TryLock(ctx, testKey(t)); err != nil {
				t.Errorf("the TryLock after that: %v", err)
			}
			restart()
			if _, err := r1.Lock(within(t, 10*time.Second), testKey(t)); err != nil {
				t.Errorf("Lock after the master's restart: %v", err)
			}
		})
	}
}

// TestDirectNodePause: a master that stops answering (SIGSTOP) fails each
// request by its deadline (the context's, or ReadTimeout's for a context
// without one), not later. The connection is given up; once the master
// answers again the next request goes on a new one.
func TestDirectNodePause(t *testing.T) {
	s := redistest.StartT(t, 1, redistest.Options{}).Servers[0]
	admin := clients(t, []string{s.Addr()})[0]
	const readTimeout, slack = 300 * time.Millisecond, 300 * time.Millisecond
	name := fmt.Sprintf("redlock-pause-%d", keySeq.Add(1))
	d := newDirect(t, &redis.Options{Addr: s.Addr(), ClientName: name, ReadTimeout: readTimeout})
	if ok, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	first := oneClient(t, admin, name)

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Resume() })
	noDeadline, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name  string
		ctx   func() context.Context
		bound time.Duration
	}{
		{"context deadline", func() context.Context { return within(t, 200*time.Millisecond) }, 200 * time.Millisecond},
		{"no Done channel", context.Background, readTimeout},
		{"Done channel, no deadline", func() context.Context { return noDeadline }, readTimeout},
	} {
		for _, op := range []struct {
			name string
			call func(ctx context.Context) error
		}{
			{"Acquire", func(ctx context.Context) error {
				_, err := d.Acquire(ctx, testKey(t), "v", time.Minute)
				return err
			}},
			{"ExtendBatch", func(ctx context.Context) error {
				_, errs := d.ExtendBatch(ctx, []ExtendRequest{{testKey(t), "v", time.Minute}, {testKey(t), "v", time.Minute}})
				return errors.Join(errs...)
			}},
		} {
			var err error
			took := bounded(t, 10*time.Second, op.name, func() { err = op.call(tc.ctx()) })
			if err == nil || took > tc.bound+slack {
				t.Errorf("%s, %s, paused master: %v after %v; want an error by %v", op.name, tc.name, err, took, tc.bound)
			}
		}
	}

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, c := range callers {
		if ok, err := d.Acquire(c.ctx(t), testKey(t), "v", time.Minute); !ok || err != nil {
			t.Fatalf("%s: Acquire after Resume: %v, %v", c.name, ok, err)
		}
	}
	if id := oneClient(t, admin, name); id == first {
		t.Errorf("the connection %s that timed out is still used", id)
	}
}

// TestDirectNodeInlineCancel: with a single master, the caller of Lock
// reads its own reply; when its context ends while the master is stuck, it
// returns at once (not at the node timeout), and the reply that comes later
// is read by a reader goroutine, so the connection stays in use.
func TestDirectNodeInlineCancel(t *testing.T) {
	s := redistest.StartT(t, 1, redistest.Options{}).Servers[0]
	admin := clients(t, []string{s.Addr()})[0]
	name := fmt.Sprintf("redlock-inline-cancel-%d", keySeq.Add(1))
	d := newDirect(t, &redis.Options{Addr: s.Addr(), ClientName: name})
	const nodeTimeout, slack = 3 * time.Second, 500 * time.Millisecond
	r := newRedlock(t, []Node{d}, WithNodeTimeout(nodeTimeout), WithTTL(time.Minute))
	key := testKey(t)
	warm, err := r.TryLock(within(t, 5*time.Second), key) // the connection is up
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	first := oneClient(t, admin, name)

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Resume() })
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
	}{
		{"cancelled while reading", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx
		}},
		{"cancelled before the call", func() context.Context { return cancelled }},
	} {
		var err error
		took := bounded(t, 10*time.Second, tc.name, func() { _, err = r.TryLock(tc.ctx(), key) })
		if !errors.Is(err, context.Canceled) || took > 100*time.Millisecond+slack {
			t.Errorf("TryLock, %s, paused master: %v after %v; want context.Canceled well before the node timeout (%v)", tc.name, err, took, nodeTimeout)
		}
	}

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	// The cancelled attempts' SETs landed once the master resumed; their
	// rollbacks follow them, so Lock gets the key.
	l, err := r.Lock(within(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("Lock after Resume: %v", err)
	}
	if err := l.Unlock(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if id := oneClient(t, admin, name); id != first {
		t.Errorf("connection %s replaced by %s: a cancelled caller broke it", first, id)
	}
}

// TestDirectNodeBlackhole: a master behind a partition that drops every
// byte (connections are accepted, nothing is answered) costs a Redlock of
// three nothing but that master: locks and unlocks succeed without waiting
// for it, Close of the Redlock waits for its requests no longer than the
// node timeout, and Close of the DirectNodes does not wait at all.
func TestDirectNodeBlackhole(t *testing.T) {
	const nodeTimeout, slack = 300 * time.Millisecond, 300 * time.Millisecond
	p, err := faultproxy.New(masters.Addrs()[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	nodes := make([]Node, 3)
	for i, a := range []string{masters.Addrs()[0], masters.Addrs()[1], p.Addr()} {
		nodes[i] = newDirect(t, &redis.Options{Addr: a, ReadTimeout: time.Minute})
	}
	r, err := New(nodes, WithNodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	lockUnlock := func(what string) {
		t.Helper()
		start := time.Now()
		l, err := r.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatalf("%s: TryLock: %v", what, err)
		}
		if took := time.Since(start); took > nodeTimeout {
			t.Errorf("%s: TryLock took %v, over the node timeout %v", what, took, nodeTimeout)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", what, err)
		}
	}
	lockUnlock("before the partition")
	p.Blackhole()
	for i := range 3 { // on the connection made before, then on new ones
		lockUnlock(fmt.Sprintf("partitioned, round %d", i))
	}
	// Requests in flight to the black hole now: TryLock and Unlock return
	// at the quorum, without waiting for them.
	for range 5 {
		l, err := r.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// An Unlock while its acquire is still in flight gives its release a
	// node timeout of its own after the acquire's deadline (Lock.fanout):
	// the requests in flight end by twice the node timeout.
	if took := bounded(t, 10*time.Second, "Redlock.Close", func() { r.Close() }); took > 2*nodeTimeout+slack {
		t.Errorf("Redlock.Close took %v; its requests end by twice the node timeout %v", took, nodeTimeout)
	}
	for i, n := range nodes {
		if took := bounded(t, 10*time.Second, "DirectNode.Close", func() { n.(*DirectNode).Close() }); took > slack {
			t.Errorf("Close of DirectNode %d took %v", i, took)
		}
	}
	noWireGoroutines(t)
}

// TestDirectNodeScriptFlush: a master that lost its scripts (SCRIPT FLUSH;
// a restart does the same) answers NOSCRIPT to EVALSHA, and the DirectNode
// sends the request again as EVAL on the same connection, for every script,
// from a reader goroutine, from a caller reading its own reply, and in a
// batch of renewals.
func TestDirectNodeScriptFlush(t *testing.T) {
	s := redistest.StartT(t, 1, redistest.Options{}).Servers[0]
	admin := clients(t, []string{s.Addr()})[0]
	ctx := context.Background()
	flush := func() {
		t.Helper()
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range callers {
		t.Run(c.name, func(t *testing.T) {
			d := newDirect(t, &redis.Options{Addr: s.Addr()})
			key, fenced := testKey(t), testKey(t)
			var last uint64
			scripts := func(round string) {
				t.Helper()
				if ok, err := d.Acquire(c.ctx(t), key, "v", time.Minute); !ok || err != nil {
					t.Fatalf("%s: Acquire: %v, %v", round, ok, err)
				}
				token, err := d.AcquireFenced(c.ctx(t), fenced, "v", time.Minute)
				if err != nil || token <= last {
					t.Fatalf("%s: AcquireFenced: %d, %v; want a token above %d", round, token, err, last)
				}
				last = token
				for _, op := range []struct {
					name string
					call func() (bool, error)
				}{
					{"RaiseFence", func() (bool, error) { return d.RaiseFence(c.ctx(t), fenced, "v", token+1) }},
					{"Extend", func() (bool, error) { return d.Extend(c.ctx(t), key, "v", time.Minute) }},
					{"Release", func() (bool, error) { return d.Release(c.ctx(t), key, "v") }},
					{"Release fenced", func() (bool, error) { return d.Release(c.ctx(t), fenced, "v") }},
				} {
					if ok, err := op.call(); !ok || err != nil {
						t.Errorf("%s: %s: %v, %v", round, op.name, ok, err)
					}
				}
				last++
			}
			scripts("first use") // EVAL: the master learns each script
			conns := infoInt(t, admin, "stats", "total_connections_received")
			noscript := infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT")
			flush()
			scripts("after SCRIPT FLUSH") // EVALSHA, NOSCRIPT, EVAL
			if n := infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT") - noscript; n != 4 {
				t.Errorf("master answered NOSCRIPT %d times to the four scripts' EVALSHA, want 4", n)
			}
			scripts("again") // EVALSHA

			keys := []string{testKey(t), testKey(t), testKey(t)}
			reqs := make([]ExtendRequest, len(keys))
			for i, k := range keys {
				if ok, err := d.Acquire(c.ctx(t), k, "v", time.Minute); !ok || err != nil {
					t.Fatalf("Acquire: %v, %v", ok, err)
				}
				reqs[i] = ExtendRequest{Key: k, Value: "v", TTL: time.Minute}
			}
			flush()
			noscript = infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT")
			oks, errs := d.ExtendBatch(c.ctx(t), reqs)
			if !oks[0] || !oks[1] || !oks[2] || errors.Join(errs...) != nil {
				t.Errorf("ExtendBatch after SCRIPT FLUSH: %v, %v", oks, errors.Join(errs...))
			}
			// The first renewal's EVAL may go out before the others'
			// EVALSHA, which the master then knows.
			if n := infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT") - noscript; n < 1 || n > 3 {
				t.Errorf("master answered NOSCRIPT %d times to the batch of three, want 1 to 3", n)
			}
			if n := infoInt(t, admin, "stats", "total_connections_received") - conns; n != 0 {
				t.Errorf("%d connections made after the first; NOSCRIPT must be handled on the same one", n)
			}
		})
	}
}
