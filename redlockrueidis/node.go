// Package redlockrueidis makes a [redlock.Node] of a rueidis client
// (github.com/redis/rueidis), so that a Redlock's masters can be reached
// through rueidis instead of go-redis, or some through each:
//
//	opt := rueidis.ClientOption{InitAddress: []string{"10.0.0.1:6379"}}
//	c, err := rueidis.NewClient(opt)
//	if err != nil { return err }
//	node := redlockrueidis.NewNode(c, opt)
//
// The Node only carries the commands the library builds (the votes, the
// scripts, the restart gate's check, the WAIT of replica confirmation) and
// hands back their replies; every safety rule stays in the library. It is a
// module of its own, so that the library's go.mod does not carry rueidis.
package redlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
)

// node is the [redlock.Node] [NewNode] returns.
type node struct {
	c       rueidis.Client
	name    string
	unnamed string // when not empty: why name does not tell this master from another, and what would
	cluster bool   // c is a cluster client: commands go to the shard of their first key
	// oneConn, when not empty, is why the Node does not promise that a
	// batch takes one connection and is never sent again
	// (redlock.Traits.OneConnection); "" when it does.
	oneConn string
	scratch sync.Pool
}

var _ redlock.Node = (*node)(nil)

// NewNode returns a Node that sends commands to the master behind c. opt
// is the ClientOption c was made with (rueidis.NewClient(opt)): rueidis
// does not let the Node read it from c, and the Node takes its name from
// it, never with credentials:
//
//   - one server: host:port/db (opt.InitAddress[0] and opt.SelectDB);
//   - a Redis Cluster: cluster:host:port,host:port (opt.InitAddress,
//     sorted); the Node then routes each command by its first key and
//     delivers wake-ups on shard channels (see below);
//   - a primary under Sentinel: sentinel:MASTER@host:port,…/db
//     (opt.Sentinel.MasterSet, the Sentinels of opt.InitAddress sorted, and
//     opt.SelectDB).
//
// Which of them c is, c says itself (its Mode). When opt does not tell
// what c reaches (no addresses; a Sentinel client without a master set),
// the name has a "?" and [redlock.New] says so if two Nodes then share it.
// It returns nil when c is nil, which New reports as an error. The Node is
// safe for concurrent use, by several Redlocks at once.
//
// The Node sends each batch with one DoMulti: on one server (a
// Sentinel-managed primary included), on one connection in the batch's
// order; on a cluster, each command to its slot's shard. It never marks a
// command read-only, so rueidis's retries (DisableRetry, RetryDelay) never
// send one again after a network error (a retried vote could land twice,
// after the release that follows it), and it declares
// [redlock.Traits].OneConnection, which [redlock.WithReplicaConfirm]
// needs: a batch on one connection, never sent again. Two ClientOptions
// make rueidis send commands of a batch again all the same, and the Node
// then does not declare it: ConnLifetime, when a connection reaches the
// end of its lifetime with a batch in flight (its unanswered commands go
// again on a new connection), unless DisableAutoPipelining is set too (a
// connection rueidis lends a batch has no lifetime until given back); and
// Standalone.EnableRedirect (a batch with a command answered REDIRECT goes
// again, whole, to the new primary). A cluster's Node does not declare it
// either.
//
// Exec returns by its context's deadline: rueidis bounds the dial, the
// handshake and the wait for a reply by it. The one wait it does not bound
// is for a connection another call is already dialing, which that call's
// deadline or opt.Dialer.Timeout (5 s by default) ends: set
// Dialer.Timeout near the node timeout ([redlock.WithNodeTimeout]) to keep
// a master that does not answer a dial from holding its lane longer.
//
// Its Subscribe subscribes over a connection of its own (rueidis's
// Dedicate, with PubSubHooks), and subscribes again on a new one each time
// that one breaks. Over a Redis Cluster it declares
// [redlock.Traits].ShardChannels, as the go-redis Node does: the scripts
// SPUBLISH wake-ups on a channel in the key's slot, which the Node
// SSUBSCRIBEs on the shard that serves the slot (rueidis's Receive), and
// subscribes again where the slot went when it moves, or when its shard
// fails over.
func NewNode(c rueidis.Client, opt rueidis.ClientOption) redlock.Node {
	if c == nil {
		return nil
	}
	n := &node{c: c, cluster: c.Mode() == rueidis.ClientModeCluster}
	n.name, n.unnamed = name(c.Mode(), opt)
	n.oneConn = connPromise(n.cluster, opt)
	n.scratch.New = func() any { return new(scratch) }
	return n
}

// name names the master a client of mode made with opt reaches; unnamed
// says why the name does not tell it from another, when it does not.
func name(mode rueidis.ClientMode, opt rueidis.ClientOption) (name, unnamed string) {
	db := "/" + strconv.Itoa(opt.SelectDB)
	switch mode {
	case rueidis.ClientModeCluster:
		if len(opt.InitAddress) == 0 {
			return "cluster:?", "the ClientOption given to NewNode has no InitAddress: give it the one the cluster client was made with"
		}
		return "cluster:" + strings.Join(sortedSet(opt.InitAddress), ","), ""
	case rueidis.ClientModeSentinel:
		if opt.Sentinel.MasterSet == "" || len(opt.InitAddress) == 0 {
			return "sentinel:?" + db, "the ClientOption given to NewNode has no Sentinel.MasterSet or no InitAddress: give it the one the Sentinel client was made with"
		}
		return "sentinel:" + opt.Sentinel.MasterSet + "@" + strings.Join(sortedSet(opt.InitAddress), ",") + db, ""
	}
	if len(opt.InitAddress) == 0 {
		return "?" + db, "the ClientOption given to NewNode has no InitAddress: give it the one the client was made with"
	}
	return opt.InitAddress[0] + db, ""
}

// sortedSet returns a sorted copy of ss without repeats: a name does not
// depend on the order the addresses were given in.
func sortedSet(ss []string) []string {
	ss = slices.Clone(ss)
	slices.Sort(ss)
	return slices.Compact(ss)
}

// Name is the master's name (see [NewNode]).
func (n *node) Name() string { return n.name }

// Traits: a cluster client routes by key, any other reaches one server.
// Exec returns by its context's deadline (see [NewNode]). A batch takes
// one connection and is never sent again unless connPromise says why not.
func (n *node) Traits() redlock.Traits {
	t := redlock.Traits{KeepsDeadlines: true, NameHint: n.unnamed, OneConnection: n.oneConn == "", ConnectionHint: n.oneConn}
	if n.cluster {
		t.Routing, t.ShardChannels = redlock.RouteByKey, true
	}
	return t
}

// scratch is what one Exec builds its batch in, reused through the Node's
// pool: rueidis copies the tokens into commands of its own, and the
// commands are its own once sent.
type scratch struct {
	toks  []string
	built []rueidis.Completed
	sent  []int // sent[j]: the index in the batch of built[j]
}

// Exec sends the commands of cmds it can build with one DoMulti and hands
// each its reply. A command it cannot build (no name, a key index out of
// Args, an argument neither a string nor an int64, a SUBSCRIBE) gets an
// Err saying why and is not sent.
func (n *node) Exec(ctx context.Context, cmds []*redlock.Command) {
	s := n.scratch.Get().(*scratch)
	for i, c := range cmds {
		rc, err := n.build(s, c)
		if err != nil {
			c.Reply, c.Err = nil, err
			continue
		}
		s.built = append(s.built, rc)
		s.sent = append(s.sent, i)
	}
	held := false // rueidis may still hold s.built
	if len(s.built) > 0 {
		for j, r := range n.c.DoMulti(ctx, s.built...) {
			c := cmds[s.sent[j]]
			c.Reply, c.Err = result(r)
			held = held || r.NonRedisError() != nil
		}
	}
	if held {
		// A batch that failed, by its deadline above all, may still be
		// queued on its connection: rueidis keeps the slice it was given
		// until it has written the batch and read the replies (after
		// Exec returned), so it is left to rueidis (TestTimedOutBatches).
		s.built = nil
	} else {
		clear(s.built) // rueidis recycled the commands it sent
		s.built = s.built[:0]
	}
	clear(s.toks)
	s.sent, s.toks = s.sent[:0], s.toks[:0]
	n.scratch.Put(s)
}

// build makes c a rueidis command. For a cluster client, Args[:Key] are
// its name and leading arguments, Args[Key] its key (rueidis sends the
// command to that key's shard), and the rest its arguments: the other keys
// of a command with several go as arguments, since they are in the first
// one's slot ([redlock.Command]) and a master that finds them elsewhere
// answers CROSSSLOT, where rueidis's own check of them would panic.
//
// Any other client gets the command without a key, which makes rueidis
// send every batch of the Node on the same connection (keyed, each batch
// would go on one of the client's PipelineMultiplex connections, picked at
// random), unless it lends each batch a connection of its pool
// (DisableAutoPipelining; a batch of BlockingPipeline commands or more).
// A batch sent after one that timed out then goes behind it, unless the
// timeout closed that connection: rueidis keeps a timed-out batch queued
// and writes it, where go-redis drops the connection.
func (n *node) build(s *scratch, c *redlock.Command) (rueidis.Completed, error) {
	switch {
	case len(c.Args) == 0:
		return rueidis.Completed{}, errors.New("redlockrueidis: a command without a name: not sent")
	case c.Keys < 0 || c.Key < 0 || c.Keys > 0 && (c.Key < 1 || c.Key+c.Keys > len(c.Args)):
		return rueidis.Completed{}, fmt.Errorf("redlockrueidis: keys at %d (%d of them) are not within the command's %d arguments: not sent", c.Key, c.Keys, len(c.Args))
	}
	toks := s.toks[:0]
	for i, a := range c.Args {
		switch v := a.(type) {
		case string:
			toks = append(toks, v)
		case int64:
			toks = append(toks, strconv.FormatInt(v, 10))
		default:
			s.toks = toks
			return rueidis.Completed{}, fmt.Errorf("redlockrueidis: argument %d of a command is a %T, want a string or an int64: not sent", i, a)
		}
	}
	s.toks = toks
	if len(toks[0]) == 0 || isSubscribe(toks[0]) {
		return rueidis.Completed{}, fmt.Errorf("redlockrueidis: %q cannot be sent in a batch (Subscribe subscribes): not sent", toks[0])
	}
	toks[0] = wireName(toks[0])
	if c.Keys == 0 || !n.cluster {
		return n.c.B().Arbitrary(toks...).Build(), nil
	}
	return n.c.B().Arbitrary(toks[:c.Key]...).Keys(toks[c.Key]).Args(toks[c.Key+1:]...).Build(), nil
}

// isSubscribe reports whether name is a subscribing command, which
// rueidis refuses to build (by panicking).
func isSubscribe(name string) bool {
	const sub = "subscribe"
	return len(name) >= len(sub) && strings.EqualFold(name[len(name)-len(sub):], sub)
}

// wireName is the name of the command as sent: rueidis upper-cases it
// (for its own checks) into a new string unless it already is, so the
// names the library sends are given upper-cased.
func wireName(name string) string {
	switch name {
	case "set":
		return "SET"
	case "eval":
		return "EVAL"
	case "wait":
		return "WAIT"
	}
	return name
}

// result is r as a [redlock.Command]'s Reply and Err: a nil reply is a
// nil Reply; an error reply is an Err whose Error is its text.
func result(r rueidis.RedisResult) (any, error) {
	if err := r.NonRedisError(); err != nil {
		return nil, err
	}
	m, _ := r.ToMessage()
	return reply(&m)
}

// okReply is the reply "OK", boxed once: the reply of every vote that SET
// a key.
var okReply any = "OK"

// reply is m as a Reply: nil, an int64, a string, or a []any of these.
// RESP3 replies are given as a RESP2 connection would get them, which is
// what the contract describes: a double, a big number or a verbatim string
// as its text (a verbatim string without its format), a boolean as 1 or
// nil (Redis's rule for a Lua script's true and false). A RESP3 map has
// no such form: it is an Err (the library sends no command that answers
// one). An error reply is a replyError; within an array, its element.
func reply(m *rueidis.RedisMessage) (any, error) {
	switch {
	case m.IsNil():
		return nil, nil
	case m.IsInt64():
		v, _ := m.AsInt64()
		return v, nil
	case m.IsString():
		s, _ := m.ToString()
		if s == "OK" {
			return okReply, nil
		}
		return s, nil
	case m.IsArray():
		vs, _ := m.ToArray()
		out := make([]any, len(vs))
		for i := range vs {
			v, err := reply(&vs[i])
			if err != nil {
				v = err
			}
			out[i] = v
		}
		return out, nil
	case m.IsBool():
		if b, _ := m.AsBool(); b {
			return int64(1), nil
		}
		return nil, nil
	case m.IsMap():
		return nil, errors.New("redlockrueidis: the master answered a RESP3 map, which has no form in a Command's Reply")
	}
	// An error, a double, a big number or a verbatim string: ToString
	// gives each one's text (an error's with its "ERR " prefix, which
	// Error strips).
	s, err := m.ToString()
	if err != nil {
		return nil, replyError(s)
	}
	if m.IsFloat64() {
		return s, nil
	}
	if len(s) >= 4 && s[3] == ':' { // a verbatim string: its format, ':', then its text
		return s[4:], nil
	}
	return s, nil
}

// replyError is an error reply of the master: its text, as the master
// sent it ("ERR …", "NOPERM …", "GATE 1200").
type replyError string

func (e replyError) Error() string { return string(e) }
