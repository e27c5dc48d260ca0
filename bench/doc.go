// Package bench compares redlock with its peers — go-redsync/redsync v4 (over
// the go-redis v9 adapter) and bsm/redislock (one master) — and with the
// floor of one master spoken to by raw go-redis, across node counts, over real
// redis-server masters that the benchmarks start themselves.
//
// It is a module of its own so that the peers never enter the main go.mod.
// Its module path lies under github.com/redlock/redlock, so Go's internal
// rule (which is by import path) lets it use internal/redistest and
// internal/faultproxy: the same masters and the same fault proxy as the
// library's own tests, for every library measured.
//
// Run it with `go run ./cmd/report` (see README.md) or
//
//	go test -run '^$' -bench . -benchmem -count 6 | tee new.txt
//	benchstat -col /lib new.txt
package bench
