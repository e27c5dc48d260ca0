package redlock

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hookClock is the real clock, and runs hook (when set) on every reading
// with the names of the functions on the reader's stack: a test stops a
// goroutine at a chosen reading to force a schedule.
type hookClock struct {
	hook atomic.Pointer[func(stack string)]
}

func (c *hookClock) Now() time.Time {
	if h := c.hook.Load(); h != nil {
		pcs := make([]uintptr, 32)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
		var b strings.Builder
		for {
			f, more := frames.Next()
			b.WriteString(f.Function)
			b.WriteByte('\n')
			if !more {
				break
			}
		}
		(*h)(b.String())
	}
	return time.Now()
}

// parkedIn waits until some goroutine is parked on a mutex inside fn.
func parkedIn(t testing.TB, fn string) {
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, "SemacquireMutex") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("no goroutine parked on a mutex in " + fn)
}

// TestHandOffKeepTimerRacesUnlock: the keepLocked timer of a lock taken by
// hand-off fires at its first Until, after an Extend moved it, while the
// lock's Unlock runs. The schedule:
//
//  1. the timer's check reads h.held == l (mine) and, under l.mu, that l is
//     neither released nor ended with time left: it will re-arm;
//  2. before it takes handsMu, the Unlock sets l.released, and its stay
//     makes h a registration again: held = nil, h back in the table, and
//     h.expiry stopped and set to nil;
//  3. the check takes handsMu, finds h in the table and calls
//     h.expiry.Reset on the nil timer: a nil pointer dereference in a timer
//     goroutine, which kills the process.
//
// The clock seam stops the check at step 1 (its reading under l.mu) with
// handsMu held, and lets the Unlock's stay take handsMu first.
func TestHandOffKeepTimerRacesUnlock(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	holder := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())))
	waiter := newRedlock(t, nodesOf(t, clients(t, masters.Addrs())), WithBackoff(10*time.Second, 10*time.Second))
	c := &hookClock{}
	waiter.clock = c
	const ttl = 300 * time.Millisecond
	l := handedLock(t, admin, holder, waiter, WithTTL(ttl))
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan error, 1)
	var checked, stayed sync.Once
	hook := func(stack string) {
		switch {
		case strings.Contains(stack, "keepLocked.func1"):
			checked.Do(func() {
				// Step 1 is done: hold handsMu so the check parks on it,
				// and start the Unlock (it waits for l.mu, held here).
				waiter.wake.handsMu.Lock()
				go func() { unlocked <- l.Unlock(ctx) }()
			})
		case strings.Contains(stack, "(*wakeups).stay"):
			stayed.Do(func() {
				// Step 2, in stay's register: the check waits for
				// handsMu; let stay take it first.
				parkedIn(t, "keepLocked.func1")
				waiter.wake.handsMu.Unlock()
			})
		}
	}
	c.hook.Store(&hook)
	select {
	case err := <-unlocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Unlock did not run: the keepLocked timer did not fire at the first Until")
	}
	c.hook.Store(nil)
	settle(waiter)
}
