package chaos

import (
	"context"
	"sync"

	"github.com/redlock/redlock"
)

// trigger fires a hook in the middle of an acquire: when the first master's
// reply to an attempt arrives, before that reply is handed to the quorum
// decision. With N ≥ 3 masters no quorum (of successes or of failures) can
// be decided on one reply, so the hook runs after one master answered and
// before the attempt is decided. It fires once per arming, on an attempt
// that began after the arming.
//
// Its nodes ([trigger.wrap]) hold the first reply back until the hook
// returned or the request's context ended, whichever is first: the Node
// contract asks for a prompt return once ctx is done. It is safe for
// concurrent use.
type trigger struct {
	n int // masters

	mu       sync.Mutex // guards the fields below, and wg's Add
	hook     func(first int, pending []int)
	attempts map[string]*seen // by lock value: unique per attempt
	stopped  bool             // wait was called: no hook fires any more

	// wg counts the hooks fired and not yet returned. A hook fires in a
	// Node's Exec, which runs in a lane of the Redlock and may still run
	// after the Lock call that sent the attempt returned (at its ctx's
	// end): nothing orders the Add of the firing before the caller's wait
	// but mu, so the Add is made under it (an Add from zero that does not
	// happen before a Wait is a race, and the race detector says so).
	wg sync.WaitGroup
}

// seen is what the trigger knows of one attempt.
type seen struct {
	eligible bool   // began while armed
	replied  []bool // by master
	count    int
}

func newTrigger(n int) *trigger {
	return &trigger{n: n, attempts: make(map[string]*seen)}
}

// arm makes the trigger fire hook on the next attempt that begins from now
// on; hook gets the master that replied first and those that had not
// replied yet.
func (t *trigger) arm(hook func(first int, pending []int)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.hook = hook
	}
}

// wait disarms the trigger for good and waits for the hooks it fired,
// also those fired in an Exec still running after its Lock call returned.
func (t *trigger) wait() {
	t.mu.Lock()
	t.hook, t.stopped = nil, true
	t.mu.Unlock()
	t.wg.Wait()
}

func (t *trigger) started(value string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.attempts[value]; !ok {
		t.attempts[value] = &seen{eligible: t.hook != nil, replied: make([]bool, t.n)}
	}
}

// replied notes master i's reply and, when it is the first of an eligible
// attempt while armed, runs the hook and holds the reply until the hook
// returned or ctx ended.
func (t *trigger) replied(ctx context.Context, i int, value string) {
	t.mu.Lock()
	s := t.attempts[value]
	s.replied[i] = true
	s.count++
	var hook func(int, []int)
	var pending []int
	if s.count == 1 && s.eligible && t.hook != nil {
		hook, t.hook = t.hook, nil
		for j, r := range s.replied {
			if !r {
				pending = append(pending, j)
			}
		}
		t.wg.Add(1) // under mu: see wg
	}
	if s.count == t.n {
		delete(t.attempts, value)
	}
	t.mu.Unlock()
	if hook == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer t.wg.Done()
		defer close(done)
		hook(i, pending)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// wrap returns master i's Node with the trigger in front of its acquires.
func (t *trigger) wrap(i int, n redlock.Node) redlock.Node {
	return &triggerNode{Node: n, i: i, t: t}
}

// triggerNode is a redlock.Node whose acquire replies pass through a trigger.
type triggerNode struct {
	redlock.Node
	i int
	t *trigger
}

func (n *triggerNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	for _, c := range cmds {
		if value, ok := acquireOf(c); ok {
			n.t.started(value)
		}
	}
	n.Node.Exec(ctx, cmds)
	for _, c := range cmds {
		if value, ok := acquireOf(c); ok {
			n.t.replied(ctx, n.i, value)
		}
	}
}

// acquireOf returns the lock value of c when c is an acquire.
func acquireOf(c *redlock.Command) (value string, ok bool) {
	step, _, value := c.About()
	return value, step == "acquire" || step == "acquire-fenced"
}
