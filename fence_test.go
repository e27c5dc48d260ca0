package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
	"pgregory.net/rapid"
)

func TestFenceCheck(t *testing.T) {
	var f redlock.Fence
	for _, tok := range []uint64{5, 5, 7, 100} {
		if err := f.Check(tok); err != nil {
			t.Fatalf("Check(%d) after highest %d: %v", tok, f.Highest(), err)
		}
	}
	err := f.Check(99)
	var se *redlock.StaleTokenError
	if !errors.Is(err, redlock.ErrStaleToken) || !errors.As(err, &se) || se.Token != 99 || se.Highest != 100 {
		t.Fatalf("Check(99) after 100: %v, want a StaleTokenError{99, 100}", err)
	}
	if f.Highest() != 100 {
		t.Errorf("a rejected token moved Highest to %d", f.Highest())
	}

	var ce *redlock.ConfigError
	if err := f.Check(0); !errors.As(err, &ce) || ce.Field != "token" {
		t.Errorf("Check(0): %v, want a ConfigError on the token", err)
	}
	var nilFence *redlock.Fence
	if err := nilFence.Check(1); !errors.As(err, &ce) || nilFence.Highest() != 0 {
		t.Errorf("nil Fence: %v, want a ConfigError", err)
	}
	if err := f.Guard(200, nil); !errors.As(err, &ce) || f.Highest() != 100 {
		t.Errorf("Guard with a nil write: %v, want a ConfigError and no change", err)
	}
}

// TestFenceGuardSerialisesWrites: concurrent writers through Guard with
// random tokens; the writes that ran carry non-decreasing tokens in the order
// they ran, and every rejection names a higher token already written.
func TestFenceGuardSerialisesWrites(t *testing.T) {
	var f redlock.Fence
	var written []uint64 // appended by the writes only, which Guard serialises
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				tok := uint64((i*7919+g*104729)%1000 + 1)
				err := f.Guard(tok, func() error {
					written = append(written, tok)
					return nil
				})
				var se *redlock.StaleTokenError
				if err != nil && (!errors.As(err, &se) || se.Highest <= tok) {
					t.Errorf("Guard(%d): %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(written); i++ {
		if written[i] < written[i-1] {
			t.Fatalf("write %d carried token %d after %d", i, written[i], written[i-1])
		}
	}
	if len(written) == 0 || written[len(written)-1] != f.Highest() {
		t.Fatalf("last write %v, Highest %d", written[len(written)-1:], f.Highest())
	}
	wantErr := errors.New("disk full")
	if err := f.Guard(f.Highest()+1, func() error { return wantErr }); err != wantErr {
		t.Errorf("Guard returned %v, want the write's error", err)
	}
}

// counters reads the fence counter of key on every master (0 when absent).
func counters(t testing.TB, cs []*redis.Client, key string) []uint64 {
	t.Helper()
	vs := make([]uint64, len(cs))
	for i, c := range cs {
		v, err := c.Get(context.Background(), redlock.FenceKey(key)).Uint64()
		if err != nil && err != redis.Nil {
			t.Fatalf("GET %s on master %d: %v", redlock.FenceKey(key), i, err)
		}
		vs[i] = v
	}
	return vs
}

// nowMicros is the local clock in µs, the scale of the clock floor.
func nowMicros() uint64 { return uint64(time.Now().UnixMicro()) }

// TestFenceInflatedCounter is the scenario of the design's proof: one master's
// counter runs far ahead of the others (failed attempts that won only that
// master, and a counter ahead of every clock, so the clock floor cannot help).
// Holder A's quorum includes that master, so A's token is the inflated one;
// holder B's quorum excludes it. B's token must still be larger: round 2
// raised A's other masters to A's token, and B's quorum meets them.
func TestFenceInflatedCounter(t *testing.T) {
	cs := clients(t, masters().Addrs())
	r := newRedlock(t, nodesOf(t, cs), redlock.WithFencing(), redlock.WithTTL(5*time.Second))
	ctx := context.Background()
	key := testKey(t)

	// Failed attempts: master 0 free, the others held by someone else.
	occupy(t, cs, key, 1, 2, 3, 4)
	const failed = 200
	for i := range failed {
		if _, err := r.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("attempt %d with 4 of 5 masters taken: %v, want ErrNotObtained", i, err)
		}
	}
	settle(r)
	c := counters(t, cs, key)
	if c[0] == 0 || c[1]+c[2]+c[3]+c[4] != 0 {
		t.Fatalf("after %d failed attempts counters are %v; want only master 0's raised", failed, c)
	}
	// A counter ahead of every clock by an hour, as many more failed attempts
	// (or a master whose clock ran ahead) would leave it.
	ahead := nowMicros() + uint64(time.Hour.Microseconds())
	if err := cs[0].Set(ctx, redlock.FenceKey(key), ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}

	// A wins masters 0, 1, 2.
	free(t, cs, key, 1, 2)
	a, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fence() != ahead+1 {
		t.Fatalf("A's token %d, want the inflated counter + 1 = %d", a.Fence(), ahead+1)
	}
	if c := counters(t, cs, key); c[1] < a.Fence() || c[2] < a.Fence() || c[3] != 0 {
		t.Fatalf("after A's round 2 counters are %v; want masters 1 and 2 raised to A's token %d", c, a.Fence())
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle(r)

	// B wins masters 1, 3, 4: only master 1 is shared with A's quorum.
	free(t, cs, key, 3, 4)
	occupy(t, cs, key, 0, 2)
	b, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's token %d is not above A's %d", b.Fence(), a.Fence())
	}
	t.Logf("A %d, B %d (clock %d): %d failed attempts inflated master 0", a.Fence(), b.Fence(), nowMicros(), failed)
}

// TestFenceRestartEmpty: two masters that held holder A's key restart empty
// while A holds the lock: Redlock's delayed-restart rule is broken, and B
// wins a quorum while A's validity has not ended (two holders at once). The
// clock floor still makes B's token larger, so a Fence rejects A's writes.
func TestFenceRestartEmpty(t *testing.T) {
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	r := newRedlock(t, nodesOf(t, cs), redlock.WithFencing(), redlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()
	key := testKey(t)

	occupy(t, cs, key, 3, 4)
	a, err := r.TryLock(ctx, key) // masters 0, 1, 2
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1} {
		if err := cl.Servers[i].Restart(false); err != nil {
			t.Fatal(err)
		}
	}
	free(t, cs, key, 3, 4)
	if c := counters(t, cs, key); c[0] != 0 || c[1] != 0 {
		t.Fatalf("restarted masters still have counters %v", c)
	}
	var b *redlock.Lock
	for range 3 { // the first request to a restarted master fails on the dead connection
		if b, err = r.TryLock(ctx, key); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); !now.Before(a.Until()) || !now.Before(b.Until()) {
		t.Fatal("the test took so long that A's lock expired; the overlap it shows did not happen")
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("after masters restarted empty B's token %d is not above A's %d", b.Fence(), a.Fence())
	}
	var fence redlock.Fence
	if err := fence.Check(b.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := fence.Check(a.Fence()); !errors.Is(err, redlock.ErrStaleToken) {
		t.Fatalf("A's write after B's: %v, want ErrStaleToken", err)
	}
	t.Logf("two holders at once after restarts without data; tokens A %d < B %d", a.Fence(), b.Fence())
	_ = b.Unlock(ctx)
	_ = a.Unlock(ctx)
}

// TestFenceRejectsStaleHolder: A's lock expires while A is "paused"; B takes
// the lock and writes; A's late write through the Fence is rejected, and A's
// Unlock says the lock was not held.
func TestFenceRejectsStaleHolder(t *testing.T) {
	r := newRedlock(t, nodesOf(t, clients(t, masters().Addrs())), redlock.WithFencing(), redlock.WithTTL(200*time.Millisecond))
	ctx := context.Background()
	key := testKey(t)
	var fence redlock.Fence
	var store []string // the resource; fence.Guard serialises its writes

	a, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Guard(a.Fence(), func() error { store = append(store, "A1"); return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(a.Until()) + a.TTL()) // A is paused past its validity and the keys' TTL

	b, err := r.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Guard(b.Fence(), func() error { store = append(store, "B1"); return nil }); err != nil {
		t.Fatal(err)
	}
	err = fence.Guard(a.Fence(), func() error { store = append(store, "A2"); return nil })
	var se *redlock.StaleTokenError
	if !errors.As(err, &se) || se.Token != a.Fence() || se.Highest != b.Fence() {
		t.Fatalf("A's late write: %v, want a StaleTokenError{%d, %d}", err, a.Fence(), b.Fence())
	}
	if fmt.Sprint(store) != "[A1 B1]" {
		t.Fatalf("resource holds %v, want [A1 B1]", store)
	}
	if err := a.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("A's Unlock after expiry: %v, want ErrNotHeld", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// tokenLog records tokens in acquisition order, from inside the critical
// section, and checks that each is above the one before.
type tokenLog struct {
	mu      sync.Mutex // guards the fields below
	last    uint64
	checked int
	late    int // recorded after the holder's validity ended: not ordered
	bad     []string
}

func (l *tokenLog) record(lk *redlock.Lock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !time.Now().Before(lk.Until()) {
		l.late++
		return
	}
	if lk.Fence() <= l.last {
		l.bad = append(l.bad, fmt.Sprintf("token %d after %d (holder %d)", lk.Fence(), l.last, l.checked))
	}
	l.last = lk.Fence()
	l.checked++
}

// faults pauses, or kills and restarts with its data, a random minority of
// the masters, over and over, until stop is closed.
type faults struct {
	cl               *redistest.Cluster
	pauses, restarts atomic.Int64
	errs             []error
}

func (f *faults) run(stop <-chan struct{}) {
	n := len(f.cl.Servers)
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(20+rand.N(80)) * time.Millisecond):
		}
		k := 1 // one master at a time, now and then as many as a minority may be
		if rand.N(3) == 0 {
			k = (n - 1) / 2
		}
		hit := rand.Perm(n)[:k]
		var paused, killed []*redistest.Server
		for _, i := range hit {
			s := f.cl.Servers[i]
			var err error
			if rand.N(2) == 0 {
				err = s.Pause()
				paused = append(paused, s)
				f.pauses.Add(1)
			} else {
				err = s.Kill()
				killed = append(killed, s)
				f.restarts.Add(1)
			}
			if err != nil {
				f.errs = append(f.errs, err)
			}
		}
		time.Sleep(time.Duration(10+rand.N(70)) * time.Millisecond)
		for _, s := range paused {
			if err := s.Resume(); err != nil {
				f.errs = append(f.errs, err)
			}
		}
		for _, s := range killed {
			if err := s.Restart(true); err != nil {
				f.errs = append(f.errs, err)
			}
		}
	}
}

// TestFenceTokensIncreaseUnderFaults: 8 goroutines × 300 acquisitions of
// one key on 5 masters of its own, while a random minority is paused, or
// killed and restarted with its data (AOF). Tokens recorded in
// the critical sections, in acquisition order, strictly increase.
func TestFenceTokensIncreaseUnderFaults(t *testing.T) {
	goroutines, rounds := 8, 300
	if testing.Short() {
		rounds = 40
	}
	waitDialProbes(t)
	// AOF keeps the data across a kill. The write(2) to the AOF happens before
	// the reply, so a killed process loses nothing acknowledged even without
	// fsync (only a machine crash would); fsync always would slow the run 3×.
	cl := redistest.StartT(t, 5, redistest.Options{AppendOnly: true, Args: []string{"--appendfsync", "no"}})
	r := newRedlock(t, nodesOf(t, faultClients(t, cl.Addrs())), redlock.WithFencing(),
		redlock.WithTTL(time.Second), redlock.WithNodeTimeout(50*time.Millisecond), redlock.WithBackoff(5*time.Millisecond, 40*time.Millisecond))
	key := testKey(t)

	f := &faults{cl: cl}
	stop, faultsDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(faultsDone); f.run(stop) }()

	var log tokenLog
	var unlockErrs atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				l, err := r.Lock(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				log.record(l)
				if l.Unlock(ctx) != nil { // too few masters answered the release: the keys expire
					unlockErrs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	<-faultsDone
	close(errs)
	for err := range errs {
		t.Errorf("after %d acquisitions in %v (faults: %d pauses, %d restarts): %v", log.checked, took, f.pauses.Load(), f.restarts.Load(), err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if len(f.errs) > 0 {
		t.Fatalf("injecting faults: %v", errors.Join(f.errs...))
	}
	for _, b := range log.bad {
		t.Error(b)
	}
	if log.checked+log.late != goroutines*rounds || log.late > log.checked/100 {
		t.Fatalf("%d tokens checked, %d recorded after their validity, of %d", log.checked, log.late, goroutines*rounds)
	}
	t.Logf("%d tokens strictly increasing in %v (%d late, %d unlock errors); faults: %d pauses, %d kill+restart(AOF)",
		log.checked, took.Round(time.Millisecond), log.late, unlockErrs.Load(), f.pauses.Load(), f.restarts.Load())
}

// TestFenceTokensProperty drives one key through random interleavings of
// acquire, expire (the key deleted on some masters, as a lapsed TTL leaves
// it), release and restart-empty of a master, against real servers, and
// checks that every holder's token is above the previous holder's. It makes
// 50 checks unless -rapid.checks says otherwise (10 with -short).
func TestFenceTokensProperty(t *testing.T) {
	limitRapidChecks(t, 50)
	waitDialProbes(t)
	cl := redistest.StartT(t, 5, redistest.Options{})
	cs := faultClients(t, cl.Addrs())
	r := newRedlock(t, nodesOf(t, cs), redlock.WithFencing(), redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()

	var holders, restarts, expiries int
	rapid.Check(t, func(rt *rapid.T) {
		key := testKey(t)
		var held []*redlock.Lock
		var last uint64 // the previous holder's token
		defer func() {
			for _, l := range held {
				_ = l.Unlock(ctx)
			}
			settle(r)
		}()
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range steps {
			switch rapid.SampledFrom([]string{"acquire", "acquire", "expire", "release", "restart-empty"}).Draw(rt, "op") {
			case "acquire":
				l, err := r.TryLock(ctx, key)
				settle(r) // a failed attempt's rollback ends before the next step
				if err != nil {
					if !errors.Is(err, redlock.ErrNotObtained) {
						rt.Fatalf("acquire: %v", err)
					}
					continue
				}
				if l.Fence() <= last {
					rt.Fatalf("holder's token %d is not above the previous holder's %d", l.Fence(), last)
				}
				last = l.Fence()
				held = append(held, l)
				holders++
			case "expire":
				nodes := rapid.SliceOfNDistinct(rapid.IntRange(0, len(cs)-1), 1, len(cs), rapid.ID[int]).Draw(rt, "expire on")
				for _, i := range nodes {
					if err := cs[i].Del(ctx, key).Err(); err != nil {
						rt.Logf("DEL on master %d (restarted, its old connection failed): %v", i, err)
					}
				}
				expiries++
			case "release":
				if len(held) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(held)-1).Draw(rt, "release")
				_ = held[i].Unlock(ctx) // ErrNotHeld when the key was deleted from a quorum
				settle(r)
				held = append(held[:i], held[i+1:]...)
			case "restart-empty":
				i := rapid.IntRange(0, len(cs)-1).Draw(rt, "restart")
				if err := cl.Servers[i].Restart(false); err != nil {
					rt.Fatal(err)
				}
				restarts++
			}
		}
	})
	t.Logf("%d holders' tokens checked; faults: %d restarts without data, %d expiries", holders, restarts, expiries)
}
