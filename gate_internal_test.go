package redlock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
)

// TestRestartGateCoarseClock: Redis stamps its start and LASTSAVE with
// time(NULL), which on Linux reads the coarse wall clock: it lags the
// clock TIME reads by up to a kernel tick (4 ms at HZ=250). A stamp made
// just after a second turned can then name the second before, and the
// difference of two truncated seconds reads up to a second and a tick
// high, where gate.lua once counted one second less.
//
// A master that never saved has its start in LASTSAVE, stamped so; a test
// cannot time a process's start to a tick, but it can time a SAVE, which
// stamps LASTSAVE with the same time(NULL). The test keeps a SAVE whose
// LASTSAVE names the second before the one TIME had reached before the
// SAVE began (the lag seen), then asks gate.lua as shipped, in a tight
// loop across the turn of the second the old arithmetic ended on, whether
// the master has been up the gate: it must never say yes before the gate
// has passed since that TIME. It asks as a user without +info, so that
// only the LASTSAVE bound can open the gate (INFO's uptime, counted from
// an older start, would open it rightly); INFO's uptime is the same
// arithmetic on the start's stamp.
func TestRestartGateCoarseClock(t *testing.T) {
	const gate = 2 * time.Second
	// The SAVE must stamp LASTSAVE within a tick of the turn: save to
	// memory, where the fsync before the stamp costs nothing.
	shm, err := os.MkdirTemp("/dev/shm", "redlock-gate-")
	if err != nil {
		shm = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(shm) })
	}
	s := redistest.StartServerT(t, redistest.Options{Args: []string{"--dir", shm, "--user", "gater", "on", ">" + aclPassword, "~*", "+eval", "+time", "+lastsave"}})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	gater := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "gater", Password: aclPassword, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { gater.Close() })
	ctx := context.Background()

	// A save whose stamp lagged: TIME before it already in second S, its
	// LASTSAVE S-1. The coarse clock lags after a turn for up to a tick:
	// save again and again from 1 ms before a turn to 6 ms after it.
	var before time.Time // TIME just before the stamped SAVE
	var stamp int64      // its LASTSAVE
	tries := 0
	for ; tries < 30 && before.IsZero(); tries++ {
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second - time.Millisecond).Sub(now))
		for end := time.Now().Add(7 * time.Millisecond); time.Now().Before(end); {
			var t1 *redis.TimeCmd
			var ls *redis.IntCmd
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				t1 = p.Time(ctx)
				p.Save(ctx)
				ls = p.LastSave(ctx)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if ls.Val() < t1.Val().Unix() {
				before, stamp = t1.Val(), ls.Val()
				break
			}
		}
	}
	if before.IsZero() {
		t.Skip("no SAVE in 30 turns of a second had a LASTSAVE behind TIME: this machine's time(NULL) does not lag")
	}
	t.Logf("TIME %s before a SAVE stamped LASTSAVE %d (turn %d)", before.Format("15:04:05.000000"), stamp, tries)

	// Ask the gate from 50 ms before the second the old arithmetic opened it
	// on (LASTSAVE + 1 s + gate) to 10 ms after it. Without +info, a gate
	// that LASTSAVE does not open fails the script on INFO.
	probe := redis.NewScript(script(gateLua) + "\nlocal t = redis.call('TIME')\nreturn {t[1], t[2], gate(tonumber(ARGV[1]))}")
	turn := time.Unix(stamp, 0).Add(time.Second + gate)
	time.Sleep(time.Until(turn.Add(-50 * time.Millisecond)))
	closed, opened := 0, 0
	for end := turn.Add(10 * time.Millisecond); time.Now().Before(end); {
		v, err := probe.Eval(ctx, gater, nil, gate.Milliseconds()).Slice()
		if err != nil {
			if !strings.Contains(err.Error(), "can't run this command") {
				t.Fatalf("the probe = %v; want the gate's answer, or INFO refused to a user without +info", err)
			}
			closed++
			continue
		}
		sec, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		usec, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		at := time.Unix(sec, usec*1000)
		if left, _ := v[2].(int64); left == 0 {
			opened++
			if up := at.Sub(before); up < gate {
				t.Fatalf("LASTSAVE %d opened the gate at TIME %s, %v after the TIME read before the SAVE that stamped it; want no earlier than %v",
					stamp, at.Format("15:04:05.000000"), up, gate)
			}
		}
	}
	if closed == 0 {
		t.Fatalf("no probe found the gate closed in the 50 ms before %s: the window missed the turn", turn.Format("15:04:05"))
	}
	t.Logf("%d probes found the gate closed, %d open", closed, opened)
}

// TestRestartGateBlindToOperatorActions: what docs/internals.md's table
// says the gate does not see. Each action drops a held key on a running
// master without a new process, so the master's uptime still opens the
// gate and a second caller takes the key while the first holds it, gate
// on: two holders. The actions: FLUSHALL, FLUSHDB, SWAPDB with an empty
// database, DEBUG RELOAD NOSAVE (it loads the last snapshot, made before
// the lock), and REPLICAOF an empty master (a full resync) then REPLICAOF
// NO ONE.
func TestRestartGateBlindToOperatorActions(t *testing.T) {
	t.Parallel() // waits out masters' restart gates, mostly asleep: alongside the other gate tests
	const gate = 2 * time.Second
	s := redistest.StartServerT(t, redistest.Options{Args: []string{"--enable-debug-command", "yes"}})
	empty := redistest.StartServerT(t, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := redistest.WaitUp(ctx, s.Addr(), gate); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx).Err(); err != nil { // the snapshot DEBUG RELOAD NOSAVE loads
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(empty.Addr(), ":")
	for _, action := range []struct {
		name string
		cmds [][]any
	}{
		{"FLUSHALL", [][]any{{"flushall"}}},
		{"FLUSHDB", [][]any{{"flushdb"}}},
		{"SWAPDB", [][]any{{"swapdb", 0, 1}}},
		{"DEBUG RELOAD NOSAVE", [][]any{{"debug", "reload", "nosave"}}},
		{"REPLICAOF", [][]any{{"replicaof", host, port}, {"wait-sync"}, {"replicaof", "no", "one"}}},
	} {
		t.Run(action.name, func(t *testing.T) {
			r := newRedlock(t, []Node{NewNode(c)}, WithTTL(gate), WithRestartGate(gate))
			key := "blind:" + action.name
			a, err := r.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("A: %v", err)
			}
			for _, cmd := range action.cmds {
				if cmd[0] == "wait-sync" {
					waitSynced(t, c)
					continue
				}
				if err := c.Do(ctx, cmd...).Err(); err != nil {
					t.Fatalf("%v: %v", cmd, err)
				}
			}
			b, err := r.TryLock(ctx, key)
			if !time.Now().Before(a.Until()) {
				t.Fatalf("%s took until after A's lock ended: the schedule did not play out", action.name)
			}
			if err != nil {
				t.Fatalf("B after %s, while A holds until %v: %v; want the lock (the gate does not see it)", action.name, a.Until().Format(time.TimeOnly), err)
			}
			t.Logf("%s: A holds until %s, and B holds too (gate %v on): two holders", action.name, a.Until().Format(time.TimeOnly), gate)
			b.Unlock(ctx)
			c.Do(ctx, "flushall")
		})
	}
}

// waitSynced waits until c, a replica, has finished its sync with its master.
func waitSynced(t *testing.T, c *redis.Client) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
	}
	t.Fatal("the replica did not sync within 10 s")
}
