package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
)

// Migrating from redsync one service at a time is safe only if the two
// libraries' locks on the same key and masters exclude each other. Both
// SET key value NX PX with a random value and release with a
// compare-and-delete; these tests check it on real masters.

// interop returns a redlock and a redsync over the same three masters, and
// clients to read the masters directly.
func interop(t *testing.T) (*redlock.Redlock, *redsync.Redsync, []*redis.Client) {
	t.Helper()
	addrs := masters.Addrs()[:3]
	var nodes []redlock.Node
	var pools []redsyncredis.Pool
	for _, c := range newClients(t, addrs) {
		nodes = append(nodes, redlock.NewNode(c))
	}
	for _, c := range newClients(t, addrs) {
		pools = append(pools, goredis.NewPool(c))
	}
	r, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, redsync.New(pools...), newClients(t, addrs)
}

// onMasters returns the value key holds on each master ("" when absent).
func onMasters(t *testing.T, cs []*redis.Client, key string) []string {
	t.Helper()
	vs := make([]string, len(cs))
	for i, c := range cs {
		v, err := c.Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		vs[i] = v
	}
	return vs
}

// wantOnAll waits until every master holds value at key: redlock returns at
// a quorum, and its requests to the other masters land a little later.
func wantOnAll(t *testing.T, cs []*redis.Client, key, value string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		vs := onMasters(t, cs, key)
		all := true
		for _, v := range vs {
			all = all && v == value
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("masters hold %q, want %q on all", vs, value)
		}
	}
}

// A lock held by redlock refuses redsync, and redlock's Unlock frees it.
func TestRedsyncRefusedWhileRedlockHolds(t *testing.T) {
	r, rs, cs := interop(t)
	ctx := context.Background()
	for _, fencing := range []bool{false, true} {
		key := newKey(t)
		var opts []redlock.Option
		if fencing {
			opts = append(opts, redlock.WithFencing())
		}
		l, err := r.TryLock(ctx, key, opts...)
		if err != nil {
			t.Fatal(err)
		}
		wantOnAll(t, cs, key, l.Value())
		m := rs.NewMutex(key, redsync.WithTries(1))
		var taken *redsync.ErrTaken
		if err := m.TryLockContext(ctx); !errors.As(err, &taken) || len(taken.Nodes) != 3 {
			t.Fatalf("fencing=%v: redsync while redlock holds: %v, want taken on 3 masters", fencing, err)
		}
		wantOnAll(t, cs, key, l.Value()) // redsync's rollback left ours alone
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.TryLockContext(ctx); err != nil {
			t.Fatalf("fencing=%v: redsync after redlock's Unlock: %v", fencing, err)
		}
		// Unlock returned at a quorum of releases: redsync may have found
		// the last master still held, and holds a quorum.
		if n := count(onMasters(t, cs, key), m.Value()); n < r.Quorum() {
			t.Fatalf("fencing=%v: redsync holds %d masters, want a quorum", fencing, n)
		}
		if ok, err := m.UnlockContext(ctx); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
}

func count(vs []string, v string) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}

// A lock held by redsync refuses redlock (plain and fenced acquires), and
// redsync's Unlock frees it.
func TestRedlockRefusedWhileRedsyncHolds(t *testing.T) {
	r, rs, cs := interop(t)
	ctx := context.Background()
	key := newKey(t)
	m := rs.NewMutex(key, redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]redlock.Option{nil, {redlock.WithFencing()}} {
		_, err := r.TryLock(ctx, key, opts...)
		var qe *redlock.QuorumError
		if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &qe) || qe.Refused < r.Quorum() {
			t.Fatalf("redlock while redsync holds: %v, want refused by a quorum", err)
		}
	}
	wantOnAll(t, cs, key, m.Value()) // redlock's rollback left redsync's keys alone
	if ok, err := m.UnlockContext(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("redlock after redsync's Unlock: %v", err)
	}
	wantOnAll(t, cs, key, l.Value())
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A stale holder's release frees nothing: redsync's Unlock after its lock
// expired and redlock took the key leaves redlock's lock in place, and the
// other way round.
func TestStaleUnlockFreesNothing(t *testing.T) {
	r, rs, cs := interop(t)
	ctx := context.Background()

	key := newKey(t)
	m := rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(200*time.Millisecond))
	if err := m.TryLockContext(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // redsync's lock expires
	l, err := r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wantOnAll(t, cs, key, l.Value())
	if ok, err := m.UnlockContext(ctx); ok || err == nil {
		t.Fatalf("redsync's stale Unlock: ok=%v err=%v, want a failure", ok, err)
	}
	wantOnAll(t, cs, key, l.Value())
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("redlock's Extend after redsync's stale Unlock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	key = newKey(t)
	l, err = r.TryLock(ctx, key, redlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // redlock's lock expires
	m = rs.NewMutex(key, redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("redlock's stale Unlock: %v, want ErrNotHeld", err)
	}
	wantOnAll(t, cs, key, m.Value())
	if ok, err := m.UnlockContext(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
}
