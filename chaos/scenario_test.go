package chaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlock/redlock/chaos/cluster"
)

// testDuration is each scenario's workload time in tests; scenarios whose
// script needs longer take longer (see scenario.minTTLs).
const testDuration = 3 * time.Second

func TestScenariosProcess(t *testing.T) {
	t.Parallel()
	runScenarios(t, BackendProcess)
}

func TestScenariosDocker(t *testing.T) {
	t.Parallel()
	if err := cluster.DockerAvailable(); err != nil {
		if os.Getenv("REDLOCK_REQUIRE_DOCKER") == "1" {
			t.Fatalf("REDLOCK_REQUIRE_DOCKER=1 but: %v", err)
		}
		t.Skipf("no Docker: %v", err)
	}
	runScenarios(t, BackendDocker)
}

// runScenarios runs every scenario, one after another, and asserts each
// reached its expected verdict, the two that must find unsafety included.
func runScenarios(t *testing.T, backend string) {
	only := os.Getenv("REDLOCK_CHAOS_SCENARIO")
	for _, name := range ScenarioNames() {
		if only != "" && only != name {
			continue
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, Config{Backend: backend, Scenarios: []string{name}, Duration: testDuration})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			var b strings.Builder
			rep.WriteTable(&b)
			t.Log("\n" + b.String())
			s := rep.Scenarios[0]
			for _, f := range s.Faults {
				t.Logf("fault %+v", f)
			}
			if !s.Expected {
				t.Errorf("%s: %s; not shown: %s", name, s.Outcome, strings.Join(s.Failed, "; "))
			}
		})
	}
}
