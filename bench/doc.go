// Package bench compares redlock, over go-redis clients with NewNode
// (lib=redlock), with its peers — go-redsync/redsync v4 (lib=redsync, over the
// go-redis v9 adapter) and bsm/redislock (lib=redislock, one master) — with
// the floor of one master spoken to by raw go-redis (lib=floor), and with the
// wire floor (lib=wire: the round trips to every master and nothing else),
// across node counts, over real redis-server masters that the benchmarks
// start themselves.
//
// It is a module of its own so that the peers never enter the main go.mod.
// Its module path lies under github.com/redlock/redlock, so Go's internal
// rule (which is by import path) lets it use internal/redistest and
// internal/faultproxy: the same masters and the same fault proxy as the
// library's own tests, for every library measured.
//
// Run it with `go run ./cmd/report` (see README.md), which runs the suite as
// interleaved passes of -count 1, or
//
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench . -benchmem -count 1; done | tee new.txt
//	benchstat -col /lib new.txt
package bench
