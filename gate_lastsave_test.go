package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// The restart gate reads LASTSAVE first (lua/gate.lua): a master that has
// not saved within the gate has been up that long. After a save, or for
// a user whose ACL lacks +lastsave, INFO's uptime decides. These tests put
// a master in each case; TestRestartGateRounding covers the bound's lost
// second on a master that never saved.

// TestRestartGateAfterSave: a master up longer than the gate that has just
// saved (LASTSAVE is now) still votes: its uptime says so. And one that
// restarted from that snapshot does not, though the snapshot is as old as
// the save.
func TestRestartGateAfterSave(t *testing.T) {
	const gate = 2 * time.Second
	c := redistest.StartT(t, 1, redistest.Options{})
	cs := gateClients(t, c)
	r := newRedlock(t, []Node{NewNode(cs[0])}, WithTTL(time.Second), WithRestartGate(gate))
	ctx := context.Background()
	time.Sleep(gate + time.Second)
	if err := cs[0].Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	saved := cs[0].LastSave(ctx).Val()
	if now := time.Now().Unix(); now-saved > 1 {
		t.Fatalf("LASTSAVE %d right after SAVE at %d: want now", saved, now)
	}
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock on a master up longer than the gate that just saved = %v; want the lock (INFO's uptime)", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gate + time.Second) // the snapshot is now older than the gate
	if err := c.Servers[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryLock(ctx, testKey(t)); gateRefusals(err) != 1 {
		t.Fatalf("TryLock right after a restart from a snapshot older than the gate = %v; want the restart gate's refusal", err)
	}
}

// TestRestartGateWithoutLastsave: for a user whose ACL lacks +lastsave,
// the gate still closes after a start and opens once the master has been
// up the gate (INFO decides every time).
func TestRestartGateWithoutLastsave(t *testing.T) {
	const gate = 2 * time.Second
	args := append(aclUser("gater"), "+info")
	launched := time.Now()
	s := redistest.StartServerT(t, redistest.Options{Args: args})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "gater", Password: aclPassword,
		MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.LastSave(ctx).Err(); err == nil || !aclRefusal(err) {
		t.Fatalf("LASTSAVE as gater = %v; want the ACL's refusal", err)
	}
	r := newRedlock(t, []Node{NewNode(c)}, WithTTL(time.Second), WithRestartGate(gate))
	for end := launched.Add(gate + 3*time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		l, err := r.TryLock(ctx, testKey(t))
		if err == nil {
			if up := time.Since(launched); up < gate {
				t.Fatalf("the gate opened %v after the master was launched; want no earlier than %v", up.Round(time.Millisecond), gate)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			return
		}
		if gateRefusals(err) != 1 {
			t.Fatalf("TryLock as a user without +lastsave = %v; want the restart gate's refusal or the lock", err)
		}
	}
	t.Fatalf("the gate did not open within %v for a user without +lastsave", gate+3*time.Second)
}

// TestRestartGateLastsaveRounding: LASTSAVE is the second the process
// started in, truncated, and TIME's seconds are truncated too, so their
// difference reads up to a second high, as INFO's uptime does. A master
// that started (and answered) just before a second turned, and never
// saved, must still not vote before it has been up the gate.
func TestRestartGateLastsaveRounding(t *testing.T) {
	const gate = 2 * time.Second
	var launched time.Time
	var s *redistest.Server
	for try := 0; ; try++ {
		// Launch 400 ms before a second turns, by the wall clock (LASTSAVE
		// is time(NULL)); keep a server that answered before it turned.
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second - 400*time.Millisecond).Sub(now))
		launched = time.Now()
		s = redistest.StartServerT(t, redistest.Options{})
		if time.Now().Truncate(time.Second).Equal(launched.Truncate(time.Second)) {
			break
		}
		if try == 5 {
			t.Skip("redis-server took more than 400 ms to start, 6 times: no master started just before a second turned")
		}
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if ls := c.LastSave(ctx).Val(); ls != launched.Unix() {
		t.Fatalf("LASTSAVE %d; want the second the master started in, %d", ls, launched.Unix())
	}
	r := newRedlock(t, []Node{NewNode(c)}, WithTTL(time.Second), WithRestartGate(gate))
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
