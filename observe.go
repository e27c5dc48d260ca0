package redlock

import (
	"context"
	"log/slog"
	"time"
)

// Observer is told about every call, every quorum phase and every lost lock
// of a Redlock ([WithObserver]): each acquire attempt and its outcome, each
// Extend and renewal, each Unlock. [NewSlogObserver] logs them; the
// redlockotel module turns them into OpenTelemetry metrics and spans.
//
// The methods are called synchronously, from the goroutine of the call or,
// for renewals and lost locks, of the renewal scheduler, so they must be
// safe for concurrent use and return quickly. The events they are given are
// valid only during the method call: copy what you keep.
type Observer interface {
	// Start is called when Lock, TryLock, Do, Unlock or Extend begins, with
	// c's Op, Key and Start set. The call goes on with the context Start
	// returns (a tracer puts its span there), and passes it to the call's
	// other events and to its requests (so go-redis hooks see it too). It
	// must return ctx or a context derived from it.
	Start(ctx context.Context, c *Call) context.Context
	// Phase is called when a quorum phase is decided: an acquire attempt,
	// an Extend, a renewal (ctx is then context.Background()) or an Unlock.
	Phase(ctx context.Context, e *PhaseEvent)
	// End is called when the call that Start began returns, with c
	// complete.
	End(ctx context.Context, c *Call)
	// Lost is called when a held lock is lost: auto-extend could not renew
	// it, its validity ran out while its Done or Context was watched, or
	// the Redlock was closed while renewing it. cause wraps [ErrLockLost].
	//
	// Lost, and Phase for an extend or renewal, are called with the lock's
	// mutex held: they must not call the lock's methods.
	Lost(key string, cause error)
}

// CallOp names the call a [Call] describes.
type CallOp string

// The calls an [Observer] sees.
const (
	CallLock    CallOp = "Lock"
	CallTryLock CallOp = "TryLock"
	CallDo      CallOp = "Do"
	CallUnlock  CallOp = "Unlock"
	CallExtend  CallOp = "Extend"
)

// Call describes one call of Lock, TryLock, Do, Unlock or Extend.
type Call struct {
	Op    CallOp
	Key   string
	Start time.Time
	// Set for End:
	Duration time.Duration
	Attempts int    // acquire attempts made (Lock, TryLock)
	Fence    uint64 // the lock's fence token when it was taken with WithFencing
	Err      error  // what the call returned
}

// PhaseOp names the kind of quorum phase a [PhaseEvent] describes.
type PhaseOp string

// The phases an [Observer] sees.
const (
	PhaseAcquire PhaseOp = "acquire"
	PhaseExtend  PhaseOp = "extend"
	PhaseRenew   PhaseOp = "renew"
	PhaseRelease PhaseOp = "release"
	// PhaseSubscribe is reported once per Redlock, when a goroutine first
	// waits for a key (Key) and the Redlock subscribes on every master for
	// wake-ups from other processes' releases: a master that failed or
	// refused (an ACL without SUBSCRIBE) is Failed, and gives no wake-ups;
	// its waiters use their backoff. Err is set when no master listens.
	PhaseSubscribe PhaseOp = "subscribe"
)

// PhaseEvent is the outcome of one quorum phase for one key.
type PhaseEvent struct {
	Op      PhaseOp
	Key     string
	Attempt int // acquire: this call's attempt number, from 1
	// Nodes has one entry per master, in the order given to New, as known
	// when the phase was decided: a master that had not answered when a
	// quorum already had is Pending.
	Nodes     []NodeReply
	Quorum    int
	Succeeded int
	Refused   int
	Failed    int
	// Validity is what the lock had left when the phase was decided
	// (acquire, extend, renew; negative: it had run out).
	Validity time.Duration
	Fence    uint64 // acquire with fencing: the token, once confirmed
	Duration time.Duration
	Err      error // nil when the phase succeeded
}

// Outcome is one master's part in a quorum phase.
type Outcome uint8

// The outcomes of a master's request.
const (
	Pending   Outcome = iota // no reply yet when the phase was decided
	Succeeded                // the master did what was asked
	Refused                  // the key was held by another value (or gone)
	Failed                   // an error, or no reply by the deadline
)

var outcomeNames = [...]string{"pending", "succeeded", "refused", "failed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// NodeReply is one master's reply in a phase.
type NodeReply struct {
	Node    string // the master's Name: its address, never its credentials
	Outcome Outcome
	Latency time.Duration // from the phase's start to the reply (0 when Pending)
	Err     error         // Failed: why
}

// WithObserver makes the Redlock tell o about every call, quorum phase and
// lost lock (see [Observer]). It applies to New only: a Redlock has one
// observer, so that renewals and losses are reported to the same one as the
// calls. Default: none, and then nothing is measured or allocated for it.
func WithObserver(o Observer) Option {
	return func(c *config) {
		switch {
		case o == nil || isNil(o):
			c.fail(configErr("WithObserver", "observer is nil"))
		case c.inCall:
			c.fail(configErr("WithObserver", "an observer is set in New, for every call, not per call"))
		default:
			c.observer = &o
		}
	}
}

// startCall tells r's observer that a call began and returns the context
// the call goes on with.
func (r *Redlock) startCall(ctx context.Context, op CallOp, key string) (context.Context, *Call) {
	c := &Call{Op: op, Key: key, Start: time.Now()}
	return r.obs.Start(ctx, c), c
}

// endCall tells r's observer that call c returned err, with l when a lock
// was taken.
func (r *Redlock) endCall(ctx context.Context, c *Call, attempts int32, l *Lock, err error) {
	c.Duration, c.Attempts, c.Err = time.Since(c.Start), int(attempts), err
	if l != nil {
		c.Fence = l.token
	}
	r.obs.End(ctx, c)
}

// attempted reports an acquire attempt, decided by phase p (nil when
// none), to r's observer, if any.
func (r *Redlock) attempted(ctx context.Context, p *phase, key string, cfg *config, start time.Time, l *Lock, err error) {
	if r.obs != nil {
		e := &PhaseEvent{Op: PhaseAcquire, Key: key, Attempt: max(int(cfg.attempt), 1), Err: err}
		if l != nil {
			e.Fence, e.Validity = l.token, l.Until().Sub(r.clock.Now())
		}
		r.phaseEvent(ctx, e, p, 0, start)
	}
}

// phaseEvent fills e from key k of phase p and gives it to r's observer.
func (r *Redlock) phaseEvent(ctx context.Context, e *PhaseEvent, p *phase, k int, start time.Time) {
	e.Duration = r.clock.Now().Sub(start)
	e.Quorum = r.quorum
	if p != nil {
		t := &p.tallies[k]
		e.Succeeded, e.Refused, e.Failed = t.succeeded, t.refused, t.failed
		e.Nodes = p.masters(k)
	}
	r.obs.Phase(ctx, e)
}

// observedRelease reports an Unlock's release phase p, started at start,
// that ended with err to r's observer, if any.
func (l *Lock) observedRelease(ctx context.Context, p *phase, start time.Time, err error) {
	if l.r.obs != nil {
		l.r.phaseEvent(ctx, &PhaseEvent{Op: PhaseRelease, Key: l.key, Err: err}, p, 0, start)
	}
}

// observedLocked reports l's extend or renewal (key k of phase p, started
// at start) that ended with err to r's observer, if any (l.mu held).
func (l *Lock) observedLocked(ctx context.Context, op PhaseOp, p *phase, k int, start time.Time, err error) {
	if l.r.obs != nil {
		e := &PhaseEvent{Op: op, Key: l.key, Err: err, Fence: l.token, Validity: l.until.Sub(l.r.clock.Now())}
		l.r.phaseEvent(ctx, e, p, k, start)
	}
}

// NewSlogObserver returns an [Observer] that logs to logger: at Debug, each
// call's end and each quorum phase (every acquire attempt, extend, renewal
// and release, with the counts); at Warn, each master that failed in a
// phase and each lost lock. Every line names the lock ("lock") and, where
// one is concerned, the master ("master": its address, never its
// credentials). A nil logger means slog.Default().
func NewSlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ log *slog.Logger }

func (o slogObserver) Start(ctx context.Context, _ *Call) context.Context { return ctx }

func (o slogObserver) End(ctx context.Context, c *Call) {
	if !o.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("lock", c.Key), slog.Duration("duration", c.Duration)}
	if c.Attempts > 0 {
		attrs = append(attrs, slog.Int("attempts", c.Attempts))
	}
	if c.Fence != 0 {
		attrs = append(attrs, slog.Uint64("fence", c.Fence))
	}
	if c.Err != nil {
		attrs = append(attrs, slog.String("err", c.Err.Error()))
	}
	o.log.LogAttrs(ctx, slog.LevelDebug, "redlock: "+string(c.Op), attrs...)
}

func (o slogObserver) Phase(ctx context.Context, e *PhaseEvent) {
	for _, n := range e.Nodes {
		if n.Outcome == Failed && o.log.Enabled(ctx, slog.LevelWarn) {
			o.log.LogAttrs(ctx, slog.LevelWarn, "redlock: master failed",
				slog.String("lock", e.Key), slog.String("op", string(e.Op)),
				slog.String("master", n.Node), slog.String("err", errString(n.Err)))
		}
	}
	if !o.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs, slog.String("lock", e.Key))
	if e.Op == PhaseAcquire {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	attrs = append(attrs,
		slog.Int("succeeded", e.Succeeded), slog.Int("refused", e.Refused),
		slog.Int("failed", e.Failed), slog.Int("quorum", e.Quorum),
		slog.Duration("duration", e.Duration))
	if e.Err == nil && e.Op != PhaseRelease && e.Op != PhaseSubscribe {
		attrs = append(attrs, slog.Duration("validity", e.Validity))
	}
	if e.Fence != 0 {
		attrs = append(attrs, slog.Uint64("fence", e.Fence))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	o.log.LogAttrs(ctx, slog.LevelDebug, "redlock: "+string(e.Op), attrs...)
}

func (o slogObserver) Lost(key string, cause error) {
	o.log.LogAttrs(context.Background(), slog.LevelWarn, "redlock: lock lost",
		slog.String("lock", key), slog.String("cause", errString(cause)))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
