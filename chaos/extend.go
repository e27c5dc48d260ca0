package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/redlock/redlock"
)

// Extending clients hold a lock for several TTLs, so that the faults hit
// the renewal path too: one renews by auto-extend, one by calling Extend.
const (
	extendHold = 3 // TTLs an extending client holds its lock
	extenders  = 2 // extending clients in a scenario that has them
)

// Kinds of extending holder (Acquire.Extend).
const (
	extendAuto   = "auto"
	extendManual = "manual"
)

// extendKey is the key the extending clients contend on: their own, so that
// their long holdings do not starve the workload (which would leave the
// run with far fewer acquisitions to check), yet they still contend with
// each other.
const extendKey = keyPrefix + "extend"

// extendWork is an extending client's loop until stop closes: acquire
// extendKey (with auto-extend, or to Extend it by hand), hold it for
// extendHold TTLs while writing every TTL/10, then release and pause. It
// writes only while its lock is neither lost (Done) nor within TTL/10 of
// its Until, as a careful user would. An auto-extended holder holds on
// until Done closes when its renewals fail; a manual holder extends when
// less than half a TTL is left and lets go when an Extend fails.
func (e *env) extendWork(ctx context.Context, stop <-chan struct{}, c *client, kind string) {
	var opts []redlock.Option
	if kind == extendAuto {
		opts = append(opts, redlock.WithAutoExtend())
	}
	for !stopped(ctx, stop) {
		e.gate.RLock()
		if h := e.acquire(ctx, c, extendKey, 2*e.ttl, opts...); h != nil {
			e.holdExtended(ctx, stop, h, kind)
		}
		e.gate.RUnlock()
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(e.ttl/4 + rand.N(e.ttl/4)):
		}
	}
}

// holdExtended holds h for extendHold TTLs (or until stop, ctx, the loss of
// the lock, or a failed Extend), recording every renewal of its Until and
// the moment it was lost, then releases it.
func (e *env) holdExtended(ctx context.Context, stop <-chan struct{}, h *holding, kind string) {
	l := h.lock
	e.rec.extending(h.id, kind)
	// Record the loss when it happens, not when the loop below notices.
	unwatch := context.AfterFunc(l.Context(), func() {
		if errors.Is(context.Cause(l.Context()), redlock.ErrLockLost) {
			e.rec.lost(h.id, e.rec.now())
		}
	})
	defer unwatch()
	margin := e.ttl / 10
	deadline := time.Now().Add(extendHold * e.ttl)
	tick := time.NewTicker(e.ttl / 10)
	defer tick.Stop()
hold:
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			break hold
		case <-ctx.Done():
			break hold
		case <-l.Done():
			break hold
		case <-tick.C:
		}
		if kind == extendManual && time.Until(l.Until()) < e.ttl/2 {
			ectx, cancel := context.WithTimeout(ctx, e.ttl/2)
			err := l.Extend(ectx, e.ttl)
			cancel()
			if err != nil {
				break hold
			}
		}
		e.rec.renewed(h.id, e.rec.at(l.Until()))
		if time.Until(l.Until()) <= margin {
			if kind == extendManual {
				break hold
			}
			continue // auto-extend may yet renew it; if not, Done closes
		}
		select {
		case <-l.Done():
			break hold
		default:
		}
		e.write(h)
	}
	e.rec.renewed(h.id, e.rec.at(l.Until()))
	e.release(h)
}
