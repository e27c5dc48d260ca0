package redlocktest

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// oneConnection: a Node that declares [redlock.Traits].OneConnection keeps
// it, which replica confirmation rests on (a WAIT confirms only the writes
// of its own connection): each batch runs on one connection, also with
// batches from several goroutines at once (several Redlocks share a
// Node); a WAIT after a write in the same batch counts only the replicas
// that acknowledged that write; and no command of a batch is sent again
// when its connection breaks. A Node that does not declare it is skipped,
// with the reason it gives.
func (k *kit) oneConnection(t *testing.T) {
	tr := k.a.Node(t, k.addrs[0]).Traits()
	if !tr.OneConnection {
		hint := tr.ConnectionHint
		if hint == "" {
			hint = "it gives no ConnectionHint"
		}
		t.Skipf("the Node does not declare Traits.OneConnection, so replica confirmation is refused on it: %s", hint)
	}
	if tr.Routing == redlock.RouteByKey {
		t.Error("the Node declares OneConnection and routes by key: a Node that sends each command to the shard of its key cannot promise it")
	}
	t.Run("a batch", k.batchConnection)
	t.Run("concurrent batches", k.concurrentBatches)
	t.Run("WAIT", k.waitCountsItsBatch)
	t.Run("never sent again", k.neverSentAgain)
}

// connections runs, on n, a batch of CLIENT ID, a write, and CLIENT ID
// twice, and returns the ids the batch's commands ran on.
func connections(n redlock.Node, ky string) ([]int64, error) {
	cmds := []*redlock.Command{cmd(0, "client", "id"), cmd(1, "incr", ky), cmd(0, "client", "id"), cmd(0, "client", "id")}
	exec(n, 5*time.Second, cmds...)
	var ids []int64
	for _, c := range cmds {
		if c.Args[0] != "client" {
			continue
		}
		id, ok := c.Reply.(int64)
		if c.Err != nil || !ok {
			return nil, fmt.Errorf("CLIENT ID in a batch: Reply %#v, Err %v; want the connection's id", c.Reply, c.Err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// oneOf reports whether ids are all the same.
func oneOf(ids []int64) bool {
	for _, id := range ids {
		if id != ids[0] {
			return false
		}
	}
	return true
}

// batchConnection: the commands of a batch run on one connection.
func (k *kit) batchConnection(t *testing.T) {
	n := k.a.Node(t, k.addrs[0])
	for range 5 {
		ids, err := connections(n, key(t))
		if err != nil {
			t.Fatal(err)
		}
		if !oneOf(ids) {
			t.Fatalf("CLIENT ID, INCR, CLIENT ID, CLIENT ID in one batch ran on connections %v; want one", ids)
		}
	}
}

// concurrentBatches: batches from several goroutines at once on one Node
// (as several Redlocks that share it send them) each run on one
// connection.
func (k *kit) concurrentBatches(t *testing.T) {
	n := k.a.Node(t, k.addrs[0])
	const goroutines, batches = 8, 25
	var mu sync.Mutex
	var split []string
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			ky := key(t)
			for range batches {
				ids, err := connections(n, ky)
				mu.Lock()
				switch {
				case err != nil:
					split = append(split, err.Error())
				case !oneOf(ids):
					split = append(split, fmt.Sprint(ids))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(split) > 0 {
		t.Errorf("%d of %d batches of CLIENT ID, INCR, CLIENT ID, CLIENT ID, sent from %d goroutines at once, did not run on one connection; the first: %s",
			len(split), goroutines*batches, goroutines, split[0])
	}
}

// waitCountsItsBatch: on a primary with one replica, a WAIT 1 after a SET
// in one batch answers 1 while the replica is linked, and 0 once the
// replica stopped (SIGSTOP) before the SET: it counts the replicas that
// acknowledged its own batch's write. A WAIT on another connection, whose
// own writes the replica had acknowledged before it stopped, answers 1.
func (k *kit) waitCountsItsBatch(t *testing.T) {
	// hz 100: a WAIT whose timeout passed ends within 10 ms; no delay
	// before the replica's first sync.
	primary := redistest.StartServerT(t, redistest.Options{Args: []string{"--hz", "100", "--repl-diskless-sync-delay", "0"}})
	host, port, _ := net.SplitHostPort(primary.Addr())
	replica := redistest.StartServerT(t, redistest.Options{Args: []string{"--replicaof", host, port}})
	n, admin := k.a.Node(t, primary.Addr()), k.a.Node(t, primary.Addr())
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		w := setWait(n, key(t))
		if w.Err == nil && w.Reply == int64(1) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("SET, WAIT 1 100 in one batch with the replica linked: WAIT answers %#v, %v after 10 s; want 1", w.Reply, w.Err)
		}
	}
	// The replica acknowledged every write so far, on every connection:
	// only a WAIT on the SET's own connection waits for the SET.
	acknowledged(t, admin)
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := replica.Resume(); err != nil {
			t.Error(err)
		}
	}()
	for i := range 4 {
		if w := setWait(n, key(t)); w.Err != nil || w.Reply != int64(0) {
			t.Fatalf("batch %d: SET, WAIT 1 100 with the replica stopped: WAIT answers %#v, %v; want 0 (a WAIT that counts the stopped replica ran on another connection than the SET's)", i, w.Reply, w.Err)
		}
	}
}

// setWait runs SET ky, WAIT 1 100 in one batch on n and returns the WAIT.
func setWait(n redlock.Node, ky string) *redlock.Command {
	wait := cmd(0, "wait", int64(1), int64(100))
	exec(n, 5*time.Second, cmd(1, "set", ky, "v"), wait)
	return wait
}

// acknowledged waits until the one replica of the primary behind admin has
// acknowledged every byte of its replication stream.
func acknowledged(t *testing.T, admin redlock.Node) {
	t.Helper()
	offset := regexp.MustCompile(`(?m)^master_repl_offset:(\d+)`)
	acked := regexp.MustCompile(`(?m)^slave0:.*,offset=(\d+),`)
	var s string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		info := cmd(0, "info", "replication")
		exec(admin, 5*time.Second, info)
		s, _ = info.Reply.(string)
		o, a := offset.FindStringSubmatch(s), acked.FindStringSubmatch(s)
		if o != nil && a != nil && o[1] == a[1] {
			return
		}
	}
	t.Fatalf("the replica did not acknowledge the primary's whole stream within 5 s: INFO replication %q", s)
}

// neverSentAgain: a batch whose connection breaks while the master runs it
// is not sent again. INCR, WAIT, INCR: WAIT 1 blocks on a master without
// replicas until its timeout, and the Node's connection is killed
// (CLIENT KILL) meanwhile. The first INCR ran, the rest of the batch
// failed with errors (the master drops what its killed connection had not
// run), and nothing ran again: the counter is 1.
func (k *kit) neverSentAgain(t *testing.T) {
	n, admin := k.a.Node(t, k.addrs[0]), k.a.Node(t, k.addrs[0])
	ky := key(t)
	cmds := []*redlock.Command{cmd(1, "incr", ky), cmd(0, "wait", int64(1), int64(3000)), cmd(1, "incr", ky)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		exec(n, 8*time.Second, cmds...)
	}()
	id, err := waiting(admin)
	if err == nil {
		kill := cmd(0, "client", "kill", "id", id)
		exec(admin, 5*time.Second, kill)
		err = kill.Err
	}
	<-done
	if err != nil {
		t.Fatalf("killing the connection of the batch's WAIT: %v", err)
	}
	if cmds[1].Err == nil {
		t.Errorf("the WAIT whose connection was killed: Reply %#v, no error; want the broken connection's error", cmds[1].Reply)
	}
	time.Sleep(100 * time.Millisecond) // what a Node sent again after Exec returned has run
	get := cmd(1, "get", ky)
	exec(admin, 5*time.Second, get)
	if get.Err != nil || get.Reply != "1" {
		t.Errorf("the counter that INCR, WAIT, INCR raise, once the WAIT's connection was killed: %#v, %v; want 1: a command of the batch ran again, or the INCR after the WAIT ran on another connection (replies %#v %v, %#v %v, %#v %v)",
			get.Reply, get.Err, cmds[0].Reply, cmds[0].Err, cmds[1].Reply, cmds[1].Err, cmds[2].Reply, cmds[2].Err)
	}
}

// waiting returns the id of the one connection blocked in a WAIT on the
// master behind admin, once there is one (within 3 s).
func waiting(admin redlock.Node) (string, error) {
	blocked := regexp.MustCompile(`(?m)^id=(\d+) .* flags=\S*b\S* .* cmd=wait\b`)
	var s string
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		list := cmd(0, "client", "list")
		exec(admin, 5*time.Second, list)
		s, _ = list.Reply.(string)
		if ms := blocked.FindAllStringSubmatch(s, -1); len(ms) == 1 {
			return ms[0][1], nil
		}
	}
	return "", fmt.Errorf("no one connection blocked in WAIT within 3 s: CLIENT LIST %q", strings.TrimSpace(s))
}
