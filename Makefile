# The README's commands. `make test` is what CI runs.
GO ?= go
# The modules of this repository are built together through go.work (the
# library, chaos/, cmd/redlock/, redlockotel/, redlockrueidis/, bench/),
# also when the environment says GOWORK=off. NESTED lists the modules other
# than the root.
export GOWORK = $(CURDIR)/go.work
NESTED = chaos cmd/redlock redlockotel redlockrueidis bench
# Schedules of the simulation's non-race runs in `make test`: the mutex's
# (TestSim), the semaphore's and the RWMutex's. The -race run does few
# (sim_test.go's defaultSimSchedules says why): 100, 40 and 40.
SIM_SCHEDULES ?= 3000
SIM_SEM_SCHEDULES ?= 300
SIM_RW_SCHEDULES ?= 300

.PHONY: test test-sim test-rest vet chaos redis-server soak tidy modules release
# The simulation's masters (internal/sim, imported by tests only) run the
# real scripts in gopher-lua:
# the race detector skips the interpreter, whose every memory access it
# would instrument (2.7x the simulation's CPU); our code stays instrumented.
RACE_FLAGS = -race -gcflags=github.com/yuin/gopher-lua/...=-race=false

# make test: about 13 minutes on this repository's 2-core machine, in three
# stages. The tests mostly wait (TTLs, faults, restart gates), so stages 1
# and 3 run two streams side by side, each stream's output printed whole
# when it ends. Figures: README.md, "Contributing: commands".
test: vet redis-server
	# 1. The root module: its test binaries built once, then run by two
	# workers: each half of the root package's tests (scripts/test-halves.sh
	# says why), and the module's other packages by whichever is free.
	# -test.parallel 12: the tests that call t.Parallel wait out masters'
	# restart gates (seconds asleep each); they run together at the end.
	GO=$(GO) bash scripts/test-halves.sh $(RACE_FLAGS) -- -test.count=1 -test.timeout=15m -test.parallel=12
	# 2. The chaos module alone (its two backends' scenarios one after the
	# other: chaos/scenario_test.go). Beside anything busy its scenarios
	# starve, even beside each other (shard-kill's, shard-pause's gaps):
	# next to stage 1's tests once (no acquire both started and ended
	# inside a 1.5 s fault), next to stage 3's simulation (shard-kill's gap
	# above 100 ms, no permit taken during a pause).
	cd chaos && $(GO) test -race -count=1 -timeout 15m -p 1 ./...
	# 3. The simulation without -race beside the other nested modules.
	$(MAKE) --no-print-directory -j2 -O test-sim test-rest

# The simulations again without -race, which costs them ten times the
# CPU: thousands of schedules (sim_test.go).
test-sim:
	$(GO) test -count=1 -timeout 10m -run 'TestSim$$' . -sim.schedules=$(SIM_SCHEDULES)
	$(GO) test -count=1 -timeout 10m -run 'TestSimSem$$|TestSimRW$$' . -sim.schedules=$(SIM_SEM_SCHEDULES) -sim.rw.schedules=$(SIM_RW_SCHEDULES)

# The nested modules other than chaos (./... stops at nested modules:
# their tests run from their own dirs).
test-rest:
	cd cmd/redlock && $(GO) test -race -count=1 -timeout 10m ./...
	cd redlockotel && $(GO) test -race -count=1 -timeout 5m ./...
	cd redlockrueidis && $(GO) test -race -count=1 -timeout 5m ./...
	cd bench && $(GO) test -race -count=1 -timeout 5m ./...

# Every scenario of the chaos harness, on masters it starts itself.
chaos: redis-server
	$(GO) run ./cmd/redlock chaos

# The tests and the harness start their own redis-server processes: install
# it when missing (root with apt-get), or stop with the command to run.
redis-server:
	@bash .ci/need-redis-server

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	for m in $(NESTED); do (cd $$m && $(GO) vet ./...) || exit 1; done
	cd .ci/modproxy && GOWORK=off $(GO) vet ./...

# The simulation (sim_test.go) for longer than make test runs it: schedules
# from a random seed until SOAK has passed; a failure prints its seed.
SOAK ?= 10m
soak:
	$(GO) test $(RACE_FLAGS) -count=1 -timeout 0 -run 'TestSim$$' . -sim.soak=$(SOAK)

# go mod tidy in every module (see .ci/tidy for the nested modules).
tidy:
	bash .ci/tidy


# What a user of the published modules gets: a program importing only the
# library has at most 15 modules and none of Docker's; the release
# procedure works and each nested module builds with GOWORK=off against the
# root as it would be published (a dry run in a scratch clone; .ci/modules).
modules:
	bash .ci/modules

# Tag a release of every module: make release VERSION=vX.Y.Z (docs/releasing.md).
release:
	bash .ci/release $(VERSION)
