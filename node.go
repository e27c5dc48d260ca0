package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis master, as the quorum algorithm sees it.
// Implementations must be safe for concurrent use and must return promptly
// once ctx is done: the per-node timeout is enforced through ctx.
//
// [NewNode] makes one from a go-redis client. Other implementations wrap a
// Node to inject faults in tests, or speak through another client.
//
// A "refused" answer (false or 0 with a nil error) means the master answered
// and the key is not ours; an error means the outcome is unknown (the command
// may still have taken effect).
type Node interface {
	// Name identifies the master in errors and reports: its address and
	// database, never its credentials. Two Nodes with the same Name are the
	// same master.
	Name() string

	// Acquire sets key to value with the ttl if key does not exist
	// (SET key value NX PX ttl) and reports whether it did.
	Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, error)

	// AcquireFenced does what Acquire does and, when the key was set, raises
	// the fence counter [FenceKey](key) to max(counter+1, the master's clock in
	// µs) and returns it; it returns 0 when the key was taken.
	AcquireFenced(ctx context.Context, key, value string, ttl time.Duration) (uint64, error)

	// RaiseFence raises the fence counter of key to at least token while key
	// still holds value, and reports whether key still held value.
	RaiseFence(ctx context.Context, key, value string, token uint64) (bool, error)

	// Extend resets key's TTL to ttl while key still holds value, and reports
	// whether it did. A key that is gone is not created again.
	Extend(ctx context.Context, key, value string, ttl time.Duration) (bool, error)

	// Release deletes key while it still holds value, and reports whether it did.
	Release(ctx context.Context, key, value string) (bool, error)
}

// FenceKey is the name of the fence counter kept on each master next to key.
// It never expires: deleting it while the lock is in use can hand out a token
// that does not increase (the clock floor limits the damage to restarts).
// Lock and TryLock refuse keys that end in ":fence" with a [*ConfigError], so
// that no lock is ever taken on another lock's counter.
func FenceKey(key string) string { return key + fenceSuffix }

const fenceSuffix = ":fence"

var (
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/acquire_fenced.lua
	acquireFencedLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string

	// Scripts run with EVALSHA, falling back to EVAL when the master does not
	// know them yet (after a restart, say).
	releaseScript       = redis.NewScript(releaseLua)
	extendScript        = redis.NewScript(extendLua)
	acquireFencedScript = redis.NewScript(acquireFencedLua)
	raiseFenceScript    = redis.NewScript(raiseFenceLua)

	// scriptSource is what EVAL sends when a master lacks a script.
	scriptSource = map[*redis.Script]string{
		releaseScript:       releaseLua,
		extendScript:        extendLua,
		acquireFencedScript: acquireFencedLua,
		raiseFenceScript:    raiseFenceLua,
	}
)

// scripter is the part of a go-redis client a Node uses.
type scripter interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	SetArgs(ctx context.Context, key string, value any, a redis.SetArgs) *redis.StatusCmd
}

var (
	_ scripter = (*redis.Client)(nil)
	_ scripter = (redis.UniversalClient)(nil)
)

// redisNode is the go-redis client behind a Node and its name; the requests
// themselves go through pipelinedNode's batcher (pipeline.go), renewals
// through ExtendBatch (extendbatch.go).
type redisNode struct {
	c    scripter
	name string
}

// NewNode returns a Node that talks to the master behind c (one master: a
// *redis.Client, or a redis.UniversalClient made for one address). It returns
// nil when c is nil, which [New] reports as an error.
//
// Make the client with ContextTimeoutEnabled: true, so the per-node timeout
// (passed as a context deadline) reaches the socket. Without it the Redlock
// still decides at the node timeout, but a request to a paused master keeps
// its goroutine, and delays a later release to that master, until the
// client's ReadTimeout (3 s by default). MaxRetries: -1 and DialerRetries: 1
// make a dead master fail at once; [ParseMasterURL] sets all three.
func NewNode(c redis.UniversalClient) Node {
	if c == nil || isNil(c) {
		return nil
	}
	return newPipelinedNode(&redisNode{c: c, name: clientName(c)}, c)
}

// clientName names the master behind c without its credentials.
func clientName(c any) string {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		return o.Addr + "/" + strconv.Itoa(o.DB)
	case fmt.Stringer:
		return c.String()
	}
	return fmt.Sprintf("%T@%p", c, c)
}

func (n *redisNode) Name() string { return n.name }

// isNil reports whether v is an interface holding a nil pointer (or other nil
// reference), which a plain == nil check misses.
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
