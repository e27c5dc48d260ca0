package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// logRecorder keeps go-redis's log lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Printf(_ context.Context, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// TestNoSecretsInErrors: with a wrong password, with the right one against a
// master that is down, and with a URL that does not parse, no error text
// (in any verb), node name or go-redis log line shows the password.
func TestNoSecretsInErrors(t *testing.T) {
	rec := &logRecorder{}
	redis.SetLogger(rec)
	t.Cleanup(func() { redis.SetLogger(quietLogger{}) })

	const wrong = "wrong-pw-Kx3m"
	up := aclMasters(t)
	dead := redistest.StartT(t, 1, redistest.Options{})
	deadAddr := dead.Addrs()[0]
	if err := dead.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var shown []string // everything a user could see
	check := func(what string, err error) {
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		shown = append(shown, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
	}

	var urls []string
	for _, a := range up.Addrs() {
		urls = append(urls, "redis://locker:"+wrong+"@"+a)
	}
	urls = append(urls[:2], "redis://locker:"+aclPassword+"@"+deadAddr)
	r, err := NewFromURLs(urls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for _, n := range r.Nodes() {
		shown = append(shown, n.Name())
	}
	_, err = r.TryLock(ctx, testKey(t))
	check("wrong password and a dead master", err)
	if err != nil && !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("error %q does not say the password was refused", err)
	}

	deadOnly, err := NewFromURLs(urls[2:])
	if err != nil {
		t.Fatal(err)
	}
	_, err = deadOnly.TryLock(ctx, testKey(t))
	check("a dead master", err)
	deadOnly.Close()

	_, err = NewFromURLs([]string{"redis://locker:" + aclPassword + "/#@" + up.Addrs()[0]})
	check("unparsable URL", err)
	_, err = NewFromURLs([]string{"redis://locker:" + aclPassword + "@" + up.Addrs()[0] + "/notadb"})
	check("bad database", err)

	r.Close()
	rec.mu.Lock()
	shown = append(shown, rec.lines...)
	rec.mu.Unlock()
	for _, s := range shown {
		for _, secret := range []string{wrong, aclPassword} {
			if strings.Contains(s, secret) {
				t.Errorf("a password shows in %q", s)
			}
		}
	}
}
