package redlock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Test for them with [errors.Is]; the errors returned by this
// package wrap them with the details (per-node errors, counts, the context's
// error).
var (
	// ErrNotObtained is wrapped by every error of a failed acquire (Lock,
	// TryLock): the key is held by someone else, too few masters answered, or
	// the validity left after acquiring was under the minimum.
	ErrNotObtained = errors.New("redlock: not obtained")

	// ErrNotHeld is wrapped by the errors of Unlock and Extend when the lock is
	// not (or no longer) held: its validity ended, its value is gone from a
	// quorum of masters, it was already released, or the *Lock is nil. After
	// ErrNotHeld from Unlock the critical section may have overlapped another
	// holder's.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrClosed is returned by calls on a Redlock after Close.
	ErrClosed = errors.New("redlock: closed")

	// ErrStaleToken is wrapped by the error a [Fence] returns for a write
	// whose fencing token is lower than one it has already accepted: the
	// writer's lock had expired and another client has held it since.
	ErrStaleToken = errors.New("redlock: stale fencing token")

	// ErrLockLost is the cause ([context.Cause]) of a [Lock.Context]
	// cancelled because the lock was lost: its validity ran out without a
	// renewal (a lock without [WithAutoExtend] past [Lock.Until]), auto-extend
	// could not renew it with a quorum in time, the masters no longer hold its
	// value, or the Redlock was closed while auto-extend was renewing it. The
	// cause wraps it with the details; test with errors.Is. Unlock and Extend
	// of a lost lock return errors that wrap it too.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrUnlocked is the cause ([context.Cause]) of a [Lock.Context]
	// cancelled because Unlock was called. It is never returned by a call.
	ErrUnlocked = errors.New("redlock: unlocked")

	// ErrBadReply is wrapped by the [*NodeError] of a master whose reply was
	// not one a Redis master gives to the command sent: a wrong type (a
	// string where an integer belongs), a value out of range (a script
	// answering 7 for 0 or 1, a negative fence token). Such a master counts as
	// failed, never as a success or a refusal.
	ErrBadReply = errors.New("redlock: unexpected reply")

	// ErrRestartGate is wrapped by the [*NodeError] of a master whose vote
	// did not count because it came back up less than the restart gate ago
	// ([WithRestartGate]).
	ErrRestartGate = errors.New("redlock: master inside its restart gate")

	// ErrNotReplicated is wrapped by the [*NodeError] of a master whose vote
	// did not count because fewer of its replicas than [WithReplicaConfirm]
	// asks for confirmed it in time.
	ErrNotReplicated = errors.New("redlock: vote not confirmed by the master's replicas")
)

// NodeError is the failure of one master: a network error, a timeout, an
// error reply (NOPERM from an ACL, say), or a reply the library could not use
// ([ErrBadReply]). Node names the master (its address, never its credentials).
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return "redlock: node " + e.Node + ": " + e.Err.Error() }

// Unwrap returns the underlying error, so errors.Is(err, context.DeadlineExceeded)
// works for a node that timed out.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError is the outcome of a phase (acquire, fence, extend, release) that
// did not reach a quorum of masters, or reached it too late. Its Error is
// one line that names every master with its part, for example:
//
//	redlock: acquire "order:42": no quorum: 0 succeeded, 1 refused (held by another owner), 1 failed, 1 not awaited of 3 masters (need 2): 10.0.0.1:6379/0 refused; 10.0.0.2:6379/0 failed: dial tcp 10.0.0.2:6379: connect: connection refused; 10.0.0.3:6379/0 not awaited
//
// A QuorumError from an acquire matches [ErrNotObtained] with errors.Is; one
// from Extend or Unlock matches [ErrNotHeld] when the key was gone from so many
// masters that no quorum can hold it (not when masters merely failed to
// answer). errors.As on it reaches the per-node errors too: Unwrap returns them.
type QuorumError struct {
	Op     string // "acquire", "fence", "extend" or "release"
	Key    string
	Nodes  int // masters asked
	Quorum int // successes needed

	// Succeeded counts the masters that did what was asked (set, extended,
	// released the key); Refused those that answered that the key is not ours
	// (held by another value, or gone); Failed those that gave an error or did
	// not answer in time. Masters still in flight at the decision count in
	// none of them: they were not awaited.
	Succeeded, Refused, Failed int

	// Validity is what was left of the lock's TTL at the decision when the
	// quorum was reached but the validity was under the minimum (Late is then
	// true). It is zero otherwise.
	Validity time.Duration
	Late     bool

	// Errs holds a *NodeError for each master that Failed.
	Errs []error

	// Masters has one entry per master, in the order given to New, with its
	// part in the decision: Succeeded, Refused, Failed (with Err), or
	// Pending for a master not awaited (the outcome was decided without it,
	// or ctx ended first). Latency is set only for a Redlock with an
	// [Observer]. Masters is empty for a phase that sent no request (Late,
	// when too little validity was left to start it).
	Masters []NodeReply

	// free, for a permit's acquire, is each refusing master's free slots
	// (see Semaphore): where the next attempt looks.
	free []uint64
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %s: ", e.Op, quoteKey(e.Key))
	if e.Late {
		fmt.Fprintf(&b, "quorum reached but only %v of validity left, no more than the minimum", e.Validity)
	} else {
		fmt.Fprintf(&b, "no quorum: %d succeeded, %d refused", e.Succeeded, e.Refused)
		if e.Refused > 0 {
			fmt.Fprintf(&b, " (%s)", refusedMeans(e.Op))
		}
		fmt.Fprintf(&b, ", %d failed", e.Failed)
		if n := e.Nodes - e.Succeeded - e.Refused - e.Failed; n > 0 && len(e.Masters) > 0 {
			fmt.Fprintf(&b, ", %d not awaited", n)
		}
		fmt.Fprintf(&b, " of %d masters (need %d)", e.Nodes, e.Quorum)
	}
	if len(e.Masters) == 0 {
		// Made by hand, or no request was sent: the failures are all there is.
		for i, err := range e.Errs {
			b.WriteString(listSep(i))
			b.WriteString(oneLine(strings.TrimPrefix(err.Error(), "redlock: ")))
		}
		return b.String()
	}
	for i, m := range e.Masters {
		b.WriteString(listSep(i))
		b.WriteString(m.Node)
		switch m.Outcome {
		case Pending:
			b.WriteString(" not awaited")
		case Failed:
			b.WriteString(" failed")
			if m.Err != nil {
				b.WriteString(": " + oneLine(strings.TrimPrefix(m.Err.Error(), "redlock: ")))
			}
		default:
			b.WriteString(" " + m.Outcome.String())
		}
	}
	return b.String()
}

// listSep is what goes before the i-th master or error of a QuorumError.
func listSep(i int) string {
	if i == 0 {
		return ": "
	}
	return "; "
}

// refusedMeans says what a master's refusal in phase op means.
func refusedMeans(op string) string {
	if op == opAcquire {
		return "held by another owner"
	}
	return "the key is gone or held by another owner"
}

// Is reports whether target is the sentinel this phase's failure stands for.
func (e *QuorumError) Is(target error) bool {
	switch e.Op {
	case opAcquire, opFence:
		return target == ErrNotObtained
	default: // extend, release: not held when the key is gone from a quorum
		return target == ErrNotHeld && (e.Late || e.Refused > e.Nodes-e.Quorum)
	}
}

// Unwrap returns the per-node errors.
func (e *QuorumError) Unwrap() []error { return e.Errs }

// StaleTokenError is a write rejected by a [Fence]: its Token is lower than
// the Highest token the fence has accepted. It matches [ErrStaleToken] with
// errors.Is.
type StaleTokenError struct {
	Token   uint64 // the rejected write's token
	Highest uint64 // the highest token accepted before it
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("redlock: stale fencing token %d: a holder with token %d has written since; this holder's lock had expired", e.Token, e.Highest)
}

// Unwrap returns [ErrStaleToken].
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// ConfigError reports an invalid argument or option: which one, and why.
type ConfigError struct {
	Field  string // the option or argument, e.g. "WithTTL" or "key"
	Reason string // what was wrong and what would be right
}

func (e *ConfigError) Error() string { return "redlock: invalid " + e.Field + ": " + e.Reason }

func configErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// lineErrors are errors joined on one line, "; " between them, for logs
// that keep an entry per line ([errors.Join] puts each on a line of its
// own). errors.Is and errors.As see each of them.
type lineErrors struct{ errs []error }

func (e *lineErrors) Error() string {
	var b strings.Builder
	for i, err := range e.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(oneLine(err.Error()))
	}
	return b.String()
}

func (e *lineErrors) Unwrap() []error { return e.errs }

// joinLine joins the errors that are not nil on one line, as errors.Join
// does on several: nil when all are.
func joinLine(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return &lineErrors{kept}
}

// oneLine is s with line breaks (an errors.Join inside, a server's reply)
// as "; ".
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
}

// notHeld wraps ErrNotHeld with why.
func notHeld(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrNotHeld, quoteKey(key), fmt.Sprintf(format, args...))
}

// quoteKey quotes a key for an error message (escaping newlines and binary
// bytes, so a key cannot forge a log line), shortened when it is long.
func quoteKey(key string) string {
	const limit = 128
	if len(key) <= limit {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%q... (%d bytes)", key[:limit], len(key))
}

// lost wraps ErrLockLost with the key and why.
func lost(key string, why error) error {
	return fmt.Errorf("%w: %q: %w", ErrLockLost, key, why)
}

// Phase names used in QuorumError.Op.
const (
	opAcquire = "acquire"
	opFence   = "fence"
	opExtend  = "extend"
	opRelease = "release"
)

// gateError is a vote refused by the restart gate: the master has been up
// for less than gate, and its votes count in left.
type gateError struct{ left, gate time.Duration }

func (e *gateError) Error() string {
	return fmt.Sprintf("%v: it has been up less than the gate %v (it restarted); its votes count in %v", ErrRestartGate, e.gate, e.left)
}

func (e *gateError) Unwrap() error { return ErrRestartGate }
