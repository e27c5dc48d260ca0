package cliflag

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func newSet() (*flag.FlagSet, *time.Duration) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ttl := Duration(fs, "ttl", 30*time.Second, "how long the `lock` lives")
	fs.Bool("json", false, "print JSON")
	fs.String("adapter", "go-redis", "the clients' Redis client: go-redis, rueidis, or mixed: client i uses go-redis when i is even, rueidis when odd")
	return fs, ttl
}

// TestDurationNeedsUnit: a number without a unit is refused with the fix;
// a duration is read as time.ParseDuration reads it.
func TestDurationNeedsUnit(t *testing.T) {
	for _, tc := range []struct {
		arg, says string
		want      time.Duration
	}{
		{"5", `invalid value "5" for --ttl: a duration needs a unit: 5s, 5ms or 5m`, 0},
		{"1.5", "1.5s", 0},
		{"soon", "want a number and a unit", 0},
		{"1m30s", "", 90 * time.Second},
	} {
		fs, ttl := newSet()
		err := Error(fs.Parse([]string{"--ttl", tc.arg}))
		if tc.says == "" {
			if err != nil || *ttl != tc.want {
				t.Errorf("--ttl %s: %v, %v; want %v", tc.arg, *ttl, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("--ttl %s: %v; want an error saying %q", tc.arg, err, tc.says)
		}
	}
}

// TestErrorNamesFlagsWithTwoDashes: every flag the flag package names in an
// error is written --name.
func TestErrorNamesFlagsWithTwoDashes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "flag provided but not defined: --nope"},
		{[]string{"--ttl"}, "flag needs an argument: --ttl"},
		{[]string{"--json=maybe"}, `invalid boolean value "maybe" for --json`},
	} {
		fs, _ := newSet()
		err := Error(fs.Parse(tc.args))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// TestPrintDefaults: --name ARG, the usage wrapped within 80 columns, the
// default when it is not the zero value.
func TestPrintDefaults(t *testing.T) {
	fs, _ := newSet()
	var b bytes.Buffer
	PrintDefaults(&b, fs)
	out := b.String()
	for _, s := range []string{"  --ttl LOCK ", "(default 30s)", "  --json ", "  --adapter STRING", "(default go-redis)"} {
		if !strings.Contains(out, s) {
			t.Errorf("help does not show %q:\n%s", s, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 80 {
			t.Errorf("line of %d columns: %q", len(line), line)
		}
		if strings.Contains(line, " -") && !strings.Contains(line, " --") {
			t.Errorf("a flag with one dash: %q", line)
		}
	}
}
