# The README's commands. `make test` is what CI runs.
GO ?= go

.PHONY: test vet chaos redis-server soak
test: vet redis-server
	# Packages one at a time (-p 1): on 2 cores the root package's tests
	# running alongside the chaos scenarios starved them once (no acquire both
	# started and ended inside a 1.5 s fault).
	$(GO) test -race -count=1 -timeout 15m -p 1 ./...
	# ./... stops at nested modules: their tests run from their own dirs.
	cd redlockotel && $(GO) test -race -count=1 -timeout 5m ./...
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
	cd redlockotel && $(GO) vet ./...
	cd bench && $(GO) vet ./...

# The simulation (sim_test.go) for longer than make test runs it: schedules
# from a random seed until SOAK has passed; a failure prints its seed.
SOAK ?= 10m
soak:
	$(GO) test -race -count=1 -timeout 0 -run 'TestSim$$' . -sim.soak=$(SOAK)
