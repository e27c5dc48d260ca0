package chaos

import (
	"context"
	"errors"
	"sync"

	"github.com/redlock/redlock"
)

// errCut is the failure of a request to a master cut off from the client.
var errCut = errors.New("chaos: master cut off from this client (simulated partition)")

// cutoff is a partition between one client and some masters, on the
// client's side: requests to a cut master fail at once and never reach it.
// It holds for the requests the client runs while it is on, and a Redlock
// may run one later than the call that sent it returned (a lane runs it
// after the quorum decided): to keep every request of a call from a
// master, keep the cut on after the call. It is safe for concurrent use.
type cutoff struct {
	mu  sync.Mutex // guards cut
	cut map[int]bool
}

func newCutoff() *cutoff { return &cutoff{cut: make(map[int]bool)} }

// set cuts the masters nodes off, for good.
func (c *cutoff) set(nodes []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range nodes {
		c.cut[i] = true
	}
}

func (c *cutoff) isCut(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[i]
}

// wrap returns master i's Node behind the cutoff.
func (c *cutoff) wrap(i int, n redlock.Node) redlock.Node {
	return &cutNode{Node: n, i: i, c: c}
}

// cutNode is a redlock.Node that fails while its master is cut off.
type cutNode struct {
	redlock.Node
	i int
	c *cutoff
}

func (n *cutNode) Exec(ctx context.Context, cmds []*redlock.Command) {
	if !n.c.isCut(n.i) {
		n.Node.Exec(ctx, cmds)
		return
	}
	for _, c := range cmds {
		c.Reply, c.Err = nil, errCut
	}
}
