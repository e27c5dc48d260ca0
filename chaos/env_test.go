package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// addrsCluster is a cluster.Cluster of running masters for leaked, which
// only reads their addresses.
type addrsCluster struct{ addrs []string }

func (c addrsCluster) Addrs() []string       { return c.addrs }
func (addrsCluster) Kill(int) error          { return nil }
func (addrsCluster) Start(int) error         { return nil }
func (addrsCluster) Restart(int, bool) error { return nil }
func (addrsCluster) Pause(int) error         { return nil }
func (addrsCluster) Resume(int) error        { return nil }
func (addrsCluster) Partition(int) error     { return nil }
func (addrsCluster) Heal(int) error          { return nil }
func (addrsCluster) Close() error            { return nil }

// TestLeakedReadsEveryKind: a plain lock's key and an owned lock's (the
// redlock exec clients hold theirs as an owner: a hash) are reported as
// leaked; fence counters and queues of waiting Redlocks are not locks.
func TestLeakedReadsEveryKind(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0]})
	defer c.Close()
	plain, owned := keyPrefix+"plain", keyPrefix+"owned"
	c.Set(ctx, plain, "v1", time.Minute)
	c.Set(ctx, redlock.FenceKey(plain), "7", 0)
	c.HSet(ctx, owned, "owner", "job-7", "fence", "9", "h1", "123")
	c.PExpire(ctx, owned, time.Minute)
	c.ZAdd(ctx, redlock.WaitKey(plain), redis.Z{Score: 1, Member: "redlock:wake:x"})
	e := &env{cl: addrsCluster{cl.Addrs()}, n: 1, rec: newRecorder(), faulted: make([]bool, 1)}
	out, err := e.leaked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(out, "\n")
	if len(out) != 2 || !strings.Contains(got, plain+" ") || !strings.Contains(got, owned+" ") {
		t.Fatalf("leaked:\n%s\nwant the plain and the owned lock, not the counter or the queue", got)
	}
}
