package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// recorder is an Observer that writes each event as one line. The observe
// tests are in observe_test.go; internal tests record events too, so it is
// defined here and lent to them (export_test.go).
type recorder struct {
	mu     sync.Mutex
	events []string
	Nodes  [][]NodeReply // each phase's Nodes, in order
}

type depthKey struct{}

func depth(ctx context.Context) int { d, _ := ctx.Value(depthKey{}).(int); return d }

func (o *recorder) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, s)
}

func (o *recorder) Start(ctx context.Context, c *Call) context.Context {
	d := depth(ctx) + 1
	o.add(fmt.Sprintf("start %s depth=%d", c.Op, d))
	return context.WithValue(ctx, depthKey{}, d)
}

func (o *recorder) Phase(ctx context.Context, e *PhaseEvent) {
	var outcomes []string
	for _, n := range e.Nodes {
		outcomes = append(outcomes, n.Outcome.String())
	}
	// Which master answered after the decision varies from run to run:
	// compare the outcomes as a multiset.
	slices.Sort(outcomes)
	s := fmt.Sprintf("%s depth=%d", e.Op, depth(ctx))
	if e.Op == PhaseAcquire {
		s += fmt.Sprintf(" attempt=%d", e.Attempt)
	}
	s += fmt.Sprintf(" %d/%d/%d q=%d [%s] ok=%v", e.Succeeded, e.Refused, e.Failed, e.Quorum, strings.Join(outcomes, " "), e.Err == nil)
	if e.Err == nil && e.Op != PhaseRelease && e.Op != PhaseSubscribe && e.Validity <= 0 {
		s += " NO-VALIDITY"
	}
	o.add(s)
	o.mu.Lock()
	o.Nodes = append(o.Nodes, append([]NodeReply(nil), e.Nodes...))
	o.mu.Unlock()
}

func (o *recorder) End(ctx context.Context, c *Call) {
	o.add(fmt.Sprintf("end %s depth=%d attempts=%d fenced=%v ok=%v", c.Op, depth(ctx), c.Attempts, c.Fence != 0, c.Err == nil))
}

func (o *recorder) Lost(key string, cause error) {
	o.add(fmt.Sprintf("lost lockLost=%v", errors.Is(cause, ErrLockLost)))
}

func (o *recorder) Take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ev := o.events
	o.events = nil
	return ev
}
