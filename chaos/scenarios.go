package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/chaos/cluster"
)

// scenario is a fault schedule and the verdict its run must reach.
type scenario struct {
	name  string
	about string // what it shows, in a sentence

	fencing    bool // the clients take locks WithFencing and the resource checks tokens
	midAcquire bool // the clients' masters sit behind a trigger
	minTTLs    int  // the least run time, in TTLs, for the script to play out

	// script injects the faults while the workload runs, until ctx ends. It
	// may leave faults in force: the run restores every master afterwards.
	script func(ctx context.Context, e *env) error
	want   []expectation
}

// scenarios is every scenario, in the order they run.
var scenarios = []scenario{
	{
		name:    "minority-kill",
		about:   "(N-1)/2 masters SIGKILLed, down for 1.5 TTL, started again empty: safe and available",
		minTTLs: 3,
		script:  cycle(kindKill, "start", (*env).minority, cluster.Cluster.Kill, cluster.Cluster.Start),
		want:    []expectation{noOverlap, noUnsafeWrite, available, noLeak},
	},
	{
		name:       "minority-kill-mid-acquire",
		about:      "(N-1)/2 masters killed after the first master replied to an attempt and before its quorum was decided: safe and available",
		midAcquire: true,
		minTTLs:    3,
		script:     killMidAcquire,
		want:       []expectation{midAcquireFired, noOverlap, noUnsafeWrite, available, noLeak},
	},
	{
		name:    "minority-pause",
		about:   "(N-1)/2 masters SIGSTOPped for 1.5 TTL: safe and available",
		minTTLs: 3,
		script:  cycle(kindPause, "resume", (*env).minority, cluster.Cluster.Pause, cluster.Cluster.Resume),
		want:    []expectation{noOverlap, noUnsafeWrite, available, noLeak},
	},
	{
		name:    "minority-partition",
		about:   "(N-1)/2 masters cut off the network (requests time out) for 1.5 TTL: safe and available",
		minTTLs: 3,
		script:  cycle(kindPartition, "heal", (*env).minority, cluster.Cluster.Partition, cluster.Cluster.Heal),
		want:    []expectation{noOverlap, noUnsafeWrite, available, noLeak},
	},
	{
		name:    "majority-kill",
		about:   "N/2+1 masters killed for 1.5 TTL: safe; every acquire fails while they are down; available again after the restart",
		minTTLs: 4,
		script:  majorityKill,
		want:    []expectation{noOverlap, noUnsafeWrite, failWhileDown, availableAfter, noLeak},
	},
	{
		name:    "holder-pause",
		about:   "a holder stops (a GC pause) past its validity while another client takes the lock and writes, then wakes and writes: without fencing the late write is accepted",
		minTTLs: 4,
		script:  holderPause,
		want:    []expectation{noOverlap, lateAccepted, noLeak},
	},
	{
		name:    "holder-pause-fenced",
		about:   "the same with fencing tokens: the resource rejects every late write",
		fencing: true,
		minTTLs: 4,
		script:  holderPause,
		want:    []expectation{noOverlap, lateRejected, staleRejected, noLeak},
	},
	{
		name:    "restart-no-persistence-immediate",
		about:   "a holder owns the key on a bare majority; one of its masters restarts empty at once; a second client wins a quorum too: the checker finds the overlap",
		minTTLs: 6,
		script:  restartScript(false),
		want:    []expectation{overlapFound, staleAccepted},
	},
	{
		name:    "restart-no-persistence-immediate-fenced",
		about:   "the same with fencing tokens (floored by the masters' clocks): still two holders, but every write of the older one after the newer one's first write is rejected",
		fencing: true,
		minTTLs: 6,
		script:  restartScript(false),
		want:    []expectation{overlapFound, staleRejected},
	},
	{
		name:    "restart-delayed",
		about:   "the same bare majority, but the master stays down longer than the largest TTL before it comes back empty (the delayed-restart rule): safe",
		minTTLs: 6,
		script:  restartScript(true),
		want:    []expectation{noOverlap, noUnsafeWrite, noLeak},
	},
}

// Timing of the scripts, in TTLs of the workload's locks.
func (e *env) warm() time.Duration   { return e.ttl / 2 }     // before the first fault
func (e *env) down() time.Duration   { return 3 * e.ttl / 2 } // a fault in force
func (e *env) settle() time.Duration { return e.ttl / 2 }     // after a fault was undone

// cycle injects a fault on the masters nodes picks, again and again while
// there is time: in force for down(), then undone, then a pause.
func cycle(kind, undoName string, nodes func(*env) []int, do, undo func(cluster.Cluster, int) error) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		if !sleep(ctx, e.warm()) {
			return nil
		}
		ns := nodes(e)
		bind := func(op func(cluster.Cluster, int) error) func(int) error {
			return func(i int) error { return op(e.cl, i) }
		}
		for left(ctx) > e.down()+e.settle() {
			f, err := e.inject(kind, ns, "", bind(do))
			if err != nil {
				return err
			}
			sleep(ctx, e.down())
			if err := e.undo(f, ns, undoName, bind(undo)); err != nil {
				return err
			}
			if !sleep(ctx, e.settle()) {
				return nil
			}
		}
		return nil
	}
}

// killMidAcquire arms the trigger, which kills (N-1)/2 masters (those that
// had not replied yet, if enough) after the first master replied to an
// attempt; they stay down for down(), then start again empty.
func killMidAcquire(ctx context.Context, e *env) error {
	if !sleep(ctx, e.warm()) {
		return nil
	}
	type fired struct {
		f     int
		nodes []int
		err   error
	}
	for left(ctx) > e.down()+e.settle() {
		ch := make(chan fired, 1)
		e.trig.arm(func(first int, pending []int) {
			nodes := pick((e.n-1)/2, first, pending, e.n)
			f, err := e.inject(kindKillMidAcquire, nodes, fmt.Sprintf("after master %d replied, before the quorum", first), e.cl.Kill)
			ch <- fired{f, nodes, err}
		})
		var r fired
		select {
		case r = <-ch:
		case <-ctx.Done():
			e.trig.arm(nil)
			return nil
		}
		if r.err != nil {
			return r.err
		}
		sleep(ctx, e.down())
		if err := e.undo(r.f, r.nodes, "start", e.cl.Start); err != nil {
			return err
		}
		if !sleep(ctx, e.settle()) {
			return nil
		}
	}
	return nil
}

// pick chooses k masters other than first, those still pending first.
func pick(k, first int, pending []int, n int) []int {
	var out []int
	chosen := make(map[int]bool)
	add := func(i int) {
		if len(out) < k && i != first && !chosen[i] {
			chosen[i] = true
			out = append(out, i)
		}
	}
	for j := len(pending) - 1; j >= 0; j-- {
		add(pending[j])
	}
	for i := n - 1; i >= 0; i-- {
		add(i)
	}
	return out
}

// majorityKill kills N/2+1 masters once, for down(), then starts them
// again (empty: they were down longer than the TTL).
func majorityKill(ctx context.Context, e *env) error {
	if !sleep(ctx, e.warm()) {
		return nil
	}
	ns := e.majority()
	f, err := e.inject(kindKill, ns, "", e.cl.Kill)
	if err != nil {
		return err
	}
	sleep(ctx, e.down())
	return e.undo(f, ns, "start", e.cl.Start)
}

// holderPause is Kleppmann's case, scripted: a holder of the first key
// writes, stops until its validity has ended and another holder has
// written, then writes again (the late write) and unlocks.
func holderPause(ctx context.Context, e *env) error {
	c, err := e.newClient()
	if err != nil {
		return err
	}
	if !sleep(ctx, e.warm()) {
		return nil
	}
	key := e.keys[0]
	for left(ctx) > 3*e.ttl {
		h := e.acquire(ctx, c, key, 2*e.ttl)
		if h == nil {
			continue
		}
		e.write(h)
		f := e.rec.faultBegin(kindHolderPause, nil, fmt.Sprintf("holder #%d stops past its validity", h.id))
		time.Sleep(time.Until(h.lock.Until()) + e.ttl/10)
		e.res.waitWrittenByOther(ctx.Done(), key, h.id, 3*e.ttl)
		e.rec.faultEnd(f)
		e.write(h) // late: its validity has ended
		e.release(h)
		if !sleep(ctx, e.settle()) {
			return nil
		}
	}
	return nil
}

// restartScript gives a scripted holder the first key on a bare majority:
// with the workload held back, the N-Q masters outside it are killed while
// the holder acquires, then started again (empty). Then 2Q-N of the
// holder's masters lose the key: restarted empty at once, or, when delayed,
// killed and started only after the largest TTL has passed. The workload
// resumes; the holder writes until its validity ends.
func restartScript(delayed bool) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		c, err := e.newClient()
		if err != nil {
			return err
		}
		if !sleep(ctx, e.warm()) {
			return nil
		}
		others := e.last(e.n - e.quorum)
		var restarted []int
		for i := range 2*e.quorum - e.n {
			restarted = append(restarted, i)
		}
		key, ttl := e.keys[0], 2*e.ttl // the holder's TTL: the largest in the run

		e.gate.Lock()
		gated := true
		defer func() {
			if gated {
				e.gate.Unlock()
			}
		}()
		fo, err := e.inject(kindKill, others, "while the next holder acquires", e.cl.Kill)
		if err != nil {
			return err
		}
		h := e.acquire(ctx, c, key, 2*e.ttl, redlock.WithTTL(ttl))
		if h == nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the scripted holder could not lock %s on the remaining majority", key)
		}
		e.write(h)
		if err := e.undo(fo, others, "start", e.cl.Start); err != nil {
			return err
		}
		var fr int
		if delayed {
			fr, err = e.inject(kindKill, restarted, "held back longer than the largest TTL", e.cl.Kill)
		} else {
			fr, err = e.inject(kindRestartEmpty, restarted, "at once", func(i int) error { return e.cl.Restart(i, false) })
			e.rec.faultEnd(fr)
		}
		if err != nil {
			return err
		}
		e.gate.Unlock()
		gated = false

		until := h.lock.Until()
		for time.Until(until) > e.ttl/20 {
			e.write(h)
			time.Sleep(e.ttl / 20)
		}
		e.release(h)
		if !delayed {
			return nil
		}
		killed := e.rec.history().Faults[fr].At
		if wait := killed + ttl + e.ttl/2 - e.rec.now(); wait > 0 {
			time.Sleep(wait) // the restart must wait; ignoring ctx keeps the rule
		}
		return e.undo(fr, restarted, "start", e.cl.Start)
	}
}
