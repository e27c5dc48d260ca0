package redlock

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

// This file tests DirectNode on its own terms: its options, its handshake,
// what it does when its master dies, stalls or loses its scripts, many
// goroutines sharing its one connection, and Close. The rest of the root
// package's tests also run on DirectNodes with REDLOCK_TEST_NODE=direct (see
// nodesOf); hostile_test.go and FuzzNodeReply feed them garbage.
//
// A DirectNode's methods called with a context that has a Done channel go
// through a reader goroutine; called with one that has none (Background,
// WithoutCancel), the caller reads its own reply when the connection is idle
// (wire.call). The tests below try both ways where they differ.

// newDirect returns a DirectNode for o, closed at the end of the test.
func newDirect(t testing.TB, o *redis.Options) *DirectNode {
	t.Helper()
	d, err := NewDirectNode(o)
	if err != nil {
		t.Fatalf("NewDirectNode: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// within returns a context that ends after d, or at the end of the test.
func within(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// callers are the two ways a DirectNode's method is called: with a context
// whose Done channel a reader goroutine watches, and with one without, whose
// caller reads its reply itself.
var callers = []struct {
	name string
	ctx  func(t testing.TB) context.Context
}{
	{"reader goroutine", func(t testing.TB) context.Context { return within(t, 5*time.Second) }},
	{"caller reads", func(testing.TB) context.Context { return context.Background() }},
}

// clientIDs returns the ids of the master's connections named name.
func clientIDs(t testing.TB, admin *redis.Client, name string) []string {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		fields := strings.Fields(line)
		for _, f := range fields {
			if f == "name="+name {
				ids = append(ids, strings.TrimPrefix(fields[0], "id="))
			}
		}
	}
	return ids
}

// oneClient waits until the master has exactly one connection named name
// (a connection we closed may take a moment to go) and returns its id.
func oneClient(t testing.TB, admin *redis.Client, name string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids := clientIDs(t, admin, name)
		if len(ids) == 1 {
			return ids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("master has connections %q named %s; want one", ids, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// infoInt returns the integer field of the master's INFO section.
func infoInt(t testing.TB, admin *redis.Client, section, field string) int {
	t.Helper()
	info, err := admin.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			v = strings.TrimPrefix(v, "count=") // errorstat_NOSCRIPT:count=3
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO %s: %s is %q", section, field, v)
			}
			return n
		}
	}
	return 0 // errorstats lists an error once it happened
}

// wireGoroutines returns the stacks of the goroutines running, or started
// by, a wire's code.
func wireGoroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "redlock.(*wire).") {
			out = append(out, g)
		}
	}
	return out
}

// noWireGoroutines fails t if goroutines of a wire remain after the
// DirectNodes were closed. Close waits for them, but one may still be
// returning from its last call when Close does: a short grace, far below
// the deadlines that would end a leaked one.
func noWireGoroutines(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		left := wireGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of a closed DirectNode remain:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// bounded runs f and fails t if it has not returned within limit: a test
// of something that must not hang fails instead of stalling the run. It
// returns how long f took.
func bounded(t testing.TB, limit time.Duration, what string, f func()) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("%s has not returned after %v", what, limit)
		return 0
	}
}

// streamingCreds is a StreamingCredentialsProvider, which a DirectNode
// refuses.
type streamingCreds struct{}

func (streamingCreds) Subscribe(auth.CredentialsListener) (auth.Credentials, auth.UnsubscribeFunc, error) {
	return auth.NewBasicCredentials("u", "p"), func() error { return nil }, nil
}

// TestDirectNodeOptions: options a DirectNode cannot honour are a
// *ConfigError naming the problem; a go-redis client's options and
// ParseMasterURL's are fine as they are; the node is named as NewNode names
// the same master, so New refuses the two together.
func TestDirectNodeOptions(t *testing.T) {
	addr := masters.Addrs()[0]
	for _, tc := range []struct {
		name string
		o    *redis.Options
		says string
	}{
		{"nil", nil, "options are nil"},
		{"empty Addr", &redis.Options{}, "Addr is empty"},
		{"udp", &redis.Options{Addr: addr, Network: "udp"}, `Network "udp"; want tcp or unix`},
		{"Protocol 1", &redis.Options{Addr: addr, Protocol: 1}, "Protocol 1; want 0, 2 or 3"},
		{"Protocol 4", &redis.Options{Addr: addr, Protocol: 4}, "Protocol 4"},
		{"Protocol -1", &redis.Options{Addr: addr, Protocol: -1}, "Protocol -1"},
		{"OnConnect", &redis.Options{Addr: addr, OnConnect: func(context.Context, *redis.Conn) error { return nil }}, "OnConnect is set"},
		{"StreamingCredentialsProvider", &redis.Options{Addr: addr, StreamingCredentialsProvider: streamingCreds{}}, "StreamingCredentialsProvider is set"},
		{"negative DB", &redis.Options{Addr: addr, DB: -1}, "DB -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := NewDirectNode(tc.o)
			var ce *ConfigError
			if d != nil || !errors.As(err, &ce) || ce.Field != "direct node" || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("NewDirectNode: %v, %v (%T); want no node and a *ConfigError saying %q", d, err, err, tc.says)
			}
		})
	}

	valid := map[string]func() (*redis.Options, error){
		"a client's Options()": func() (*redis.Options, error) {
			c := redis.NewClient(&redis.Options{Addr: addr, DB: 2, Username: "u", Password: "p", PoolSize: 3})
			defer c.Close()
			return c.Options(), nil
		},
		"ParseMasterURL":           func() (*redis.Options, error) { return ParseMasterURL("redis://u:p@" + addr + "/2") },
		"ParseMasterURL rediss://": func() (*redis.Options, error) { return ParseMasterURL("rediss://" + addr) },
		"ParseMasterURL unix://":   func() (*redis.Options, error) { return ParseMasterURL("unix:///tmp/redlock-none.sock?db=1") },
		"Protocol 2":               func() (*redis.Options, error) { return &redis.Options{Addr: addr, Protocol: 2}, nil },
		"Protocol 3":               func() (*redis.Options, error) { return &redis.Options{Addr: addr, Protocol: 3}, nil },
		"tcp":                      func() (*redis.Options, error) { return &redis.Options{Addr: addr, Network: "tcp"}, nil },
	}
	for name, opts := range valid {
		t.Run(name, func(t *testing.T) {
			o, err := opts()
			if err != nil {
				t.Fatal(err)
			}
			d := newDirect(t, o)
			c := redis.NewClient(o) // after NewDirectNode: NewClient fills o in
			defer c.Close()
			if n := NewNode(c); d.Name() != n.Name() {
				t.Errorf("DirectNode named %q, NewNode %q; want the same name for the same master", d.Name(), n.Name())
			}
		})
	}

	// The same master twice, through either kind of Node, is refused.
	c := redis.NewClient(&redis.Options{Addr: addr, DB: 2})
	defer c.Close()
	d := newDirect(t, &redis.Options{Addr: addr, DB: 2})
	if want := addr + "/2"; d.Name() != want {
		t.Errorf("Name %q, want %q", d.Name(), want)
	}
	for name, pair := range map[string][]Node{
		"DirectNode and NewNode": {d, NewNode(c)},
		"two DirectNodes":        {d, newDirect(t, c.Options())},
	} {
		_, err := New(pair)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "same master "+addr+"/2") {
			t.Errorf("New(%s of one master): %v; want a *ConfigError saying they are the same master", name, err)
		}
	}
}

// aclMaster starts a master whose default user may only PING (and INFO, for
// redistest's readiness probe), with the users "locker" (the README's
// minimal rule) and "admin" (everything), both with aclPassword, and returns
// it with a client logged in as admin.
func aclMaster(t *testing.T) (*redistest.Server, *redis.Client) {
	args := []string{"--user", "default", "on", "nopass", "resetkeys", "-@all", "+ping", "+info"}
	args = append(args, aclUser("locker")...)
	args = append(args, "--user", "admin", "on", ">"+aclPassword, "~*", "+@all")
	s := redistest.StartT(t, 1, redistest.Options{Args: args}).Servers[0]
	admin := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "admin", Password: aclPassword})
	t.Cleanup(func() { admin.Close() })
	return s, admin
}

// TestDirectNodeHandshake: AUTH (user and password, password only, a
// credentials provider), SELECT and CLIENT SETNAME go before the first
// request on each connection; a handshake the master refuses fails the
// request with an error that names the command and the master's reason.
func TestDirectNodeHandshake(t *testing.T) {
	s, admin := aclMaster(t)
	ctx := context.Background()
	get := func(key string) string {
		v, err := admin.Get(ctx, key).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		return v
	}

	t.Run("user and password", func(t *testing.T) {
		for _, c := range callers {
			t.Run(c.name, func(t *testing.T) {
				d := newDirect(t, &redis.Options{Addr: s.Addr(), Username: "locker", Password: aclPassword})
				r := newRedlock(t, []Node{d}, WithFencing())
				key := testKey(t)
				l, err := r.TryLock(c.ctx(t), key)
				if err != nil {
					t.Fatalf("TryLock as locker: %v", err)
				}
				if v := get(key); v != l.Value() {
					t.Errorf("master holds %q, want the lock's value %q", v, l.Value())
				}
				if err := l.Extend(c.ctx(t), time.Minute); err != nil {
					t.Fatalf("Extend: %v", err)
				}
				if err := l.Unlock(c.ctx(t)); err != nil {
					t.Fatalf("Unlock: %v", err)
				}
				if ok, err := d.Acquire(c.ctx(t), key, "v", time.Minute); !ok || err != nil {
					t.Fatalf("Acquire as locker: %v, %v", ok, err)
				}
			})
		}
	})

	t.Run("credentials provider", func(t *testing.T) {
		calls := 0
		d := newDirect(t, &redis.Options{Addr: s.Addr(), Password: "not this one",
			CredentialsProvider: func() (string, string) { calls++; return "locker", aclPassword }})
		if ok, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
			t.Fatalf("Acquire with the provider's credentials: %v, %v", ok, err)
		}
		if calls != 1 {
			t.Errorf("provider called %d times for one connection, want 1", calls)
		}

		d = newDirect(t, &redis.Options{Addr: s.Addr(),
			CredentialsProviderContext: func(context.Context) (string, string, error) {
				return "", "", errors.New("vault sealed")
			}})
		_, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute)
		if err == nil || !strings.Contains(err.Error(), "vault sealed") || !strings.Contains(err.Error(), s.Addr()) {
			t.Errorf("Acquire with a failing provider: %v; want its error, naming the master", err)
		}
	})

	// The handshake is pipelined before the requests, so the master runs
	// them after a refused AUTH, as the user the connection had: here
	// default, which may not SET. Either way the request fails, saying why.
	for _, tc := range []struct {
		name, user, password string
		says                 []string
	}{
		{"wrong password", "locker", "wrong-pw-Kx3m", []string{"AUTH", "WRONGPASS"}},
		{"password only", "", "wrong-pw-Kx3m", []string{"AUTH", "without any password configured for the default user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirect(t, &redis.Options{Addr: s.Addr(), Username: tc.user, Password: tc.password})
			key := testKey(t)
			for _, c := range callers {
				start := time.Now()
				ok, err := d.Acquire(c.ctx(t), key, "v", time.Minute)
				if ok || err == nil {
					t.Fatalf("%s: Acquire with a refused AUTH: %v, %v", c.name, ok, err)
				}
				for _, s := range tc.says {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: error %q does not say %q", c.name, err, s)
					}
				}
				if strings.Contains(err.Error(), tc.password) {
					t.Errorf("%s: error %q shows the password", c.name, err)
				}
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("%s: the refusal took %v", c.name, took)
				}
			}
			if v := get(key); v != "" {
				t.Errorf("master holds %q after the refused AUTH", v)
			}
			// Through a Redlock: a NodeError naming the master.
			_, err := newRedlock(t, []Node{d}).TryLock(ctx, key)
			var ne *NodeError
			if !errors.As(err, &ne) || ne.Node != s.Addr()+"/0" || !strings.Contains(err.Error(), "AUTH") {
				t.Errorf("TryLock: %v; want a NodeError naming %s/0 and AUTH", err, s.Addr())
			}
		})
	}

	t.Run("SELECT and CLIENT SETNAME", func(t *testing.T) {
		for _, c := range callers {
			t.Run(c.name, func(t *testing.T) {
				const db = 3
				name := fmt.Sprintf("redlock-handshake-%d", keySeq.Add(1))
				d := newDirect(t, &redis.Options{Addr: s.Addr(), Username: "admin", Password: aclPassword, DB: db, ClientName: name})
				if want := s.Addr() + "/3"; d.Name() != want {
					t.Errorf("Name %q, want %q", d.Name(), want)
				}
				key := testKey(t)
				l, err := newRedlock(t, []Node{d}).TryLock(c.ctx(t), key)
				if err != nil {
					t.Fatal(err)
				}
				inDB := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "admin", Password: aclPassword, DB: db})
				defer inDB.Close()
				if v, err := inDB.Get(ctx, key).Result(); v != l.Value() {
					t.Errorf("DB %d holds %q (%v), want the lock's value %q", db, v, err, l.Value())
				}
				if v := get(key); v != "" {
					t.Errorf("DB 0 holds %q; the lock belongs in DB %d", v, db)
				}
				id := oneClient(t, admin, name)
				list, err := admin.ClientList(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(list, "\n") {
					if strings.HasPrefix(line, "id="+id+" ") && (!strings.Contains(line, " db=3 ") || !strings.Contains(line, " user=admin ")) {
						t.Errorf("connection %s: %s; want db=3 and user=admin", name, line)
					}
				}
			})
		}
	})

	for _, tc := range []struct {
		name string
		o    redis.Options
		says []string
	}{
		{"DB out of range", redis.Options{DB: 99}, []string{"SELECT", "out of range"}},
		{"bad client name", redis.Options{ClientName: "two words"}, []string{"CLIENT", "cannot contain spaces"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Addr, o.Username, o.Password = s.Addr(), "admin", aclPassword
			d := newDirect(t, &o)
			for _, c := range callers {
				_, err := d.Acquire(c.ctx(t), testKey(t), "v", time.Minute)
				for _, s := range tc.says {
					if err == nil || !strings.Contains(err.Error(), s) {
						t.Errorf("%s: Acquire: %v; want an error saying %q", c.name, err, s)
					}
				}
			}
		})
	}
}

// TestDirectNodeConcurrent: many goroutines share one DirectNode's
// connection, half of them reading their own replies and half through the
// reader goroutine, and each gets the reply to its own request: every call
// below has one right answer, which a reply meant for another goroutine (a
// refusal for a success, an integer for OK, another key's token) would not
// give.
func TestDirectNodeConcurrent(t *testing.T) {
	const goroutines, rounds = 64, 15
	d := newDirect(t, &redis.Options{Addr: masters.Addrs()[0], ReadTimeout: 10 * time.Second})
	base := testKey(t)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			fenceKey := fmt.Sprintf("%s:fenced:%d", base, g)
			var last uint64
			for i := range rounds {
				ctx := callers[(g+i)%2].ctx(t)
				key := fmt.Sprintf("%s:%d:%d", base, g, i)
				mine, other := fmt.Sprintf("mine-%d-%d", g, i), fmt.Sprintf("other-%d-%d", g, i)
				fail := func(what string, got any, err error, want any) {
					t.Errorf("goroutine %d round %d (%s): %s = %v, %v; want %v", g, i, callers[(g+i)%2].name, what, got, err, want)
				}
				flag := func(what string, ok bool, err error, want bool) {
					if ok != want || err != nil {
						fail(what, ok, err, want)
					}
				}
				ok, err := d.Acquire(ctx, key, mine, time.Minute)
				flag("Acquire", ok, err, true)
				ok, err = d.Acquire(ctx, key, other, time.Minute)
				flag("Acquire by another", ok, err, false)
				ok, err = d.Extend(ctx, key, other, time.Minute)
				flag("Extend by another", ok, err, false)
				ok, err = d.Extend(ctx, key, mine, time.Minute)
				flag("Extend", ok, err, true)
				token, err := d.AcquireFenced(ctx, fenceKey, mine, time.Minute)
				if err != nil || token <= last {
					fail("AcquireFenced", token, err, fmt.Sprintf("a token above %d", last))
				}
				last = token
				ok, err = d.RaiseFence(ctx, fenceKey, mine, token+1)
				flag("RaiseFence", ok, err, true)
				last = token + 1
				ok, err = d.RaiseFence(ctx, fenceKey, other, token+5)
				flag("RaiseFence by another", ok, err, false)
				oks, errs := d.ExtendBatch(ctx, []ExtendRequest{{key, mine, time.Minute}, {key, other, time.Minute}, {fenceKey, mine, time.Minute}})
				if !oks[0] || oks[1] || !oks[2] || errors.Join(errs...) != nil {
					fail("ExtendBatch", oks, errors.Join(errs...), "[true false true]")
				}
				ok, err = d.Release(ctx, fenceKey, mine)
				flag("Release fenced", ok, err, true)
				ok, err = d.Release(ctx, key, other)
				flag("Release by another", ok, err, false)
				ok, err = d.Release(ctx, key, mine)
				flag("Release", ok, err, true)
				ok, err = d.Release(ctx, key, mine)
				flag("Release again", ok, err, false)
			}
		})
	}
	bounded(t, 30*time.Second, "the goroutines' calls", wg.Wait)
}

// TestDirectNodeConcurrentLocks: 64 goroutines lock distinct keys and one
// shared key through the same three DirectNodes. While a goroutine holds a
// lock, a quorum of masters holds its value; no two holders of the shared
// key overlap. With one master, the goroutine that locks reads its own
// reply while others queue behind it: every reply must still be read, and
// Close must not wait for one that nobody reads.
func TestDirectNodeConcurrentLocks(t *testing.T) {
	const goroutines = 64
	cs := clients(t, masters.Addrs()[:3])
	check := func(r *Redlock, key string, l *Lock) error {
		var vs []string
		for _, c := range cs[:len(r.Nodes())] {
			v, err := c.Get(context.Background(), key).Result()
			if err != nil && err != redis.Nil {
				return err
			}
			vs = append(vs, v)
		}
		if n := count(vs, l.Value()); n < r.Quorum() {
			return fmt.Errorf("masters hold %q while %q holds %s; want a quorum of %d", vs, l.Value(), key, r.Quorum())
		}
		return nil
	}

	for _, n := range []int{3, 1} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			nodes := make([]Node, n)
			for i := range nodes {
				nodes[i] = newDirect(t, &redis.Options{Addr: masters.Addrs()[i]})
			}
			r, err := New(nodes, WithTTL(time.Minute), WithNodeTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			shared := testKey(t)
			var inside atomic.Int32
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					ctx := within(t, 30*time.Second)
					for i := range 8 {
						key := fmt.Sprintf("%s:%d:%d", shared, g, i)
						if i%4 == 3 {
							key = shared
						}
						l, err := r.Lock(ctx, key)
						if err != nil {
							t.Errorf("goroutine %d: Lock %s: %v", g, key, err)
							return
						}
						if key == shared && inside.Add(1) != 1 {
							t.Errorf("goroutine %d holds %s together with another", g, key)
						}
						if err := check(r, key, l); err != nil {
							t.Errorf("goroutine %d: %v", g, err)
						}
						if err := l.Extend(ctx, time.Minute); err != nil {
							t.Errorf("goroutine %d: Extend %s: %v", g, key, err)
						}
						if time.Now().After(l.Until()) {
							t.Errorf("goroutine %d: the lock on %s expired in the test; its TTL is too short for this machine", g, key)
						}
						if key == shared {
							inside.Add(-1)
						}
						if err := l.Unlock(ctx); err != nil {
							t.Errorf("goroutine %d: Unlock %s: %v", g, key, err)
						}
					}
				})
			}
			bounded(t, 30*time.Second, "the goroutines' locks", wg.Wait)
			if took := bounded(t, 10*time.Second, "Close", func() { r.Close() }); took > 2*time.Second {
				t.Errorf("Close took %v", took)
			}
		})
	}
}

// TestDirectNodeTLS: a DirectNode speaks TLS with its options' TLSConfig,
// ParseMasterURL's rediss:// included; a certificate it does not trust
// fails the request, saying so.
func TestDirectNodeTLS(t *testing.T) {
	// Lock, fence, extend and unlock over TLS on DirectNodes is
	// TestTLSMasters in make test's DirectNode pass (tlsNodes).
	c, conf := tlsMasters(t, 3)

	otherFiles, err := redistest.GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wrongCA, err := otherFiles.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	d := newDirect(t, &redis.Options{Addr: c.Addrs()[0], TLSConfig: wrongCA})
	if _, err := d.Acquire(within(t, 2*time.Second), testKey(t), "v", time.Minute); err == nil ||
		!strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), c.Addrs()[0]) {
		t.Errorf("Acquire with a CA the master's certificate is not from: %v; want a dial error naming the master and the certificate", err)
	}

	o, err := ParseMasterURL("rediss://" + c.Addrs()[1])
	if err != nil {
		t.Fatal(err)
	}
	o.TLSConfig.RootCAs, o.TLSConfig.Certificates = conf.RootCAs, conf.Certificates
	if ok, err := newDirect(t, o).Acquire(within(t, 2*time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
		t.Errorf("Acquire through rediss:// with the CA: %v, %v", ok, err)
	}
}

// TestDirectNodeRestart: a DirectNode needs no master to start, and takes a
// master up again after it died and came back, with or without its data.
//
// The contract, as found here: a connection whose master died is given up
// as soon as a goroutine reading it sees the end of the stream (a reader
// goroutine lingers for a second after the last reply, see linger), or,
// once it has been idle for idleCheck with no reader, by the check before
// its next use (TestDirectNodeIdleCheck). So a master that dies and comes
// back costs nothing, except when it died within idleCheck of a reply that
// no reader followed (one master, or a context without Done channel: the
// caller read it) or of the end of a reader's linger: then the next request
// is written to the dead connection and fails (EOF, reset), one failed
// phase, and the one after it dials again. Lock, which retries, succeeds.
func TestDirectNodeRestart(t *testing.T) {
	for _, aof := range []bool{false, true} {
		t.Run(fmt.Sprintf("appendonly=%v", aof), func(t *testing.T) {
			t.Parallel()
			c := redistest.StartT(t, 3, redistest.Options{AppendOnly: aof})
			s := c.Servers[0]
			cs := clients(t, c.Addrs())
			ctx := context.Background()
			restart := func() {
				t.Helper()
				if err := s.Kill(); err != nil {
					t.Fatal(err)
				}
				if err := s.Restart(true); err != nil {
					t.Fatal(err)
				}
			}

			// Down at the start: the node is made, the request fails
			// naming the master, the next one after it is back dials again.
			if err := s.Kill(); err != nil {
				t.Fatal(err)
			}
			nodes := make([]Node, 3)
			for i, a := range c.Addrs() {
				nodes[i] = newDirect(t, &redis.Options{Addr: a, DialTimeout: time.Second})
			}
			_, err := nodes[0].Acquire(within(t, time.Second), testKey(t), "v", time.Minute)
			if err == nil || !strings.Contains(err.Error(), "dial "+s.Addr()) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("Acquire from a master that is down: %v; want the dial's refusal, naming the master", err)
			}
			if err := s.Restart(true); err != nil {
				t.Fatal(err)
			}
			if ok, err := nodes[0].Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
				t.Fatalf("Acquire once the master is up: %v, %v", ok, err)
			}

			// Three masters: each connection's reader lingers after the
			// replies, and sees the killed master's connection end.
			r := newRedlock(t, nodes, WithNodeTimeout(time.Second))
			replied := time.Now() // before the replies: the lingers end later than a second after it
			kept, err := r.TryLock(ctx, testKey(t))
			if err != nil {
				t.Fatal(err)
			}
			settle(r)
			if err := s.Kill(); err != nil {
				t.Fatal(err)
			}
			killedIn := time.Since(replied)
			if err := s.Restart(true); err != nil {
				t.Fatal(err)
			}
			l, err := r.TryLock(ctx, testKey(t))
			if err != nil {
				t.Fatalf("TryLock after the restart: %v", err)
			}
			settle(r)
			if vs := holders(t, cs, l.Key()); killedIn < linger && count(vs, l.Value()) != 3 {
				t.Errorf("masters hold %q; want the lock's value on all three, the restarted one included", vs)
			}
			want := ""
			if aof {
				want = kept.Value() // the append-only file kept the lock
			}
			if v := holders(t, cs[:1], kept.Key())[0]; v != want {
				t.Errorf("restarted master holds %q for the lock taken before, want %q", v, want)
			}
			for _, l := range []*Lock{kept, l} {
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}

			// One master: the caller reads its own reply, and nobody reads
			// the connection between requests. Three locks get there: the
			// first dials (its reader lingers), the second's reply ends that
			// reader, the third is read by its caller.
			r1 := newRedlock(t, []Node{newDirect(t, &redis.Options{Addr: s.Addr(), DialTimeout: time.Second})}, WithNodeTimeout(time.Second))
			for range 3 {
				if _, err := r1.TryLock(ctx, testKey(t)); err != nil {
					t.Fatal(err)
				}
			}
			// The connection is idle from the reply on: from between these two.
			before := time.Now()
			if _, err := r1.TryLock(ctx, testKey(t)); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			restart()
			atLeast := time.Since(after)
			_, err = r1.TryLock(ctx, testKey(t))
			switch atMost := time.Since(before); {
			case atMost < idleCheck: // always, unless the restart took a second
				var ne *NodeError
				if !errors.As(err, &ne) || !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "broken pipe") {
					t.Errorf("TryLock %v after the last reply, the master restarted since: %v; want the one failure of a request written to the dead connection", atMost, err)
				}
			case atLeast >= idleCheck:
				if err != nil {
					t.Errorf("TryLock %v after the last reply, the master restarted since: %v; want the check before use to replace the connection", atLeast, err)
				}
			}
			if _, err := r1.TryLock(ctx, testKey(t)); err != nil {
				t.Errorf("the TryLock after that: %v", err)
			}
			restart()
			if _, err := r1.Lock(within(t, 10*time.Second), testKey(t)); err != nil {
				t.Errorf("Lock after the master's restart: %v", err)
			}
		})
	}
}

// TestDirectNodePause: a master that stops answering (SIGSTOP) fails each
// request by its deadline (the context's, or ReadTimeout's for a context
// without one), not later. The connection is given up; once the master
// answers again the next request goes on a new one.
func TestDirectNodePause(t *testing.T) {
	s := redistest.StartT(t, 1, redistest.Options{}).Servers[0]
	admin := clients(t, []string{s.Addr()})[0]
	const readTimeout, slack = 300 * time.Millisecond, 300 * time.Millisecond
	name := fmt.Sprintf("redlock-pause-%d", keySeq.Add(1))
	d := newDirect(t, &redis.Options{Addr: s.Addr(), ClientName: name, ReadTimeout: readTimeout})
	if ok, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	first := oneClient(t, admin, name)

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Resume() })
	noDeadline, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name  string
		ctx   func() context.Context
		bound time.Duration
	}{
		{"context deadline", func() context.Context { return within(t, 200*time.Millisecond) }, 200 * time.Millisecond},
		{"no Done channel", context.Background, readTimeout},
		{"Done channel, no deadline", func() context.Context { return noDeadline }, readTimeout},
	} {
		for _, op := range []struct {
			name string
			call func(ctx context.Context) error
		}{
			{"Acquire", func(ctx context.Context) error {
				_, err := d.Acquire(ctx, testKey(t), "v", time.Minute)
				return err
			}},
			{"ExtendBatch", func(ctx context.Context) error {
				_, errs := d.ExtendBatch(ctx, []ExtendRequest{{testKey(t), "v", time.Minute}, {testKey(t), "v", time.Minute}})
				return errors.Join(errs...)
			}},
		} {
			var err error
			took := bounded(t, 10*time.Second, op.name, func() { err = op.call(tc.ctx()) })
			if err == nil || took > tc.bound+slack {
				t.Errorf("%s, %s, paused master: %v after %v; want an error by %v", op.name, tc.name, err, took, tc.bound)
			}
		}
	}

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, c := range callers {
		if ok, err := d.Acquire(c.ctx(t), testKey(t), "v", time.Minute); !ok || err != nil {
			t.Fatalf("%s: Acquire after Resume: %v, %v", c.name, ok, err)
		}
	}
	if id := oneClient(t, admin, name); id == first {
		t.Errorf("the connection %s that timed out is still used", id)
	}
}

// TestDirectNodeBlackhole: a master behind a partition that drops every
// byte (connections are accepted, nothing is answered) costs a Redlock of
// three nothing but that master: locks and unlocks succeed without waiting
// for it, Close of the Redlock waits for its requests no longer than the
// node timeout, and Close of the DirectNodes does not wait at all.
func TestDirectNodeBlackhole(t *testing.T) {
	const nodeTimeout, slack = 300 * time.Millisecond, 300 * time.Millisecond
	p, err := faultproxy.New(masters.Addrs()[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	nodes := make([]Node, 3)
	for i, a := range []string{masters.Addrs()[0], masters.Addrs()[1], p.Addr()} {
		nodes[i] = newDirect(t, &redis.Options{Addr: a, ReadTimeout: time.Minute})
	}
	r, err := New(nodes, WithNodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	lockUnlock := func(what string) {
		t.Helper()
		start := time.Now()
		l, err := r.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatalf("%s: TryLock: %v", what, err)
		}
		if took := time.Since(start); took > nodeTimeout {
			t.Errorf("%s: TryLock took %v, over the node timeout %v", what, took, nodeTimeout)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", what, err)
		}
	}
	lockUnlock("before the partition")
	p.Blackhole()
	for i := range 3 { // on the connection made before, then on new ones
		lockUnlock(fmt.Sprintf("partitioned, round %d", i))
	}
	// Requests in flight to the black hole now: TryLock and Unlock return
	// at the quorum, without waiting for them.
	for range 5 {
		l, err := r.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// An Unlock while its acquire is still in flight gives its release a
	// node timeout of its own after the acquire's deadline (Lock.fanout):
	// the requests in flight end by twice the node timeout.
	if took := bounded(t, 10*time.Second, "Redlock.Close", func() { r.Close() }); took > 2*nodeTimeout+slack {
		t.Errorf("Redlock.Close took %v; its requests end by twice the node timeout %v", took, nodeTimeout)
	}
	for i, n := range nodes {
		if took := bounded(t, 10*time.Second, "DirectNode.Close", func() { n.(*DirectNode).Close() }); took > slack {
			t.Errorf("Close of DirectNode %d took %v", i, took)
		}
	}
	noWireGoroutines(t)
}

// TestDirectNodeScriptFlush: a master that lost its scripts (SCRIPT FLUSH;
// a restart does the same) answers NOSCRIPT to EVALSHA, and the DirectNode
// sends the request again as EVAL on the same connection, for every script,
// from a reader goroutine, from a caller reading its own reply, and in a
// batch of renewals.
func TestDirectNodeScriptFlush(t *testing.T) {
	s := redistest.StartT(t, 1, redistest.Options{}).Servers[0]
	admin := clients(t, []string{s.Addr()})[0]
	ctx := context.Background()
	flush := func() {
		t.Helper()
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range callers {
		t.Run(c.name, func(t *testing.T) {
			d := newDirect(t, &redis.Options{Addr: s.Addr()})
			key, fenced := testKey(t), testKey(t)
			var last uint64
			scripts := func(round string) {
				t.Helper()
				if ok, err := d.Acquire(c.ctx(t), key, "v", time.Minute); !ok || err != nil {
					t.Fatalf("%s: Acquire: %v, %v", round, ok, err)
				}
				token, err := d.AcquireFenced(c.ctx(t), fenced, "v", time.Minute)
				if err != nil || token <= last {
					t.Fatalf("%s: AcquireFenced: %d, %v; want a token above %d", round, token, err, last)
				}
				last = token
				for _, op := range []struct {
					name string
					call func() (bool, error)
				}{
					{"RaiseFence", func() (bool, error) { return d.RaiseFence(c.ctx(t), fenced, "v", token+1) }},
					{"Extend", func() (bool, error) { return d.Extend(c.ctx(t), key, "v", time.Minute) }},
					{"Release", func() (bool, error) { return d.Release(c.ctx(t), key, "v") }},
					{"Release fenced", func() (bool, error) { return d.Release(c.ctx(t), fenced, "v") }},
				} {
					if ok, err := op.call(); !ok || err != nil {
						t.Errorf("%s: %s: %v, %v", round, op.name, ok, err)
					}
				}
				last++
			}
			scripts("first use") // EVAL: the master learns each script
			conns := infoInt(t, admin, "stats", "total_connections_received")
			noscript := infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT")
			flush()
			scripts("after SCRIPT FLUSH") // EVALSHA, NOSCRIPT, EVAL
			if n := infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT") - noscript; n != 4 {
				t.Errorf("master answered NOSCRIPT %d times to the four scripts' EVALSHA, want 4", n)
			}
			scripts("again") // EVALSHA

			keys := []string{testKey(t), testKey(t), testKey(t)}
			reqs := make([]ExtendRequest, len(keys))
			for i, k := range keys {
				if ok, err := d.Acquire(c.ctx(t), k, "v", time.Minute); !ok || err != nil {
					t.Fatalf("Acquire: %v, %v", ok, err)
				}
				reqs[i] = ExtendRequest{Key: k, Value: "v", TTL: time.Minute}
			}
			flush()
			noscript = infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT")
			oks, errs := d.ExtendBatch(c.ctx(t), reqs)
			if !oks[0] || !oks[1] || !oks[2] || errors.Join(errs...) != nil {
				t.Errorf("ExtendBatch after SCRIPT FLUSH: %v, %v", oks, errors.Join(errs...))
			}
			// The first renewal's EVAL may go out before the others'
			// EVALSHA, which the master then knows.
			if n := infoInt(t, admin, "errorstats", "errorstat_NOSCRIPT") - noscript; n < 1 || n > 3 {
				t.Errorf("master answered NOSCRIPT %d times to the batch of three, want 1 to 3", n)
			}
			if n := infoInt(t, admin, "stats", "total_connections_received") - conns; n != 0 {
				t.Errorf("%d connections made after the first; NOSCRIPT must be handled on the same one", n)
			}
		})
	}
}

// TestDirectNodeClose: Close ends the node's goroutines before it returns —
// a lingering reader, readers waiting on a master that never answers, a
// dial that does not end — and fails the requests it cuts short, and every
// request after it, with an error saying the node is closed.
func TestDirectNodeClose(t *testing.T) {
	const slack = 500 * time.Millisecond
	closeNow := func(t *testing.T, d *DirectNode) {
		t.Helper()
		if took := bounded(t, 10*time.Second, "Close", func() { d.Close() }); took > slack {
			t.Errorf("Close took %v", took)
		}
		noWireGoroutines(t)
	}
	// cutShort starts the calls, lets them reach the connection (they
	// would wait a minute there), closes d and checks how they ended.
	cutShort := func(t *testing.T, d *DirectNode, started <-chan struct{}) {
		t.Helper()
		noDeadline, cancel := context.WithCancel(context.Background())
		defer cancel()
		const calls = 8
		errs := make(chan error, calls)
		for i := range calls {
			ctx := context.Background() // the caller reads, once it can
			if i%2 == 1 {
				ctx = noDeadline // the reader goroutine reads
			}
			go func() {
				_, err := d.Acquire(ctx, testKey(t), "v", time.Minute)
				errs <- err
			}()
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the node did not start dialling")
		}
		time.Sleep(100 * time.Millisecond)
		closeNow(t, d)
		for range calls {
			select {
			case err := <-errs:
				if err == nil || !strings.Contains(err.Error(), "node closed") {
					t.Errorf("a request cut short by Close: %v; want an error saying the node is closed", err)
				}
			case <-time.After(slack):
				t.Fatal("a request cut short by Close has not returned")
			}
		}
	}

	t.Run("lingering reader", func(t *testing.T) {
		d := newDirect(t, &redis.Options{Addr: masters.Addrs()[0]})
		if ok, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		if len(wireGoroutines()) == 0 {
			t.Fatal("no reader lingers after the reply: nothing for Close to end")
		}
		closeNow(t, d) // well before the linger would end
	})

	// Connections to a black hole are accepted and never answered: the
	// requests wait for their replies, and with a password the handshake's
	// reader waits for AUTH's.
	for _, password := range []string{"", "pw"} {
		t.Run(fmt.Sprintf("requests in flight, password %q", password), func(t *testing.T) {
			p, err := faultproxy.New(masters.Addrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.Blackhole()
			dialed := make(chan struct{}, 1)
			d := newDirect(t, &redis.Options{Addr: p.Addr(), Password: password, ReadTimeout: time.Minute,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					select {
					case dialed <- struct{}{}:
					default:
					}
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}})
			cutShort(t, d, dialed)
		})
	}

	// A dial that has no answer (a SYN into a black hole) ends when the
	// node is closed, not at its timeout.
	t.Run("dial in progress", func(t *testing.T) {
		dialing := make(chan struct{}, 1)
		d := newDirect(t, &redis.Options{Addr: "192.0.2.1:6379", DialTimeout: time.Minute, ReadTimeout: time.Minute,
			Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
				dialing <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}})
		cutShort(t, d, dialing)
	})

	t.Run("after Close", func(t *testing.T) {
		d := newDirect(t, &redis.Options{Addr: masters.Addrs()[0]})
		if ok, err := d.Acquire(within(t, time.Second), testKey(t), "v", time.Minute); !ok || err != nil {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		closeNow(t, d)
		for _, c := range callers {
			for _, op := range []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"Acquire", func(ctx context.Context) error { _, err := d.Acquire(ctx, "k", "v", time.Minute); return err }},
				{"AcquireFenced", func(ctx context.Context) error { _, err := d.AcquireFenced(ctx, "k", "v", time.Minute); return err }},
				{"RaiseFence", func(ctx context.Context) error { _, err := d.RaiseFence(ctx, "k", "v", 1); return err }},
				{"Extend", func(ctx context.Context) error { _, err := d.Extend(ctx, "k", "v", time.Minute); return err }},
				{"Release", func(ctx context.Context) error { _, err := d.Release(ctx, "k", "v"); return err }},
				{"ExtendBatch", func(ctx context.Context) error {
					_, errs := d.ExtendBatch(ctx, []ExtendRequest{{"k", "v", time.Minute}})
					return errs[0]
				}},
			} {
				var err error
				took := bounded(t, 10*time.Second, op.name, func() { err = op.call(c.ctx(t)) })
				if err == nil || !strings.Contains(err.Error(), "node closed") || took > slack {
					t.Errorf("%s: %s after Close: %v after %v; want at once an error saying the node is closed", c.name, op.name, err, took)
				}
			}
		}
		_, err := newRedlock(t, []Node{d}).TryLock(context.Background(), testKey(t))
		var ne *NodeError
		if !errors.As(err, &ne) || !strings.Contains(ne.Error(), "node closed") {
			t.Errorf("TryLock on a closed DirectNode: %v; want a NodeError saying it is closed", err)
		}
		if err := d.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		noWireGoroutines(t)
	})
}

// TestDirectNodeIdleCheck: a connection that has been idle for idleCheck
// with no goroutine reading it is checked before its next use; one the
// master closed meanwhile (CLIENT KILL here; a restart or the master's
// idle timeout alike) is dropped and the request goes on a new one, so it
// succeeds instead of failing on the dead one. Without a reader, nothing
// else would notice: the request would be written and get EOF.
func TestDirectNodeIdleCheck(t *testing.T) {
	tlsServers, conf := tlsMasters(t, 1)
	for _, tc := range []struct {
		name     string
		addr     string
		tls      *tls.Config
		ctx      func(testing.TB) context.Context
		readerOn time.Duration // how long a reader goroutine reads on after a reply
	}{
		{"caller reads", masters.Addrs()[0], nil, callers[1].ctx, 0},
		{"reader goroutine", masters.Addrs()[0], nil, callers[0].ctx, linger},
		{"TLS, caller reads", tlsServers.Addrs()[0], conf, callers[1].ctx, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits for the check
			admin := redis.NewClient(&redis.Options{Addr: tc.addr, TLSConfig: tc.tls})
			t.Cleanup(func() { admin.Close() })
			name := fmt.Sprintf("redlock-idle-%d", keySeq.Add(1))
			d := newDirect(t, &redis.Options{Addr: tc.addr, TLSConfig: tc.tls, ClientName: name})
			// On a new connection a reader goroutine reads the first reply;
			// a caller that reads its own takes over from the next.
			for range 3 {
				if ok, err := d.Acquire(tc.ctx(t), testKey(t), "v", time.Minute); !ok || err != nil {
					t.Fatalf("Acquire: %v, %v", ok, err)
				}
			}
			time.Sleep(tc.readerOn + 100*time.Millisecond) // no reader would see the kill
			id := oneClient(t, admin, name)
			if err := admin.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(idleCheck + 100*time.Millisecond)
			if ok, err := d.Acquire(tc.ctx(t), testKey(t), "v", time.Minute); !ok || err != nil {
				t.Fatalf("Acquire on a connection the master closed while it was idle: %v, %v; want a new connection and success", ok, err)
			}
			if now := oneClient(t, admin, name); now == id {
				t.Errorf("still on connection %s, which the master closed", id)
			}
		})
	}
}

// TestReadReplyBounds: whatever lengths a reply declares, a DirectNode
// allocates no more than the reply's bytes and one bulk string's bound: a
// length over the bounds, arrays nested too deep or a line with no end is a
// protocol error (ErrBadReply), found before anything of the declared size
// is allocated; so is a bulk string's payload not ended by CRLF.
func TestReadReplyBounds(t *testing.T) {
	for _, tc := range []struct{ reply, says string }{
		{"$99999999\r\n", "bulk string of 99999999 bytes"},
		{"*99999999\r\n", "array of 99999999 elements"},
		{"$9223372036854775807\r\n", "bulk string of 9223372036854775807 bytes"},
		{"*9223372036854775807\r\n", "array of 9223372036854775807 elements"},
		{"$99999999999999999999999\r\n", "bulk length"},
		{"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "nested over 4 deep"},
		{"*2\r\n:1\r\n$99999999\r\n", "bulk string of 99999999 bytes"},
		{strings.Repeat("+", 1<<20), "line over 4096 bytes"},
		{"$2\r\nOKxx", "not ended by CRLF"},
		{"$-2\r\n", "bulk length"},
	} {
		src := strings.NewReader(tc.reply)
		r := bufio.NewReaderSize(src, 4096)
		var err error
		const runs = 50
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			src.Reset(tc.reply)
			r.Reset(src)
			_, _, err = readReply(r)
		}
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errProtocol) || !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("reply %.40q: %v; want a protocol error saying %q", tc.reply, err, tc.says)
		}
		if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4<<10 {
			t.Errorf("reply %.40q: %d bytes allocated per read", tc.reply, per)
		}
	}
}
