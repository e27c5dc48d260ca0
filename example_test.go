package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
)

func Example() {
	// Independent Redis masters (the tests start five and list them here).
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		nodes = append(nodes, redlock.NewNode(redis.NewClient(&redis.Options{Addr: addr})))
	}
	rl, err := redlock.New(nodes, redlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer rl.Close()

	ctx := context.Background()
	lock, err := rl.Lock(ctx, "order:42")
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	// Work here, and stop before lock.Until().
	fmt.Println("holding", lock.Key(), "for at most", lock.TTL())

	if err := lock.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output: holding order:42 for at most 10s
}

func ExampleRedlock_TryLock() {
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		nodes = append(nodes, redlock.NewNode(redis.NewClient(&redis.Options{Addr: addr})))
	}
	rl, _ := redlock.New(nodes)
	defer rl.Close()
	ctx := context.Background()

	first, _ := rl.TryLock(ctx, "report:daily")
	_, err := rl.TryLock(ctx, "report:daily")
	fmt.Println(errors.Is(err, redlock.ErrNotObtained))
	first.Unlock(ctx)
	// Output: true
}

func ExampleFence() {
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		nodes = append(nodes, redlock.NewNode(redis.NewClient(&redis.Options{Addr: addr})))
	}
	rl, err := redlock.New(nodes, redlock.WithFencing())
	if err != nil {
		panic(err)
	}
	defer rl.Close()
	ctx := context.Background()

	// The resource keeps one Fence per lock key (the zero value is ready).
	var fence redlock.Fence

	first, err := rl.Lock(ctx, "invoice:7")
	if err != nil {
		panic(err)
	}
	stale := first.Fence()
	first.Unlock(ctx) // as if its validity ran out while the process was paused

	second, err := rl.Lock(ctx, "invoice:7")
	if err != nil {
		panic(err)
	}
	fmt.Println("newer holder writes:", fence.Check(second.Fence()))
	second.Unlock(ctx)

	// The first holder wakes up and tries to write: one line rejects it.
	err = fence.Check(stale)
	fmt.Println("stale holder rejected:", errors.Is(err, redlock.ErrStaleToken))
	// Output:
	// newer holder writes: <nil>
	// stale holder rejected: true
}

func ExampleRedlock_Do() {
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		nodes = append(nodes, redlock.NewNode(redis.NewClient(&redis.Options{Addr: addr})))
	}
	rl, _ := redlock.New(nodes)
	defer rl.Close()

	err := rl.Do(context.Background(), "job:nightly", func(ctx context.Context) error {
		// Long work: the lock is renewed meanwhile; stop when ctx ends.
		select {
		case <-time.After(10 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx) // errors.Is(err, redlock.ErrLockLost)
		}
	}, redlock.WithTTL(time.Second))
	fmt.Println(err)
	// Output: <nil>
}

func ExampleNewNode() {
	// One go-redis client per master, made as the README recommends; the
	// Redlock does not close clients given to it, so close them after it.
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		nodes = append(nodes, redlock.NewNode(c))
	}
	rl, err := redlock.New(nodes)
	if err != nil {
		panic(err)
	}
	defer rl.Close()

	ctx := context.Background()
	lock, err := rl.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	fmt.Println("holding", lock.Key())
	_ = lock.Unlock(ctx)
	// Output: holding invoice:7
}

func ExampleNewSlogObserver() {
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		nodes = append(nodes, redlock.NewNode(redis.NewClient(&redis.Options{Addr: addr})))
	}
	// Debug: every attempt and call; Warn: a failing master, a lost lock.
	// (Times are dropped here only to keep the output the same every run.)
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "duration", "validity":
				return slog.Attr{}
			}
			return a
		},
	}))
	rl, _ := redlock.New(nodes, redlock.WithObserver(redlock.NewSlogObserver(log)))
	defer rl.Close()
	ctx := context.Background()

	lock, _ := rl.Lock(ctx, "invoice:7")
	lock.Unlock(ctx)
	// Output:
	// level=DEBUG msg="redlock: acquire" lock=invoice:7 attempt=1 succeeded=3 refused=0 failed=0 quorum=3
	// level=DEBUG msg="redlock: Lock" lock=invoice:7 attempts=1
	// level=DEBUG msg="redlock: release" lock=invoice:7 succeeded=3 refused=0 failed=0 quorum=3
	// level=DEBUG msg="redlock: Unlock" lock=invoice:7
}

func ExampleWithOwner() {
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		nodes = append(nodes, redlock.NewNode(redis.NewClient(&redis.Options{Addr: addr})))
	}
	rl, _ := redlock.New(nodes)
	defer rl.Close()
	ctx := context.Background()

	// A job takes the lock, then calls code that takes it again: with the
	// job's ID as the owner, the second Lock nests instead of waiting.
	job := redlock.WithOwner("job-7")
	outer, err := rl.Lock(ctx, "invoice:9", job)
	if err != nil {
		panic(err)
	}
	inner, err := rl.TryLock(ctx, "invoice:9", job)
	fmt.Println("nested:", err == nil)
	_, err = rl.TryLock(ctx, "invoice:9", redlock.WithOwner("job-8"))
	fmt.Println("another owner:", errors.Is(err, redlock.ErrNotObtained))

	_ = inner.Unlock(ctx)
	_ = outer.Unlock(ctx) // the last hold: the key is free again
	next, err := rl.TryLock(ctx, "invoice:9", redlock.WithOwner("job-8"))
	fmt.Println("after the last hold:", err == nil)
	_ = next.Unlock(ctx)
	// Output:
	// nested: true
	// another owner: true
	// after the last hold: true
}
