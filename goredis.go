package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisNode is the Node [NewNode] returns.
type redisNode struct {
	c    redis.UniversalClient
	name string
	// unnamed, when not empty, says why name does not tell this master from
	// another of its kind, and what would: [New] says so when two collide.
	unnamed string
	// keepsDeadlines: c puts its context's deadline on the socket
	// (ContextTimeoutEnabled), so Exec returns by the deadline (see lane).
	keepsDeadlines bool
	// kind is how c reaches the master's keys (see nodeKind).
	kind nodeKind
	// oneConn, when not empty, is why c does not promise that a batch takes
	// one connection and is never sent again (Traits.OneConnection); ""
	// when it does.
	oneConn string
	// reloads paces a cluster client's map reloads (see Exec).
	reloads throttle
}

// throttle lets a thing happen at most once per reloadEvery.
type throttle struct{ last atomic.Int64 } // UnixNano of the last time it let through

// reloadEvery: while a cluster stays out of reach, go-redis starts a
// failed reload again at once; this bounds them to five a second.
const reloadEvery = 200 * time.Millisecond

// ok reports whether the thing may happen at now, and if so counts it.
func (t *throttle) ok(now time.Time) bool {
	last := t.last.Load()
	return now.UnixNano()-last >= int64(reloadEvery) && t.last.CompareAndSwap(last, now.UnixNano())
}

// nodeKind is how a go-redis client reaches its master's keys, recorded by
// NewNode; the core reads it only as the Node's Traits.
type nodeKind uint8

const (
	kindServer  nodeKind = iota // one server: a *redis.Client, Sentinel-managed or not
	kindCluster                 // a *redis.ClusterClient: keys spread over shards by hash slot
	kindRing                    // a *redis.Ring: keys spread over shards by go-redis's own hash
)

// kindOf is the kind of master c reaches.
func kindOf(c redis.UniversalClient) nodeKind {
	switch c.(type) {
	case *redis.ClusterClient:
		return kindCluster
	case *redis.Ring:
		return kindRing
	}
	return kindServer
}

// Traits: a Redis Cluster and a Ring route by key; the client keeps
// deadlines when made with ContextTimeoutEnabled; a *redis.Client sends a
// batch as one pipeline on one connection, and never again when its
// retries are off (see connPromise).
func (n *redisNode) Traits() Traits {
	t := Traits{KeepsDeadlines: n.keepsDeadlines, NameHint: n.unnamed,
		OneConnection: n.oneConn == "", ConnectionHint: n.oneConn}
	if n.kind != kindServer {
		t.Routing = RouteByKey
	}
	t.ShardChannels = n.kind == kindCluster
	return t
}

// connPromise says why c does not promise that a batch reaches its master
// on one connection and is never sent again, "" when it does. go-redis
// runs a pipeline on one connection, but retries a failed one whole on a
// new connection, MaxRetries times (3 by default): the retry's WAIT then
// runs on a connection whose votes may have written nothing (a SET NX that
// finds the first try's key), and confirms nothing of them. A Cluster or a
// Ring splits a pipeline by shard.
func connPromise(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		// Options() holds MaxRetries as go-redis resolved it: -1 became 0.
		if r := c.Options().MaxRetries; r > 0 {
			return fmt.Sprintf("its go-redis client retries a failed pipeline on a new connection (MaxRetries %d): make it with MaxRetries: -1 (ParseMaster and NewFromURLs do)", r)
		}
		return ""
	case *redis.ClusterClient, *redis.Ring:
		return "its go-redis client routes each command to the shard of its key"
	}
	return fmt.Sprintf("redlock cannot tell how a %T sends a pipeline: give NewNode the *redis.Client itself", c)
}

var _ Node = (*redisNode)(nil)

// NewNode returns a Node that talks to the master behind c. Each batch of
// requests goes out as one pipeline on one connection; to a
// *redis.ClusterClient, as one pipeline per shard, on the shard's client
// (MasterForKey), so hooks added to the ClusterClient itself see only
// batches of one command and commands sent again after a redirect: add
// hooks to each shard's client too (ClusterClient.OnNewNode). A shard
// that does not answer makes the ClusterClient reload the cluster's map
// (ReloadState), so that a replica that took over is found at once. It
// returns nil when c is nil, which [New] reports as an error.
//
// The Node is named by what c was made for, never with credentials:
//
//   - a *redis.Client for one server: host:port/db (a Unix socket: its path/db);
//   - a *redis.ClusterClient: cluster:host:port,host:port (its seed
//     addresses, sorted);
//   - a *redis.Ring: ring:shard=host:port,…/db (its shards, sorted by name).
//
// A client made by redis.NewFailoverClient (Sentinel) does not tell its
// master name and Sentinels: make its Node with [NewFailoverNode] instead.
// Two clients given different seed addresses of one cluster get different
// names: New cannot tell they are the same master.
//
// The Redlock keeps every deadline it promises whatever the client's
// settings, but a request to a frozen master holds that master's lane until
// the client gives up on it: make the client with ContextTimeoutEnabled: true
// so that this is the node timeout rather than the ReadTimeout (3 s by
// default, times MaxRetries). MaxRetries: -1 and DialerRetries: 1 make a dead
// master fail at once; [ParseMasterURL] and [ParseMaster] set all three.
func NewNode(c redis.UniversalClient) Node {
	if c == nil || isNil(c) {
		return nil
	}
	name, unnamed, keeps := clientName(c)
	return &redisNode{c: c, name: name, unnamed: unnamed, keepsDeadlines: keeps, kind: kindOf(c), oneConn: connPromise(c)}
}

// NewNamedNode returns a Node that talks to the master behind c, as
// [NewNode] does, named name instead of by what c was made for: for a
// client that does not tell which master it reaches, such as a cluster
// client without seed addresses (redis.NewFailoverClusterClient, or one
// made with ClusterSlots), whose routing, wake-ups and deadlines it keeps.
// name must tell this master from every other one the Redlock has (two
// Nodes with the same name are the same master: see [Node]); never put
// credentials in it. It returns nil when c is nil, which [New] reports as
// an error.
func NewNamedNode(c redis.UniversalClient, name string) Node {
	n, ok := NewNode(c).(*redisNode)
	if !ok {
		return nil
	}
	n.name, n.unnamed = name, ""
	return n
}

// NewFailoverNode returns a Node that talks to the Sentinel-managed master
// behind c, a client made by redis.NewFailoverClient(opt) (or by
// redis.NewUniversalClient with a MasterName): as [NewNode] does, but named
// sentinel:MASTER@SENTINEL,SENTINEL/db — opt's master name, its Sentinels'
// addresses sorted, and the database — which go-redis does not let NewNode
// read from c. Two Sentinel-managed masters get different names, the same
// one twice the same name. When c is not a failover client, opt is ignored
// and c is named as NewNode names it. It returns nil when c or opt is nil.
func NewFailoverNode(c redis.UniversalClient, opt *redis.FailoverOptions) Node {
	if c == nil || isNil(c) || opt == nil {
		return nil
	}
	n := NewNode(c).(*redisNode)
	if n.unnamed != "" {
		db := opt.DB
		if fc, ok := c.(*redis.Client); ok {
			db = fc.Options().DB
		}
		n.name, n.unnamed = failoverName(opt.MasterName, opt.SentinelAddrs, db), ""
	}
	return n
}

// failoverAddr is the address go-redis gives every client that
// redis.NewFailoverClient makes: the master's is known only once connected.
const failoverAddr = "FailoverClient"

// clientName names the master behind c without its credentials. When the
// name cannot tell c's master from another one of its kind, unnamed says
// why and what would. keeps reports whether c was made with
// ContextTimeoutEnabled: it then bounds every wait (the pool, the dial, the
// socket) by its context's deadline.
func clientName(c any) (name, unnamed string, keeps bool) {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		if o.Addr == failoverAddr {
			return "sentinel:?/" + strconv.Itoa(o.DB),
				"Sentinel-managed clients (redis.NewFailoverClient) do not tell their master name and Sentinels: make each Node with NewFailoverNode(client, its FailoverOptions)",
				o.ContextTimeoutEnabled
		}
		return o.Addr + "/" + strconv.Itoa(o.DB), "", o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		if len(o.Addrs) == 0 {
			return "cluster:?", "cluster clients without seed addresses (redis.NewFailoverClusterClient, ClusterSlots) do not tell which cluster they reach: make each Node with NewNamedNode(client, a name of your own)",
				o.ContextTimeoutEnabled
		}
		return "cluster:" + strings.Join(sortedSet(o.Addrs), ","), "", o.ContextTimeoutEnabled
	case *redis.Ring:
		o := c.Options()
		shards := make([]string, 0, len(o.Addrs))
		for shard, addr := range o.Addrs {
			shards = append(shards, shard+"="+addr)
		}
		return "ring:" + strings.Join(sortedSet(shards), ",") + "/" + strconv.Itoa(o.DB), "", o.ContextTimeoutEnabled
	case fmt.Stringer:
		return c.String(), "", false
	}
	return fmt.Sprintf("%T", c), fmt.Sprintf("clients of type %T do not tell which master they reach: make each Node with NewNamedNode(client, a name of your own)", c), false
}

// failoverName names a Sentinel-managed master: its name, its Sentinels and
// the database.
func failoverName(master string, sentinels []string, db int) string {
	return "sentinel:" + master + "@" + strings.Join(sortedSet(sentinels), ",") + "/" + strconv.Itoa(db)
}

// sortedSet returns a sorted copy of ss without repeats: a name does not
// depend on the order the addresses were given in.
func sortedSet(ss []string) []string {
	ss = slices.Clone(ss)
	slices.Sort(ss)
	return slices.Compact(ss)
}

func (n *redisNode) Name() string { return n.name }

// Exec sends cmds as one pipeline on one connection (a single command as
// a plain command); to a Redis Cluster, as execCluster does.
func (n *redisNode) Exec(ctx context.Context, cmds []*Command) {
	if n.kind != kindCluster {
		execPipeline(ctx, n.c, cmds)
		return
	}
	cc := n.c.(*redis.ClusterClient)
	if len(cmds) > 1 {
		execCluster(ctx, cc, cmds)
	} else {
		execPipeline(ctx, cc, cmds)
	}
	// A shard that did not answer may have failed over: go-redis reloads
	// the cluster's map on a MOVED, which a dead master never sends, or
	// once a minute. ReloadState reloads in the background (redlocktest:
	// cluster/failover); at most once per reloadEvery, as go-redis does
	// after a reload that worked but not after one that failed.
	for _, c := range cmds {
		if unanswered(c.Err) {
			if n.reloads.ok(time.Now()) {
				cc.ReloadState(ctx)
			}
			break
		}
	}
}

// unanswered reports whether err says the master did not answer (a
// connection or a timeout's error, not the master's error reply), other
// than because the caller gave up, closed the client, or waited for one
// of its pool's connections (a busy client, not a dead shard).
func unanswered(err error) bool {
	var reply redis.Error
	return err != nil && !errors.As(err, &reply) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, redis.ErrClosed) && !errors.Is(err, redis.ErrPoolTimeout)
}

// pipeliner is what execPipeline needs of a go-redis client.
type pipeliner interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// execPipeline runs cmds on c as one pipeline (a single command as a plain
// command).
func execPipeline(ctx context.Context, c pipeliner, cmds []*Command) {
	if len(cmds) == 1 {
		execOne(ctx, c, cmds[0])
		return
	}
	rcs := make([]*redis.Cmd, len(cmds))
	pipe := c.Pipeline()
	for i, c := range cmds {
		rcs[i] = redis.NewCmd(ctx, c.Args...)
		_ = pipe.Process(ctx, rcs[i])
	}
	_, _ = pipe.Exec(ctx) // each command holds its own reply or error
	for i, c := range cmds {
		setReply(c, rcs[i])
	}
}

// execOne runs cmd on c as a plain command.
func execOne(ctx context.Context, c pipeliner, cmd *Command) {
	rc := redis.NewCmd(ctx, cmd.Args...)
	_ = c.Process(ctx, rc)
	setReply(cmd, rc)
}

// execCluster runs cmds on the Redis Cluster behind cc with one pipeline
// per shard, the shards side by side: each command goes to the shard
// that serves its first key's slot as cc knew it when the batch began
// (each slot looked up once a batch, so that two commands of one key never
// go to two shards at once), and the commands a shard redirected (MOVED,
// ASK) go again one at a time, in order, through cc, which follows each
// redirect once. A command that names no key (the core sends a Cluster
// none) goes last, alone, through cc. The shards' pipelines are plain
// ones: with the cluster's MaxRetries off (go-redis's default for a
// cluster, and ParseMaster's), each is sent once. With MaxRetries above 0,
// go-redis sends a shard's pipeline again whole after a broken connection
// or when its first command is answered TRYAGAIN, as it does a
// *redis.Client's (neither then declares Traits.OneConnection).
//
// It does not hand the batch to go-redis's cluster pipeline: that one
// (v9.23) can run a command of a batch more than once, from two
// goroutines at once. When one command is redirected and another one's
// error makes it retry its shard's commands (TRYAGAIN, a broken
// connection), it queues the redirected command for both
// (osscluster.go, pipelineReadCmds; TestClusterBatchRunsEachCommandOnce).
// Nor one command at a time: that costs a round trip per command, 4×
// fewer locks a second on BenchmarkDistinctKeysShards. A shard that
// answers TRYAGAIN keeps that reply: the core sends such commands again
// after a pause (batch.tryAgain).
func execCluster(ctx context.Context, cc *redis.ClusterClient, cmds []*Command) {
	type shard struct {
		c    *redis.Client
		cmds []*Command
	}
	type lookup struct {
		slot  uint16
		shard int // index in shards
	}
	var (
		shards  []shard  // a batch meets few shards and slots: scans beat maps
		slots   []lookup // the slots looked up, and their shards
		keyless []*Command
		failed  error // the first lookup's failure: the cluster's map is out of reach
	)
	for _, c := range cmds {
		key, ok := firstKey(c)
		if !ok {
			keyless = append(keyless, c)
			continue
		}
		if failed != nil {
			c.Reply, c.Err = nil, failed
			continue
		}
		slot := keySlot(key)
		j := slices.IndexFunc(slots, func(l lookup) bool { return l.slot == slot })
		if j < 0 {
			m, err := cc.MasterForKey(ctx, key)
			if err != nil {
				failed = err
				c.Reply, c.Err = nil, err
				continue
			}
			i := slices.IndexFunc(shards, func(s shard) bool { return s.c == m })
			if i < 0 {
				i = len(shards)
				shards = append(shards, shard{c: m})
			}
			j = len(slots)
			slots = append(slots, lookup{slot: slot, shard: i})
		}
		i := slots[j].shard
		shards[i].cmds = append(shards[i].cmds, c)
	}
	var wg sync.WaitGroup
	for i := 1; i < len(shards); i++ {
		wg.Go(func() { execPipeline(ctx, shards[i].c, shards[i].cmds) })
	}
	if len(shards) > 0 {
		execPipeline(ctx, shards[0].c, shards[0].cmds)
	}
	wg.Wait()
	for _, c := range cmds {
		if isRedirect(c.Err) {
			execOne(ctx, cc, c)
		}
	}
	for _, c := range keyless {
		execOne(ctx, cc, c)
	}
}

// firstKey is c's first key, when it names one.
func firstKey(c *Command) (string, bool) {
	if c.Keys < 1 || c.Key < 1 || c.Key >= len(c.Args) {
		return "", false
	}
	k, ok := c.Args[c.Key].(string)
	return k, ok
}

// setReply hands c the reply go-redis read for it: a nil reply (redis.Nil)
// as a nil Reply.
func setReply(c *Command, cmd *redis.Cmd) {
	c.Reply, c.Err = cmd.Result()
	if errors.Is(c.Err, redis.Nil) {
		c.Reply, c.Err = nil, nil
	}
}

// pubsub is the part of a *redis.PubSub that listen reads: an interface so
// that the subscriptions of a Ring's shards (shardSubs) and the
// simulation's (sim_test.go) are read the same way.
type pubsub interface {
	Receive(ctx context.Context) (any, error)
	ChannelWithSubscriptions(opts ...redis.ChannelOption) <-chan any
	Close() error
}

var _ pubsub = (*redis.PubSub)(nil)

// listen makes ps, a go-redis-style subscription, a [Subscription] that
// hands deliver what it receives, as [Node.Subscribe] asks: it waits for
// the first confirmation (or ctx's end, or a failure), then one goroutine
// reads the messages and later confirmations until Close. On a failure it
// returns ps with the error unless the master refused (then ps is closed):
// go-redis keeps reconnecting and subscribing again until Close.
func listen(ctx context.Context, ps pubsub, deliver func(Message)) (Subscription, error) {
	_, err := ps.Receive(ctx)
	if err != nil && refused(err) {
		_ = ps.Close()
		return nil, err
	}
	l := &listener{ps: ps}
	msgs := ps.ChannelWithSubscriptions()
	go func() {
		for m := range msgs {
			var msg Message
			switch m := m.(type) {
			case *redis.Message:
				msg.Payload = m.Payload
			case *redis.Subscription:
				msg.Resubscribed = true
			default:
				continue
			}
			l.mu.Lock()
			if !l.closed {
				deliver(msg)
			}
			l.mu.Unlock()
		}
	}()
	return l, err
}

// listener is listen's Subscription. Its reader goroutine ends when
// go-redis closes the channel, which on a master that is down comes only
// after go-redis's pause between tries (100 ms): Close does not wait for
// that, only for a deliver under way.
type listener struct {
	ps     pubsub
	mu     sync.Mutex // held while deliver runs; guards closed
	closed bool
}

func (l *listener) Close() error {
	err := l.ps.Close()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return err
}

// Subscribe subscribes channel on the master; on a Ring, on each of its
// shards (see shardSubs). On a Redis Cluster (Traits.ShardChannels) channel
// is a [ShardChannel], in a slot: it is SSUBSCRIBEd on the shard that serves
// the slot, and followed when the slot moves (see slotListener); a plain
// channel is refused there, as a script's PUBLISH counts only the listeners
// of the shard that runs it.
func (n *redisNode) Subscribe(ctx context.Context, channel string, deliver func(Message)) (Subscription, error) {
	switch ring, _ := n.c.(*redis.Ring); n.kind {
	case kindCluster:
		cc, ok := n.c.(*redis.ClusterClient)
		if !ok || !strings.HasSuffix(channel, "}") {
			return nil, fmt.Errorf("a Redis Cluster's PUBLISH from a script counts only the receivers on the node that runs it: wake-ups only on shard channels: %w", errors.ErrUnsupported)
		}
		return listenSlot(ctx, cc, channel, deliver)
	case kindRing:
		return listen(ctx, subscribeShards(ctx, ring.GetShardClients(), channel), deliver)
	}
	return listen(ctx, n.c.Subscribe(ctx, channel), deliver)
}

// shardSubs is one subscription per shard of a Ring, read as one. A Ring
// is shards that know nothing of each other: a release's PUBLISH runs on
// the shard of the key it frees, and counts and reaches only the listeners
// there, while go-redis's Ring.Subscribe listens on the one shard its hash
// of the channel's name picks. Listening on every shard, this Redlock hears
// each shard's hand-offs, and each shard counts it as a listener.
//
// The shards are those the Ring thinks up when the Redlock first waits: a
// shard then down, or added later (Ring.SetAddrs), gives no hand-offs, and
// calls waiting for its keys take them by their backoff, as on a master
// whose subscription broke. A shard that restarts is subscribed again, as
// any master is.
type shardSubs struct {
	subs []*redis.PubSub
	once sync.Once
	all  chan any // every shard's messages; closed once all their channels closed
}

var _ pubsub = (*shardSubs)(nil)

func subscribeShards(ctx context.Context, shards []*redis.Client, channel string) *shardSubs {
	s := &shardSubs{subs: make([]*redis.PubSub, len(shards))}
	var wg sync.WaitGroup
	for i, c := range shards {
		wg.Go(func() { s.subs[i] = c.Subscribe(ctx, channel) })
	}
	wg.Wait()
	return s
}

var errNoShards = errors.New("redis: the Ring has no shard up to subscribe on")

// Receive waits for every shard's confirmation: nil once each confirmed,
// else a refusal (see refused) when a shard refused, else another shard's
// error (go-redis keeps subscribing again on those).
func (s *shardSubs) Receive(ctx context.Context) (any, error) {
	if len(s.subs) == 0 {
		return nil, errNoShards
	}
	msgs, errs := make([]any, len(s.subs)), make([]error, len(s.subs))
	var wg sync.WaitGroup
	for i, ps := range s.subs {
		wg.Go(func() { msgs[i], errs[i] = ps.Receive(ctx) })
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err != nil && refused(err) {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	return msgs[0], first
}

// ChannelWithSubscriptions returns one channel with every shard's
// messages and subscriptions.
func (s *shardSubs) ChannelWithSubscriptions(opts ...redis.ChannelOption) <-chan any {
	s.once.Do(func() {
		s.all = make(chan any)
		var fwd sync.WaitGroup
		for _, ps := range s.subs {
			in := ps.ChannelWithSubscriptions(opts...)
			fwd.Go(func() {
				for m := range in {
					s.all <- m
				}
			})
		}
		go func() {
			fwd.Wait()
			close(s.all)
		}()
	})
	return s.all
}

// Close closes every shard's subscription: their channels close, and so,
// once their messages are read, does ChannelWithSubscriptions'.
func (s *shardSubs) Close() error {
	errs := make([]error, len(s.subs))
	for i, ps := range s.subs {
		errs[i] = ps.Close()
	}
	return errors.Join(errs...)
}

// listenSlot subscribes channel, a [ShardChannel], on the cluster c: go-redis
// sends SSUBSCRIBE to the master of the channel's slot, and after a broken
// connection subscribes again there, routed by its current slot map (a
// failover). When the slot moves to another shard, the shard that served
// it ends the subscription (an SUNSUBSCRIBE it sends itself): the listener
// reloads c's slot map and subscribes anew, on the slot's new shard, and
// deliver gets Resubscribed once that is confirmed.
func listenSlot(ctx context.Context, c *redis.ClusterClient, channel string, deliver func(Message)) (Subscription, error) {
	ps := c.SSubscribe(ctx, channel)
	_, err := ps.Receive(ctx)
	if err != nil && refused(err) {
		_ = ps.Close()
		return nil, err
	}
	l := &slotListener{c: c, channel: channel, ps: ps, done: make(chan struct{}), ended: make(chan struct{})}
	go l.run(deliver)
	return l, err
}

// slotListener is listenSlot's Subscription; run is its one reader.
type slotListener struct {
	c       *redis.ClusterClient
	channel string
	done    chan struct{} // closed by Close
	ended   chan struct{} // closed when run returned

	mu sync.Mutex    // guards ps
	ps *redis.PubSub // the subscription on the slot's shard
}

func (l *slotListener) run(deliver func(Message)) {
	defer close(l.ended)
	for {
		l.mu.Lock()
		ps := l.ps
		l.mu.Unlock()
		if ps == nil {
			return
		}
		moved := false
		for m := range ps.ChannelWithSubscriptions() {
			switch m := m.(type) {
			case *redis.Message:
				deliver(Message{Payload: m.Payload})
				continue
			case *redis.Subscription:
				if m.Kind == "ssubscribe" {
					deliver(Message{Resubscribed: true})
					continue
				}
				moved = m.Kind == "sunsubscribe" && m.Count == 0
			}
			if moved {
				break
			}
		}
		if !moved {
			return // closed
		}
		_ = ps.Close()
		l.followSlot()
		l.mu.Lock()
		select {
		case <-l.done:
			l.ps = nil
		default:
			l.ps = l.c.SSubscribe(context.Background(), l.channel)
		}
		l.mu.Unlock()
	}
}

// followSlot waits, up to 2 s or Close, until the client's slot map names
// another master for the channel's slot than the one that ended the
// subscription: go-redis reloads its map in the background
// (ReloadState), from a node that may not know of the move yet.
func (l *slotListener) followSlot() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	old, _ := l.c.MasterForKey(ctx, l.channel)
	for {
		l.c.ReloadState(ctx)
		select {
		case <-l.done:
			return
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		if now, err := l.c.MasterForKey(ctx, l.channel); err == nil && (old == nil || now.Options().Addr != old.Options().Addr) {
			return
		}
	}
}

// Close ends the subscription and waits for its reader: deliver is not
// called once it returned.
func (l *slotListener) Close() error {
	l.mu.Lock()
	close(l.done)
	ps := l.ps
	l.ps = nil
	l.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
	}
	<-l.ended
	return err
}
