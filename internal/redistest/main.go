package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// IgnoreDialProbe is the goleak option for go-redis's dial probe: after a
// failed dial (a killed master) go-redis probes the address from a goroutine
// that notices its client was closed only after its next 1 s sleep.
var IgnoreDialProbe = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// Main is the body of a TestMain whose tests share n masters: it starts
// them, hands them to use (to keep in a package variable), runs the tests,
// stops the masters and, when the tests passed, fails the run on leaked
// goroutines. It returns the exit code for os.Exit.
func Main(m *testing.M, n int, opts Options, use func(*Cluster)) int {
	c, err := Start(n, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting redis-server masters:", err)
		return 1
	}
	use(c)
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping redis-server masters:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(IgnoreDialProbe); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
