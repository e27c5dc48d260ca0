package chaos

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlock/redlock"
)

// stubNode answers every acquire at once; the trigger's logic claims
// nothing about Redis.
type stubNode struct {
	redlock.Node
	name string
}

func (s stubNode) Name() string { return s.name }
func (s stubNode) Acquire(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}

func TestTriggerFiresOnceOnTheFirstReplyOfANewAttempt(t *testing.T) {
	tr := newTrigger(3)
	nodes := make([]redlock.Node, 3)
	for i := range nodes {
		nodes[i] = tr.wrap(i, stubNode{name: string(rune('a' + i))})
	}
	ctx := context.Background()

	// An attempt that began before arming is not eligible.
	_, _ = nodes[0].Acquire(ctx, "k", "old", time.Second)
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
	_, _ = nodes[1].Acquire(ctx, "k", "old", time.Second)
	if len(fired) != 0 {
		t.Fatal("fired on an attempt that began before arming")
	}

	// The first reply of a new attempt fires the hook and is held until
	// the hook returned.
	start := time.Now()
	_, _ = nodes[2].Acquire(ctx, "k", "new", time.Second)
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("first reply returned after %v, before the hook's 20ms", took)
	}
	<-hookDone
	_, _ = nodes[0].Acquire(ctx, "k", "new", time.Second)
	_, _ = nodes[0].Acquire(ctx, "k", "newer", time.Second)
	tr.wait()
	mu.Lock()
	defer mu.Unlock()
	if want := [][]int{{2, 0, 1}}; !slices.EqualFunc(fired, want, slices.Equal) {
		t.Fatalf("fired %v, want once: first 2, pending 0 and 1", fired)
	}
}

func TestTriggerReleasesTheReplyWhenCtxEnds(t *testing.T) {
	tr := newTrigger(3)
	n := tr.wrap(0, stubNode{name: "a"})
	release := make(chan struct{})
	tr.arm(func(int, []int) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _ = n.Acquire(ctx, "k", "v", time.Second)
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
