package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// The tests drive the built binary against real masters.
var (
	binary  string             // the redlock binary, built by TestMain
	masters *redistest.Cluster // five masters shared by the tests that kill none
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "redlock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "redlock")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return redistest.Main(m, 5, redistest.Options{}, func(c *redistest.Cluster) { masters = c })
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// command returns the binary ready to run with args, with REDLOCK_MASTERS set
// to masterList ("" leaves it unset).
func command(ctx context.Context, masterList string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if masterList != "" {
		cmd.Env = append(cmd.Env, "REDLOCK_MASTERS="+masterList)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// wait waits for cmd and returns its result.
func wait(t *testing.T, cmd *exec.Cmd, stdout, stderr *bytes.Buffer, start time.Time) result {
	t.Helper()
	err := cmd.Wait()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return r
}

// runCLI runs the binary with args against masterList and returns its result.
func runCLI(t *testing.T, masterList string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdout, stderr := command(ctx, masterList, args...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return wait(t, cmd, stdout, stderr, start)
}

// shared is the list of the shared masters.
func shared() string { return strings.Join(masters.Addrs(), ",") }

var nameSeq atomic.Int64

// lockName returns a lock name no other test uses.
func lockName(t *testing.T) string {
	return fmt.Sprintf("%s:%d", t.Name(), nameSeq.Add(1))
}

// wantCode fails the test unless r exited with code.
func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %v", code, r)
	}
}

// setOnAll sets key to value on every address, as another holder would.
func setOnAll(t *testing.T, addrs []string, key, value string, ttl time.Duration) {
	t.Helper()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		err := c.Set(context.Background(), key, value, ttl).Err()
		c.Close()
		if err != nil {
			t.Fatalf("SET %s on %s: %v", key, a, err)
		}
	}
}

// waitForFile waits until path exists.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within 10s", path)
}
