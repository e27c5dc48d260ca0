package chaos

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock"
)

// stubNode answers every command at once as a master that grants it
// would (SET: OK; our scripts: 1), after delay; the trigger's logic claims
// nothing about Redis.
func stubNode(name string, delay time.Duration) redlock.Node {
	return redlock.NodeFunc(name, func(ctx context.Context, c *redlock.Command) {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			c.Err = ctx.Err()
			return
		}
		if c.Args[0] == "set" {
			c.Reply = "OK"
		} else {
			c.Reply = int64(1)
		}
	})
}

// stubRedlock is a Redlock over 3 stub masters behind tr, answering after
// 0, 20 and 500 ms: master 0 first, and masters 0 and 1 a quorum at 20 ms
// unless master 0's reply is held.
func stubRedlock(t *testing.T, tr *trigger) *redlock.Redlock {
	t.Helper()
	nodes := make([]redlock.Node, 3)
	for i, d := range []time.Duration{0, 20 * time.Millisecond, 500 * time.Millisecond} {
		nodes[i] = tr.wrap(i, stubNode(string(rune('a'+i)), d))
	}
	rl, err := redlock.New(nodes, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	return rl
}

// attempt makes one TryLock on rl and unlocks what it got.
func attempt(ctx context.Context, t *testing.T, rl *redlock.Redlock) {
	t.Helper()
	l, err := rl.TryLock(ctx, "k")
	if err != nil {
		return
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTriggerFiresOnceOnTheFirstReplyOfANewAttempt(t *testing.T) {
	tr := newTrigger(3)
	rl := stubRedlock(t, tr)
	ctx := context.Background()

	// An attempt that ended before arming is not eligible.
	attempt(ctx, t, rl)
	var mu sync.Mutex
	var fired [][]int
	tr.arm(func(first int, pending []int) {
		mu.Lock()
		fired = append(fired, append([]int{first}, pending...))
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	})
	// The first reply of a new attempt fires the hook (master 0, the
	// others pending) and is held until the hook returned: the quorum of
	// masters 0 and 1 comes after it, not at 20 ms.
	start := time.Now()
	attempt(ctx, t, rl)
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("the attempt ended after %v, before the hook's 100 ms", took)
	}
	attempt(ctx, t, rl)
	tr.wait()
	mu.Lock()
	defer mu.Unlock()
	if want := [][]int{{0, 1, 2}}; !slices.EqualFunc(fired, want, slices.Equal) {
		t.Fatalf("fired %v, want once: first 0, pending 1 and 2", fired)
	}
}

func TestTriggerReleasesTheReplyWhenCtxEnds(t *testing.T) {
	tr := newTrigger(3)
	n := tr.wrap(0, stubNode("a", 0))
	release := make(chan struct{})
	tr.arm(func(int, []int) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	// An acquire as the core sends it: SET key value PX ms NX.
	n.Exec(ctx, []*redlock.Command{{Args: []any{"set", "k", "v", "px", int64(1000), "nx"}, Key: 1, Keys: 1}})
	if took := time.Since(start); took > time.Second {
		t.Errorf("reply held %v past its context", took)
	}
	close(release)
	tr.wait()
}

// TestTriggerWaitAfterLockReturned: a Redlock's Lock returns at its ctx's
// end while the lane still runs the trigger-wrapped Exec that fired the
// hook (the Node contract lets it, until the batch's own deadline); wait
// must still be ordered after that firing. It was not (the hook's
// WaitGroup.Add ran in the lane, unordered with the test's Wait) and the
// race detector said so, in 20 to 43 runs of 60 on a busy 2-core machine.
func TestTriggerWaitAfterLockReturned(t *testing.T) {
	tr := newTrigger(3)
	rl := stubRedlock(t, tr)
	release := make(chan struct{})
	tr.arm(func(int, []int) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	attempt(ctx, t, rl)
	if took := time.Since(start); took > time.Second {
		t.Errorf("reply held %v past its context", took)
	}
	close(release)
	tr.wait()
}

func TestPick(t *testing.T) {
	for _, c := range []struct {
		k, first int
		pending  []int
		want     []int
	}{
		{2, 0, []int{1, 2, 3, 4}, []int{4, 3}},
		{2, 4, []int{1}, []int{1, 3}},
		{2, 3, nil, []int{4, 2}},
	} {
		if got := pick(c.k, c.first, c.pending, 5); !slices.Equal(got, c.want) {
			t.Errorf("pick(%d, first %d, pending %v) = %v, want %v", c.k, c.first, c.pending, got, c.want)
		}
	}
}
