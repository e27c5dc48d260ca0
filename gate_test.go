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

// gateRefusals counts the masters whose vote err says the restart gate
// refused.
func gateRefusals(err error) int {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return 0
	}
	n := 0
	for _, e := range qe.Errs {
		if errors.Is(e, ErrRestartGate) {
			n++
		}
	}
	return n
}

// gateClients returns a go-redis client per server of c, closed at the end.
func gateClients(t *testing.T, c *redistest.Cluster) []*redis.Client {
	cs := make([]*redis.Client, len(c.Servers))
	for i, s := range c.Servers {
		cs[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { cs[i].Close() })
	}
	return cs
}

// TestRestartGateKeepsOneHolder is the unsafe schedule of the chaos scenario
// restart-no-persistence-immediate, on three real masters: A holds the key
// on a bare majority (masters 0 and 1), master 0 restarts empty at once,
// and B asks masters 0 and 2. Without the gate B gets a quorum while A's
// lock is valid: two holders. With the gate master 0's vote does not count,
// for plain, fenced and owned attempts alike, until it has been up for the
// gate; then B gets the lock.
func TestRestartGateKeepsOneHolder(t *testing.T) {
	const ttl, gate = 2 * time.Second, 3 * time.Second
	for _, gated := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[gated], func(t *testing.T) {
			c := redistest.StartT(t, 3, redistest.Options{})
			cs := gateClients(t, c)
			nodes := []Node{NewNode(cs[0]), NewNode(cs[1]), NewNode(cs[2])}
			opts := []Option{WithTTL(ttl)}
			if gated {
				opts = append(opts, WithRestartGate(gate))
				time.Sleep(gate + time.Second) // the fresh masters' own gate (uptime counts in whole seconds)
			}
			a, b := newRedlock(t, nodes, opts...), newRedlock(t, nodes, opts...)
			ctx := context.Background()
			key := testKey(t)
			la := onBareMajority(t, a, cs, key)
			if err := c.Servers[0].Restart(false); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			lb, err := b.TryLock(ctx, key)
			if !gated {
				if err != nil {
					t.Fatalf("without the gate B's TryLock = %v; want the lock (the unsafe schedule did not play out)", err)
				}
				if time.Now().Before(la.Until()) {
					t.Logf("two holders without the gate: A until %v, B until %v", la.Until().Format(time.StampMilli), lb.Until().Format(time.StampMilli))
				} else {
					t.Fatalf("A's lock had ended before B's: the schedule shows nothing")
				}
				return
			}
			if !errors.Is(err, ErrNotObtained) || gateRefusals(err) != 1 {
				t.Fatalf("B's TryLock right after master 0 restarted = %v, %v; want ErrNotObtained with master 0 refused by the restart gate", lb, err)
			}
			if !strings.Contains(err.Error(), "restart gate") || !strings.Contains(err.Error(), "votes count in") {
				t.Errorf("the error does not say why: %v", err)
			}
			for _, o := range [][]Option{{WithFencing()}, {WithOwner("job")}} {
				if l, err := b.TryLock(ctx, key, o...); gateRefusals(err) != 1 {
					t.Errorf("B's TryLock %v right after the restart = %v, %v; want master 0 refused by the restart gate", o, l, err)
				}
			}
			// Nothing is left of B's attempts: the gated vote's SET was rolled back.
			settle(b)
			if n, err := cs[0].Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("master 0 keeps B's gated key: EXISTS = %d, %v", n, err)
			}
			// Once master 0 has been up for the gate (and A's lock expired), B gets it.
			l, err := b.Lock(ctx, key)
			if err != nil {
				t.Fatalf("B's Lock after the gate: %v", err)
			}
			if !time.Now().After(la.Until()) {
				t.Errorf("B got the lock %v after master 0 restarted, before A's lock ended", time.Since(restarted))
			}
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRestartGateCases pins down what the gate does in each case
// docs/internals.md lists: a master up for less than the gate refuses
// every vote (acquire, Extend) with an error that says when its votes
// count; one up for longer votes; a restart with its data (AOF) is a
// restart like any other; FLUSHALL does not close the gate of a master up for
// longer (it is not a restart); a TTL longer than the gate is refused.
func TestRestartGateCases(t *testing.T) {
	const gate = 2 * time.Second
	c := redistest.StartT(t, 1, redistest.Options{AppendOnly: true})
	cs := gateClients(t, c)
	r := newRedlock(t, []Node{NewNode(cs[0])}, WithTTL(time.Second), WithRestartGate(gate))
	ctx := context.Background()

	if _, err := r.TryLock(ctx, testKey(t)); gateRefusals(err) != 1 {
		t.Fatalf("TryLock on a master started just now = %v; want the restart gate's refusal", err)
	}
	time.Sleep(gate + time.Second)
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock on a master up longer than the gate: %v", err)
	}
	if err := l.Extend(ctx, 3*time.Second); err == nil || !strings.Contains(err.Error(), "WithRestartGate") {
		t.Errorf("Extend to a TTL longer than the gate = %v; want a ConfigError", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := New([]Node{NewNode(cs[0])}, WithRestartGate(-time.Second)); err == nil {
		t.Error("New with a negative gate: no error")
	}

	// A restart with its data (appendfsync always) closes the gate as one
	// without: the process is new, whatever it restored (an AOF may lose
	// the last second, an RDB snapshot everything after it).
	key := testKey(t)
	l, err = r.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Servers[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); gateRefusals(err) != 1 {
		t.Errorf("Extend right after a restart with the data = %v; want the restart gate's refusal", err)
	}
	if _, err := r.TryLock(ctx, testKey(t)); gateRefusals(err) != 1 {
		t.Errorf("TryLock of a new key right after the restart = %v; want the restart gate's refusal", err)
	}
	time.Sleep(gate + time.Second)
	if err := cs[0].FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := r.TryLock(ctx, key); err != nil {
		t.Errorf("TryLock after FLUSHALL on a master up longer than the gate = %v; want the lock (FLUSHALL is not a restart)", err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestRestartGateClusterShard: on a master that is a Redis Cluster, the
// gate is each shard's: a shard that restarted refuses votes on its keys,
// and the other shards' keys vote.
func TestRestartGateClusterShard(t *testing.T) {
	const gate = 5 * time.Second // longer than a restarted shard is CLUSTERDOWN (about 2 s)
	rc := redistest.StartRedisClusterT(t, 3, redistest.Options{Args: []string{"--cluster-require-full-coverage", "no"}})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	r := newRedlock(t, []Node{NewNode(cc)}, WithTTL(time.Second), WithRestartGate(gate), WithNodeTimeout(time.Second))
	ctx := context.Background()
	time.Sleep(gate + time.Second)
	// A key on shard 0 and one on shard 2 (shard k has slots [k*16384/3, (k+1)*16384/3)).
	var on0, on2 string
	for i := 0; on0 == "" || on2 == ""; i++ {
		k := testKey(t)
		switch s := int(keySlot(k)) * 3 / 16384; {
		case s == 0 && on0 == "":
			on0 = k
		case s == 2 && on2 == "":
			on2 = k
		}
	}
	// Without persistence the shard comes back empty, its cluster
	// configuration (nodes.conf) kept: wait until it answers for its keys.
	if err := rc.Shards[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err = r.TryLock(ctx, on0); gateRefusals(err) == 1 {
			break
		}
	}
	if gateRefusals(err) != 1 {
		t.Fatalf("TryLock of a key on the restarted shard = %v; want the restart gate's refusal", err)
	}
	l, err := r.TryLock(ctx, on2)
	if err != nil {
		t.Fatalf("TryLock of a key on a shard that did not restart: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestRestartGateNoHandOffFromGatedMaster: a hand-off is a vote too. Five
// masters; A holds the key on masters 0, 1 and 2; master 0 restarts empty.
// Two waiting calls with the restart gate on contend: the rollback of one
// frees its own value on masters 0, 3 and 4, and where the masters hand the
// key on, the other would count three hand-offs, master 0's among them,
// while A's lock is valid. With the gate on no call holds the key until A's
// lock has ended.
func TestRestartGateNoHandOffFromGatedMaster(t *testing.T) {
	const ttl = 3 * time.Second
	c := redistest.StartT(t, 5, redistest.Options{})
	cs := gateClients(t, c)
	nodes := make([]Node, len(cs))
	for i, rc := range cs {
		nodes[i] = NewNode(rc)
	}
	time.Sleep(ttl + time.Second) // the fresh masters' own gate
	opts := []Option{WithTTL(ttl), WithRestartGate(ttl), WithBackoff(time.Millisecond, 20*time.Millisecond)}
	a := newRedlock(t, nodes, opts...)
	ctx := context.Background()
	key := testKey(t)
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	settle(a)
	for _, i := range []int{3, 4} {
		if err := cs[i].Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 2)
	wctx, cancel := context.WithDeadline(ctx, la.Until())
	defer cancel()
	for range 2 {
		w := newRedlock(t, nodes, opts...)
		go func() {
			if l, err := w.Lock(wctx, key); err == nil {
				got <- time.Now()
				_ = l.Unlock(ctx)
			} else {
				got <- time.Time{}
			}
		}()
	}
	for range 2 {
		if at := <-got; !at.IsZero() && at.Before(la.Until()) {
			t.Errorf("a waiting call got the lock %v before A's lock ended", la.Until().Sub(at))
		}
	}
}

// TestRestartGatePersistence is the review's schedule, under each
// persistence mode a master can restart with: three masters, gate = TTL.
// Every master has counted gated votes before (a gate that cached the
// start next to the key, as the first one did, has that cache in the
// snapshot), master 0 saved a snapshot (RDB) or logs every
// write (AOF), A then holds the key on a bare majority (masters 0 and 1),
// and master 0 is SIGKILLed and restarts with what it persisted. Whatever
// it restored, its process started less than the gate ago: its vote must
// not count, so B cannot take the key while A's lock is valid.
func TestRestartGatePersistence(t *testing.T) {
	const gate = 4 * time.Second // A's lock must outlive a restart on a loaded machine
	for _, mode := range []string{"none", "rdb", "aof"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartT(t, 3, redistest.Options{AppendOnly: mode == "aof"})
			cs := gateClients(t, c)
			nodes := []Node{NewNode(cs[0]), NewNode(cs[1]), NewNode(cs[2])}
			opts := []Option{WithTTL(gate), WithRestartGate(gate)}
			a, b := newRedlock(t, nodes, opts...), newRedlock(t, nodes, opts...)
			ctx := context.Background()
			key := testKey(t)
			// The fresh masters' own gate (uptime counts in whole seconds,
			// read up to a second high).
			time.Sleep(gate + 2*time.Second)
			lb, err := b.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("B before the restart: %v", err)
			}
			if err := lb.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			settle(b) // every master's release is in before the snapshot
			if mode == "rdb" {
				if err := cs[0].Save(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			la := onBareMajority(t, a, cs, key)
			if err := c.Servers[0].Restart(true); err != nil {
				t.Fatal(err)
			}
			if mode != "aof" {
				if n, err := cs[0].Exists(ctx, key).Result(); err != nil || n != 0 {
					t.Fatalf("master 0 came back with A's key (EXISTS = %d, %v): the schedule does not lose it", n, err)
				}
			}
			_, err = b.TryLock(ctx, key)
			if err == nil && time.Now().Before(la.Until()) {
				t.Fatalf("B took the key %v before A's lock ends: two holders (master 0 restarted from %s counted)",
					time.Until(la.Until()).Round(time.Millisecond), mode)
			}
			if err == nil {
				t.Fatalf("A's lock ended before B's TryLock: the schedule did not play out (a restart slower than %v)", gate)
			}
			if n := gateRefusals(err); n != 1 {
				t.Errorf("B's TryLock = %v; want master 0 refused by the restart gate (refusals: %d)", err, n)
			}
		})
	}
}

// TestRestartGateRounding: INFO's uptime_in_seconds is the difference of
// two whole seconds, so it reads up to a second high. A master started
// just before a second turns reads 1 s of uptime within milliseconds; the
// gate must still not open before the process has been up the gate.
func TestRestartGateRounding(t *testing.T) {
	const gate = 2 * time.Second
	// Start the master 30 ms before a second turns, by the wall clock (Redis
	// counts its uptime in wall-clock seconds).
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second - 30*time.Millisecond).Sub(now))
	launched := time.Now()
	s := redistest.StartServerT(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	r := newRedlock(t, []Node{NewNode(c)}, WithTTL(time.Second), WithRestartGate(gate))
	ctx := context.Background()
	for end := launched.Add(gate + 3*time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		l, err := r.TryLock(ctx, testKey(t))
		if err == nil {
			if up := time.Since(launched); up < gate {
				t.Fatalf("the gate opened %v after the master was launched; want no earlier than %v", up.Round(time.Millisecond), gate)
			}
			_ = l.Unlock(ctx)
			return
		}
		if gateRefusals(err) != 1 {
			t.Fatalf("TryLock = %v; want the restart gate's refusal or the lock", err)
		}
	}
	t.Fatalf("the gate did not open within %v", gate+3*time.Second)
}

// onBareMajority has a take key on three masters and lose it on master 2
// (its acquire there lost): a holds masters 0 and 1, a bare majority.
func onBareMajority(t *testing.T, a *Redlock, cs []*redis.Client, key string) *Lock {
	t.Helper()
	ctx := context.Background()
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	settle(a)
	if err := cs[2].Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestGatedVoteIsOneCommand: a gated vote is one script on the master, the
// gate's check and the vote together (issue 33, item 3), for every kind of
// vote: a closed gate answers for the vote and writes nothing (no lock key,
// no fence counter, no hold), and an open one lets the vote run in the
// same script. Counted on the client (the master's commandstats count the
// commands the scripts call too): each attempt sends the master one command
// for its vote and one for its release (a rollback when the vote failed).
func TestGatedVoteIsOneCommand(t *testing.T) {
	const gate = time.Second
	c := redistest.StartT(t, 1, redistest.Options{})
	cs := gateClients(t, c)
	rc := gateClients(t, c)[0]
	sent := []*sentCounter{{name: "set"}, {name: "eval"}, {name: "evalsha"}}
	for _, h := range sent {
		rc.AddHook(h)
	}
	r := newRedlock(t, []Node{NewNode(rc)}, WithTTL(gate), WithRestartGate(gate))
	ctx := context.Background()
	calls := func() int64 {
		var n int64
		for _, h := range sent {
			n += h.n.Load()
		}
		return n
	}
	kinds := []struct {
		name string
		opts []Option
	}{
		{"plain", nil},
		{"fenced", []Option{WithFencing()}},
		{"owned", []Option{WithOwner("job")}},
	}
	for _, k := range kinds {
		key := testKey(t)
		before := calls()
		if _, err := r.TryLock(ctx, key, k.opts...); gateRefusals(err) != 1 {
			t.Fatalf("%s: TryLock behind a closed gate = %v; want the gate's refusal", k.name, err)
		}
		settle(r) // the rollback
		if n := calls() - before; n != 2 {
			t.Errorf("%s, gate closed: the master saw %d commands for the vote and its rollback; want 2 (one script for the gated vote)", k.name, n)
		}
		if n, err := cs[0].Exists(ctx, key, FenceKey(key)).Result(); err != nil || n != 0 {
			t.Errorf("%s, gate closed: %d of the lock key and its fence counter exist (%v); want none: a closed gate writes nothing", k.name, n, err)
		}
	}
	time.Sleep(2*gate + 100*time.Millisecond) // uptime_in_seconds reads up to 1 s high, and the gate counts 1 s less
	for _, k := range kinds {
		before := calls()
		l, err := r.TryLock(ctx, testKey(t), k.opts...)
		if err != nil {
			t.Fatalf("%s: TryLock behind an open gate: %v", k.name, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		settle(r)
		want := int64(2)
		if k.name == "fenced" {
			want = 3 // round 2 raises the counter on the quorum
		}
		if n := calls() - before; n != want {
			t.Errorf("%s, gate open: the master saw %d commands for Lock and Unlock; want %d", k.name, n, want)
		}
	}
}
