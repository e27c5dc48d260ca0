package chaos

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/redlock/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis probes a master it could not dial (a killed one) from a
	// goroutine that notices its client was closed only after its next 1s
	// sleep.
	goleak.VerifyTestMain(m, redistest.IgnoreDialProbe)
}
