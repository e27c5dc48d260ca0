package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// downNode is a master that does not answer: every command fails at once.
type downNode struct{ Node }

var errMasterDown = errors.New("master down (test)")

func (n downNode) Exec(_ context.Context, cmds []*Command) {
	for _, c := range cmds {
		c.Err = errMasterDown
	}
}

// TestHandOffWithBareQuorumUp: two of five masters are down, so a quorum
// (3) needs every master that is up. The holder's key is gone from one of
// them (a failover without the key), so a waiting call's attempt wins that
// master and its rollback frees it again. The holder's Unlock then hands
// the key to the call on the other two: fewer than a quorum. Its attempt
// is refused there by its own hand-offs, and a rollback that left the
// freed master free (or handed only those two back) would repeat that
// forever: the call must get the key within a hand-off's time.
func TestHandOffWithBareQuorumUp(t *testing.T) {
	ctx := context.Background()
	admin := clients(t, masters.Addrs())
	nodes := func() []Node {
		ns := nodesOf(t, clients(t, masters.Addrs()))
		ns[3], ns[4] = downNode{ns[3]}, downNode{ns[4]}
		return ns
	}
	holder := newRedlock(t, nodes())
	waiter := newRedlock(t, nodes(), WithBackoff(10*time.Second, 10*time.Second))
	key := testKey(t)
	l := mustLock(t, holder, key)
	settle(holder)
	if err := admin[2].Del(ctx, key).Err(); err != nil { // failed over without the key
		t.Fatal(err)
	}
	got := lockAsync(t, ctx, waiter, key)
	waitRegistered(t, admin[:3], key, 1)
	settle(waiter) // its rollback reached every master that is up
	if vs := holders(t, admin, key); vs[2] != "" {
		t.Fatalf("master 2 holds %q after the waiter's rollback; want it free", vs[2])
	}
	released := time.Now()
	// The Unlock reports no quorum (master 2 lost the key): it released
	// the key on masters 0 and 1, and that is what hands it on.
	var qe *QuorumError
	if err := l.Unlock(ctx); err != nil && !errors.As(err, &qe) {
		t.Fatal(err)
	}
	o := obtainedWithin(t, admin, key, got, 5*time.Second, "the waiter did not get the key after the holder's release")
	if d := o.at.Sub(released); d > time.Second {
		t.Errorf("the waiter held the key %v after the release; want a hand-off, not its backoff", d)
	}
	if err := o.l.Unlock(ctx); err != nil {
		t.Error(err)
	}
}
