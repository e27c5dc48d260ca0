package redlock

import (
	"errors"
	"strings"
	"testing"
)

// FuzzMasterURL builds master URLs around a password that starts with a
// marker: ParseMasterURL never panics, returns options or a *ConfigError,
// and neither its error, RedactURL nor the master's address (the Node's name)
// shows the password.
func FuzzMasterURL(f *testing.F) {
	for _, s := range [][4]string{
		{"redis", "locker", "pw", "127.0.0.1:6379/0"},
		{"rediss", "", "p@ss/w#rd", "h:1"},
		{"redis", "u:v", "x", "[::1]:6379/3?dial_timeout=1s"},
		{"redis", "u", "%zz", "h:1/notadb"},
		{"", "u", "", "@h:1"},
		{"unix", "u", "x", "/tmp/redis.sock?db=1"},
		{"redis", "u", "pw:more", "h:99999"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, scheme, user, pwTail, rest string) {
		const marker = "SeCrEt"
		if strings.Contains(scheme+user+rest, marker[:3]) {
			t.Skip("the marker must appear in the password only")
		}
		password := marker + pwTail
		raw := user + ":" + password + "@" + rest
		if scheme != "" {
			raw = scheme + "://" + raw
		}
		if red := RedactURL(raw); strings.Contains(red, marker) {
			t.Fatalf("RedactURL(%q) = %q", raw, red)
		}
		o, err := ParseMasterURL(raw)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseMasterURL(%q): %v (%T), want a *ConfigError", raw, err, err)
			}
			if strings.Contains(err.Error(), marker) {
				t.Fatalf("ParseMasterURL(%q): the error shows the password: %v", raw, err)
			}
			return
		}
		if strings.Contains(o.Addr, marker) || strings.Contains(o.Username, marker) {
			t.Fatalf("ParseMasterURL(%q): the password went into addr %q or user %q", raw, o.Addr, o.Username)
		}
	})
}
