package redlock

import (
	"errors"
	"strings"
	"testing"
)

// FuzzMasterURL builds master URLs around a password that starts with a
// marker: ParseMasterURL and ParseMaster never panic, return options or a
// *ConfigError, and neither their errors, RedactURL nor the master's
// addresses (the Node's name) show the password.
func FuzzMasterURL(f *testing.F) {
	for _, s := range [][4]string{
		{"redis", "locker", "pw", "127.0.0.1:6379/0"},
		{"rediss", "", "p@ss/w#rd", "h:1"},
		{"redis", "u:v", "x", "[::1]:6379/3?dial_timeout=1s"},
		{"redis", "u", "%zz", "h:1/notadb"},
		{"", "u", "", "@h:1"},
		{"unix", "u", "x", "/tmp/redis.sock?db=1"},
		{"redis", "u", "pw:more", "h:99999"},
		{"redis+sentinel", "", "x", "s:26379/1?master_name=m&addr=s2:26379&password=p"},
		{"rediss+sentinel", "u", "p@?x", "s:1?master_name=m"},
		{"redis+cluster", "u", "x", "h:7000?addr=h2:7001"},
		{"redis+cluster", "u", "x#y", "h:7000/1"},
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
		checkParseMaster(t, raw, marker)
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

// checkParseMaster checks ParseMaster(raw) as FuzzMasterURL checks
// ParseMasterURL: no password in its error or in the names it gives.
func checkParseMaster(t *testing.T, raw, marker string) {
	m, err := ParseMaster(raw)
	if err != nil {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("ParseMaster(%q): %v (%T), want a *ConfigError", raw, err, err)
		}
		if strings.Contains(err.Error(), marker) {
			t.Fatalf("ParseMaster(%q): the error shows the password: %v", raw, err)
		}
		return
	}
	var name string
	switch {
	case m.Sentinel != nil:
		name = failoverName(m.Sentinel.MasterName, m.Sentinel.SentinelAddrs, m.Sentinel.DB) + " " + m.Sentinel.SentinelUsername
	case m.Cluster != nil:
		name = strings.Join(m.Cluster.Addrs, ",") + " " + m.Cluster.Username
	default:
		name = m.Client.Addr + " " + m.Client.Username
	}
	if strings.Contains(name, marker) {
		t.Fatalf("ParseMaster(%q): the password went into the name or user: %q", raw, name)
	}
}
