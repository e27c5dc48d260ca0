package redlock

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkLockUnlock measures one Lock and Unlock of a key on one and on
// five local masters, with and without fencing; the ratio is the cost of the
// second round of a fenced acquire. (bench/ compares with the peers.)
func BenchmarkLockUnlock(b *testing.B) {
	for _, n := range []int{1, 5} {
		for _, fencing := range []bool{false, true} {
			var opts []Option
			if fencing {
				opts = append(opts, WithFencing())
			}
			b.Run(fmt.Sprintf("nodes=%d/fencing=%v", n, fencing), func(b *testing.B) {
				r := newRedlock(b, nodesOf(b, clients(b, masters.Addrs()[:n])), opts...)
				key := fmt.Sprintf("%s:%d", b.Name(), keySeq.Add(1))
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					l, err := r.Lock(ctx, key)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
