package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
)

// tokenLog records tokens in acquisition order, from inside the critical
// section, and checks that each is above the one before.
type tokenLog struct {
	mu      sync.Mutex // guards the fields below
	last    uint64
	checked int
	late    int // recorded after the holder's validity ended: not ordered
	bad     []string
}

func (l *tokenLog) record(lk *Lock) {
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
	r := newRedlock(t, nodesOf(t, faultClients(t, cl.Addrs())), WithFencing(),
		WithTTL(time.Second), WithNodeTimeout(50*time.Millisecond), WithBackoff(5*time.Millisecond, 40*time.Millisecond))
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
