package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// TestAutoExtendSurvivesMinorityAfterBareQuorum: an auto-extended lock
// whose key is on exactly a quorum of masters (two of five came back empty
// after it was acquired — or a contender's rollback left them free) is
// spread again to the free masters by its renewals, so that a later fault
// on a minority (one master of that quorum among them) does not lose it:
// three of the five masters are healthy and hold its value throughout.
func TestAutoExtendSurvivesMinorityAfterBareQuorum(t *testing.T) {
	const ttl = repairTTL
	c, cs, l := autoExtendedOnFive(t)
	ctx, key := context.Background(), l.Key()
	// Masters 3 and 4 restart empty: the lock is now on 0, 1, 2 alone.
	for _, s := range c.Servers[3:] {
		if err := s.Restart(false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl / 2) // a renewal at a third of the TTL
	if vs := holders(t, cs, key); count(vs, l.Value()) != 5 {
		t.Errorf("after a renewal the masters hold %q; want the lock's value on all five", vs)
	}
	// A minority fault that takes one master of the bare quorum.
	for _, s := range c.Servers[1:3] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-l.Done():
		t.Fatalf("lost with three of five masters healthy: %v", context.Cause(l.Context()))
	case <-time.After(2 * ttl):
	}
	live := clients(t, []string{c.Servers[0].Addr(), c.Servers[3].Addr(), c.Servers[4].Addr()})
	if vs := holders(t, live, key); count(vs, l.Value()) != 3 {
		t.Errorf("the healthy masters hold %q; want the lock's value on all three", vs)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if vs := holders(t, live, key); count(vs, "") != 3 {
		t.Errorf("after Unlock the healthy masters hold %q", vs)
	}
}

// TestAutoExtendRepairsOnlyFreeMasters: a renewal sets the key only where
// it is absent; a master where another value holds it (a contender's key)
// keeps that value, and with too few masters left holding the lock's value
// the lock is lost as before.
func TestAutoExtendRepairsOnlyFreeMasters(t *testing.T) {
	const ttl = repairTTL
	c, cs, l := autoExtendedOnFive(t)
	ctx, key := context.Background(), l.Key()
	// Masters 3 and 4 lose the key and another value takes it there.
	for i, s := range c.Servers[3:] {
		if err := s.Restart(false); err != nil {
			t.Fatal(err)
		}
		if err := cs[3+i].Set(ctx, key, "other", 10*ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * ttl):
		t.Fatal("not lost with two of five masters holding its value")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("cause %v, want ErrLockLost", cause)
	}
	for i := 3; i < 5; i++ {
		if v, err := cs[i].Get(ctx, key).Result(); err != nil || v != "other" {
			t.Errorf("master %d holds %q (%v); the renewal must leave another value alone", i, v, err)
		}
	}
}

// TestSimSpreadAfterExtend replays the simulation's schedule that found
// the follow-up of a renewal (spreadLocked) queued behind an Extend of the
// same lock to a longer TTL: its extend to the renewal's shorter TTL landed
// last on two masters, the key expired there before the lock's Until, and
// another holder took it. A follow-up is now never sent while an Extend
// runs, and uses the TTL the last Extend set.
func TestSimSpreadAfterExtend(t *testing.T) {
	for range 5 {
		s := genSchedule(84009693132816)
		if res := runSchedule(t, s, false); len(res.violations) > 0 {
			t.Fatalf("seed 84009693132816:\n  %s", strings.Join(res.violations, "\n  "))
		}
	}
}

// repairTTL is the TTL of autoExtendedOnFive's lock.
const repairTTL = time.Second

// autoExtendedOnFive starts five masters of the test's own and takes an
// auto-extended lock on them, with the TTL repairTTL.
func autoExtendedOnFive(t *testing.T) (*redistest.Cluster, []*redis.Client, *Lock) {
	t.Helper()
	c := redistest.StartT(t, 5, redistest.Options{})
	cs := clients(t, c.Addrs())
	r := newRedlock(t, nodesOf(t, cs), WithNodeTimeout(100*time.Millisecond))
	l, err := r.Lock(context.Background(), testKey(t), WithTTL(repairTTL), WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	return c, cs, l
}
