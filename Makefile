# The README's commands. `make test` is what CI runs.
GO ?= go

.PHONY: test vet
test: vet
	$(GO) test -race -count=1 -timeout 15m ./...
	# The root package again, every test's masters as DirectNodes.
	REDLOCK_TEST_NODE=direct $(GO) test -race -count=1 -timeout 15m .

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
