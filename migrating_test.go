package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock"
)

// TestMigratingRecipe runs the redlock side of docs/migrating.md, step by
// step, against three real masters: each step's code is the page's block
// word for word (TestMigratingDocMatches checks it), inside a function
// that gives it what the steps before it made.
func TestMigratingRecipe(t *testing.T) {
	addrs := masters().Addrs()[:3]
	ctx := context.Background()
	run := func(step string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}

	// 1. Masters.
	run("1. masters", func() error {
		rl, err := redlock.NewFromURLs(addrs)
		if err != nil {
			return err
		}
		defer rl.Close()
		if rl.Quorum() != 2 {
			return fmt.Errorf("quorum %d of %d masters; want 2", rl.Quorum(), len(rl.Nodes()))
		}
		return nil
	})
	rl, err := redlock.NewFromURLs(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	other, err := redlock.NewFromURLs(addrs) // another service, holding or waiting
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// 2. Lock: bound the wait.
	var held *redlock.Lock
	run("2. lock", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // redsync's 32 tries took about 5 s
		defer cancel()
		lock, err := rl.Lock(ctx, "order:42", redlock.WithTTL(8*time.Second))
		if err != nil {
			return err // errors.Is(err, redlock.ErrNotObtained), and ctx's error
		}
		held = lock
		return nil
	})

	// 7. Errors, while the lock of step 2 is held: another service's
	// TryLock is refused by a quorum.
	run("7. errors", func() error {
		rl := other
		err := func() error {
			_, err := rl.TryLock(ctx, "order:42")
			var qe *redlock.QuorumError
			switch {
			case errors.As(err, &qe) && qe.Refused > qe.Nodes-qe.Quorum:
				return fmt.Errorf("held elsewhere: %w", err) // the text names each master's part
			case errors.Is(err, redlock.ErrNotObtained):
				return err // too few masters answered, or ctx ended
			}
			return nil
		}()
		if err == nil || !strings.HasPrefix(err.Error(), "held elsewhere: ") {
			return fmt.Errorf("TryLock of a held lock: %v; want held elsewhere", err)
		}
		return nil
	})

	// The wait has no limit of its own: with the lock held, a Lock ends
	// only when its ctx does, and says so.
	run("the wait ends with ctx", func() error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := other.Lock(ctx, "order:42")
		if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("Lock of a held lock = %v; want ErrNotObtained and DeadlineExceeded", err)
		}
		settle(other) // its place in the masters' queues is taken back
		return nil
	})

	// 4. Valid and Until.
	run("4. until", func() error {
		lock := held
		if time.Now().After(lock.Until()) {
			return errors.New("lock expired: stop writing") // or watch lock.Done()
		}
		return nil
	})

	// 5. Extend.
	run("5. extend", func() error {
		lock := held
		if err := lock.Extend(ctx, 8*time.Second); err != nil {
			return err // errors.Is(err, redlock.ErrNotHeld): the lock is gone
		}
		return nil
	})

	// 6. Unlock.
	run("6. unlock", func() error {
		lock := held
		if err := lock.Unlock(ctx); err != nil {
			return err // errors.Is(err, redlock.ErrNotHeld): its validity had ended, or the key was gone
		}
		return nil
	})

	// 3. TryLock, now that the key is free; then 8. Options.
	run("3. trylock", func() error {
		lock, err := rl.TryLock(ctx, "order:42")
		if err != nil {
			return err // one attempt: errors.Is(err, redlock.ErrNotObtained)
		}
		return lock.Unlock(ctx)
	})
	run("8. options", func() error {
		lock, err := rl.Lock(ctx, "order:42",
			redlock.WithTTL(30*time.Second),
			redlock.WithRetry(10),
			redlock.WithBackoff(100*time.Millisecond, 100*time.Millisecond),
			redlock.WithNodeTimeout(300*time.Millisecond), // 30 s × 0.01
			redlock.WithDriftFactor(0.01),
		)
		if err != nil {
			return err
		}
		if lock.TTL() != 30*time.Second {
			return fmt.Errorf("TTL %v; want 30s", lock.TTL())
		}
		return lock.Unlock(ctx)
	})
}

// TestMigratingDocMatches: each redlock block of docs/migrating.md (a block
// that does not name redsync) is in this file word for word, so that
// TestMigratingRecipe runs what the page shows.
func TestMigratingDocMatches(t *testing.T) {
	src, err := os.ReadFile("migrating_test.go")
	if err != nil {
		t.Fatal(err)
	}
	here := "\n" + strings.Join(trimmedLines(string(src)), "\n") + "\n"
	n := 0
	for _, s := range goSnippets(t, "docs/migrating.md") {
		if slices.ContainsFunc(namedPackages(s.code), func(p string) bool { return strings.Contains(snippetImports[p], "redsync") }) ||
			strings.Contains(s.code, "mutex.") {
			continue // redsync's: the before
		}
		n++
		if block := "\n" + strings.Join(trimmedLines(s.code), "\n") + "\n"; !strings.Contains(here, block) {
			t.Errorf("%s is not in migrating_test.go word for word:\n%s", s.where, s.code)
		}
	}
	if n < 8 {
		t.Errorf("%d redlock blocks in docs/migrating.md; want one per step (8)", n)
	}
}

// trimmedLines returns the lines of s without their indentation, blank
// lines dropped.
func trimmedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
