package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ExtendRequest is one lock's renewal within a batch: reset Key's TTL to TTL
// while it still holds Value, as [Node.Extend] does.
type ExtendRequest struct {
	Key   string
	Value string
	TTL   time.Duration
}

// BatchExtender is an optional interface of a [Node]: extend many keys on
// the master in one round trip. Auto-extend ([WithAutoExtend]) sends the
// renewals that fall due together through it; a Node without it gets one
// Extend per lock instead, a few at a time.
//
// ExtendBatch returns, for each request in order, what Extend would: ok[i]
// reports whether reqs[i].Key was extended, errs[i] why the outcome is
// unknown. errs may be nil when no request failed. Like every Node method it
// must be safe for concurrent use and return promptly once ctx is done.
type BatchExtender interface {
	ExtendBatch(ctx context.Context, reqs []ExtendRequest) (ok []bool, errs []error)
}

var _ BatchExtender = (*redisNode)(nil)

// ExtendBatch sends the extend script for every request in one go-redis
// pipeline (EVALSHA). When the master does not know the script (after a
// restart, say) it sends those requests again as EVAL, which caches it.
func (n *redisNode) ExtendBatch(ctx context.Context, reqs []ExtendRequest) ([]bool, []error) {
	ok := make([]bool, len(reqs))
	errs := make([]error, len(reqs))
	idx := make([]int, len(reqs)) // the requests still to send
	for i := range idx {
		idx[i] = i
	}
	for round := 0; len(idx) > 0; round++ {
		pipe := n.c.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for j, i := range idx {
			r := &reqs[i]
			if round == 0 {
				cmds[j] = pipe.EvalSha(ctx, extendScript.Hash(), []string{r.Key}, r.Value, r.TTL.Milliseconds())
			} else { // the master did not know the script: send its source
				cmds[j] = pipe.Eval(ctx, extendLua, []string{r.Key}, r.Value, r.TTL.Milliseconds())
			}
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var again []int
		for j, i := range idx {
			err := cmds[j].Err()
			if round == 0 && err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				again = append(again, i)
				continue
			}
			ok[i], errs[i] = flag(cmds[j].Result())
		}
		idx = again
	}
	return ok, errs
}

// fallbackWorkers is how many Extend calls at a time go to one master that
// is not a BatchExtender.
const fallbackWorkers = 16

// extendOn renews reqs on one master: in one ExtendBatch when it has one,
// otherwise with concurrent Extend calls. It always returns len(reqs)
// results; a BatchExtender that returns the wrong number fails them all.
func extendOn(ctx context.Context, n Node, reqs []ExtendRequest) ([]bool, []error) {
	if be, is := n.(BatchExtender); is {
		ok, errs := be.ExtendBatch(ctx, reqs)
		if len(ok) != len(reqs) || (errs != nil && len(errs) != len(reqs)) {
			err := fmt.Errorf("ExtendBatch returned %d results and %d errors for %d requests", len(ok), len(errs), len(reqs))
			ok, errs = make([]bool, len(reqs)), make([]error, len(reqs))
			for i := range errs {
				errs[i] = err
			}
		}
		if errs == nil {
			errs = make([]error, len(reqs))
		}
		return ok, errs
	}
	ok := make([]bool, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(fallbackWorkers, len(reqs)) {
		wg.Go(func() {
			for i := range next {
				ok[i], errs[i] = n.Extend(ctx, reqs[i].Key, reqs[i].Value, reqs[i].TTL)
			}
		})
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	return ok, errs
}
