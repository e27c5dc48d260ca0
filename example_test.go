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

// The examples reach the masters the tests start (five local
// redis-servers) through $REDLOCK_MASTERS, the variable the command reads:
// host:port,host:port,... Each builds its clients with the settings the
// README recommends, or lets NewFromURLs, which sets them, build them.

func Example() {
	// One URL per independent Redis master: here the tests' five.
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","),
		redlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()

	// Lock waits and retries until ctx ends: give it a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := rl.Lock(ctx, "order:42")
	if err != nil {
		fmt.Println("not obtained:", err) // errors.Is(err, redlock.ErrNotObtained)
		return
	}
	// Work here, and stop before lock.Until().
	fmt.Println("holding", lock.Key(), "for at most", lock.TTL())

	if err := lock.Unlock(ctx); err != nil {
		// errors.Is(err, redlock.ErrNotHeld): the validity had ended, and
		// the work may have overlapped another holder's.
		fmt.Println("unlock:", err)
	}
	// Output: holding order:42 for at most 10s
}

func ExampleNewFromURLs() {
	// host:port, redis://[user:password@]host:port[/db], rediss://... (TLS),
	// redis+sentinel://..., redis+cluster://...: one URL per master. The
	// clients it makes fail fast on a dead master (no go-redis retries) and
	// keep to the per-node timeout; Close closes them.
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	fmt.Println(len(rl.Nodes()), "masters, quorum", rl.Quorum())

	// Bad input is a *ConfigError that quotes the URL as given (passwords
	// hidden) and says what would be right.
	_, err = redlock.NewFromURLs([]string{"redis://:s3cret@10.0.0.1"})
	fmt.Println(err)
	// Output:
	// 5 masters, quorum 3
	// redlock: invalid master URL: "redis://:xxxxx@10.0.0.1": 10.0.0.1 has no port; write host:port (Redis listens on 6379 by default): a master's port is never guessed
}

func ExampleRedlock_TryLock() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	first, err := rl.TryLock(ctx, "report:daily")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = rl.TryLock(ctx, "report:daily") // one attempt: held by first
	fmt.Println(errors.Is(err, redlock.ErrNotObtained))
	if err := first.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output: true
}

// An acquire that failed is a *QuorumError: the counts, and each master's
// part (Masters).
func ExampleQuorumError() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	held, err := rl.Lock(ctx, "invoice:8")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = rl.TryLock(ctx, "invoice:8")
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Println("op:", qe.Op, "- quorum:", qe.Quorum, "of", qe.Nodes)
		// Refused: the master answered that another owner holds the key;
		// Failed: an error or no reply, with a *NodeError in qe.Errs.
		fmt.Println("held by another owner:", qe.Refused > qe.Nodes-qe.Quorum, "- failed:", qe.Failed)
	}
	if err := held.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output:
	// op: acquire - quorum: 3 of 5
	// held by another owner: true - failed: 0
}

func ExampleLock_Extend() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","),
		redlock.WithTTL(2*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	lock, err := rl.Lock(ctx, "import:batch-7")
	if err != nil {
		fmt.Println(err)
		return
	}
	before := lock.Until()
	// The work needs longer: reset the keys' TTL on the masters. Until
	// moves to this call's start plus 30s, less the drift allowance.
	if err := lock.Extend(ctx, 30*time.Second); err != nil {
		// errors.Is(err, redlock.ErrNotHeld): too late, the lock is gone.
		fmt.Println("extend:", err)
		return
	}
	fmt.Println("TTL:", lock.TTL(), "- Until moved later:", lock.Until().After(before))
	if err := lock.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output: TTL: 30s - Until moved later: true
}

func ExampleFence() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","),
		redlock.WithFencing())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// The resource keeps one Fence per lock key (the zero value is ready).
	var fence redlock.Fence

	first, err := rl.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	stale := first.Fence()
	// As if its validity ran out while the process was paused:
	if err := first.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}

	second, err := rl.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("newer holder writes:", fence.Check(second.Fence()))
	if err := second.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}

	// The first holder wakes up and tries to write: one line rejects it.
	err = fence.Check(stale)
	fmt.Println("stale holder rejected:", errors.Is(err, redlock.ErrStaleToken))
	// Output:
	// newer holder writes: <nil>
	// stale holder rejected: true
}

func ExampleRedlock_Do() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	err = rl.Do(ctx, "job:nightly", func(ctx context.Context) error {
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
	// One go-redis client per master, made as the README recommends: no
	// go-redis retries (a dead master fails at once) and context deadlines
	// on the socket (the per-node timeout holds). The Redlock does not
	// close clients given to it, so close them after it.
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		nodes = append(nodes, redlock.NewNode(c))
	}
	rl, err := redlock.New(nodes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	lock, err := rl.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	fmt.Println("holding", lock.Key())
	if err := lock.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output: holding invoice:7
}

func ExampleNewSlogObserver() {
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		nodes = append(nodes, redlock.NewNode(c))
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
	rl, err := redlock.New(nodes, redlock.WithObserver(redlock.NewSlogObserver(log)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	lock, err := rl.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := lock.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output:
	// level=DEBUG msg="redlock: acquire" lock=invoice:7 attempt=1 succeeded=3 refused=0 failed=0 quorum=3
	// level=DEBUG msg="redlock: Lock" lock=invoice:7 attempts=1
	// level=DEBUG msg="redlock: release" lock=invoice:7 succeeded=3 refused=0 failed=0 quorum=3
	// level=DEBUG msg="redlock: Unlock" lock=invoice:7
}

func ExampleWithOwner() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// A job takes the lock, then calls code that takes it again: with the
	// job's ID as the owner, the second Lock nests instead of waiting.
	job := redlock.WithOwner("job-7")
	outer, err := rl.Lock(ctx, "invoice:9", job)
	if err != nil {
		fmt.Println(err)
		return
	}
	inner, err := rl.TryLock(ctx, "invoice:9", job)
	fmt.Println("nested:", err == nil)
	_, err = rl.TryLock(ctx, "invoice:9", redlock.WithOwner("job-8"))
	fmt.Println("another owner:", errors.Is(err, redlock.ErrNotObtained))

	for _, l := range []*redlock.Lock{inner, outer} { // the last hold frees the key
		if err := l.Unlock(ctx); err != nil {
			fmt.Println("unlock:", err)
		}
	}
	next, err := rl.TryLock(ctx, "invoice:9", redlock.WithOwner("job-8"))
	fmt.Println("after the last hold:", err == nil)
	if err == nil {
		if err := next.Unlock(ctx); err != nil {
			fmt.Println("unlock:", err)
		}
	}
	// Output:
	// nested: true
	// another owner: true
	// after the last hold: true
}

func ExampleRWMutex() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	catalog := rl.RWMutex("example:catalog")
	a, err := catalog.RLock(ctx) // readers share the lock
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := catalog.RLock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = catalog.TryLock(ctx) // a writer holds it alone
	fmt.Println("writer beside readers:", errors.Is(err, redlock.ErrNotObtained))
	a.Unlock(ctx)
	b.Unlock(ctx)

	w, err := catalog.Lock(ctx, redlock.WithFencing())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("writer holds", w.Key(), "with a token:", w.Fence() > 0)
	w.Unlock(ctx)
	// Output:
	// writer beside readers: true
	// writer holds example:catalog with a token: true
}

func ExampleRedlock_Semaphore() {
	rl, err := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_MASTERS"), ","))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// At most 2 renders at once, across every process and host.
	farm := rl.Semaphore("render-farm", 2)
	a, err := farm.Acquire(ctx) // waits while both permits are held
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := farm.TryAcquire(ctx)
	_, err = farm.TryAcquire(ctx)
	fmt.Println("third permit:", errors.Is(err, redlock.ErrNotObtained))

	// Another limit on the same name, while permits are held, is an error.
	_, err = rl.Semaphore("render-farm", 3).TryAcquire(ctx)
	var pe *redlock.PermitsError
	fmt.Println("limit 3:", errors.As(err, &pe))

	_ = a.Unlock(ctx)
	_ = b.Unlock(ctx)
	// Output:
	// third permit: true
	// limit 3: true
}
