package redlock

import (
	"context"
	"log/slog"
)

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
