package redlockrueidis_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// TestSentinel: a master that is a primary with a replica under Sentinel,
// through a rueidis Sentinel client, is one server to the library: its
// Node is named by the master set and its Sentinels, a vote is confirmed
// by the replica (the WAIT follows the vote on its connection), and a call
// waiting in another Redlock is handed the key.
func TestSentinel(t *testing.T) {
	p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100"}})
	host, port, _ := net.SplitHostPort(p.Addr())
	redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
	s := redistest.StartServerT(t, redistest.Options{Sentinel: map[string]string{"m1": p.Addr()}})
	opt := rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true,
		Dialer: net.Dialer{Timeout: time.Second}, Sentinel: rueidis.SentinelOption{MasterSet: "m1"}}
	n := newNode(t, opt)
	if want := "sentinel:m1@" + s.Addr() + "/0"; n.Name() != want {
		t.Errorf("Name %q; want %q", n.Name(), want)
	}
	if n.Traits().Routing != redlock.RouteServer {
		t.Errorf("Routing %v; want RouteServer", n.Traits().Routing)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		wait := command(0, "wait", int64(1), int64(100))
		do(n, wait)
		if wait.Err == nil && wait.Reply == int64(1) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the replica did not catch up: WAIT 1 = %#v, %v", wait.Reply, wait.Err)
		}
	}
	holder := newRedlock(t, []redlock.Node{n}, redlock.WithReplicaConfirm(1))
	waiter := newRedlock(t, []redlock.Node{newNode(t, opt)}, redlock.WithReplicaConfirm(1))
	w, took := handOff(t, holder, waiter, "sentinel")
	t.Logf("handed to the waiting call %v after the Unlock", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("the waiting call had the key %v after the Unlock; want a hand-off, far below its 5 s backoff", took)
	}
	if err := w.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}
