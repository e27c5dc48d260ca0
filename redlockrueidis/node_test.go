package redlockrueidis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlockrueidis"
)

// modeClient is a client that only tells its mode: NewNode asks nothing
// else of it, nor does Subscribe of a cluster's Node.
type modeClient struct {
	rueidis.Client // nil: any other method panics
	mode           rueidis.ClientMode
}

func (c modeClient) Mode() rueidis.ClientMode { return c.mode }

// TestNames: a Node is named by what its client reaches, from the
// ClientOption it was made with, never with credentials; a name that
// cannot tell the master comes with a hint.
func TestNames(t *testing.T) {
	creds := func(o rueidis.ClientOption) rueidis.ClientOption {
		o.Username, o.Password = "locker", "s3cret-pw"
		o.Sentinel.Username, o.Sentinel.Password = "watcher", "s3cret-sentinel"
		return o
	}
	for _, tc := range []struct {
		mode rueidis.ClientMode
		opt  rueidis.ClientOption
		name string
		hint bool
	}{
		{rueidis.ClientModeStandalone, rueidis.ClientOption{InitAddress: []string{"10.0.0.1:6379"}}, "10.0.0.1:6379/0", false},
		{rueidis.ClientModeStandalone, rueidis.ClientOption{InitAddress: []string{"10.0.0.1:6379"}, SelectDB: 3}, "10.0.0.1:6379/3", false},
		{rueidis.ClientModeStandalone, rueidis.ClientOption{}, "?/0", true},
		{rueidis.ClientModeCluster, rueidis.ClientOption{InitAddress: []string{"10.0.0.3:7000", "10.0.0.1:7000", "10.0.0.3:7000"}}, "cluster:10.0.0.1:7000,10.0.0.3:7000", false},
		{rueidis.ClientModeCluster, rueidis.ClientOption{}, "cluster:?", true},
		{rueidis.ClientModeSentinel, rueidis.ClientOption{InitAddress: []string{"s2:26379", "s1:26379"}, SelectDB: 1,
			Sentinel: rueidis.SentinelOption{MasterSet: "orders"}}, "sentinel:orders@s1:26379,s2:26379/1", false},
		{rueidis.ClientModeSentinel, rueidis.ClientOption{InitAddress: []string{"s1:26379"}}, "sentinel:?/0", true},
	} {
		n := redlockrueidis.NewNode(modeClient{mode: tc.mode}, creds(tc.opt))
		if n.Name() != tc.name {
			t.Errorf("%s client with %v: Name %q; want %q", tc.mode, tc.opt.InitAddress, n.Name(), tc.name)
		}
		if hint := n.Traits().NameHint; (hint != "") != tc.hint {
			t.Errorf("%s client with %v: NameHint %q; want one: %v", tc.mode, tc.opt.InitAddress, hint, tc.hint)
		}
		if strings.Contains(n.Name()+n.Traits().NameHint, "s3cret") {
			t.Errorf("%s client: the name %q or hint %q has a password", tc.mode, n.Name(), n.Traits().NameHint)
		}
		want := redlock.RouteServer
		if tc.mode == rueidis.ClientModeCluster {
			want = redlock.RouteByKey
		}
		if got := n.Traits().Routing; got != want {
			t.Errorf("%s client: Routing %v; want %v", tc.mode, got, want)
		}
	}
	if n := redlockrueidis.NewNode(nil, rueidis.ClientOption{}); n != nil {
		t.Errorf("NewNode(nil) = %v; want nil", n)
	}
}

// TestNodesOfOneMasterCollide: two Nodes of one server share a name, and
// New refuses them; two Nodes whose options do not tell their master are
// refused with the hint.
func TestNodesOfOneMasterCollide(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	a, b := newNode(t, serverOption(s.Addr())), newNode(t, serverOption(s.Addr()))
	if _, err := redlock.New([]redlock.Node{a, b}); err == nil {
		t.Errorf("New over two Nodes of %s: no error; want one: they are the same master", s.Addr())
	}
	unnamed := func() redlock.Node {
		return redlockrueidis.NewNode(modeClient{mode: rueidis.ClientModeCluster}, rueidis.ClientOption{})
	}
	_, err := redlock.New([]redlock.Node{unnamed(), unnamed()})
	if err == nil || !strings.Contains(err.Error(), "InitAddress") {
		t.Errorf("New over two cluster Nodes made without their options = %v; want an error that says what is missing", err)
	}
}

// do runs cmds on n in one Exec within 5 s.
func do(n redlock.Node, cmds ...*redlock.Command) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.Exec(ctx, cmds)
}

// command is a command whose keys are Args[1:1+keys].
func command(keys int, args ...any) *redlock.Command {
	c := &redlock.Command{Args: args}
	if keys > 0 {
		c.Key, c.Keys = 1, keys
	}
	return c
}

// script is an EVAL of src without keys.
func script(src string) *redlock.Command {
	return &redlock.Command{Args: []any{"eval", src, int64(0)}}
}

// TestReplies: what RESP3 adds is handed back as a RESP2 connection would
// get it, and error replies keep their text whole (rueidis's own error
// drops an "ERR " prefix), also within an array.
func TestReplies(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	for _, resp2 := range []bool{false, true} {
		opt := serverOption(s.Addr())
		opt.AlwaysRESP2 = resp2
		n := newNode(t, opt)
		yes, no := script("return true"), script("return false")
		double := script("redis.setresp(3); return {double=3.141}")
		bignum := script("redis.setresp(3); return {big_number='1234567999999999999999999999'}")
		info := command(0, "info", "server")
		errText := script("return redis.error_reply('ERR boom')")
		unknown := command(0, "nosuchcommand")
		inArray := script("return {1, redis.error_reply('NOPE inside'), 'x'}")
		mapReply := script("redis.setresp(3); return {map={a=1}}")
		do(n, yes, no, double, bignum, info, errText, unknown, inArray, mapReply)
		name := fmt.Sprintf("RESP2 %v: ", resp2)
		check := func(what string, c *redlock.Command, want any) {
			t.Helper()
			if c.Err != nil || fmt.Sprintf("%#v", c.Reply) != fmt.Sprintf("%#v", want) {
				t.Errorf("%s%s: Reply %#v, Err %v; want %#v", name, what, c.Reply, c.Err, want)
			}
		}
		check("a script's true", yes, int64(1))
		check("a script's false", no, nil)
		if d, ok := double.Reply.(string); double.Err != nil || !ok || !strings.HasPrefix(d, "3.141") {
			t.Errorf("%sa double: Reply %#v, Err %v; want its text, 3.141…", name, double.Reply, double.Err)
		}
		if b, ok := bignum.Reply.(string); bignum.Err != nil || !ok || !strings.HasPrefix(b, "1234567999") {
			t.Errorf("%sa big number: Reply %#v, Err %v; want its digits", name, bignum.Reply, bignum.Err)
		}
		if s, ok := info.Reply.(string); info.Err != nil || !ok || !strings.HasPrefix(s, "# Server") {
			t.Errorf("%sINFO (a verbatim string in RESP3): Reply %.20q…, Err %v; want the text from \"# Server\"", name, info.Reply, info.Err)
		}
		if errText.Err == nil || errText.Err.Error() != "ERR boom" {
			t.Errorf("%san error reply ERR boom: Err %v; want its text whole", name, errText.Err)
		}
		if unknown.Err == nil || !strings.HasPrefix(unknown.Err.Error(), "ERR unknown command") {
			t.Errorf("%san unknown command: Err %v; want the master's ERR unknown command…", name, unknown.Err)
		}
		arr, _ := inArray.Reply.([]any)
		if inArray.Err != nil || len(arr) != 3 || arr[0] != int64(1) || arr[2] != "x" {
			t.Errorf("%san array with an error in it: Reply %#v, Err %v", name, inArray.Reply, inArray.Err)
		} else if e, ok := arr[1].(error); !ok || e.Error() != "NOPE inside" {
			t.Errorf("%san array with an error in it: element %#v; want an error with the text NOPE inside", name, arr[1])
		}
		if resp2 {
			check("a script's map over RESP2 (a flat array)", mapReply, []any{"a", int64(1)})
		} else if mapReply.Err == nil {
			t.Errorf("%sa RESP3 map: Reply %#v and no Err; want an Err: the contract has no form for it", name, mapReply.Reply)
		}
	}
}

// TestCommandsNotSent: a command the Node cannot send fails alone, with an
// error that says why, and the others of its batch still run in order.
func TestCommandsNotSent(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	n := newNode(t, serverOption(s.Addr()))
	key := "not-sent"
	bad := []*redlock.Command{
		{}, // no name
		{Args: []any{"get", key}, Key: 2, Keys: 1}, // key past the arguments
		{Args: []any{"get", key}, Key: 0, Keys: 1}, // a key where the name is
		{Args: []any{"set", key, 1.5}, Key: 1, Keys: 1},
		{Args: []any{"subscribe", "ch"}},
		{Args: []any{42}},
	}
	var batch []*redlock.Command
	for _, c := range bad {
		batch = append(batch, command(1, "incr", key), c)
	}
	get := command(1, "get", key)
	batch = append(batch, get)
	do(n, batch...)
	for i, c := range bad {
		if c.Err == nil || !strings.Contains(c.Err.Error(), "not sent") {
			t.Errorf("bad command %d (%#v): Reply %#v, Err %v; want an error saying it was not sent", i, c.Args, c.Reply, c.Err)
		}
	}
	for i := 0; i < len(batch)-1; i += 2 {
		if c := batch[i]; c.Err != nil || c.Reply != int64(i/2+1) {
			t.Errorf("INCR %d between bad commands: Reply %#v, Err %v; want %d", i/2, c.Reply, c.Err, i/2+1)
		}
	}
	if get.Err != nil || get.Reply != fmt.Sprint(len(bad)) {
		t.Errorf("GET after the batch: %#v, %v; want %d", get.Reply, get.Err, len(bad))
	}
}

// TestOneConnection: every batch of a Node of one server goes on one
// connection, also from several goroutines at once, so that a batch sent
// after one that timed out goes behind it (see build).
func TestOneConnection(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	opt := serverOption(s.Addr())
	opt.ClientName = "one-connection"
	n := newNode(t, opt)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				key := fmt.Sprintf("one:%d:%d", g, i)
				do(n, command(1, "set", key, "v"), command(1, "get", key))
			}
		})
	}
	wg.Wait()
	list := command(0, "client", "list")
	do(newNode(t, serverOption(s.Addr())), list)
	l, _ := list.Reply.(string)
	if got := strings.Count(l, " name=one-connection "); list.Err != nil || got != 1 {
		t.Errorf("the Node's connections after 200 batches from 4 goroutines: %d (CLIENT LIST %v); want 1", got, list.Err)
	}
}

// TestDeadlineOnRedial: when the connection is gone and the master stopped
// answering (SIGSTOP: the kernel still accepts the dial, the handshake gets
// no reply), Exec returns by its deadline, as Traits promise.
func TestDeadlineOnRedial(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	n := newNode(t, serverOption(s.Addr()))
	admin := newNode(t, serverOption(s.Addr()))
	ping := command(0, "ping")
	kill := command(0, "client", "kill", "type", "normal", "skipme", "yes")
	do(n, ping)
	do(admin, kill)
	if ping.Err != nil || kill.Err != nil {
		t.Fatalf("PING %v; CLIENT KILL %v", ping.Err, kill.Err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Resume(); err != nil {
			t.Error(err)
		}
	}()
	if !n.Traits().KeepsDeadlines {
		t.Fatal("Traits().KeepsDeadlines is false")
	}
	const d = 150 * time.Millisecond
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		c := command(1, "set", "redial", "v")
		began := time.Now()
		n.Exec(ctx, []*redlock.Command{c})
		took := time.Since(began)
		cancel()
		t.Logf("Exec %d: %v after, %v", i, took.Round(time.Millisecond), c.Err)
		if c.Err == nil {
			t.Errorf("Exec %d to a stopped master: no error", i)
		}
		if took > d+100*time.Millisecond {
			t.Errorf("Exec %d to a stopped master whose connection was killed returned after %v; want by its %v deadline (err %v)", i, took, d, c.Err)
		}
	}
}

// inbox collects what a subscription delivers.
type inbox struct {
	mu           sync.Mutex
	msgs         []string
	resubscribed int
	afterClose   bool
	closed       bool
	changed      chan struct{}
}

func newInbox() *inbox { return &inbox{changed: make(chan struct{}, 1)} }

func (b *inbox) deliver(m redlock.Message) {
	b.mu.Lock()
	if b.closed {
		b.afterClose = true
	}
	if m.Resubscribed {
		b.resubscribed++
	} else {
		b.msgs = append(b.msgs, m.Payload)
	}
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// await waits up to d for cond to hold of what was delivered.
func (b *inbox) await(d time.Duration, cond func(msgs []string, resubscribed int) bool) bool {
	end := time.After(d)
	for {
		b.mu.Lock()
		ok := cond(b.msgs, b.resubscribed)
		b.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-b.changed:
		case <-end:
			return false
		}
	}
}

// close marks the subscription closed: anything delivered later is an error.
func (b *inbox) close(t *testing.T, s redlock.Subscription) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// publish publishes payload on channel through n, again while the
// connection fails (the first command after a master's restart finds its
// connection closed), for up to 3 s.
func publish(t *testing.T, n redlock.Node, channel, payload string) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c := command(0, "publish", channel, payload)
		do(n, c)
		if c.Err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("PUBLISH: %v", c.Err)
		}
	}
}

// TestSubscribeAgain: a master that restarts breaks the subscription; it
// is made again (Resubscribed), and messages published after reach it.
func TestSubscribeAgain(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	n := newNode(t, serverOption(s.Addr()))
	b := newInbox()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub, err := n.Subscribe(ctx, "again", b.deliver)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	publish(t, n, "again", "before")
	if !b.await(3*time.Second, func(m []string, _ int) bool { return len(m) == 1 }) {
		t.Fatal("the message published before the restart was not delivered")
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if !b.await(5*time.Second, func(_ []string, r int) bool { return r == 1 }) {
		t.Fatal("no Resubscribed within 5 s of the master's restart")
	}
	publish(t, n, "again", "after")
	if !b.await(3*time.Second, func(m []string, _ int) bool { return len(m) == 2 }) {
		t.Fatal("the message published after the restart was not delivered")
	}
	b.close(t, sub)
	publish(t, n, "again", "closed")
	time.Sleep(100 * time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	if strings.Join(b.msgs, ",") != "before,after" || b.resubscribed != 1 || b.afterClose {
		t.Errorf("delivered %q, Resubscribed %d times, after Close %v; want before, after, once, false", b.msgs, b.resubscribed, b.afterClose)
	}
}

// TestSubscribeAgainAtOnce: a subscription that breaks while its master
// stays up (the master dropped the connection: CLIENT KILL TYPE pubsub) is
// made again at once, as go-redis's is; waiters listen again without a
// pause. The pause between attempts is for attempts that fail (a master
// that is down). Before, every break cost at least 50 ms, and in the chaos
// scenario subscriptions-drop rueidis clients' acquires took 104 ms at p50
// against 50 ms for go-redis's (issue 42).
func TestSubscribeAgainAtOnce(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	n := newNode(t, serverOption(s.Addr()))
	b := newInbox()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub, err := n.Subscribe(ctx, "atonce", b.deliver)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer b.close(t, sub)
	fastest := time.Hour
	for i := range 5 {
		began := time.Now()
		c := command(0, "client", "kill", "type", "pubsub")
		do(n, c)
		if c.Err != nil {
			t.Fatalf("CLIENT KILL TYPE pubsub: %v", c.Err)
		}
		if !b.await(5*time.Second, func(_ []string, r int) bool { return r == i+1 }) {
			t.Fatalf("break %d: no Resubscribed within 5 s", i)
		}
		fastest = min(fastest, time.Since(began))
	}
	if fastest >= 40*time.Millisecond {
		t.Errorf("after each of 5 breaks the subscription was made again %v or later; want at once (a dial and a SUBSCRIBE)", fastest.Round(time.Millisecond))
	}
}

// TestSubscribeWhileDown: Subscribe to a master that is down returns with
// an error and a Subscription that keeps trying; once the master is up,
// deliver gets Resubscribed and then the messages.
func TestSubscribeWhileDown(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{})
	n := newNode(t, serverOption(s.Addr()))
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	b := newInbox()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	sub, err := n.Subscribe(ctx, "down", b.deliver)
	if err == nil || sub == nil {
		t.Fatalf("Subscribe to a master that is down = %v, %v; want a Subscription that keeps trying and an error", sub, err)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("Subscribe to a master that is down returned after %v", took)
	}
	defer b.close(t, sub)
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if !b.await(5*time.Second, func(_ []string, r int) bool { return r == 1 }) {
		t.Fatal("no Resubscribed within 5 s of the master's start")
	}
	publish(t, n, "down", "up")
	if !b.await(3*time.Second, func(m []string, _ int) bool { return len(m) == 1 && m[0] == "up" }) {
		t.Fatal("the message published once the master was up was not delivered")
	}
}

// TestSubscribeCloseWhileRetrying: Close of a subscription to a master
// that stays down returns promptly, and its goroutine is gone (TestMain's
// goleak check).
func TestSubscribeCloseWhileRetrying(t *testing.T) {
	n := newNode(t, serverOption("127.0.0.1:1"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	b := newInbox()
	sub, err := n.Subscribe(ctx, "never", b.deliver)
	if err == nil || sub == nil {
		t.Fatalf("Subscribe to a master nobody listens for = %v, %v; want a Subscription and an error", sub, err)
	}
	time.Sleep(300 * time.Millisecond) // a few attempts
	began := time.Now()
	b.close(t, sub)
	if took := time.Since(began); took > time.Second {
		t.Errorf("Close took %v", took)
	}
	if b.afterClose || b.resubscribed != 0 {
		t.Errorf("deliver called for a master that never answered")
	}
}

// TestSubscribeRefused: a user the master does not let subscribe gets the
// refusal and no Subscription (the library then tells its observer and its
// waiters use their backoff).
func TestSubscribeRefused(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{Args: []string{"--user", "deaf", "on", ">pw", "~*", "resetchannels", "+@all"}})
	opt := serverOption(s.Addr())
	opt.Username, opt.Password = "deaf", "pw"
	n := newNode(t, opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub, err := n.Subscribe(ctx, "ch", func(redlock.Message) { t.Error("deliver called on a refused subscription") })
	if sub != nil {
		sub.Close()
	}
	if sub != nil || err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("Subscribe as a user without channels = %v, %v; want no Subscription and the NOPERM refusal", sub, err)
	}
}

// TestClusterSubscribe: a cluster's Node declares ShardChannels and
// refuses a plain channel, whose PUBLISH from a script would count only
// the listeners of the shard that runs it (the conformance kit checks the
// shard channels it delivers).
func TestClusterSubscribe(t *testing.T) {
	n := redlockrueidis.NewNode(modeClient{mode: rueidis.ClientModeCluster}, rueidis.ClientOption{InitAddress: []string{"a:1"}})
	if !n.Traits().ShardChannels {
		t.Error("a cluster Node does not declare Traits.ShardChannels")
	}
	sub, err := n.Subscribe(context.Background(), "ch", func(redlock.Message) {})
	if sub != nil || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Subscribe to a plain channel on a cluster Node = %v, %v; want no Subscription and errors.ErrUnsupported", sub, err)
	}
}

// TestMinimalACL: the README's ACL rule is enough for the rueidis Node
// made as the README says (DisableCache: client-side caching would need
// CLIENT TRACKING), for every kind of lock.
func TestMinimalACL(t *testing.T) {
	s := redistest.StartServerT(t, redistest.Options{Args: []string{"--user", "locker", "on", ">pw", "~*",
		"+set", "+get", "+del", "+pexpire", "+time", "+eval", "+type", "+hget", "+hset", "+hdel", "+hgetall"}})
	opt := serverOption(s.Addr())
	opt.Username, opt.Password = "locker", "pw"
	r, err := redlock.New([]redlock.Node{newNode(t, opt)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	for _, o := range [][]redlock.Option{nil, {redlock.WithFencing()}, {redlock.WithOwner("job")}} {
		l, err := r.TryLock(ctx, "acl", o...)
		if err != nil {
			t.Fatalf("TryLock as the minimal user: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock as the minimal user: %v", err)
		}
	}
}
