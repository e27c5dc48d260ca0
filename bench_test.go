package redlock

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkLockUnlock measures one Lock and Unlock of a key on five local
// masters, with and without fencing; the ratio is the cost of the second
// round of a fenced acquire.
func BenchmarkLockUnlock(b *testing.B) {
	for _, fencing := range []bool{false, true} {
		name := "nodes=5/fencing=off"
		var opts []Option
		if fencing {
			name = "nodes=5/fencing=on"
			opts = append(opts, WithFencing())
		}
		b.Run(name, func(b *testing.B) {
			r := newRedlock(b, nodesOf(b, clients(b, masters.Addrs())), opts...)
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

// BenchmarkLockUnlockOne is BenchmarkLockUnlock on one master.
func BenchmarkLockUnlockOne(b *testing.B) {
	r := newRedlock(b, nodesOf(b, clients(b, masters.Addrs()[:1])))
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
}
