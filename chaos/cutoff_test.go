package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// lateNode runs a request only after a delay: a Redlock's lane that gets
// the CPU late, after the quorum decided and Lock returned.
type lateNode struct {
	redlock.Node
	delay time.Duration
}

func (n lateNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	time.Sleep(n.delay)
	n.Node.Exec(ctx, cmds)
}

// TestBareMajorityNeverReachesTheOthers: the scripted holder's acquire
// wins masters 0 to Q-1 and Lock returns at that quorum, while its
// requests to the others (cut off) have not run yet. Run after the holder
// was healed, they would set its key there too (one CI run: the holder
// held 4 of 5 masters for its 10 s, so failover-without-key found no
// second holder and the workload none of the key): they must fail.
func TestBareMajorityNeverReachesTheOthers(t *testing.T) {
	const n = 5
	cl := redistest.StartT(t, n, redistest.Options{})
	e := &env{cl: addrsCluster{cl.Addrs()}, n: n, quorum: n/2 + 1, ttl: time.Second,
		rec: newRecorder(), faulted: make([]bool, n), adapter: AdapterGoRedis}
	cut := newCutoff()
	c, err := e.newClient(func(i int, nd redlock.Node) redlock.Node {
		nd = cut.wrap(i, nd)
		if i >= e.quorum {
			nd = lateNode{nd, 30 * time.Millisecond}
		}
		return nd
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.closeClients()
	ctx := context.Background()
	key := keyPrefix + "bare"
	h := e.onBareMajority(ctx, c, cut, key, 10*time.Second)
	if h == nil {
		t.Fatalf("the holder could not lock %s on masters 0 to %d: %+v", key, e.quorum-1, e.rec.history().Acquires)
	}
	time.Sleep(300 * time.Millisecond) // the late requests have run
	for i, addr := range cl.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		v, err := rc.Get(ctx, key).Result()
		rc.Close()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if held := v == h.lock.Value(); held != (i < e.quorum) {
			t.Errorf("master %d holds %q; the holder's value is %q and it must hold masters 0 to %d only", i, v, h.lock.Value(), e.quorum-1)
		}
	}
}
