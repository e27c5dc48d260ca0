package redlock

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// urlDialTimeout bounds a dial to a master named by URL, unless the URL sets
// dial_timeout. The per-node timeout bounds every request anyway (the clients
// respect context deadlines); this only ends a hung dial of a straggler sooner.
const urlDialTimeout = time.Second

// ParseMasterURL returns the go-redis client options for one master named by
// rawURL: redis://[user:password@]host:port[/db], rediss://… (TLS), or a plain
// host:port, read as redis://host:port. Query parameters are go-redis's
// (see [redis.ParseURL]).
//
// Unless the URL says otherwise, the options turn go-redis's own retries off
// (MaxRetries -1, DialerRetries 1) and make the client respect context
// deadlines, so that the per-node timeout is the only bound that matters and a
// dead master fails at once. Errors name the URL with its password replaced by
// "xxxxx".
func ParseMasterURL(rawURL string) (*redis.Options, error) {
	s := strings.TrimSpace(rawURL)
	if s == "" {
		return nil, configErr("master URL", "empty; want redis://[user:password@]host:port[/db], rediss://… or host:port")
	}
	if !strings.Contains(s, "://") {
		s = "redis://" + s
	}
	shown := RedactURL(s)
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
			return nil, configErr("master URL", "%s is not a valid URL; percent-encode special characters in the password (@ as %%40, / as %%2F, # as %%23, : as %%3A)", shown)
		}
		return nil, configErr("master URL", "%s is not a valid URL: %v", shown, err)
	}
	o, err := redis.ParseURL(s)
	if err != nil {
		return nil, configErr("master URL", "%s: %s; want redis://[user:password@]host:port[/db], rediss://… or host:port",
			shown, urlProblem(s, err))
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	if o.DialerRetries == 0 {
		o.DialerRetries = 1
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = urlDialTimeout
	}
	o.ContextTimeoutEnabled = true
	return o, nil
}

// NewFromURLs returns a Redlock over one go-redis client per URL (see
// [ParseMasterURL] for the forms accepted and the client settings), each
// wrapped with [NewNode], with opts as in [New]. Unlike New, the Redlock owns
// the clients it makes: [Redlock.Close] closes them. Errors name the
// offending URL without its password. To configure the clients further
// (certificates, a dialer, hooks such as redisotel), build them from
// ParseMasterURL's options and use NewNode and New instead.
func NewFromURLs(urls []string, opts ...Option) (*Redlock, error) {
	if len(urls) == 0 {
		return nil, configErr("master URLs", "need at least one master URL, got none")
	}
	var errs []error
	optsOf := make([]*redis.Options, len(urls))
	for i, u := range urls {
		o, err := ParseMasterURL(u)
		if err != nil {
			errs = append(errs, err)
		}
		optsOf[i] = o
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cs := make([]*redis.Client, len(urls))
	nodes := make([]Node, len(urls))
	for i, o := range optsOf {
		cs[i] = redis.NewClient(o)
		nodes[i] = NewNode(cs[i])
	}
	closeAll := func() error {
		var g errgroup.Group
		for i, c := range cs {
			g.Go(func() error {
				if err := c.Close(); err != nil {
					return fmt.Errorf("closing %s: %w", RedactURL(urls[i]), err)
				}
				return nil
			})
		}
		return g.Wait()
	}
	r, err := New(nodes, opts...)
	if err != nil {
		_ = closeAll()
		return nil, err
	}
	r.closeClients = closeAll
	return r, nil
}

// RedactURL returns rawURL with the password in its user information replaced
// by "xxxxx", also when rawURL does not parse, so that it can be shown in
// errors and logs.
func RedactURL(rawURL string) string {
	colon, at, ok := passwordSpan(rawURL)
	if !ok {
		return rawURL
	}
	return rawURL[:colon+1] + "xxxxx" + rawURL[at:]
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

// urlProblem is go-redis's complaint err about rawURL, without the password.
// Its messages quote parts of the URL (the path, for a database number), and
// an "@" outside the host part puts the password there: for a URL with a
// password it is the complaint about the redacted URL.
func urlProblem(rawURL string, err error) string {
	if hasPassword(rawURL) {
		_, err = redis.ParseURL(RedactURL(rawURL))
		if err == nil {
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
