package redlock

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// urlDialTimeout bounds a dial to a master named by URL, unless the URL sets
// dial_timeout. The per-node timeout bounds every request anyway (the clients
// respect context deadlines); this only ends a hung dial of a straggler sooner.
const urlDialTimeout = time.Second

// The forms of master URL, for errors that say what would be right.
const (
	wantPlainURL    = "redis://[user:password@]host:port[/db], rediss://… or host:port"
	wantSentinelURL = "redis+sentinel://[sentinel-user:password@]host:port[/db]?master_name=NAME[&addr=host:port…]"
	wantClusterURL  = "redis+cluster://[user:password@]host:port[?addr=host:port…]"
)

// MasterOptions are the go-redis options of one master named by a URL
// ([ParseMaster]): exactly one field is set, by the kind of master the
// URL's scheme names.
type MasterOptions struct {
	// Client: one server (redis://, rediss://, unix://, or host:port).
	Client *redis.Options
	// Sentinel: a primary with replicas that Sentinel watches
	// (redis+sentinel://, rediss+sentinel://); make the client with
	// redis.NewFailoverClient and its Node with [NewFailoverNode].
	Sentinel *redis.FailoverOptions
	// Cluster: a Redis Cluster (redis+cluster://, rediss+cluster://).
	Cluster *redis.ClusterOptions
}

// NewClient returns a new go-redis client for the master: a *redis.Client
// (for Client and Sentinel) or a *redis.ClusterClient. The caller closes it.
func (m MasterOptions) NewClient() redis.UniversalClient {
	switch {
	case m.Sentinel != nil:
		return redis.NewFailoverClient(m.Sentinel)
	case m.Cluster != nil:
		return redis.NewClusterClient(m.Cluster)
	}
	return redis.NewClient(m.Client)
}

// node is the Node of c, a client that m.NewClient made.
func (m MasterOptions) node(c redis.UniversalClient) Node {
	if m.Sentinel != nil {
		return NewFailoverNode(c, m.Sentinel)
	}
	return NewNode(c)
}

// ParseMaster returns the go-redis options of the master named by rawURL,
// one master per URL, of one of three kinds:
//
//   - one server: redis://[user:password@]host:port[/db], rediss://… (TLS),
//     unix://[user:password@]/path[?db=N], or a plain host:port, read as
//     redis://host:port (see [redis.ParseURL]);
//   - a primary with replicas under Sentinel:
//     redis+sentinel://[sentinel-user:password@]host:port[/db]?master_name=NAME[&addr=host:port…],
//     or rediss+sentinel://… (TLS), naming one or more Sentinels and the
//     name they watch the master by; as in [redis.ParseFailoverURL], the
//     user information is the Sentinels' credentials, and the master's are
//     the username= and password= parameters;
//   - a Redis Cluster:
//     redis+cluster://[user:password@]host:port[?addr=host:port…], or
//     rediss+cluster://… (TLS), naming one or more of its nodes (see
//     [redis.ParseClusterURL]).
//
// Other query parameters are go-redis's for that kind. A plain URL with
// master_name or addr parameters is refused: one URL names one master, and
// the scheme says which kind. Every host, addr= parameters included, needs
// its port: go-redis would take 6379 for one left out (for a Sentinel too),
// and a typo must not quietly move a lock to another server.
//
// Unless the URL says otherwise, the options turn go-redis's own retries off
// (MaxRetries -1, DialerRetries 1; a cluster still follows MOVED and ASK
// redirects, and its retry backoff is off: MinRetryBackoff and
// MaxRetryBackoff -1) and make the client respect context deadlines, so that the
// per-node timeout is the only bound that matters and a dead master fails at
// once. Errors are [*ConfigError]s that quote the URL as given, with its
// passwords replaced by "xxxxx" (see [RedactURL]).
func ParseMaster(rawURL string) (MasterOptions, error) {
	s := strings.TrimSpace(rawURL)
	if s == "" {
		return MasterOptions{}, configErr("master URL", "empty; want %s, %s or %s", wantPlainURL, wantSentinelURL, wantClusterURL)
	}
	// Errors quote the URL as given, never as rewritten here.
	shown := RedactURL(s)
	if !strings.Contains(s, "://") {
		if i := strings.IndexByte(s, '/'); i > 0 && isScheme(strings.TrimSuffix(s[:i], ":")) && !strings.Contains(s[:i], ".") {
			// redis//h:1 or redis:/h:1: a scheme without its "://".
			return MasterOptions{}, urlErr(shown, "a URL's scheme is followed by \"://\"; want %s", wantPlainURL)
		}
		s = "redis://" + s
	}
	u, err := checkURL(s, shown)
	if err != nil {
		return MasterOptions{}, err
	}
	base, kind, _ := strings.Cut(u.Scheme, "+")
	if kind != "" {
		if base != "redis" && base != "rediss" || kind != "sentinel" && kind != "cluster" {
			return MasterOptions{}, urlErr(shown, "unknown scheme %s; want %s, %s (or rediss+sentinel:// for TLS) or %s (or rediss+cluster://)",
				u.Scheme, wantPlainURL, wantSentinelURL, wantClusterURL)
		}
		// go-redis's parsers read the scheme without the kind.
		s = base + s[strings.Index(s, "://"):]
	}
	if err := checkPorts(u, kind, shown); err != nil {
		return MasterOptions{}, err
	}
	switch kind {
	case "sentinel":
		o, err := parseSentinelURL(s, shown)
		return MasterOptions{Sentinel: o}, err
	case "cluster":
		o, err := parseClusterURL(s, shown, u)
		return MasterOptions{Cluster: o}, err
	}
	o, err := parsePlainURL(s, shown, u)
	return MasterOptions{Client: o}, err
}

// ParseMasterURL returns the go-redis client options for one server named by
// rawURL: redis://[user:password@]host:port[/db], rediss://… (TLS), or a
// plain host:port, read as redis://host:port, with the settings [ParseMaster]
// describes. A URL that names a Sentinel-managed master or a cluster
// (redis+sentinel://, redis+cluster://) has options of another type: it is
// refused with a [*ConfigError] that says to use ParseMaster.
func ParseMasterURL(rawURL string) (*redis.Options, error) {
	m, err := ParseMaster(rawURL)
	if err != nil {
		return nil, err
	}
	if m.Client == nil {
		kind, typ := "a Sentinel-managed master", "redis.FailoverOptions"
		if m.Cluster != nil {
			kind, typ = "a Redis Cluster", "redis.ClusterOptions"
		}
		return nil, urlErr(RedactURL(strings.TrimSpace(rawURL)), "names %s, whose options are %s, not redis.Options: use ParseMaster", kind, typ)
	}
	return m.Client, nil
}

// urlErr is the *ConfigError of the master URL shown (as given, without
// its passwords): what is wrong with it.
func urlErr(shown, format string, args ...any) error {
	return configErr("master URL", "%q: %s", shown, fmt.Sprintf(format, args...))
}

// checkPorts refuses a URL (parsed as u, shown as shown, of kind "", "sentinel"
// or "cluster") that names a server without its port: go-redis would take
// 6379, also for a Sentinel, and a lock's masters are not to be guessed. A
// unix socket has no port.
func checkPorts(u *url.URL, kind, shown string) error {
	if u.Scheme == "unix" {
		return nil
	}
	if u.Host == "" {
		return urlErr(shown, "no host; want host:port")
	}
	hosts := []string{u.Host}
	if kind != "" {
		for _, a := range u.Query()["addr"] {
			hosts = append(hosts, "addr="+a)
		}
	}
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(strings.TrimPrefix(h, "addr=")); err != nil || port == "" {
			def := "Redis listens on 6379 by default"
			if kind == "sentinel" {
				def = "Sentinel listens on 26379 by default, Redis on 6379"
			}
			return urlErr(shown, "%s has no port; write host:port (%s): a master's port is never guessed", h, def)
		}
	}
	return nil
}

// checkURL parses s, a master URL shown as shown, and refuses one whose
// password would show in errors because it is not where url reads it.
func checkURL(s, shown string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err == nil && hasPassword(s) {
		if _, ok := u.User.Password(); !ok {
			// An unencoded "#", "/" or "?" ended the host part before the
			// "@": the password would be read as part of the host, and show
			// in every error that names the master.
			err = errors.New("the password is not in the user information")
		}
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL field would repeat the password
		}
		if hasPassword(s) {
			// url's messages quote the part they choke on, which may be the
			// password: say what usually causes it instead.
			return nil, urlErr(shown, "not a valid URL; percent-encode special characters in the password (@ as %%40, / as %%2F, # as %%23, : as %%3A)")
		}
		return nil, urlErr(shown, "not a valid URL: %v", err)
	}
	return u, nil
}

// parsePlainURL returns the options of one server named by s (shown as
// shown, parsed as u).
func parsePlainURL(s, shown string, u *url.URL) (*redis.Options, error) {
	q := u.Query()
	switch {
	case q.Has("master_name"):
		return nil, urlErr(shown, "master_name is a Sentinel parameter; for a master that Sentinel watches, want %s", wantSentinelURL)
	case q.Has("addr"):
		return nil, urlErr(shown, "addr names more servers, but one URL names one master; for a Redis Cluster want %s, for a master that Sentinel watches %s",
			wantClusterURL, wantSentinelURL)
	}
	o, err := redis.ParseURL(s)
	if err != nil {
		return nil, urlErr(shown, "%s; want %s", urlProblem(s, err, redis.ParseURL), wantPlainURL)
	}
	failFast(&o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ContextTimeoutEnabled)
	return o, nil
}

// parseSentinelURL returns the options of the Sentinel-managed master named
// by s (shown as shown), its scheme redis:// or rediss://.
func parseSentinelURL(s, shown string) (*redis.FailoverOptions, error) {
	o, err := redis.ParseFailoverURL(s)
	if err != nil {
		return nil, urlErr(shown, "%s; want %s", urlProblem(s, err, redis.ParseFailoverURL), wantSentinelURL)
	}
	switch {
	case o.MasterName == "":
		return nil, urlErr(shown, "no master_name: Sentinel watches masters by name; want %s", wantSentinelURL)
	case o.RouteByLatency || o.RouteRandomly || o.ReplicaOnly:
		return nil, urlErr(shown, "route_by_latency, route_randomly and replica_only send commands to replicas, but a lock is taken on the primary; drop them")
	}
	failFast(&o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ContextTimeoutEnabled)
	return o, nil
}

// parseClusterURL returns the options of the Redis Cluster named by s (shown
// as shown, parsed as u), its scheme redis:// or rediss://.
func parseClusterURL(s, shown string, u *url.URL) (*redis.ClusterOptions, error) {
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return nil, urlErr(shown, "a Redis Cluster has database 0 only; want %s", wantClusterURL)
	}
	o, err := redis.ParseClusterURL(s)
	if err != nil {
		return nil, urlErr(shown, "%s; want %s", urlProblem(s, err, redis.ParseClusterURL), wantClusterURL)
	}
	failFast(&o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ContextTimeoutEnabled)
	// A cluster client retries a failed request (the same shard, then
	// another, which redirects it back) up to MaxRedirects times, and
	// sleeps its retry backoff before each: 10 ms to 1 s, doubling, by
	// default, 30-170 ms per request to a shard that is down. The vote of a
	// dead shard then ends at the node timeout instead of at once, and every
	// contended acquire that needs it waits that long
	// (TestClusterShardDownFailsFast). -1 is go-redis's "no backoff"; MOVED
	// and ASK are followed without one anyway.
	if o.MinRetryBackoff == 0 && o.MaxRetryBackoff == 0 {
		o.MinRetryBackoff, o.MaxRetryBackoff = -1, -1
	}
	return o, nil
}

// failFast sets the client options a URL left unset so that a dead master
// fails at once and the per-node timeout is the bound that matters: no
// go-redis retries, one dial try bounded by urlDialTimeout, and context
// deadlines on the socket. Each kind of go-redis options has these fields.
func failFast(maxRetries, dialerRetries *int, dialTimeout *time.Duration, ctxTimeout *bool) {
	if *maxRetries == 0 {
		*maxRetries = -1
	}
	if *dialerRetries == 0 {
		*dialerRetries = 1
	}
	if *dialTimeout == 0 {
		*dialTimeout = urlDialTimeout
	}
	*ctxTimeout = true
}

// NewFromURLs returns a Redlock over one go-redis client per URL (see
// [ParseMaster] for the forms accepted — one server, a Sentinel-managed
// master, a Redis Cluster — and the client settings), each wrapped with
// [NewNode] or [NewFailoverNode], with opts as in [New]. Unlike New, the Redlock owns
// the clients it makes: [Redlock.Close] closes them. Errors name the
// offending URL without its password. To configure the clients further
// (certificates, a dialer, hooks such as redisotel), build them from
// ParseMaster's options and use NewNode (or NewFailoverNode) and New instead.
func NewFromURLs(urls []string, opts ...Option) (*Redlock, error) {
	if len(urls) == 0 {
		return nil, configErr("master URLs", "need at least one master URL, got none")
	}
	var errs []error
	optsOf := make([]MasterOptions, len(urls))
	for i, u := range urls {
		o, err := ParseMaster(u)
		if err != nil {
			errs = append(errs, err)
		}
		optsOf[i] = o
	}
	if err := joinLine(errs...); err != nil {
		return nil, err
	}
	cs := make([]redis.UniversalClient, len(urls))
	nodes := make([]Node, len(urls))
	for i, o := range optsOf {
		o.fewConns()
		cs[i] = o.NewClient()
		nodes[i] = o.node(cs[i])
	}
	closeAll := func() error {
		var wg sync.WaitGroup
		errs := make([]error, len(cs))
		for i, c := range cs {
			wg.Go(func() {
				if err := c.Close(); err != nil {
					errs[i] = fmt.Errorf("closing %s: %w", RedactURL(urls[i]), err)
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	r, err := New(nodes, opts...)
	if err != nil {
		_ = closeAll()
		return nil, err
	}
	r.closeClients = closeAll
	return r, nil
}

// fewConns sizes the connection pools of a client that only a Redlock uses,
// unless the URL set pool_size or pipeline_pool_size: one connection, which
// pipelines share. The Redlock sends one batch at a time to a master (its
// lane), so it never needs a second; and go-redis prints a line on stderr,
// through its logger for the whole program, for every dial that fails until
// as many failed in a row as the pool has connections. So a master that
// goes down costs one line, not one per connection of a default pool and
// of its pipeline pool (30 with 2 CPUs) — the design's least: the line
// comes from go-redis, and a library does not silence the program's
// logger (README: go-redis's log lines).
func (m MasterOptions) fewConns() {
	var pool, pipe *int
	switch {
	case m.Sentinel != nil:
		pool, pipe = &m.Sentinel.PoolSize, &m.Sentinel.PipelinePoolSize
	case m.Cluster != nil:
		pool, pipe = &m.Cluster.PoolSize, &m.Cluster.PipelinePoolSize
	default:
		pool, pipe = &m.Client.PoolSize, &m.Client.PipelinePoolSize
	}
	if *pool == 0 && *pipe == 0 {
		*pool, *pipe = 1, -1
	}
}

// RedactURL returns rawURL with its passwords replaced by "xxxxx" — the one
// in its user information, and the values of password= and
// sentinel_password= parameters (a Sentinel URL's master password) — also
// when rawURL does not parse, so that it can be shown in errors and logs.
func RedactURL(rawURL string) string {
	var spans [][2]int // [from, to) of each password, in order
	if colon, at, ok := passwordSpan(rawURL); ok {
		spans = append(spans, [2]int{colon + 1, at})
	}
	for _, p := range []string{"password=", "sentinel_password="} {
		for i := 0; ; {
			j := strings.Index(rawURL[i:], p)
			if j < 0 {
				break
			}
			from := i + j + len(p)
			if c := i + j - 1; c >= 0 && (rawURL[c] == '?' || rawURL[c] == '&') {
				to := strings.IndexByte(rawURL[from:], '&')
				if to < 0 {
					to = len(rawURL)
				} else {
					to += from
				}
				spans = append(spans, [2]int{from, to})
			}
			i = from
		}
	}
	if len(spans) == 0 {
		return rawURL
	}
	// The spans may overlap (an unencoded "@" in a query password, a "?" in
	// the user information): replace each stretch they cover once.
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	last := 0
	for i := 0; i < len(spans); {
		from, to := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= to; i++ {
			to = max(to, spans[i][1])
		}
		b.WriteString(rawURL[last:from])
		b.WriteString("xxxxx")
		last = to
	}
	b.WriteString(rawURL[last:])
	return b.String()
}

// passwordSpan finds the password in rawURL: it lies between the colon and the
// "@" returned. The last "@" ends the user information, so a password with an
// unencoded "@", "/" or "#" is still found whole.
func passwordSpan(rawURL string) (colon, at int, ok bool) {
	start := 0
	if i := strings.Index(rawURL, "://"); i >= 0 && isScheme(rawURL[:i]) {
		start = i + 3 // not a "://" inside the password
	}
	at = strings.LastIndex(rawURL[start:], "@")
	if at < 0 {
		return 0, 0, false
	}
	colon = strings.Index(rawURL[start:start+at], ":")
	if colon < 0 {
		return 0, 0, false // a user name only
	}
	return start + colon, start + at, true
}

// urlProblem is go-redis's complaint err about rawURL, which parse (one of
// go-redis's parsers) made, without the password. Its messages quote parts
// of the URL (the path, for a database number), and an "@" outside the host
// part puts the password there: for a URL with a password it is the
// complaint about the redacted URL.
func urlProblem[T any](rawURL string, err error, parse func(string) (T, error)) string {
	if RedactURL(rawURL) != rawURL {
		if _, err = parse(RedactURL(rawURL)); err == nil {
			return "not a valid master URL"
		}
	}
	return strings.TrimPrefix(err.Error(), "redis: ")
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, "+", "-" or ".".
func isScheme(s string) bool {
	for i, c := range s {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// hasPassword reports whether rawURL carries a password.
func hasPassword(rawURL string) bool {
	colon, at, ok := passwordSpan(rawURL)
	return ok && at > colon+1
}
