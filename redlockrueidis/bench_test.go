package redlockrueidis_test

import (
	"context"
	"testing"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/redistest"
)

// BenchmarkExec is one Exec of the batch an uncontended lock sends a
// master, a SET NX PX and then a release script, through each kind of
// Node: what the adapter costs beside the go-redis one (allocs/op).
func BenchmarkExec(b *testing.B) {
	s := redistest.StartServerT(b, redistest.Options{Args: []string{"--save", ""}})
	const release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
	for _, kind := range []struct {
		name string
		node func(testing.TB, string) redlock.Node
	}{{"go-redis", goredisNode}, {"rueidis", rueidisNode}} {
		b.Run("node="+kind.name, func(b *testing.B) {
			n := kind.node(b, s.Addr())
			key, value, ttl := "bench:"+kind.name, "0123456789abcdefghijkl", int64(10000)
			set := &redlock.Command{Args: make([]any, 0, 8)}
			del := &redlock.Command{Args: make([]any, 0, 8)}
			cmds := []*redlock.Command{set, del}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				set.Args = append(set.Args[:0], "set", key, value, "px", ttl, "nx")
				set.Key, set.Keys = 1, 1
				del.Args = append(del.Args[:0], "eval", release, int64(1), key, value)
				del.Key, del.Keys = 3, 1
				n.Exec(ctx, cmds)
				if set.Err != nil || set.Reply != "OK" || del.Err != nil || del.Reply != int64(1) {
					b.Fatalf("SET %#v %v; release %#v %v", set.Reply, set.Err, del.Reply, del.Err)
				}
			}
		})
	}
}
