# The README's commands. `make test` is what CI runs.
GO ?= go

.PHONY: test vet soak
test: vet
	# Packages one at a time (-p 1): on 2 cores the root package's tests
	# running alongside the chaos scenarios starved them once (no acquire both
	# started and ended inside a 1.5 s fault).
	$(GO) test -race -count=1 -timeout 15m -p 1 ./...

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# The simulation (sim_test.go) for longer than make test runs it: schedules
# from a random seed until SOAK has passed; a failure prints its seed.
SOAK ?= 10m
soak:
	$(GO) test -race -count=1 -timeout 0 -run 'TestSim$$' . -sim.soak=$(SOAK)
