package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/redlock/redlock/internal/redistest"
)

func TestParseMasterURL(t *testing.T) {
	for _, tc := range []struct {
		url, addr, user, pass string
		db                    int
		tls                   bool
	}{
		{"127.0.0.1:7000", "127.0.0.1:7000", "", "", 0, false},
		{" redis://h:1/2 ", "h:1", "", "", 2, false},
		{"redis://u:p%40ss@h:1/3", "h:1", "u", "p@ss", 3, false},
		{"redis://:secret@h:1", "h:1", "", "secret", 0, false},
		{"rediss://h:6380/0", "h:6380", "", "", 0, true},
		{"[::1]:7000", "[::1]:7000", "", "", 0, false},
	} {
		o, err := ParseMasterURL(tc.url)
		if err != nil {
			t.Errorf("ParseMasterURL(%q): %v", tc.url, err)
			continue
		}
		if o.Addr != tc.addr || o.Username != tc.user || o.Password != tc.pass || o.DB != tc.db || (o.TLSConfig != nil) != tc.tls {
			t.Errorf("ParseMasterURL(%q) = addr %q user %q pass %q db %d tls %v; want %q %q %q %d %v",
				tc.url, o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil, tc.addr, tc.user, tc.pass, tc.db, tc.tls)
		}
		if o.MaxRetries != -1 || o.DialerRetries != 1 || !o.ContextTimeoutEnabled {
			t.Errorf("ParseMasterURL(%q): MaxRetries %d, DialerRetries %d, ContextTimeoutEnabled %v; want -1, 1, true",
				tc.url, o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled)
		}
	}
	o, err := ParseMasterURL("redis://h:1?max_retries=2&dial_timeout=3s")
	if err != nil || o.MaxRetries != 2 || o.DialTimeout != 3*time.Second {
		t.Errorf("URL options: %+v, %v; want the URL's max_retries and dial_timeout kept", o, err)
	}
}

func TestParseMasterURLErrorsHidePassword(t *testing.T) {
	const secret = "s3cr#t/pw"
	for _, tc := range []struct{ url, says string }{
		{"", "empty"},
		{"http://h:1", "scheme"},
		{"redis://h:1/notadb", "database"},
		{"redis://h:1?bogus=1", "bogus"},
		{"redis://u:" + secret + "@h:1/0", "percent-encode"},
		{"redis://u:" + secret + "@h:1/x", "percent-encode"},
		{"redis://u:s3cret@h:1/x", "u:xxxxx@h:1/x"},
		{"rediss://:s3cret@h:1?nope=1", "nope"},
	} {
		_, err := ParseMasterURL(tc.url)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("ParseMasterURL(%q) = %v; want a *ConfigError", tc.url, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.says) {
			t.Errorf("ParseMasterURL(%q): %q does not say %q", tc.url, msg, tc.says)
		}
		for _, part := range []string{"s3cr", "cret", "#t/pw"} {
			if strings.Contains(msg, part) {
				t.Errorf("ParseMasterURL(%q): %q shows the password", tc.url, msg)
			}
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:p@h:1/0":     "redis://u:xxxxx@h:1/0",
		"redis://:p@ss@h:1":     "redis://:xxxxx@h:1",
		"redis://u@h:1":         "redis://u@h:1",
		"redis://h:1/0":         "redis://h:1/0",
		"u:p/w#x@h:1":           "u:xxxxx@h:1",
		"rediss://u:%40@h:6380": "rediss://u:xxxxx@h:6380",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestNewFromURLs(t *testing.T) {
	addrs := masters.Addrs()[:3]
	urls := []string{addrs[0], "redis://" + addrs[1] + "/0", "redis://" + addrs[2] + "?max_retries=1"}
	r, err := NewFromURLs(urls, WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := r.TryLock(ctx, testKey(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("TryLock after Close: %v; want ErrClosed", err)
	}
}

func TestNewFromURLsBadInput(t *testing.T) {
	addr := masters.Addrs()[0]
	for _, tc := range []struct {
		urls []string
		says []string
	}{
		{nil, []string{"at least one"}},
		{[]string{addr, "redis://u:topsecret@h:1/x", "ftp://h"}, []string{"u:xxxxx@h:1/x", "ftp://h"}},
		{[]string{addr, addr}, []string{"same master"}},
	} {
		r, err := NewFromURLs(tc.urls)
		if err == nil {
			r.Close()
			t.Errorf("NewFromURLs(%q) succeeded", tc.urls)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("NewFromURLs(%q): %q does not say %q", tc.urls, err, s)
			}
		}
		if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("NewFromURLs(%q): %q shows the password", tc.urls, err)
		}
	}
	if _, err := NewFromURLs([]string{addr}, WithTTL(-1)); err == nil {
		t.Error("NewFromURLs with a bad option succeeded")
	}
}

// TestParseMasterKinds: each scheme gives the options of its kind, read by
// go-redis's parser for it, with the defaults ParseMasterURL sets.
func TestParseMasterKinds(t *testing.T) {
	for _, tc := range []struct {
		url  string
		kind string // client, sentinel or cluster
		// want: "addr|user|pass|db|tls" for a client, "master|sentinels|user|pass|sentinel-pass|db|tls"
		// for a Sentinel URL, "addrs|user|pass|tls" for a cluster.
		want string
	}{
		{"h:1", "client", "h:1|||0|false"},
		{"redis://u:p%40ss@h:1/3", "client", "h:1|u|p@ss|3|false"},
		{"redis+sentinel://s1:26379?master_name=mymaster", "sentinel", "mymaster|s1:26379||||0|false"},
		{"redis+sentinel://s1:26379/2?master_name=m&addr=s2:26379&addr=s3:26379", "sentinel", "m|s1:26379,s2:26379,s3:26379||||2|false"},
		{"rediss+sentinel://:spw@s1:26379?master_name=m&username=locker&password=p%26w", "sentinel", "m|s1:26379|locker|p&w|spw|0|true"},
		{"REDIS+SENTINEL://s1:26379?master_name=m", "sentinel", "m|s1:26379||||0|false"},
		{"redis+cluster://h1:7000", "cluster", "h1:7000|||false"},
		{"redis+cluster://u:pw@h1:7000/?addr=h2:7001", "cluster", "h1:7000,h2:7001|u|pw|false"},
		{"rediss+cluster://h1:7000/0", "cluster", "h1:7000|||true"},
	} {
		m, err := ParseMaster(tc.url)
		if err != nil {
			t.Errorf("ParseMaster(%q): %v", tc.url, err)
			continue
		}
		var kind, got string
		var maxRetries, dialerRetries int
		var ctxTimeout bool
		switch {
		case m.Client != nil && m.Sentinel == nil && m.Cluster == nil:
			o := m.Client
			kind = "client"
			got = fmt.Sprintf("%s|%s|%s|%d|%v", o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil)
			maxRetries, dialerRetries, ctxTimeout = o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled
		case m.Sentinel != nil && m.Client == nil && m.Cluster == nil:
			o := m.Sentinel
			kind = "sentinel"
			got = fmt.Sprintf("%s|%s|%s|%s|%s|%d|%v", o.MasterName, strings.Join(o.SentinelAddrs, ","), o.Username, o.Password, o.SentinelPassword, o.DB, o.TLSConfig != nil)
			maxRetries, dialerRetries, ctxTimeout = o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled
		case m.Cluster != nil && m.Client == nil && m.Sentinel == nil:
			o := m.Cluster
			kind = "cluster"
			got = fmt.Sprintf("%s|%s|%s|%v", strings.Join(o.Addrs, ","), o.Username, o.Password, o.TLSConfig != nil)
			maxRetries, dialerRetries, ctxTimeout = o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled
		default:
			t.Errorf("ParseMaster(%q) = %+v; want exactly one kind set", tc.url, m)
			continue
		}
		if kind != tc.kind || got != tc.want {
			t.Errorf("ParseMaster(%q) = %s %s; want %s %s", tc.url, kind, got, tc.kind, tc.want)
		}
		if maxRetries != -1 || dialerRetries != 1 || !ctxTimeout {
			t.Errorf("ParseMaster(%q): MaxRetries %d, DialerRetries %d, ContextTimeoutEnabled %v; want -1, 1, true",
				tc.url, maxRetries, dialerRetries, ctxTimeout)
		}
	}
	m, err := ParseMaster("redis+sentinel://s:1?master_name=m&max_retries=2&dial_timeout=3s")
	if err != nil || m.Sentinel.MaxRetries != 2 || m.Sentinel.DialTimeout != 3*time.Second {
		t.Errorf("Sentinel URL options: %+v, %v; want the URL's max_retries and dial_timeout kept", m.Sentinel, err)
	}
}

// TestParseMasterBadInput: a URL that names no master, or more than one, or
// is ambiguous, is a *ConfigError that says what was wrong and what would be
// right, without the password.
func TestParseMasterBadInput(t *testing.T) {
	const pw = "topsecret"
	for _, tc := range []struct{ url, says, right string }{
		{"redis://h:1?master_name=m", "master_name is a Sentinel parameter", "redis+sentinel://"},
		{"redis://:" + pw + "@h:1?addr=h:2", "addr names more servers", "redis+cluster://"},
		{"redis+sentinel://:" + pw + "@s:1", "no master_name", "?master_name=NAME"},
		{"redis+sentinel://s:1?master_name=m&password=" + pw + "&bogus=1", "bogus", "redis+sentinel://"},
		{"redis+sentinel://s:1?master_name=m&replica_only=true&password=" + pw, "replica_only", "primary"},
		{"redis+sentinel://s:1?master_name=m&route_randomly=true", "route_randomly", "primary"},
		{"redis+sentinel://s:1/x?master_name=m", "database", "redis+sentinel://"},
		{"redis+sentinel://s:1?master_name=m&addr=nope", "addr", "redis+sentinel://"},
		{"redis+cluster://u:" + pw + "@h:1/2", "database 0 only", "redis+cluster://"},
		{"redis+cluster://h:1?master_name=m", "master_name", "redis+cluster://"},
		{"redis+ring://h:1", "unknown scheme redis+ring", "redis+sentinel://"},
		{"unix+sentinel://h:1", "unknown scheme", "redis+cluster://"},
		{"redis+sentinel://u:" + pw + "/#@s:1?master_name=m", "percent-encode", "%40"},
		{"http://h:1", "scheme", "redis://"},
	} {
		_, err := ParseMaster(tc.url)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("ParseMaster(%q) = %v; want a *ConfigError", tc.url, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.says) || !strings.Contains(msg, tc.right) {
			t.Errorf("ParseMaster(%q): %q does not say %q and %q", tc.url, msg, tc.says, tc.right)
		}
		if strings.Contains(msg, pw) || strings.Contains(msg, "cret") {
			t.Errorf("ParseMaster(%q): %q shows the password", tc.url, msg)
		}
	}
	// ParseMasterURL keeps its type: it points to ParseMaster for the others.
	for _, u := range []string{"redis+sentinel://:" + pw + "@s:1?master_name=m", "redis+cluster://h:1"} {
		_, err := ParseMasterURL(u)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "use ParseMaster") || strings.Contains(err.Error(), pw) {
			t.Errorf("ParseMasterURL(%q) = %v; want a *ConfigError pointing to ParseMaster, without the password", u, err)
		}
	}
}

// TestRedactURLQueryPasswords: a Sentinel URL's master password is a query
// parameter; RedactURL hides it, also where it overlaps the user
// information.
func TestRedactURLQueryPasswords(t *testing.T) {
	for in, want := range map[string]string{
		"redis+sentinel://s:1?master_name=m&password=p":                 "redis+sentinel://s:1?master_name=m&password=xxxxx",
		"redis+sentinel://:sp@s:1?password=p&username=u":                "redis+sentinel://:xxxxx@s:1?password=xxxxx&username=u",
		"redis+sentinel://s:1?sentinel_password=p":                      "redis+sentinel://s:1?sentinel_password=xxxxx",
		"redis+sentinel://s:1?master_name=m&password=p@x":               "redis+sentinel://s:xxxxx",
		"redis://u:a?password=b@h:1":                                    "redis://u:xxxxx",
		"redis+sentinel://s:1?master_name=m&mypassword=p&client_name=c": "redis+sentinel://s:1?master_name=m&mypassword=p&client_name=c",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestNewFromURLsNames: NewFromURLs names the masters of each kind by their
// addresses; no master needs to run (the clients dial lazily).
func TestNewFromURLsNames(t *testing.T) {
	urls := []string{
		"redis+sentinel://s1:26379?master_name=m1&addr=s2:26379&password=topsecret",
		"redis+sentinel://s2:26379?master_name=m2&addr=s1:26379",
		"redis+cluster://:topsecret@h2:7001?addr=h1:7000",
		"redis://:topsecret@h:6379/1",
		"h:6380",
	}
	r, err := NewFromURLs(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, n := range r.Nodes() {
		names = append(names, n.Name())
	}
	want := "sentinel:m1@s1:26379,s2:26379/0 sentinel:m2@s1:26379,s2:26379/0 cluster:h1:7000,h2:7001 h:6379/1 h:6380/0"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("names %s; want %s", got, want)
	}
	// The same Sentinel-managed master twice, its Sentinels in another order.
	_, err = NewFromURLs([]string{urls[0], "redis+sentinel://s2:26379?master_name=m1&addr=s1:26379", "h:6380"})
	if err == nil || !strings.Contains(err.Error(), "same master sentinel:m1@s1:26379,s2:26379/0") {
		t.Errorf("NewFromURLs(the same Sentinel-managed master twice) = %v; want it refused by name", err)
	}
}

// quietChildEnv holds the master URLs when the test binary is the program
// that TestNewFromURLsQuietWhenMastersDown watches; quietLineEnv, when set,
// makes that program run the README's line that drops go-redis's dial
// failures.
const (
	quietChildEnv = "REDLOCK_TEST_QUIET_CHILD"
	quietLineEnv  = "REDLOCK_TEST_QUIET_LINE"
)

// TestNewFromURLsQuietWhenMastersDown runs a program that locks and unlocks
// in a loop with NewFromURLs while 2 of its 5 masters are down, with
// go-redis's logger as a user's program has it (this test binary silences
// it in TestMain, so the program is the test binary run again), and counts
// the lines it writes on stderr: go-redis prints one per master that went
// down, and none with the README's line.
func TestNewFromURLsQuietWhenMastersDown(t *testing.T) {
	if urls := os.Getenv(quietChildEnv); urls != "" {
		if os.Getenv(quietLineEnv) != "" {
			redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial"}))
		}
		lockLoop(t, strings.Split(urls, ","), 2*time.Second)
		return
	}
	c := redistest.StartT(t, 5, redistest.Options{})
	down := c.Servers[3:]
	for _, s := range down {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		env       string
		wantLines int
	}{
		{"library", "", len(down)},
		{"README line", quietLineEnv + "=1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNewFromURLsQuietWhenMastersDown$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), quietChildEnv+"="+strings.Join(c.Addrs(), ","), tc.env)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("the locking program: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			t.Logf("the locking program:\n%s", stdout.String())
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if stderr.Len() == 0 {
				lines = nil
			}
			t.Logf("%d lines on stderr with %d of %d masters down", len(lines), len(down), len(c.Servers))
			if len(lines) > tc.wantLines {
				t.Errorf("%d lines on stderr; want at most %d (one per master down: go-redis's dial failure):\n%s",
					len(lines), tc.wantLines, strings.Join(lines[:min(len(lines), 10)], "\n"))
			}
			for _, l := range lines {
				if !strings.Contains(l, "failed to dial") {
					t.Errorf("a line on stderr that is not go-redis's dial failure: %s", l)
				}
			}
		})
	}
}

// lockLoop locks and unlocks one key over urls until d has passed, and
// fails unless nearly every attempt took the lock.
func lockLoop(t *testing.T, urls []string, d time.Duration) {
	r, err := NewFromURLs(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var taken, failed int
	for end := time.Now().Add(d); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		lock, err := r.Lock(ctx, "quiet")
		if err == nil {
			taken++
			err = lock.Unlock(ctx)
		}
		cancel()
		if err != nil {
			failed++
		}
	}
	t.Logf("%d locks taken and released, %d failed, in %v", taken, failed, d)
	if taken == 0 || failed > taken/10 {
		t.Errorf("%d locks taken, %d failed: want nearly all taken with 3 of 5 masters up", taken, failed)
	}
}
