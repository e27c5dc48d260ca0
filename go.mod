module github.com/redlock/redlock

go 1.26.0

// What the library needs. The chaos harness, the command, the benchmarks and
// redlockotel are modules of their own (chaos/, cmd/redlock/, bench/,
// redlockotel/, tied together by go.work), so that a program importing the
// library gets none of their requirements (Docker's client among them):
// .ci/modules checks that it gets at most 15 modules.
require (
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.23.0
)

// Only this module's tests need these; they are listed here because go mod
// tidy lists what the tests import, and a program importing the library
// gets the four modules in its graph (not their requirements) and builds
// none of them.
require (
	// The simulation's masters run the real scripts in Lua (sim*_test.go).
	github.com/yuin/gopher-lua v1.1.2
	// The leak check after every test binary (internal/redistest.Main).
	go.uber.org/goleak v1.3.0
	// waitid for the test servers' processes (internal/redistest); go-redis
	// requires it too, so it adds no module.
	golang.org/x/sys v0.48.0
	// Property tests with shrinking (fencing_prop_test.go, owner_faults_test.go).
	pgregory.net/rapid v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)
