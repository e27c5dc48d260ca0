// Package redlockotel reports a [redlock.Redlock]'s locks to OpenTelemetry:
// metrics of every acquire, extend, renewal, release and lost lock, and a
// span per Lock, TryLock, Do, Unlock and Extend, nested under the caller's
// span. It is its own Go module, so that OpenTelemetry stays out of the
// redlock module's dependencies (as go-redis does with redisotel).
//
//	obs, err := redlockotel.NewObserver()
//	rl, err := redlock.New(nodes, redlock.WithObserver(obs))
//
// Metrics (instrumentation scope github.com/redlock/redlock/redlockotel):
//
//   - redlock.acquire.duration (s, histogram): each Lock and TryLock call,
//     by redlock.call and redlock.outcome (obtained, not_obtained);
//   - redlock.acquire.attempts (histogram): attempts per Lock and TryLock,
//     by redlock.call and redlock.outcome;
//   - redlock.acquires, redlock.extends, redlock.releases (counters): Lock and
//     TryLock calls, Extend calls and renewals (redlock.call Extend or
//     renew), Unlock calls, by redlock.outcome (obtained/not_obtained, or
//     ok/failed);
//   - redlock.locks.held (up-down counter): locks taken and not yet
//     unlocked or lost;
//   - redlock.locks.lost (counter): locks lost;
//   - redlock.master.failures (counter): a master's failed request in a
//     decided phase, by redlock.master (its address, never credentials) and
//     redlock.phase (acquire, extend, renew, release).
//
// Spans are named "redlock.Lock", "redlock.TryLock", "redlock.Do",
// "redlock.Unlock" and "redlock.Extend", with the attribute redlock.key, the
// quorum counts of the call's last phase (redlock.quorum,
// redlock.succeeded, redlock.refused, redlock.failed), redlock.attempts and
// redlock.fence where they apply, an event per decided phase (each
// acquire attempt) and an event "redlock.reply" per master reply, with
// redlock.master, redlock.outcome and redlock.latency_ms. Failed calls
// have status Error.
package redlockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlock/redlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/redlock/redlock/redlockotel"

// Option configures NewObserver.
type Option func(*options)

type options struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

// WithMeterProvider sets where the metrics go. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.mp = mp }
}

// WithTracerProvider sets where the spans go. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// Observer is a [redlock.Observer] that records metrics and spans. Make one
// with NewObserver and give it to redlock.New with redlock.WithObserver. It
// is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer

	acquireDuration metric.Float64Histogram
	attempts        metric.Int64Histogram
	acquires        metric.Int64Counter
	extends         metric.Int64Counter
	releases        metric.Int64Counter
	held            metric.Int64UpDownCounter
	lost            metric.Int64Counter
	failures        metric.Int64Counter

	// mu guards heldKeys: how many locks of each key are counted in held,
	// so that a lock lost and then unlocked leaves held once.
	mu       sync.Mutex
	heldKeys map[string]int
}

var _ redlock.Observer = (*Observer)(nil)

// NewObserver returns an Observer that reports to the given providers (by
// default the global ones).
func NewObserver(opts ...Option) (*Observer, error) {
	o := options{}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("redlockotel: option is nil")
		}
		opt(&o)
	}
	if o.mp == nil {
		o.mp = otel.GetMeterProvider()
	}
	if o.tp == nil {
		o.tp = otel.GetTracerProvider()
	}
	m := o.mp.Meter(ScopeName)
	ob := &Observer{tracer: o.tp.Tracer(ScopeName), heldKeys: map[string]int{}}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	ob.acquireDuration, err = m.Float64Histogram("redlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a Lock or TryLock call took, attempts and waits included."))
	add(err)
	ob.attempts, err = m.Int64Histogram("redlock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts per Lock or TryLock call."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 5, 10, 20, 50, 100))
	add(err)
	ob.acquires, err = m.Int64Counter("redlock.acquires", metric.WithUnit("{call}"),
		metric.WithDescription("Lock and TryLock calls, by outcome."))
	add(err)
	ob.extends, err = m.Int64Counter("redlock.extends", metric.WithUnit("{extend}"),
		metric.WithDescription("Extend calls and renewals, by outcome."))
	add(err)
	ob.releases, err = m.Int64Counter("redlock.releases", metric.WithUnit("{call}"),
		metric.WithDescription("Unlock calls, by outcome."))
	add(err)
	ob.held, err = m.Int64UpDownCounter("redlock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks taken and not yet unlocked or lost."))
	add(err)
	ob.lost, err = m.Int64Counter("redlock.locks.lost", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks lost: not renewed in time, validity ran out, or the Redlock closed."))
	add(err)
	ob.failures, err = m.Int64Counter("redlock.master.failures", metric.WithUnit("{request}"),
		metric.WithDescription("Failed requests to a master in a decided phase, by master and phase."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redlockotel: making instruments: %w", err)
	}
	return ob, nil
}

// Start starts the call's span under ctx's.
func (o *Observer) Start(ctx context.Context, c *redlock.Call) context.Context {
	ctx, _ = o.tracer.Start(ctx, "redlock."+string(c.Op), trace.WithTimestamp(c.Start),
		trace.WithAttributes(attribute.String("redlock.key", c.Key)))
	return ctx
}

// Phase records the phase's failures per master and adds its events to the
// call's span.
func (o *Observer) Phase(ctx context.Context, e *redlock.PhaseEvent) {
	phase := attribute.String("redlock.phase", string(e.Op))
	for _, n := range e.Nodes {
		if n.Outcome == redlock.Failed {
			o.failures.Add(ctx, 1, metric.WithAttributes(attribute.String("redlock.master", n.Node), phase))
		}
	}
	if e.Op == redlock.PhaseRenew {
		o.extends.Add(ctx, 1, metric.WithAttributes(attribute.String("redlock.call", "renew"), okOutcome(e.Err)))
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	counts := []attribute.KeyValue{
		attribute.Int("redlock.quorum", e.Quorum), attribute.Int("redlock.succeeded", e.Succeeded),
		attribute.Int("redlock.refused", e.Refused), attribute.Int("redlock.failed", e.Failed),
	}
	span.SetAttributes(counts...)
	attrs := append(counts, phase, attribute.Bool("redlock.ok", e.Err == nil))
	if e.Op == redlock.PhaseAcquire {
		attrs = append(attrs, attribute.Int("redlock.attempt", e.Attempt))
	}
	span.AddEvent("redlock."+string(e.Op), trace.WithAttributes(attrs...))
	for _, n := range e.Nodes {
		if n.Outcome == redlock.Pending {
			continue
		}
		a := []attribute.KeyValue{
			attribute.String("redlock.master", n.Node), attribute.String("redlock.outcome", n.Outcome.String()),
			attribute.Float64("redlock.latency_ms", float64(n.Latency.Microseconds())/1000),
		}
		if n.Err != nil {
			a = append(a, attribute.String("error.message", n.Err.Error()))
		}
		span.AddEvent("redlock.reply", trace.WithAttributes(a...))
	}
}

// End records the call's metrics and ends its span.
func (o *Observer) End(ctx context.Context, c *redlock.Call) {
	switch c.Op {
	case redlock.CallLock, redlock.CallTryLock:
		outcome := attribute.String("redlock.outcome", "obtained")
		if c.Err != nil {
			outcome = attribute.String("redlock.outcome", "not_obtained")
		}
		set := metric.WithAttributes(attribute.String("redlock.call", string(c.Op)), outcome)
		o.acquireDuration.Record(ctx, c.Duration.Seconds(), set)
		o.attempts.Record(ctx, int64(c.Attempts), set)
		o.acquires.Add(ctx, 1, set)
		if c.Err == nil {
			o.mu.Lock()
			o.heldKeys[c.Key]++
			o.mu.Unlock()
			o.held.Add(ctx, 1)
		}
	case redlock.CallExtend:
		o.extends.Add(ctx, 1, metric.WithAttributes(attribute.String("redlock.call", "Extend"), okOutcome(c.Err)))
	case redlock.CallUnlock:
		o.releases.Add(ctx, 1, metric.WithAttributes(okOutcome(c.Err)))
		if !errors.Is(c.Err, redlock.ErrLockLost) {
			o.unheld(ctx, c.Key)
		}
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if c.Attempts > 0 {
		span.SetAttributes(attribute.Int("redlock.attempts", c.Attempts))
	}
	if c.Fence != 0 {
		span.SetAttributes(attribute.Int64("redlock.fence", int64(c.Fence)))
	}
	if c.Err != nil {
		span.SetStatus(codes.Error, c.Err.Error())
	}
	span.End(trace.WithTimestamp(c.Start.Add(c.Duration)))
}

// Lost counts a lost lock, which is no longer held.
func (o *Observer) Lost(key string, _ error) {
	ctx := context.Background()
	o.lost.Add(ctx, 1)
	o.unheld(ctx, key)
}

// unheld takes a lock of key off the held count, if one is counted.
func (o *Observer) unheld(ctx context.Context, key string) {
	o.mu.Lock()
	n := o.heldKeys[key]
	if n > 1 {
		o.heldKeys[key] = n - 1
	} else {
		delete(o.heldKeys, key)
	}
	o.mu.Unlock()
	if n > 0 {
		o.held.Add(ctx, -1)
	}
}

func okOutcome(err error) attribute.KeyValue {
	if err != nil {
		return attribute.String("redlock.outcome", "failed")
	}
	return attribute.String("redlock.outcome", "ok")
}
