package redlockrueidis_test

import (
	"context"
	"fmt"
	"net"
	"regexp"
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
	w, took := handOff(t, holder, waiter, "sentinel", nil)
	t.Logf("handed to the waiting call %v after the Unlock", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("the waiting call had the key %v after the Unlock; want a hand-off, far below its 5 s backoff", took)
	}
	if err := w.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSentinelFailoverMidBatch: a Sentinel failover while a batch runs on
// the primary sends none of it again on the new primary's connection. The
// batch INCR, WAIT 2 (one replica: it blocks), INCR is in flight when
// SENTINEL FAILOVER demotes the primary; the first INCR ran there and
// reached the replica, the rest fails, and the new primary's counter is 1
// (a batch sent again, whole or in part, on the connection rueidis makes
// to the new primary would raise it). Both ways rueidis runs a batch: on
// a connection that serves one call at a time, and pipelined.
func TestSentinelFailoverMidBatch(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("AlwaysPipelining %v", pipelined), func(t *testing.T) {
			failoverMidBatch(t, pipelined)
		})
	}
}

func failoverMidBatch(t *testing.T, pipelined bool) {
	p := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--repl-diskless-sync-delay", "0"}})
	host, port, _ := net.SplitHostPort(p.Addr())
	r := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--replicaof", host, port}})
	s := redistest.StartServerT(t, redistest.Options{Sentinel: map[string]string{"m1": p.Addr()}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := redistest.WaitReplicaKnown(ctx, s.Addr(), "m1"); err != nil {
		t.Fatal(err)
	}
	opt := rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, AlwaysPipelining: pipelined,
		Dialer: net.Dialer{Timeout: time.Second}, Sentinel: rueidis.SentinelOption{MasterSet: "m1"}}
	n := newNode(t, opt)
	if !n.Traits().OneConnection {
		t.Fatalf("a Sentinel client's Node does not declare OneConnection: %s", n.Traits().ConnectionHint)
	}
	onPrimary, onReplica := newNode(t, serverOption(p.Addr())), newNode(t, serverOption(r.Addr()))
	const key = "failover-mid-batch"
	cmds := []*redlock.Command{command(1, "incr", key), command(0, "wait", int64(2), int64(5000)), command(1, "incr", key)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Exec(ctx, cmds)
	}()
	blocked := regexp.MustCompile(`(?m) flags=\S*b\S* .* cmd=wait\b`)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		list := command(0, "client", "list")
		do(onPrimary, list)
		if l, _ := list.Reply.(string); blocked.MatchString(l) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the batch's WAIT is not blocked on the primary after 5 s: %v %v", list.Reply, list.Err)
		}
	}
	// The first INCR must be on the replica before it is promoted: SENTINEL
	// FAILOVER does not wait for it to catch up, and under -race the
	// promotion once beat the replication stream (the counter was absent).
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := command(1, "get", key)
		do(onReplica, got)
		if got.Reply == "1" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the batch's first INCR did not reach the replica in 5 s: %#v %v", got.Reply, got.Err)
		}
	}
	failover := command(0, "sentinel", "failover", "m1")
	do(newNode(t, serverOption(s.Addr())), failover)
	if failover.Err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", failover.Err)
	}
	<-done
	t.Logf("the batch across the failover: %v %v, %v %v, %v %v", cmds[0].Reply, cmds[0].Err, cmds[1].Reply, cmds[1].Err, cmds[2].Reply, cmds[2].Err)
	if cmds[1].Err == nil {
		t.Errorf("the WAIT across the failover: Reply %#v, no error", cmds[1].Reply)
	}
	role := command(0, "role")
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		do(onReplica, role)
		if a, _ := role.Reply.([]any); len(a) > 0 && a[0] == "master" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the replica is not a primary 20 s after SENTINEL FAILOVER: ROLE %v %v", role.Reply, role.Err)
		}
	}
	time.Sleep(200 * time.Millisecond) // what a Node sent again after Exec returned has run
	get := command(1, "get", key)
	do(onReplica, get)
	if get.Err != nil || get.Reply != "1" {
		t.Errorf("the new primary's counter: %#v, %v; want 1: the batch's first INCR, replicated, and nothing sent again", get.Reply, get.Err)
	}
}
