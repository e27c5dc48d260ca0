package redlockrueidis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// TestTimedOutBatches: batches of large commands that time out from
// several goroutines at once while the master is stopped (SIGSTOP), so
// that rueidis's writer blocks on the full socket and Exec returns before
// it has written them. They are written once the master continues, each
// command as it was built: a key holds its own value or nothing, never
// another command's. (A Node that reused the slice of commands it gave
// DoMulti once Exec returned crashed rueidis's writer here.)
func TestTimedOutBatches(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	n := newNode(t, serverOption(s.Addr()))
	admin := newNode(t, serverOption(s.Addr()))
	// Batches from several goroutines at once put the connection in
	// rueidis's pipelining mode, where a batch waits in a queue to be
	// written and a timeout leaves it there (alone, it writes and reads
	// itself, and a timeout closes the connection).
	var warm sync.WaitGroup
	for range 8 {
		warm.Go(func() {
			for range 50 {
				do(n, command(0, "ping"))
			}
		})
	}
	warm.Wait()
	if err := s.Pause(); err != nil { // SIGSTOP: nothing is read; the socket buffers fill
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := s.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()
	big := strings.Repeat("x", 256<<10)
	var mu sync.Mutex
	var keys []string
	timedOut := 0
	var wg sync.WaitGroup
	end := time.Now().Add(400 * time.Millisecond)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				k1, k2 := fmt.Sprintf("timed-out:%d:%d:a", g, i), fmt.Sprintf("timed-out:%d:%d:b", g, i)
				cmds := []*redlock.Command{command(1, "set", k1, k1+big), command(1, "set", k2, k2+big)}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				n.Exec(ctx, cmds)
				cancel()
				mu.Lock()
				keys = append(keys, k1, k2)
				if cmds[0].Err != nil {
					timedOut++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	resume()
	time.Sleep(time.Second) // what was queued is written
	if timedOut == 0 {
		t.Fatal("no batch timed out: the test did not test anything")
	}
	written := 0
	for _, k := range keys {
		get := command(1, "get", k)
		do(admin, get)
		switch {
		case get.Err != nil:
			t.Fatalf("GET %s: %v", k, get.Err)
		case get.Reply == nil:
		case get.Reply != k+big:
			v, _ := get.Reply.(string)
			t.Errorf("%s holds %.40q…: another command's value", k, v)
		default:
			written++
		}
	}
	t.Logf("%d batches timed out; %d of %d keys written after the pause", timedOut, written, len(keys))
}
