package redlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
)

// masters are five redis-server processes shared by the tests that need no
// faults; each test uses keys of its own.
var masters *redistest.Cluster

// quietLogger drops go-redis's log lines: the tests kill masters on purpose.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv(quietChildEnv) != "" {
		// The program TestNewFromURLsQuietWhenMastersDown watches: go-redis
		// logs as it does in a user's program, and it has masters of its own.
		os.Exit(m.Run())
	}
	redis.SetLogger(quietLogger{})
	os.Exit(redistest.Main(m, 5, redistest.Options{}, func(c *redistest.Cluster) {
		masters = c
		// The runnable examples read the masters from the same variable the
		// command-line tool reads.
		os.Setenv("REDLOCK_MASTERS", strings.Join(c.Addrs(), ","))
	}))
}

var keySeq atomic.Int64

// testKey returns a key no other test uses.
func testKey(t testing.TB) string {
	return fmt.Sprintf("%s:%d", t.Name(), keySeq.Add(1))
}

// clients returns one go-redis client per address, closed at the end of the
// test, configured as the README recommends: go-redis retries off, so a dead
// master fails at once, and context deadlines on the socket.
func clients(t testing.TB, addrs []string) []*redis.Client {
	t.Helper()
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
		c := cs[i]
		t.Cleanup(func() { c.Close() })
	}
	return cs
}

// nodesOf wraps clients as Nodes.
func nodesOf(t testing.TB, cs []*redis.Client) []Node {
	t.Helper()
	ns := make([]Node, len(cs))
	for i, c := range cs {
		ns[i] = NewNode(c)
	}
	return ns
}

// newRedlock returns a Redlock over nodes; its background work is waited for
// at the end of the test.
func newRedlock(t testing.TB, nodes []Node, opts ...Option) *Redlock {
	t.Helper()
	// A node timeout that a loaded CI machine does not exceed by accident
	// (the default is TTL/10: 20 ms for the 200 ms TTLs some tests use);
	// tests about timeouts set their own, which comes later and wins.
	opts = append([]Option{WithNodeTimeout(250 * time.Millisecond)}, opts...)
	r, err := New(nodes, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// settle waits for the requests a Redlock still runs in the background.
func settle(r *Redlock) { r.bg.Wait() }

// holders lists, per master, the value key holds there ("" when absent).
func holders(t testing.TB, cs []*redis.Client, key string) []string {
	t.Helper()
	vs := make([]string, len(cs))
	for i, c := range cs {
		v, err := c.Get(context.Background(), key).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("GET %s on master %d: %v", key, i, err)
		}
		vs[i] = v
	}
	return vs
}

// count returns how many entries of vs equal v.
func count(vs []string, v string) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}

// fakeMaster is a tiny server speaking RESP on loopback, for the one thing a
// real master cannot be made to do: answer garbage. It completes go-redis's
// connection handshake (HELLO is refused, so the client falls back to RESP2;
// CLIENT SETINFO is accepted) and answers every other command with the same
// canned bytes. With hangUp it closes the connection after each answer, so a
// truncated frame ends in EOF at once; without, the client waits for the rest
// until its deadline.
type fakeMaster struct {
	ln     net.Listener
	reply  []byte
	hangUp bool

	wg    sync.WaitGroup
	mu    sync.Mutex // guards conns
	conns map[net.Conn]bool
}

// startFake starts a fakeMaster answering reply on a loopback port; it stops
// with the test.
func startFake(t testing.TB, reply []byte, hangUp bool) *fakeMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := pipeFake(t, reply, hangUp)
	f.ln = ln
	f.wg.Add(1)
	go f.accept()
	return f
}

// pipeFake returns a fakeMaster without a port: its clients (pipeNode) reach
// it over in-memory pipes, so a fuzzer can dial it thousands of times a
// second without running the machine out of ports. It stops with the test.
func pipeFake(t testing.TB, reply []byte, hangUp bool) *fakeMaster {
	f := &fakeMaster{reply: reply, hangUp: hangUp, conns: map[net.Conn]bool{}}
	t.Cleanup(f.stop)
	return f
}

func (f *fakeMaster) Addr() string { return f.ln.Addr().String() }

// pipeNode returns a function that makes a Node on a client of its own,
// connected to f over in-memory pipes.
func (f *fakeMaster) pipeNode(t testing.TB) func() Node {
	return func() Node {
		c := redis.NewClient(&redis.Options{Addr: "192.0.2.1:6379", // TEST-NET: an IP, so nothing is looked up, MaxRetries: -1, DialerRetries: 1,
			ContextTimeoutEnabled: true,
			// go-redis replays once, after a backoff, a command whose
			// connection dropped before it was written; no waiting here.
			MinRetryBackoff: -1, MaxRetryBackoff: -1,
			Dialer: func(context.Context, string, string) (net.Conn, error) {
				client, server := net.Pipe()
				f.track(server)
				return client, nil
			}})
		t.Cleanup(func() { c.Close() })
		return NewNode(c)
	}
}

// client returns a go-redis client for the fake, without retries, that
// keeps to the context's deadline (go-redis ignores it otherwise and waits
// for its ReadTimeout).
func (f *fakeMaster) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: f.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// node returns a function that makes a Node on a client of its own.
func (f *fakeMaster) node(t testing.TB) func() Node {
	return func() Node { return NewNode(f.client(t)) }
}

func (f *fakeMaster) stop() {
	if f.ln != nil {
		f.ln.Close()
	}
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeMaster) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.track(c)
	}
}

// track serves c until it closes or f stops.
func (f *fakeMaster) track(c net.Conn) {
	f.mu.Lock()
	f.conns[c] = true
	f.mu.Unlock()
	f.wg.Add(1)
	go f.serve(c)
}

func (f *fakeMaster) serve(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		switch cmd {
		case "HELLO":
			_, err = io.WriteString(c, "-ERR unknown command 'HELLO'\r\n")
		case "CLIENT":
			_, err = io.WriteString(c, "+OK\r\n")
		default:
			_, err = c.Write(f.reply)
			if f.hangUp {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readCommand reads one command (an array of bulk strings) and returns its
// name in upper case.
func readCommand(r *bufio.Reader) (string, error) {
	n, err := readHeader(r, '*')
	if err != nil {
		return "", err
	}
	var name string
	for i := range n {
		size, err := readHeader(r, '$')
		if err != nil {
			return "", err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if i == 0 {
			name = strings.ToUpper(string(buf[:size]))
		}
	}
	return name, nil
}

func readHeader(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimRight(line, "\r\n")
	if len(line) < 2 || line[0] != kind {
		return 0, fmt.Errorf("fake master: want %c, got %q", kind, line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("fake master: bad length %q", line)
	}
	return n, nil
}

// faultNode wraps a real master's Node and injects the faults a real server
// cannot be made to produce on demand. It passes the commands of a batch to
// the wrapped Node one at a time, in order, so that each can be held back or
// have its reply withheld on its own; the batch's context bounds every wait.
// The zero faults pass every request through.
type faultNode struct {
	Node
	// acquireDelay holds each acquire back (as a slow network would) before
	// it is sent.
	acquireDelay atomic.Int64
	// lateReply sends each acquire detached from the context, so it lands,
	// then withholds the reply until the context ends: a SET that landed
	// although the client saw a timeout.
	lateReply atomic.Bool
	// replyDelay holds each acquire's reply back after the master answered
	// (as a slow return path would).
	replyDelay atomic.Int64
	// acquired counts the acquires that returned.
	acquired atomic.Int64
	// releases counts the releases sent to the master.
	releases atomic.Int64
	// extendDelay holds each extend back before it is sent.
	extendDelay atomic.Int64
	// extends counts the extends sent; extendsDone is when the last one
	// returned, and firstRelease when the first release was sent
	// (UnixNano; 0: never).
	extends                   atomic.Int64
	extendsDone, firstRelease atomic.Int64
	// strayTTL, when set, makes each extend to that TTL (in ns) a straggler:
	// held back for strayDelay and then sent detached from the context,
	// while the caller sees the context's error when it ends — a request
	// that timed out and went on in the network after go-redis dropped its
	// connection, landing after the requests sent later. strayed counts the
	// stragglers that landed.
	strayTTL, strayDelay, strayed atomic.Int64
	// failTTL, when set, fails each extend to that TTL (in ns) without
	// sending it.
	failTTL atomic.Int64
	// lateFailTTL, when set, holds each extend to that TTL (in ns) for
	// lateFailDelay and then fails it without sending it: a request whose
	// failure is known only after later phases were decided without this
	// master. lateFailed counts them.
	lateFailTTL, lateFailDelay, lateFailed atomic.Int64
	// during, when set, runs as each request of its Op is sent (a clock
	// that jumps while a request is in flight).
	during atomic.Pointer[func(*request)]
	// releaseGate, when set, holds each release back until the channel is
	// closed (or the batch's context ends).
	releaseGate atomic.Pointer[chan struct{}]
	// releaseReplyLost sends each release and withholds its reply: it
	// landed, and the client sees it fail.
	releaseReplyLost atomic.Bool
}

func wrap(n Node) *faultNode { return &faultNode{Node: n} }

// wait sleeps for the delay in d, or until ctx ends.
func wait(ctx context.Context, d0 *atomic.Int64) error {
	d := time.Duration(d0.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *faultNode) Exec(ctx context.Context, cmds []*Command) {
	for _, c := range cmds {
		if err := ctx.Err(); err != nil {
			c.Err = err
			continue
		}
		q := c.req
		if q == nil { // a WAIT
			f.Node.Exec(ctx, []*Command{c})
			continue
		}
		if during := f.during.Load(); during != nil {
			(*during)(q)
		}
		switch q.Op {
		case reqAcquire, reqAcquireFenced:
			f.acquire(ctx, c)
		case reqExtend:
			f.extends.Add(1)
			if f.extendFault(c) {
				continue
			}
			if c.Err = wait(ctx, &f.extendDelay); c.Err == nil {
				f.Node.Exec(ctx, []*Command{c})
			}
			f.extendsDone.Store(time.Now().UnixNano())
		case reqRelease:
			if g := f.releaseGate.Load(); g != nil {
				select {
				case <-*g:
				case <-ctx.Done():
					c.Err = ctx.Err()
					continue
				}
			}
			f.releases.Add(1)
			f.firstRelease.CompareAndSwap(0, time.Now().UnixNano())
			f.Node.Exec(ctx, []*Command{c})
			if f.releaseReplyLost.Load() {
				c.Reply, c.Err = nil, errReplyLost
			}
		default:
			f.Node.Exec(ctx, []*Command{c})
		}
	}
}

// extendFault applies strayTTL and failTTL to the extend c and reports
// whether it did.
func (f *faultNode) extendFault(c *Command) bool {
	switch int64(c.req.TTL) {
	case f.failTTL.Load():
		c.Err = errReplyLost
		return true
	case f.lateFailTTL.Load():
		time.Sleep(time.Duration(f.lateFailDelay.Load()))
		c.Reply, c.Err = nil, errReplyLost
		f.lateFailed.Add(1)
		return true
	case f.strayTTL.Load():
		stray := &Command{Args: slices.Clone(c.Args), Key: c.Key, Keys: c.Keys}
		d := time.Duration(f.strayDelay.Load())
		go func() {
			time.Sleep(d)
			f.Node.Exec(context.Background(), []*Command{stray})
			f.strayed.Add(1)
		}()
		// The client sees the failure at once (a connection reset with the
		// request still on its way), not at the batch's deadline: that
		// deadline may be a later request's, queued in the same batch.
		c.Reply, c.Err = nil, errReplyLost
		return true
	}
	return false
}

func (f *faultNode) acquire(ctx context.Context, c *Command) {
	if c.Err = wait(ctx, &f.acquireDelay); c.Err != nil {
		return
	}
	if f.lateReply.Load() {
		f.Node.Exec(context.WithoutCancel(ctx), []*Command{c})
		<-ctx.Done()
		c.Reply, c.Err = nil, ctx.Err()
		return
	}
	defer f.acquired.Add(1)
	f.Node.Exec(ctx, []*Command{c})
	if err := wait(ctx, &f.replyDelay); err != nil {
		c.Reply, c.Err = nil, err
	}
}

// onSend makes f call fn as each request is sent.
func (f *faultNode) onSend(fn func(*request)) { f.during.Store(&fn) }

// recorder is an Observer that writes each event as one line. The observe
// tests are in observe_test.go; internal tests record events too, so it is
// defined here and lent to them (below).
type recorder struct {
	mu     sync.Mutex
	events []string
	Nodes  [][]NodeReply // each phase's Nodes, in order
}

type depthKey struct{}

func depth(ctx context.Context) int { d, _ := ctx.Value(depthKey{}).(int); return d }

func (o *recorder) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, s)
}

func (o *recorder) Start(ctx context.Context, c *Call) context.Context {
	d := depth(ctx) + 1
	o.add(fmt.Sprintf("start %s depth=%d", c.Op, d))
	return context.WithValue(ctx, depthKey{}, d)
}

func (o *recorder) Phase(ctx context.Context, e *PhaseEvent) {
	var outcomes []string
	for _, n := range e.Nodes {
		outcomes = append(outcomes, n.Outcome.String())
	}
	// Which master answered after the decision varies from run to run:
	// compare the outcomes as a multiset.
	slices.Sort(outcomes)
	s := fmt.Sprintf("%s depth=%d", e.Op, depth(ctx))
	if e.Op == PhaseAcquire {
		s += fmt.Sprintf(" attempt=%d", e.Attempt)
	}
	s += fmt.Sprintf(" %d/%d/%d q=%d [%s] ok=%v", e.Succeeded, e.Refused, e.Failed, e.Quorum, strings.Join(outcomes, " "), e.Err == nil)
	if e.Err == nil && e.Op != PhaseRelease && e.Op != PhaseSubscribe && e.Validity <= 0 {
		s += " NO-VALIDITY"
	}
	o.add(s)
	o.mu.Lock()
	o.Nodes = append(o.Nodes, append([]NodeReply(nil), e.Nodes...))
	o.mu.Unlock()
}

func (o *recorder) End(ctx context.Context, c *Call) {
	o.add(fmt.Sprintf("end %s depth=%d attempts=%d fenced=%v ok=%v", c.Op, depth(ctx), c.Attempts, c.Fence != 0, c.Err == nil))
}

func (o *recorder) Lost(key string, cause error) {
	o.add(fmt.Sprintf("lost lockLost=%v", errors.Is(cause, ErrLockLost)))
}

func (o *recorder) Take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ev := o.events
	o.events = nil
	return ev
}

// This file lends package redlock_test, the tests that use only what a user
// can call, what they cannot have from the API: two waits for what a
// Redlock does out of the caller's sight, a constant of the validity
// arithmetic, the shared masters, and the helpers they share with the
// internal tests. Each is defined once, in package redlock's test files,
// where the internal tests use it too; helpers_test.go gives it back its own
// name in package redlock_test, so that a test reads the same in either
// package.

// Settle waits for the requests a Redlock still runs in the background;
// WaitQueued, until a goroutine of the Redlock waits for a key.
var (
	Settle     = settle
	WaitQueued = waitQueued
)

// DriftFloor is the fixed part of every lock's drift allowance (options.go).
const DriftFloor = driftFloor

// Masters returns the masters TestMain starts, once it has started them.
func Masters() *redistest.Cluster { return masters }

// The shared helpers, by the file that defines them.
var (
	// main_test.go
	UniqueKey  = testKey
	Clients    = clients
	NodesOf    = nodesOf
	NewRedlock = newRedlock
	Holders    = holders
	Count      = count
	StartFake  = startFake

	// lock_internal_test.go
	Holds      = holds
	MustLock   = mustLock
	MustRefuse = mustRefuse

	// fence_internal_test.go
	Occupy           = occupy
	Free             = free
	FaultClients     = faultClients
	WaitDialProbes   = waitDialProbes
	LimitRapidChecks = limitRapidChecks

	// handoff_internal_test.go
	LockAsync      = lockAsync
	ObtainedWithin = obtainedWithin
	WaitRegistered = waitRegistered
	HandedLock     = handedLock
	Merge          = merge

	// goredis_internal_test.go
	ClusterMasters = clusterMasters
	ClusterNodes   = clusterNodes
	ClusterGets    = clusterGets
	RingMaster     = ringMaster
	ShardOf        = shardOf
	AclCommands    = aclCommands
	AclUser        = aclUser
	UserRedlock    = userRedlock
	AclRefusal     = aclRefusal

	// protocol_internal_test.go
	GateClients         = gateClients
	GateRefusals        = gateRefusals
	StartReplicated     = startReplicated
	ReplicatedNodes     = replicatedNodes
	SetReplicationDelay = setReplicationDelay

	// scheduler_internal_test.go
	HoldMany       = holdMany
	UnlockAll      = unlockAll
	IdleGoroutines = idleGoroutines

	// turn_internal_test.go
	UnlockWaited = unlockWaited
)

type (
	// main_test.go
	QuietLogger = quietLogger
	Recorder    = recorder

	// handoff_internal_test.go
	Obtained    = obtained
	SentCounter = sentCounter
)

const (
	// redlock_internal_test.go
	Foreign = foreign

	// goredis_internal_test.go
	AclPassword   = aclPassword
	QuietChildEnv = quietChildEnv
	QuietLineEnv  = quietLineEnv
)
