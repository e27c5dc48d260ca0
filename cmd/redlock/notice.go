package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/redlock/redlock"
)

// downNotice is exec's Observer: it says on stderr, in one line per run,
// when a master failed while exec took, kept or released the lock (a
// master down, unreachable, refusing the password, inside its restart
// gate), so that a cron job that ran on the others still tells its
// operator. It passes every event on to next (--verbose's logger), if set.
// When exec does not get the lock, its error says which masters failed,
// and downNotice says nothing.
//
// A phase event counts the masters known when the phase was decided: a
// master that fails slowly (a connection refused under load, a master that
// closes it unanswered) may be pending in every phase of a run. settle
// asks those once more after the run.
type downNotice struct {
	next redlock.Observer
	name string
	w    io.Writer

	mu       sync.Mutex // guards the fields below
	held     bool       // exec holds the lock
	told     bool       // the line was written
	pending  string     // the line for a failure seen before the lock was held
	answered []bool     // by master: it answered (or failed) in some phase
}

func (o *downNotice) Start(ctx context.Context, c *redlock.Call) context.Context {
	if o.next != nil {
		return o.next.Start(ctx, c)
	}
	return ctx
}

func (o *downNotice) End(ctx context.Context, c *redlock.Call) {
	if o.next != nil {
		o.next.End(ctx, c)
	}
}

func (o *downNotice) Lost(key string, cause error) {
	if o.next != nil {
		o.next.Lost(key, cause)
	}
}

func (o *downNotice) Phase(ctx context.Context, e *redlock.PhaseEvent) {
	if o.next != nil {
		o.next.Phase(ctx, e)
	}
	if e.Op == redlock.PhaseSubscribe {
		return // wake-ups only: a waiting exec uses its backoff without them
	}
	var failed []string
	for _, n := range e.Nodes {
		if n.Outcome == redlock.Failed {
			failed = append(failed, fmt.Sprintf("%s failed: %v", n.Node, n.Err))
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.answered == nil {
		o.answered = make([]bool, len(e.Nodes))
	}
	for i, n := range e.Nodes {
		if n.Outcome != redlock.Pending && i < len(o.answered) {
			o.answered[i] = true
		}
	}
	if len(failed) == 0 || o.told {
		return
	}
	line := o.line(failed, len(e.Nodes))
	if !o.held {
		o.pending = line
		return
	}
	o.told = true
	fmt.Fprint(o.w, line)
}

// line is the notice for the failures failed of n masters.
func (o *downNotice) line(failed []string, n int) string {
	hint := " (--verbose logs every attempt)"
	if o.next != nil {
		hint = ""
	}
	return fmt.Sprintf("redlock exec: lock %q: %d of %d masters failed%s: %s\n",
		o.name, len(failed), n, hint, strings.Join(failed, "; "))
}

// holding tells o that exec got the lock: a failure seen while taking it
// is written now.
func (o *downNotice) holding() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held = true
	if o.pending != "" && !o.told {
		o.told = true
		fmt.Fprint(o.w, o.pending)
	}
}

// settle runs after exec released the lock. Unless a failure was told
// already, it sends a PING, within timeout, to each of nodes (the masters,
// in the order given to New) that never answered in a phase, and tells
// the ones that fail it.
func (o *downNotice) settle(nodes []redlock.Node, timeout time.Duration) {
	o.mu.Lock()
	var ask []int
	if o.held && !o.told && len(o.answered) == len(nodes) {
		for i, done := range o.answered {
			if !done {
				ask = append(ask, i)
			}
		}
	}
	o.mu.Unlock()
	if len(ask) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmds := make([]*redlock.Command, len(ask))
	var wg sync.WaitGroup
	for k, i := range ask {
		cmds[k] = &redlock.Command{Args: []any{"PING"}}
		wg.Go(func() { nodes[i].Exec(ctx, cmds[k:k+1]) })
	}
	wg.Wait()
	var failed []string
	for k, i := range ask {
		if err := cmds[k].Err; err != nil {
			failed = append(failed, fmt.Sprintf("%s failed: %v (it had not answered in time while exec held the lock)", nodes[i].Name(), err))
		}
	}
	if len(failed) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.told = true
	fmt.Fprint(o.w, o.line(failed, len(nodes)))
}
