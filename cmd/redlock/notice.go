package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/redlock/redlock"
)

// downNotice is exec's Observer: it says on stderr, in one line per run,
// when a master failed while exec took, kept or released the lock (a
// master down, unreachable, refusing the password, inside its restart
// gate), so that a cron job that ran on the others still tells its
// operator. It passes every event on to next (--verbose's logger), if set.
// When exec does not get the lock, its error says which masters failed,
// and downNotice says nothing.
type downNotice struct {
	next redlock.Observer
	name string
	w    io.Writer

	mu      sync.Mutex // guards held, told and pending
	held    bool       // exec holds the lock
	told    bool       // the line was written
	pending string     // the line for a failure seen before the lock was held
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
	if len(failed) == 0 {
		return
	}
	hint := " (--verbose logs every attempt)"
	if o.next != nil {
		hint = ""
	}
	line := fmt.Sprintf("redlock exec: lock %q: %d of %d masters failed%s: %s\n",
		o.name, len(failed), len(e.Nodes), hint, strings.Join(failed, "; "))
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.told {
		return
	}
	if !o.held {
		o.pending = line
		return
	}
	o.told = true
	fmt.Fprint(o.w, line)
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
