package main

import (
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// Bad input exits with the usage status and says what to fix.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		masters string
		args    []string
		says    string
	}{
		{shared(), nil, "Usage"},
		{shared(), []string{"frobnicate"}, `unknown command "frobnicate"`},
		{shared(), []string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{shared(), []string{"exec"}, "missing NAME"},
		{shared(), []string{"exec", "job"}, "want -- between NAME"},
		{shared(), []string{"exec", "job", "true"}, "want -- between NAME"},
		{shared(), []string{"exec", "job", "--ttl", "1s", "--", "true"}, "flags go before NAME"},
		{shared(), []string{"exec", "job", "--"}, "missing COMMAND"},
		{shared(), []string{"exec", "--", "job", "true"}, "missing NAME"},
		{shared(), []string{"exec", "--", "true"}, "missing NAME"},
		{shared(), []string{"exec", "--ttl", "1s", "--", "true"}, "missing NAME"},
		{shared(), []string{"exec", "--ttl", "soon", "job", "--", "true"}, `invalid value "soon" for --ttl: not a duration`},
		{shared(), []string{"exec", "--ttl", "5", "job", "--", "true"}, `--ttl: a duration needs a unit: 5s, 5ms or 5m`},
		{shared(), []string{"exec", "--wait", "2", "job", "--", "true"}, `--wait: a duration needs a unit`},
		{shared(), []string{"exec", "--restart-gate", "60", "job", "--", "true"}, `a duration needs a unit: 60s`},
		{shared(), []string{"status", "--timeout", "1", "job"}, `--timeout: a duration needs a unit`},
		{shared(), []string{"exec", "-ttl"}, "flag needs an argument: --ttl"},
		{shared(), []string{"exec", "--ttl", "0s", "job", "--", "true"}, "--ttl must be positive"},
		{shared(), []string{"exec", "--ttl", "2ms", "job", "--", "true"}, "--ttl: TTL 2ms leaves no validity"},
		{shared(), []string{"exec", "--wait", "-1s", "job", "--", "true"}, "--wait"},
		{shared(), []string{"exec", "--no-such-flag", "job", "--", "true"}, "not defined: --no-such-flag"},
		{"", []string{"exec", "job", "--", "true"}, "no masters"},
		{shared() + ",", []string{"exec", "job", "--", "true"}, "is empty"},
		{"", []string{"exec", "--masters", "redis://h:1/db", "job", "--", "true"}, `"redis://h:1/db": invalid database number`},
		{"", []string{"exec", "--masters", "http://h:1", "job", "--", "true"}, "scheme"},
		{"", []string{"status", "--masters", "h:1?nope=1", "job"}, "nope"},
		{"", []string{"exec", "--masters", "redis://h:1?master_name=m", "job", "--", "true"}, "want redis+sentinel://"},
		{"", []string{"exec", "--masters", "redis://h:1?addr=h:2", "job", "--", "true"}, "want redis+cluster://"},
		{"", []string{"status", "--masters", "redis+sentinel://h:1", "job"}, "no master_name"},
		{"", []string{"status", "--masters", "redis+ring://h:1", "job"}, "unknown scheme redis+ring"},
		{shared(), []string{"status"}, "exactly one NAME"},
		{shared(), []string{"status", "a", "b"}, "exactly one NAME"},
		{shared(), []string{"status", "--timeout", "0s", "a"}, "--timeout"},
	} {
		r := runCLI(t, tc.masters, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("redlock %q: want exit %d and stderr saying %q, got %v", tc.args, exitUsage, tc.says, r)
		}
	}
}

// No output ever shows a master's password: not for a bad URL, an
// unreachable master, a wrong password, nor a good one.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-secret"
	// redistest's readiness probe does not authenticate: set the password after.
	addr := redistest.StartT(t, 1, redistest.Options{}).Addrs()[0]
	admin := redis.NewClient(&redis.Options{Addr: addr})
	err := admin.ConfigSet(context.Background(), "requirepass", secret).Err()
	admin.Close()
	if err != nil {
		t.Fatal(err)
	}
	good := "redis://:" + secret + "@" + addr + "/0"
	for _, tc := range []struct {
		masters string
		args    []string
		code    int
	}{
		{good, []string{"exec", "job", "--", "sh", "-c", "echo ran"}, 0},
		{good, []string{"status", "job"}, 0},
		{"redis://:wrong-" + secret + "@" + addr, []string{"exec", "job", "--", "true"}, exitUnavailable},
		{"redis://:wrong-" + secret + "@" + addr, []string{"status", "job"}, exitUnavailable},
		{"redis://u:" + secret + "@127.0.0.1:1/0", []string{"exec", "job", "--", "true"}, exitUnavailable},
		{"redis://u:" + secret + "@127.0.0.1:1/0", []string{"status", "job"}, exitUnavailable},
		{"redis://u:" + secret + "@h:1/x", []string{"exec", "job", "--", "true"}, exitUsage},
		{"redis://u:" + secret + "#@h:1/0", []string{"status", "job"}, exitUsage},
		{"redis://u:" + secret + "@h:port", []string{"exec", "job", "--", "true"}, exitUsage},
		{"redis+sentinel://127.0.0.1:1?master_name=m&password=" + secret, []string{"exec", "job", "--", "true"}, exitUnavailable},
		{"redis+sentinel://127.0.0.1:1?master_name=m&password=" + secret, []string{"status", "job"}, exitUnavailable},
		{"redis+sentinel://:" + secret + "@h:1?master_name=m&bogus=1", []string{"exec", "job", "--", "true"}, exitUsage},
		{"redis+cluster://u:" + secret + "@127.0.0.1:1", []string{"status", "job"}, exitUnavailable},
	} {
		r := runCLI(t, tc.masters, tc.args...)
		if r.code != tc.code {
			t.Errorf("redlock %q with %s: want exit %d, got %v", tc.args, tc.masters, tc.code, r)
		}
		if strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("redlock %q with %s shows the password: %v", tc.args, tc.masters, r)
		}
	}
}

// Every command has help, on stdout, with status 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"help"}, {"-h"}, {"--help"},
		{"help", "exec"}, {"exec", "-h"}, {"exec", "--help"},
		{"help", "status"}, {"status", "-h"},
	} {
		r := runCLI(t, "", args...)
		wantCode(t, r, 0)
		for _, s := range []string{"Usage", "rediss://", "redis+sentinel://", "redis+cluster://", "64", "69"} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("redlock %q: help does not mention %q:\n%s", args, s, r.stdout)
			}
		}
	}
	for _, s := range []string{"--ttl", "--wait", "--grace", "--fencing", "--masters", "REDLOCK_KEY", "REDLOCK_FENCE", "75", "79"} {
		if !strings.Contains(runCLI(t, "", "exec", "-h").stdout, s) {
			t.Errorf("exec -h does not mention %s", s)
		}
	}
}

// Every command's help has one format: "Usage:", and flags written --name,
// redlock help chaos included.
func TestHelpFormat(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"help", "exec"}, {"help", "status"}, {"help", "chaos"}, {"chaos", "-h"}} {
		r := runCLI(t, "", args...)
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "Usage:") || strings.Contains("\n"+r.stdout, "\nusage:") {
			t.Errorf("redlock %q: help without \"Usage:\":\n%s", args, r.stdout)
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) > 0 && len(f[0]) > 1 && f[0][0] == '-' && f[0][1] != '-' {
				t.Errorf("redlock %q: a flag written with one dash: %q", args, line)
			}
		}
	}
	if r := runCLI(t, "", "help", "chaos"); !strings.Contains(r.stdout, "--adapter CLIENT") || !strings.Contains(r.stdout, "--wide") {
		t.Errorf("redlock help chaos lacks --adapter or --wide:\n%s", r.stdout)
	}
	if r := runCLI(t, "", "chaos", "--nodes", "x"); r.code != 2 || !strings.Contains(r.stderr, "for --nodes") {
		t.Errorf("redlock chaos --nodes x: want exit 2 naming --nodes, got %v", r)
	}
}

// --version prints the module's version; a build from a clone is (devel).
func TestVersion(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "--version")
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.stdout, "redlock (devel)") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Errorf("redlock --version printed %q; want redlock (devel), ..., %s", r.stdout, runtime.Version())
	}
	for _, tc := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}, Deps: []*debug.Module{{Path: libraryPath, Version: "v0.2.0"}}},
			"redlock v0.2.0, go1.26.8"},
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}, Deps: []*debug.Module{{Path: libraryPath, Version: "v0.2.1"}}},
			"redlock v0.2.0, library v0.2.1, go1.26.8"},
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c4d5e6f7a8b9c0d"}, {Key: "vcs.modified", Value: "true"}}},
			"redlock (devel), revision 1a2b3c4d5e6f (modified), go1.26.8"},
	} {
		if got := version(&tc.bi, true); got != tc.want {
			t.Errorf("version = %q; want %q", got, tc.want)
		}
	}
}
