package redlock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redlock/redlock"
)

// TestParseMasterQuotesInput: an error quotes the URL as it was given
// (without its password), never as the parser rewrote it.
func TestParseMasterQuotesInput(t *testing.T) {
	for _, tc := range []struct{ url, says, hint string }{
		{"redis//127.0.0.1:7101", `"redis//127.0.0.1:7101"`, `"://"`},
		{"redis:/127.0.0.1:7101", `"redis:/127.0.0.1:7101"`, `"://"`},
		{"127.0.0.1:7101/x", `"127.0.0.1:7101/x"`, "database"},
		{"u:s3cret@h:1/x", `"u:xxxxx@h:1/x"`, "database"},
	} {
		_, err := redlock.ParseMaster(tc.url)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("ParseMaster(%q) = %v; want a *ConfigError", tc.url, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.says) || !strings.Contains(msg, tc.hint) || strings.Contains(msg, "redis://redis") || strings.Contains(msg, "redis://127") || strings.Contains(msg, "s3cret") {
			t.Errorf("ParseMaster(%q): %q; want it to quote %s as given, say %s, and show no password", tc.url, msg, tc.says, tc.hint)
		}
	}
}

// TestParseMasterNeedsPort: a master's port is never guessed: a host
// without one, in any kind of URL, is a *ConfigError that says so and
// names the default ports.
func TestParseMasterNeedsPort(t *testing.T) {
	for _, u := range []string{
		"127.0.0.1",
		"redis://h",
		"rediss://:pw@h/0",
		"redis://[::1]",
		"redis+sentinel://s?master_name=m",
		"redis+sentinel://s:26379?master_name=m&addr=s2",
		"redis+cluster://h1",
		"redis+cluster://h1:7000?addr=h2",
	} {
		_, err := redlock.ParseMaster(u)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("ParseMaster(%q) = %v; want a *ConfigError", u, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "no port") || !strings.Contains(msg, "6379") || strings.Contains(msg, ":pw@") {
			t.Errorf("ParseMaster(%q): %q; want it to say the port is missing, with the default as an example", u, msg)
		}
	}
	for _, u := range []string{"unix:///tmp/redis.sock", "h:6379", "h:6379/1", "redis+sentinel://s:26379?master_name=m&addr=s2:26379", "redis+cluster://h1:7000?addr=[::1]:7001"} {
		if _, err := redlock.ParseMaster(u); err != nil {
			t.Errorf("ParseMaster(%q): %v", u, err)
		}
	}
}
