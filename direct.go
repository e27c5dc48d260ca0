package redlock

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DirectNode is a [Node] that speaks to its master itself, over one
// pipelined connection, instead of through a go-redis client: it is the
// fastest Node (see the README's benchmarks). A Redlock's phases write their
// request to every DirectNode from the calling goroutine, and each
// connection's reader hands the replies back; requests from concurrent calls
// share writes and reads. Requests reach the master in the order they were
// made, like a pipelined [NewNode]'s.
//
// It connects on first use, not in [NewDirectNode], and again after the
// connection broke: a master that is down when the program starts is one
// failed master, not a failed start. A request whose reply is not in by its
// deadline (the node timeout, or the context's) fails, and so does the
// connection, with the requests in flight on it.
//
// Close it when done; a [Redlock] does not close the Nodes given to [New]
// ([NewFromURLs] makes DirectNodes and closes them in [Redlock.Close]).
type DirectNode struct {
	name    string
	w       *wire
	readMax time.Duration
}

var (
	_ Node          = (*DirectNode)(nil)
	_ BatchExtender = (*DirectNode)(nil)
)

// NewDirectNode returns a DirectNode for the master o describes, in
// go-redis's terms: Network ("tcp" or "unix"), Addr, Dialer, TLSConfig,
// Username, Password, CredentialsProvider, CredentialsProviderContext, DB,
// ClientName, DialTimeout (0: 5 s) and ReadTimeout (the bound of a Node method
// called with a context without deadline; 0: 3 s, negative: none) mean what
// they mean there. The pool, retry and timeout-handling fields do not apply
// (one connection, no retries, context deadlines always honoured). Options
// that a DirectNode cannot honour are errors: OnConnect,
// StreamingCredentialsProvider. It speaks RESP2 whatever Protocol says: the
// replies it reads are the same in RESP3. [ParseMasterURL]'s options are
// fine as they are.
func NewDirectNode(o *redis.Options) (*DirectNode, error) {
	if o == nil {
		return nil, configErr("direct node", "options are nil")
	}
	network := o.Network
	switch network {
	case "":
		network = "tcp"
	case "tcp", "unix":
	default:
		return nil, configErr("direct node", "Network %q; want tcp or unix", o.Network)
	}
	switch {
	case o.Addr == "":
		return nil, configErr("direct node", "Addr is empty; want host:port, or a socket path for unix")
	case o.Protocol < 0 || o.Protocol > 3 || o.Protocol == 1:
		return nil, configErr("direct node", "Protocol %d; want 0, 2 or 3", o.Protocol)
	case o.OnConnect != nil:
		return nil, configErr("direct node", "OnConnect is set; a DirectNode cannot run it (use NewNode with a go-redis client)")
	case o.StreamingCredentialsProvider != nil:
		return nil, configErr("direct node", "StreamingCredentialsProvider is set; a DirectNode cannot use it (use NewNode with a go-redis client)")
	case o.DB < 0:
		return nil, configErr("direct node", "DB %d is negative", o.DB)
	}
	dialMax := o.DialTimeout
	if dialMax <= 0 {
		dialMax = 5 * time.Second
	}
	readMax := o.ReadTimeout
	switch {
	case readMax == 0:
		readMax = 3 * time.Second
	case readMax < 0:
		readMax = 0
	}
	addr, dialer, tlsConf := o.Addr, o.Dialer, o.TLSConfig
	dial := func(ctx context.Context) (net.Conn, error) {
		if dialer != nil {
			return dialer(ctx, network, addr)
		}
		nd := &net.Dialer{KeepAlive: 5 * time.Minute}
		if tlsConf == nil {
			return nd.DialContext(ctx, network, addr)
		}
		return (&tls.Dialer{NetDialer: nd, Config: tlsConf}).DialContext(ctx, network, addr)
	}
	user, pass, db, clientName := o.Username, o.Password, o.DB, o.ClientName
	creds, credsCtx := o.CredentialsProvider, o.CredentialsProviderContext
	hello := func(ctx context.Context) ([][]string, error) {
		u, p := user, pass
		switch {
		case credsCtx != nil:
			var err error
			if u, p, err = credsCtx(ctx); err != nil {
				return nil, err
			}
		case creds != nil:
			u, p = creds()
		}
		var cmds [][]string
		switch {
		case u != "" && p != "":
			cmds = append(cmds, []string{"AUTH", u, p})
		case p != "":
			cmds = append(cmds, []string{"AUTH", p})
		}
		if db != 0 {
			cmds = append(cmds, []string{"SELECT", strconv.Itoa(db)})
		}
		if clientName != "" {
			cmds = append(cmds, []string{"CLIENT", "SETNAME", clientName})
		}
		return cmds, nil
	}
	name := addr + "/" + strconv.Itoa(db)
	return &DirectNode{name: name, readMax: readMax, w: newWire(name, dial, hello, dialMax)}, nil
}

// Name is the master's address and database, as [NewNode]'s: the two name
// the same master alike.
func (n *DirectNode) Name() string { return n.name }

// Close closes the connection, fails the requests not yet answered and waits
// for the node's goroutines. Requests after Close fail.
func (n *DirectNode) Close() error {
	n.w.close()
	return nil
}

func (n *DirectNode) Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	ok, _, err := n.do(ctx, request{kind: reqAcquire, key: key, value: value, ttl: ttl})
	return ok, err
}

func (n *DirectNode) AcquireFenced(ctx context.Context, key, value string, ttl time.Duration) (uint64, error) {
	_, token, err := n.do(ctx, request{kind: reqAcquireFenced, key: key, value: value, ttl: ttl})
	return token, err
}

func (n *DirectNode) RaiseFence(ctx context.Context, key, value string, token uint64) (bool, error) {
	ok, _, err := n.do(ctx, request{kind: reqRaiseFence, key: key, value: value, token: token})
	return ok, err
}

func (n *DirectNode) Extend(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	ok, _, err := n.do(ctx, request{kind: reqExtend, key: key, value: value, ttl: ttl})
	return ok, err
}

func (n *DirectNode) Release(ctx context.Context, key, value string) (bool, error) {
	ok, _, err := n.do(ctx, request{kind: reqRelease, key: key, value: value})
	return ok, err
}

// ExtendBatch sends every renewal on the connection at once (one write) and
// waits for all the replies.
func (n *DirectNode) ExtendBatch(ctx context.Context, reqs []ExtendRequest) ([]bool, []error) {
	ok := make([]bool, len(reqs))
	errs := make([]error, len(reqs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return ok, errs
	}
	calls := make([]call, len(reqs))
	qs := make([]request, len(reqs))
	deadline := n.deadline(ctx)
	for i, r := range reqs {
		qs[i] = request{kind: reqExtend, key: r.Key, value: r.Value, ttl: r.TTL}
		calls[i] = call{ctx: ctx, req: &qs[i], deadline: deadline, done: make(chan struct{})}
	}
	n.w.submitAll(calls)
	for i := range calls {
		select {
		case <-calls[i].done:
			ok[i], errs[i] = calls[i].ok, calls[i].err
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return ok, errs
}

// do sends q and waits for its reply or for ctx to end.
func (n *DirectNode) do(ctx context.Context, q request) (bool, uint64, error) {
	if err := ctx.Err(); err != nil {
		return false, 0, err
	}
	c := &call{ctx: ctx, req: &q, deadline: n.deadline(ctx), done: make(chan struct{})}
	if ctx.Done() == nil {
		// Nothing can cancel the call: it may read its own reply.
		n.w.call(c)
		<-c.done
		return c.ok, c.token, c.err
	}
	n.w.submit(c)
	select {
	case <-c.done:
		return c.ok, c.token, c.err
	case <-ctx.Done():
		return false, 0, ctx.Err()
	}
}

// deadline is when the reply to a request made under ctx is due.
func (n *DirectNode) deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	if n.readMax > 0 {
		return time.Now().Add(n.readMax)
	}
	return time.Time{}
}
