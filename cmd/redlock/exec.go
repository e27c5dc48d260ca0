package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/cliflag"
)

// execArgs is what the exec command was asked to do.
type execArgs struct {
	masters          []string
	ttl, wait, grace time.Duration
	gate             time.Duration // --restart-gate, $REDLOCK_RESTART_GATE; 0: off
	fencing, verbose bool
	owner            string // --owner, $REDLOCK_OWNER, or a new UUID; "" with --read, --write, --permits
	read, write      bool   // --read, --write: a reader or the writer of the RWMutex NAME
	permits          int    // --permits: take one of a Semaphore's permits; 0: the lock
	name             string
	command          []string
}

func cmdExec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("exec")
	masters := fs.String("masters", "", "")
	var a execArgs
	cliflag.DurationVar(fs, &a.ttl, "ttl", 30*time.Second, "")
	cliflag.DurationVar(fs, &a.wait, "wait", 0, "")
	cliflag.DurationVar(fs, &a.grace, "grace", 10*time.Second, "")
	fs.BoolVar(&a.fencing, "fencing", false, "")
	fs.StringVar(&a.owner, "owner", "", "")
	fs.BoolVar(&a.verbose, "verbose", false, "")
	fs.BoolVar(&a.read, "read", false, "")
	fs.BoolVar(&a.write, "write", false, "")
	gate := fs.String("restart-gate", "", "")
	fs.IntVar(&a.permits, "permits", 0, "")
	if status, done := parseFlags(fs, args, execUsage, stdout, stderr); done {
		return status
	}
	// "--" right before the arguments ended the flags: no NAME came first.
	n := len(args) - fs.NArg()
	err := a.check(fs.Args(), n > 0 && args[n-1] == "--")
	if err == nil {
		a.gate, err = restartGate(*gate)
	}
	if err == nil {
		a.masters, err = masterURLs(*masters)
	}
	if err != nil {
		return usageFail(stderr, "exec", err)
	}

	opts := []redlock.Option{redlock.WithTTL(a.ttl), redlock.WithRestartGate(a.gate)}
	if a.fencing {
		opts = append(opts, redlock.WithFencing())
	}
	notice := &downNotice{name: a.name, w: stderr}
	if a.verbose {
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		notice.next = redlock.NewSlogObserver(log)
	}
	opts = append(opts, redlock.WithObserver(notice))
	rl, err := redlock.NewFromURLs(a.masters, opts...)
	if err != nil {
		return usageFail(stderr, "exec", flagError(err))
	}
	defer rl.Close()

	// Catch the signals from now on: while waiting for the lock they end the
	// wait, later they go to the command.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	// The acquire's contexts stay alive until exec ends: the acquire returns
	// at a quorum, and cancelling its context then would cut short the SETs
	// still on their way to the other masters, leaving the lock on a bare
	// quorum.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.wait > 0 {
		var cancelWait context.CancelFunc
		ctx, cancelWait = context.WithTimeout(ctx, a.wait)
		defer cancelWait()
	}
	lock, status := obtain(ctx, cancel, rl, &a, sigs, stderr)
	if lock == nil {
		return status
	}
	notice.holding()
	status = runLocked(lock, &a, sigs, stdout, stderr)
	notice.settle(rl.Nodes(), redlock.DefaultNodeTimeout)
	return status
}

// check reads NAME -- COMMAND [ARG...] and checks the flags' values;
// dashed: a "--" ended the flags just before rest.
func (a *execArgs) check(rest []string, dashed bool) error {
	switch {
	case a.ttl <= 0:
		return usagef("--ttl must be positive, got %v", a.ttl)
	case a.wait < 0:
		return usagef("--wait must be 0 (one attempt) or positive, got %v", a.wait)
	case a.grace < 0:
		return usagef("--grace must not be negative, got %v", a.grace)
	case a.read && a.write:
		return usagef("--read and --write exclude each other: a reader shares the lock, the writer holds it alone")
	case (a.read || a.write) && a.owner != "":
		return usagef("--owner does not apply with --read or --write: an RWMutex's holds have no owner and do not nest")
	case a.read && a.fencing:
		return usagef("--fencing applies to the writer (--write), not to readers")
	case a.permits < 0:
		return usagef("--permits must be 0 (the lock) or a semaphore's number of permits, got %d", a.permits)
	case a.permits > 0 && (a.read || a.write):
		return usagef("--permits excludes --read and --write: a Semaphore's permits are one kind of hold")
	case a.permits > 0 && a.owner != "":
		return usagef("--owner does not apply to --permits: a permit does not nest")
	case len(rest) == 0:
		return usagef("missing NAME -- COMMAND")
	case rest[0] == "" || rest[0] == "--" || dashed && (len(rest) < 2 || rest[1] != "--"):
		return usagef("missing NAME before -- COMMAND; want redlock exec [flags] NAME -- COMMAND [ARG...]")
	case len(rest) == 1 || rest[1] != "--":
		if len(rest) > 1 && len(rest[1]) > 1 && rest[1][0] == '-' {
			return usagef("want -- after NAME %q, got %q; flags go before NAME", rest[0], rest[1])
		}
		return usagef("want -- between NAME %q and the command", rest[0])
	case len(rest) == 2 || rest[2] == "":
		return usagef("missing COMMAND after --")
	}
	a.name, a.command = rest[0], rest[2:]
	if a.read || a.write || a.permits > 0 {
		return nil // an RWMutex's holds and a permit have no owner
	}
	// Every exec holds the lock as an owner, which its command inherits:
	// a redlock exec of the same name under it nests instead of waiting for
	// its own caller.
	if a.owner == "" {
		a.owner = os.Getenv("REDLOCK_OWNER")
	}
	if a.owner == "" {
		a.owner = uuid.NewString()
	}
	if len(a.owner) > redlock.MaxOwnerLen {
		return usagef("--owner (or $REDLOCK_OWNER) is %d bytes, more than %d", len(a.owner), redlock.MaxOwnerLen)
	}
	return nil
}

// restartGate reads the --restart-gate value, or $REDLOCK_RESTART_GATE
// when the flag is not given: a duration, 0 (the default) for none.
func restartGate(flag string) (time.Duration, error) {
	v, from := flag, "--restart-gate"
	if v == "" {
		v, from = os.Getenv("REDLOCK_RESTART_GATE"), "$REDLOCK_RESTART_GATE"
	}
	if v == "" {
		return 0, nil
	}
	d, err := cliflag.ParseDuration(v)
	if err == nil && d < 0 {
		err = fmt.Errorf("negative")
	}
	if err != nil {
		return 0, usagef("%s must be a duration such as 1m (0 for none), got %q: %v", from, v, err)
	}
	return d, nil
}

// flagError says which flag to fix when the library rejected an option.
func flagError(err error) error {
	var ce *redlock.ConfigError
	if errors.As(err, &ce) {
		switch ce.Field {
		case "WithTTL":
			return usagef("--ttl: %s", ce.Reason)
		case "WithRestartGate":
			return usagef("--restart-gate: %s", ce.Reason)
		case "permits":
			return usagef("--permits: %s", ce.Reason)
		}
	}
	var pe *redlock.PermitsError
	if errors.As(err, &pe) {
		return usagef("--permits %d: %v", pe.Permits, err)
	}
	return err
}

// obtain takes the lock: one attempt with --wait 0, else retries until --wait
// (ctx's deadline) runs out. A signal ends the wait, through cancel. Without a
// lock it returns the exit status.
func obtain(ctx context.Context, cancel context.CancelFunc, rl *redlock.Redlock, a *execArgs, sigs <-chan os.Signal, stderr io.Writer) (*redlock.Lock, int) {
	var caught os.Signal
	stopped := make(chan struct{})
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case caught = <-sigs:
			cancel()
		case <-stopped:
		}
	}()

	var lock *redlock.Lock
	var err error
	opts := keepOptions()
	rw := rl.RWMutex(a.name)
	switch {
	case a.read && a.wait == 0:
		lock, err = rw.TryRLock(ctx, opts...)
	case a.read:
		lock, err = rw.RLock(ctx, opts...)
	case a.write && a.wait == 0:
		lock, err = rw.TryLock(ctx, opts...)
	case a.write:
		lock, err = rw.Lock(ctx, opts...)
	case a.permits > 0 && a.wait == 0:
		lock, err = rl.Semaphore(a.name, a.permits).TryAcquire(ctx, opts...)
	case a.permits > 0:
		lock, err = rl.Semaphore(a.name, a.permits).Acquire(ctx, opts...)
	case a.wait == 0:
		lock, err = rl.TryLock(ctx, a.name, append(opts, redlock.WithOwner(a.owner))...)
	default:
		lock, err = rl.Lock(ctx, a.name, append(opts, redlock.WithOwner(a.owner))...)
	}
	close(stopped)
	<-watching

	if caught != nil {
		if lock != nil {
			unlock(lock, stderr)
		}
		fmt.Fprintf(stderr, "redlock exec: %v while waiting for lock %q; not running the command\n", caught, a.name)
		return nil, signalStatus(caught)
	}
	if err == nil {
		return lock, 0
	}
	var qe *redlock.QuorumError
	switch {
	case !errors.Is(err, redlock.ErrNotObtained):
		return nil, usageFail(stderr, "exec", flagError(err))
	case errors.As(err, &qe) && qe.Refused == 0 && qe.Failed > 0 && errors.Is(err, redlock.ErrRestartGate):
		fmt.Fprintf(stderr, "redlock exec: lock %q: too few masters may vote; some came up less than the restart gate ago and vote once it has passed: %v\n", a.name, err)
		return nil, exitUnavailable
	case errors.As(err, &qe) && qe.Refused == 0 && qe.Failed > 0:
		fmt.Fprintf(stderr, "redlock exec: lock %q: too few masters answered; check that they are up and reachable: %v\n", a.name, err)
		return nil, exitUnavailable
	default:
		how := "held elsewhere"
		if a.permits > 0 {
			how = fmt.Sprintf("all %d permits held elsewhere", a.permits)
		}
		if a.wait > 0 {
			how = fmt.Sprintf("still %s after --wait %v", how, a.wait)
		}
		fmt.Fprintf(stderr, "redlock exec: lock %q not obtained: %s (%v)\n", a.name, how, err)
		return nil, exitNotObtained
	}
}

// unlock releases lock and reports whether its validity had ended before
// (the command may then have overlapped another holder).
func unlock(lock *redlock.Lock, stderr io.Writer) (lost bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := lock.Unlock(ctx)
	switch {
	case err == nil:
		return false
	case errors.Is(err, redlock.ErrNotHeld):
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return true
	default: // too few masters answered: the keys expire with their TTL
		fmt.Fprintf(stderr, "redlock exec: releasing lock %q (it expires with its TTL anyway): %v\n", lock.Key(), err)
		return false
	}
}
