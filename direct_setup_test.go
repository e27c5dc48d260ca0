package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"

	"github.com/redlock/redlock/internal/redistest"
)

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
