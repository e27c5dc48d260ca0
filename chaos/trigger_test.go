package chaos

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock"
)

// stubNode answers every request at once; the trigger's logic claims
// nothing about Redis.
func stubNode(name string) redlock.Node {
	return redlock.NodeFunc(name, func(_ context.Context, q *redlock.Request) { q.OK = true })
}

// acquire sends one acquire of value to n.
func acquire(ctx context.Context, n redlock.Node, value string) {
	n.Exec(ctx, []*redlock.Request{{Op: redlock.OpAcquire, Key: "k", Value: value, TTL: time.Second}})
}

func TestTriggerFiresOnceOnTheFirstReplyOfANewAttempt(t *testing.T) {
	tr := newTrigger(3)
	nodes := make([]redlock.Node, 3)
	for i := range nodes {
		nodes[i] = tr.wrap(i, stubNode(string(rune('a'+i))))
	}
	ctx := context.Background()

	// An attempt that began before arming is not eligible.
	acquire(ctx, nodes[0], "old")
	var mu sync.Mutex
	var fired [][]int
	hookDone := make(chan struct{})
	tr.arm(func(first int, pending []int) {
		mu.Lock()
		fired = append(fired, append([]int{first}, pending...))
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		close(hookDone)
	})
	acquire(ctx, nodes[1], "old")
	if len(fired) != 0 {
		t.Fatal("fired on an attempt that began before arming")
	}

	// The first reply of a new attempt fires the hook and is held until
	// the hook returned.
	start := time.Now()
	acquire(ctx, nodes[2], "new")
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("first reply returned after %v, before the hook's 20ms", took)
	}
	<-hookDone
	acquire(ctx, nodes[0], "new")
	acquire(ctx, nodes[0], "newer")
	tr.wait()
	mu.Lock()
	defer mu.Unlock()
	if want := [][]int{{2, 0, 1}}; !slices.EqualFunc(fired, want, slices.Equal) {
		t.Fatalf("fired %v, want once: first 2, pending 0 and 1", fired)
	}
}

func TestTriggerReleasesTheReplyWhenCtxEnds(t *testing.T) {
	tr := newTrigger(3)
	n := tr.wrap(0, stubNode("a"))
	release := make(chan struct{})
	tr.arm(func(int, []int) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	acquire(ctx, n, "v")
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
