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
# The simulation's tests: test-sim runs them, under -race with their few
# default schedules and then without it, and test-root leaves them out.
SIM_TESTS = ^TestSim$$|^TestSimSem$$|^TestSimRW$$

.PHONY: test test-build test-timed test-root test-times test-chaos test-docker test-sim vet chaos redis-server soak tidy modules release
# The simulation's masters (internal/sim, imported by tests only) run the
# real scripts in gopher-lua:
# the race detector skips the interpreter, whose every memory access it
# would instrument (2.7x the simulation's CPU); our code stays instrumented.
RACE_FLAGS = -race -gcflags=github.com/yuin/gopher-lua/...=-race=false

# make test: after test-build, two streams side by side (make -Oline):
#  - test-sim: the simulation's tests, under -race and then the long
#    non-race runs, at the lowest CPU priority (nice 19), on what the other
#    stream leaves idle. Their masters run in virtual time: load cannot
#    fail them, and at nice 19 they take nothing from the tests that
#    measure time (under -race, in test-root, they took both cores for
#    their 10 to 25 s);
#  - test-timed: the tests that measure time, in three stages, each
#    printed whole as it ends. Figures: README.md, "Contributing: commands".
#  1. test-root: the root module's tests with redlockrueidis's,
#     cmd/redlock's, redlockotel's and bench's (./... stops at nested
#     modules: their tests run from their own dirs), four processes at a
#     time (scripts/test-pool.sh).
#  2. test-chaos, after them: the chaos harness's scenarios on local
#     processes, two groups side by side (each on masters of its own), and
#     the chaos module's other tests. Its verdicts include timing (highly
#     available: no stretch of a fault over 100 ms without an acquisition;
#     a renewal inside a fault; acquisitions after a gated restart):
#     beside the root's tests, a CI-like run here missed three (shard-
#     pause's gap, TestCommandRunsAScenario's 1 s scenario, and a gated
#     restart's, since made robust in the harness), and with the root's
#     tests at nice 10 the root's own timing tests missed instead.
#  3. test-docker alone: the scenarios on Docker containers and the Docker
#     cluster's own tests. Container operations take both cores for a
#     second or two at a time (vmstat: idle 1-5%, half of it system
#     time); beside them, timing checks missed once a run in three runs
#     (redlockrueidis's conformance kit twice, the root's
#     TestReplicaWaitPerBatch once).
test: vet redis-server test-build
	$(MAKE) --no-print-directory -j2 -Oline test-sim test-timed

# The tests that measure time (every one but the simulation's long runs),
# in stages 1 to 3, one after another.
test-timed:
	$(MAKE) --no-print-directory test-root
	$(MAKE) --no-print-directory test-chaos
	$(MAKE) --no-print-directory test-docker

# What the streams of stage 1 do not build themselves, built before any
# test runs (go test -exec /bin/true runs none of them): the simulation's
# binary without -race, the chaos module's test binaries and the command
# the chaos harness runs. On a cold build cache, compiling beside the
# tests took both cores for minutes, and the root's replica-confirmation
# tests missed beside it (TestReplicaWaitPerBatch, TestMarkKeepsTurn/
# replicas: a replica's acknowledgement over 500 ms late). test-root builds
# its own binaries before it runs any (scripts/test-pool.sh), beside only
# the simulation, at nice 19; the later stages then only link.
test-build:
	$(GO) test $(RACE_FLAGS) -count=1 -exec /bin/true -run '^TestSim' .
	$(GO) test -count=1 -exec /bin/true -run '^TestSim' .
	cd chaos && $(GO) test $(RACE_FLAGS) -count=1 -exec /bin/true ./...
	cd cmd/redlock && $(GO) build -o /dev/null .

# The chaos module but its Docker tests.
test-chaos:
	cd chaos && $(GO) test -race -count=1 -timeout 15m -skip '^TestScenariosDocker$$' .

# The chaos module's Docker tests (REDLOCK_REQUIRE_DOCKER=1: they fail
# without an engine rather than skip).
test-docker:
	cd chaos && $(GO) test -race -count=1 -timeout 15m -run '^TestScenariosDocker$$' .
	cd chaos && $(GO) test -race -count=1 -timeout 15m ./cluster/...

# The root module and the nested ones but chaos/: their test binaries
# built once, then run by POOL_WORKERS processes at a time, each taking
# the next item (scripts/test-pool.sh says why): the nested modules'
# packages (the longest first: redlockrueidis's conformance kit), the root
# module's other packages, then the root package's tests in 16 parts (4
# per worker) of about equal length by scripts/test-times.txt. Four at a time, the CPU is busy (vmstat: idle 0-4%) and the
# simulation, at nice 19, gets the rest. -test.parallel 12: the tests that
# call t.Parallel wait out masters' restart gates (seconds asleep each);
# they run together at the end of their part.
POOL_MODULES = redlockrueidis cmd/redlock redlockotel bench
POOL_WORKERS = 4
TIMES_OUT ?=

# The seconds each of the root package's tests took in a run of test-root,
# which test-pool.sh reads to make its parts of about equal length: run it
# again when tests came or grew (a test it does not list counts as the
# median).
test-times:
	$(MAKE) --no-print-directory test-root TIMES_OUT=$(CURDIR)/scripts/test-times.txt
test-root:
	GO=$(GO) WORKERS=$(POOL_WORKERS) TIMES_OUT=$(TIMES_OUT) SKIP='$(SIM_TESTS)' MODULES="$(POOL_MODULES)" bash scripts/test-pool.sh $(RACE_FLAGS) -- -test.count=1 -test.timeout=15m -test.parallel=12

# The simulation's tests under -race (their default schedules: 100, 40 and
# 40), then again without -race, which costs them ten times the CPU:
# thousands of schedules (sim_test.go), at nice 19.
test-sim:
	nice -n 19 $(GO) test $(RACE_FLAGS) -count=1 -timeout 10m -run '$(SIM_TESTS)' .
	nice -n 19 $(GO) test -count=1 -timeout 10m -run 'TestSim$$' . -sim.schedules=$(SIM_SCHEDULES)
	nice -n 19 $(GO) test -count=1 -timeout 10m -run 'TestSimSem$$|TestSimRW$$' . -sim.schedules=$(SIM_SEM_SCHEDULES) -sim.rw.schedules=$(SIM_RW_SCHEDULES)

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
