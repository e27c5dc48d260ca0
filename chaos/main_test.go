package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlock/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial through a process-wide logger; under
	// injected faults that is hundreds of expected lines. A library does
	// not set it (Command neither: redlock's main does); the test binary
	// is a program of its own.
	redis.SetLogger(quietLogger{})
	// go-redis probes a master it could not dial (a killed one) from a
	// goroutine that notices its client was closed only after its next 1s
	// sleep.
	goleak.VerifyTestMain(cleanupM{m}, redistest.IgnoreDialProbe)
}

// cleanupM removes the redlock binary built for the process clients once
// the tests have run.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	code := c.m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	return code
}

// built is the redlock binary, built once on first use.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// redlockBinary builds cmd/redlock (with this package in it: the process
// clients run "redlock exec" around "redlock chaos writer") and returns
// its path. cmd/redlock is a module of its own that requires this one: the
// build takes both from the repository's go.work (make test sets it).
func redlockBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "redlock-chaos-bin-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "redlock")
		out, err := exec.Command("go", "build", "-o", built.bin, "github.com/redlock/redlock/cmd/redlock").CombinedOutput()
		if err != nil {
			built.err = err
			built.bin = string(out)
		}
	})
	if built.err != nil {
		t.Fatalf("build cmd/redlock (from the work tree's modules: needs the repository's go.work, as make test uses): %v\n%s", built.err, built.bin)
	}
	return built.bin
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
