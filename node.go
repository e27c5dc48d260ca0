package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
)

// Node carries commands to one independent Redis master. It speaks no
// part of the lock's protocol: the core builds every command — the votes,
// the scripts, the restart gate's check, the WAIT of replica confirmation,
// the hand-offs — the same way for every Node, and reads every reply. A
// Node sends them, declares how it reaches the master's keys (Traits), and
// optionally subscribes to channels (Subscribe).
//
// A Redlock sends every command to a master through one first-in first-out
// lane: it calls Exec with the commands of the requests that queued while
// the previous call ran, in the order they queued, and never calls Exec on
// the same Node from two lanes of one Redlock at once. Exec must run them
// on the master in that order — each command reaches the master only after
// the ones before it — so that a release never overtakes the acquire it
// follows. A Node that also sends each batch on one connection and never
// sends any of it again declares so ([Traits].OneConnection): only then
// does a WAIT at the end of a batch confirm the batch's writes, which
// [WithReplicaConfirm] rests on.
//
// [NewNode] makes one from a go-redis client (the batch goes out as one
// pipeline on one connection). [NodeFunc] makes one from a function that
// runs one command at a time. A Node that wraps another (counting,
// tracing, injecting faults) embeds it and overrides Exec alone: it then
// keeps the inner Node's Traits and Subscribe, and with them hand-offs, the
// lanes and the routing guards. The package's conformance tests
// (redlocktest.Run) check a Node against real servers, its declared
// Traits included.
type Node interface {
	// Name identifies the master in errors and reports: its address and
	// database, or for a master that is a replicated set or a cluster, the
	// addresses and names that identify it (see [NewNode]); never its
	// credentials, never a pointer. Two Nodes with the same Name are the
	// same master.
	Name() string

	// Exec sends cmds to the master in order and fills in each one's Reply
	// or Err. It returns once every command has its reply or its error,
	// and promptly once ctx is done: ctx carries the deadline of the batch
	// (the latest of its requests'). An Err means the outcome is unknown:
	// the command may or may not have run. Exec must not keep cmds, or
	// their Args, once it returned: the core reuses them.
	Exec(ctx context.Context, cmds []*Command)

	// Traits declares how the Node reaches its master's keys and what it
	// promises; the core asks nothing else of a Node's kind. A Node that
	// wraps another (counting, tracing, injecting faults) returns the inner
	// one's, which embedding the inner Node does: see [Traits].
	Traits() Traits

	// Subscribe listens on channel on the master, for the wake-ups and
	// hand-offs other processes' releases send this Redlock's waiting calls
	// (docs/internals.md, "Wake-ups and hand-offs between processes"):
	// deliver gets each message, and a Message with Resubscribed set each
	// time the subscription is made again after it broke (messages may
	// have been lost meanwhile). deliver is called from
	// one goroutine at a time, never after Close returned.
	//
	// It returns once the master confirmed the subscription (err nil), or
	// with ctx's end or the failure that kept it from confirming. With an
	// error it still returns a Subscription when it keeps trying (a master
	// down: deliver then gets Resubscribed once it is made); the caller
	// closes it. A Node that cannot deliver wake-ups returns an error
	// wrapping [errors.ErrUnsupported] and no Subscription: its waiting
	// calls retry with their backoff.
	Subscribe(ctx context.Context, channel string, deliver func(Message)) (Subscription, error)
}

// Command is one Redis command the core sends a master and, once
// [Node.Exec] ran it, its reply.
type Command struct {
	// Args is the command as sent: its name, then its arguments, each a
	// string or an int64.
	Args []any
	// Key is the index in Args of the command's first key, and Keys how
	// many keys follow it there; Keys 0: the command names no key (WAIT).
	// A command's keys are all in one hash slot. A Node that routes by key
	// (Traits.Routing) sends the command to the shard of its first key.
	Key, Keys int

	// Reply is the master's reply: nil for a nil reply, an int64 for an
	// integer, a string for a simple or bulk string, a []any of these for
	// an array. A Node fills in Reply or Err.
	Reply any
	// Err is an error reply (its text, such as "NOPERM ..." or "GATE
	// 1200"), or the failure that left the reply unknown.
	Err error

	req *request // the request it carries; nil for a WAIT
}

// About says what the core sent c for: the step ("acquire",
// "acquire-fenced", "raise-fence", "extend", "release", or "wait" for a
// replica confirmation's WAIT) and the lock's key and value ("" for a
// WAIT). It is for traces, metrics and fault injection: a Node needs none
// of it to carry c. A command the core did not build is told by its Args:
// a SET is an acquire, anything else "" (a test's own commands).
func (c *Command) About() (step, key, value string) {
	if c.req != nil {
		return c.req.Op.String(), c.req.Key, c.req.Value
	}
	if len(c.Args) == 0 {
		return "", "", ""
	}
	switch c.Args[0] {
	case "wait":
		return "wait", "", ""
	case "set":
		if len(c.Args) >= 3 {
			k, _ := c.Args[1].(string)
			v, _ := c.Args[2].(string)
			return "acquire", k, v
		}
	}
	return "", "", ""
}

// Traits is what a [Node] declares about itself. The zero value is a Node
// that reaches one server, may hold a reply past its context's deadline,
// and promises nothing about the connections its batches take.
type Traits struct {
	// Routing is how commands reach the master's keys.
	Routing Routing
	// OneConnection promises that each Exec's commands reach the master on
	// one connection, in the order given, and that no command of a batch is
	// ever sent again, on that connection or another: no retry of a failed
	// batch, no re-send of what was in flight when a connection broke or
	// expired. A WAIT at the end of the batch then counts the replicas that
	// acknowledged the batch's own writes, and only those: WAIT waits for
	// the writes its own connection made, so on another connection, or
	// after a re-sent vote that wrote nothing, it confirms nothing of the
	// vote. [WithReplicaConfirm] needs it: [New] and the calls refuse that
	// option, with a [*ConfigError] that names the master, on a Node that
	// does not promise it. A Node that routes by key cannot promise it.
	OneConnection bool
	// ConnectionHint, when OneConnection is false, says what keeps the
	// Node from promising it and what would (a client setting); the
	// *ConfigError that refuses [WithReplicaConfirm] gives it.
	ConnectionHint string
	// KeepsDeadlines promises that Exec returns by its context's deadline
	// whatever the master does (go-redis's ContextTimeoutEnabled): a caller
	// waiting for its phase may then run its batch itself (see lane). A
	// wrapper that can hold a reply past the deadline must not promise it.
	KeepsDeadlines bool
	// ShardChannels: the master is a Redis Cluster, whose scripts' PUBLISH
	// counts only the listeners on the shard that runs them, and reaches
	// every node's. Its wake-ups and hand-offs come by sharded pub/sub: the
	// scripts SPUBLISH on [ShardChannel] of the Redlock's channel and the
	// key, a channel in the key's slot, and the Redlock asks Subscribe for
	// each such channel, once per slot it waits on. Subscribe must
	// SSUBSCRIBE it on the shard that serves the slot, follow the slot when
	// it moves or its shard fails over, and deliver Resubscribed each time
	// it subscribed again.
	ShardChannels bool
	// NameHint, when Name cannot tell this master from another of its kind,
	// says why and what would; [New] gives it when two Nodes share a name.
	NameHint string
}

// Routing is how a Node's commands reach the master's keys.
type Routing uint8

const (
	// RouteServer: one server (a Sentinel-managed primary included); every
	// command of a batch, whatever keys it names, reaches it, in order (on
	// one connection when the Node promises [Traits].OneConnection).
	RouteServer Routing = iota
	// RouteByKey: shards that each hold some of the keys (a Redis Cluster,
	// a Ring); each command goes to the shard of its key. A command that
	// names no key (WAIT) may reach another shard than the vote before it,
	// so [WithReplicaConfirm] is refused on such a master.
	RouteByKey
)

// Message is what a [Node.Subscribe] subscription delivers.
type Message struct {
	Payload string
	// Resubscribed: no message; the subscription was made again after it
	// broke.
	Resubscribed bool
}

// Subscription is a subscription [Node.Subscribe] made.
type Subscription interface {
	// Close ends the subscription; once it returned, deliver is not called
	// again.
	Close() error
}

// NodeFunc returns a Node named name that runs each command of a batch by
// calling do, one at a time and in order; do fills in the command's Reply
// or Err. A command whose turn comes after ctx ended is not passed to do:
// its Err is ctx's error.
//
// It suits a client that has no pipelines; do must be safe for concurrent
// use when the Node serves several Redlocks. Its Traits are the zero
// value's: one server, no promise on deadlines, and no promise that a
// batch takes one connection — a do that takes a connection from a pool
// per command does not keep it, so [WithReplicaConfirm] is refused; when
// do runs every command on one connection and never sends one again,
// declare it with [NodeWithTraits]. It delivers no wake-ups: a wrapper
// around another Node embeds it instead (see [Node]).
func NodeFunc(name string, do func(ctx context.Context, cmd *Command)) Node {
	if do == nil {
		return nil
	}
	return funcNode{name: name, do: do}
}

type funcNode struct {
	name string
	do   func(ctx context.Context, cmd *Command)
}

func (n funcNode) Name() string { return n.name }

// Traits: one server, no promise on deadlines or connections.
func (funcNode) Traits() Traits {
	return Traits{ConnectionHint: "a NodeFunc's do may take any connection for each command: declare OneConnection with NodeWithTraits if it runs every command of a batch on one connection and never sends one again"}
}

// Subscribe: a NodeFunc delivers no wake-ups.
func (funcNode) Subscribe(context.Context, string, func(Message)) (Subscription, error) {
	return nil, fmt.Errorf("a NodeFunc delivers no wake-ups: %w", errors.ErrUnsupported)
}

func (n funcNode) Exec(ctx context.Context, cmds []*Command) {
	for _, c := range cmds {
		if err := ctx.Err(); err != nil {
			c.Err = err
			continue
		}
		n.do(ctx, c)
	}
}

// NodeWithTraits returns n declaring t as its Traits instead of its own:
// for a Node whose maker knows more than it can tell, such as a [NodeFunc]
// whose do runs every command of a batch on one dedicated connection and
// never sends one again ([Traits].OneConnection), or that returns by its
// context's deadline ([Traits].KeepsDeadlines). It keeps n's Name, Exec and
// Subscribe. What t promises, n must keep: the conformance tests
// (redlocktest.Run) check it against real servers. It returns nil when n
// is nil, which [New] reports as an error.
func NodeWithTraits(n Node, t Traits) Node {
	if n == nil || isNil(n) {
		return nil
	}
	return declared{Node: n, t: t}
}

// declared is the Node [NodeWithTraits] returns.
type declared struct {
	Node
	t Traits
}

func (d declared) Traits() Traits { return d.t }

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
