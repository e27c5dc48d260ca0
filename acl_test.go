package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// aclCommands is everything the library sends, as in docs/masters.md's rule:
// SET (acquire), EVAL (the scripts), and what the scripts call, which ACLs
// check too: GET, SET, DEL, PEXPIRE, TIME.
// The handshake needs nothing: HELLO with AUTH is open to every user, and
// go-redis ignores the refusal of CLIENT SETINFO.
var aclCommands = []string{"+set", "+get", "+del", "+pexpire", "+time", "+eval", "+type", "+hget", "+hset", "+hdel", "+hgetall"}

// aclNeeds is what each kind of lock needs of aclCommands, and what its
// release needs (without it, a refused acquire's key waits for its TTL).
var aclNeeds = map[string]struct{ all, release []string }{
	"plain":  {[]string{"+set", "+get", "+del", "+pexpire", "+eval"}, []string{"+get", "+del", "+eval"}},
	"fenced": {[]string{"+set", "+get", "+del", "+pexpire", "+time", "+eval"}, []string{"+get", "+del", "+eval"}},
	"owned": { // the owned-hold script, fenced (lua/hold.lua)
		[]string{"+set", "+get", "+del", "+pexpire", "+time", "+eval", "+type", "+hget", "+hset", "+hdel", "+hgetall"},
		[]string{"+del", "+pexpire", "+time", "+eval", "+type", "+hget", "+hdel", "+hgetall"},
	},
}

const aclPassword = "acl-pw-Zq8v" // appears in no error; see TestNoSecretsInErrors

// aclUser returns redis-server arguments declaring user with the minimal
// rule less the commands in without.
func aclUser(user string, without ...string) []string {
	args := []string{"--user", user, "on", ">" + aclPassword, "~*"}
	for _, c := range aclCommands {
		if !slices.Contains(without, c) {
			args = append(args, c)
		}
	}
	return args
}

// aclMasters starts three masters knowing the user "locker" with the minimal
// rule and, for each command, a user "no-CMD" lacking it.
func aclMasters(t *testing.T) *redistest.Cluster {
	args := aclUser("locker")
	for _, c := range aclCommands {
		args = append(args, aclUser("no-"+c[1:], c)...)
	}
	return redistest.StartT(t, 3, redistest.Options{Args: args})
}

// userRedlock returns a Redlock over addrs logged in as user.
func userRedlock(t *testing.T, addrs []string, user string, opts ...Option) *Redlock {
	nodes := make([]Node, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Username: user, Password: aclPassword,
			MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		nodes[i] = NewNode(c)
	}
	return newRedlock(t, nodes, append([]Option{WithNodeTimeout(time.Second)}, opts...)...)
}

// TestACLMinimalUser: a user allowed only docs/masters.md's commands can lock,
// fence, extend and unlock; a user lacking any one of them gets, from the
// call that needs it, a NodeError per master naming it and the NOPERM
// refusal — counted as failed, never as refused or succeeded.
func TestACLMinimalUser(t *testing.T) {
	c := aclMasters(t)
	ctx := context.Background()

	r := userRedlock(t, c.Addrs(), "locker", WithFencing())
	for range 2 { // the second round finds the scripts cached
		l, err := r.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatalf("TryLock as locker: %v", err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("Extend as locker: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock as locker: %v", err)
		}
	}

	// Scripts go as EVAL: after SCRIPT FLUSH they, renewals included, need
	// nothing the user may not run (SCRIPT LOAD, say).
	for _, cl := range clients(t, c.Addrs()) {
		if err := cl.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := r.TryLock(ctx, testKey(t), WithAutoExtend(), WithTTL(300*time.Millisecond), WithMinValidity(0))
	if err != nil {
		t.Fatalf("TryLock as locker after SCRIPT FLUSH: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatalf("auto-extend as locker lost the lock: %v", context.Cause(l.Context()))
	case <-time.After(700 * time.Millisecond):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock as locker after renewals: %v", err)
	}

	owned, err := r.TryLock(ctx, testKey(t), WithOwner("A"))
	if err == nil {
		err = errors.Join(owned.Extend(ctx, 5*time.Second), owned.Unlock(ctx))
	}
	if err != nil {
		t.Fatalf("owned lock as locker: %v", err)
	}

	cs := clients(t, c.Addrs())
	for _, kind := range []string{"fenced", "plain", "owned"} {
		for _, cmd := range aclNeeds[kind].all {
			user := "no-" + cmd[1:]
			t.Run(user+"/"+kind, func(t *testing.T) {
				var opts []Option
				switch kind {
				case "fenced":
					opts = append(opts, WithFencing())
				case "owned":
					opts = append(opts, WithFencing(), WithOwner("A"))
				}
				r := userRedlock(t, c.Addrs(), user)
				key := testKey(t)
				err := lockExtendUnlock(ctx, r, key, opts...)
				if err == nil {
					t.Fatal("lock, extend and unlock all succeeded")
				}
				var qe *QuorumError
				if !errors.As(err, &qe) || qe.Succeeded >= qe.Quorum || qe.Refused != 0 || len(qe.Errs) == 0 {
					t.Fatalf("err %v: want a QuorumError with failed masters only", err)
				}
				for _, e := range qe.Errs {
					var ne *NodeError
					if !errors.As(e, &ne) || !slices.Contains(c.Addrs(), strings.TrimSuffix(ne.Node, "/0")) ||
						!aclRefusal(e) {
						t.Errorf("per-master error %v: want a NodeError naming the master and the ACL refusal", e)
					}
				}
				// A refused acquire is rolled back, unless the release is
				// what the user cannot run: the key then waits for its TTL.
				settle(r)
				if !slices.Contains(aclNeeds[kind].release, cmd) {
					for i, c := range cs {
						if c.Exists(ctx, key).Val() != 0 {
							t.Errorf("master %d holds the key after the failure", i)
						}
					}
				}
			})
		}
	}
}

// lockExtendUnlock runs the three calls and returns the first error.
func lockExtendUnlock(ctx context.Context, r *Redlock, key string, opts ...Option) error {
	l, err := r.TryLock(ctx, key, opts...)
	if err != nil {
		return err
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		_ = l.Unlock(ctx)
		return err
	}
	return l.Unlock(ctx)
}

// aclRefusal reports whether err is an ACL refusal: NOPERM for a command
// sent, or, for one a script calls, Redis 7.0's "can't run this command".
func aclRefusal(err error) bool {
	s := err.Error()
	return strings.Contains(s, "NOPERM") || strings.Contains(s, "user executing the script can't run this command")
}

// TestACLWakeups: a user without the wake-up commands still locks, waits
// and releases without an error (waiters fall back to their backoff, and the
// refusal to subscribe is kept to report); a user with them, as the README
// lists, gets wake-ups.
func TestACLWakeups(t *testing.T) {
	args := aclUser("locker")
	args = append(args, aclUser("waker")...)
	args = append(args, "+zadd", "+zrange", "+zrem", "+publish", "+subscribe", "+ping", "&redlock:wake:*")
	c := redistest.StartT(t, 3, redistest.Options{Args: args})
	ctx := context.Background()
	for _, user := range []string{"locker", "waker"} {
		t.Run(user, func(t *testing.T) {
			holder := userRedlock(t, c.Addrs(), user)
			rec := &recorder{}
			waiter := userRedlock(t, c.Addrs(), user, WithObserver(rec))
			key := testKey(t)
			l := mustLock(t, holder, key)
			got := lockAsync(t, ctx, waiter, key, WithBackoff(time.Second, time.Second))
			waitQueued(t, waiter, key)
			time.Sleep(100 * time.Millisecond)
			released := time.Now()
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock as %s: %v", user, err)
			}
			o := <-got
			if o.err != nil {
				t.Fatalf("Lock as %s: %v", user, o.err)
			}
			if err := o.l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			woken := o.at.Sub(released) < 300*time.Millisecond
			waiter.wake.mu.Lock()
			refusal := waiter.wake.err
			waiter.wake.mu.Unlock()
			switch {
			case user == "waker" && (!woken || refusal != nil):
				t.Errorf("waker: took the key %v after the release (refusal %v); want a wake-up", o.at.Sub(released), refusal)
			case user == "locker" && (refusal == nil || !aclRefusal(refusal)):
				t.Errorf("locker: subscription refusal %v, want the ACL's, kept to report", refusal)
			}
			// The observer is told once how subscribing went.
			var subscribes []string
			for _, e := range rec.take() {
				if strings.HasPrefix(e, "subscribe") {
					subscribes = append(subscribes, e)
				}
			}
			want := "subscribe depth=1 3/0/0 q=2 [succeeded succeeded succeeded] ok=true"
			if user == "locker" {
				want = "subscribe depth=1 0/0/3 q=2 [failed failed failed] ok=false"
			}
			if len(subscribes) != 1 || subscribes[0] != want {
				t.Errorf("%s: subscribe events %q, want one: %q", user, subscribes, want)
			}
		})
	}
}
