package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
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
