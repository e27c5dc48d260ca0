package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestExtendBatch: the pipelined extend reloads its script after SCRIPT
// FLUSH, extends only keys holding the value, and a BatchExtender that
// answers with the wrong number of results fails its requests, not the
// process.
func TestExtendBatch(t *testing.T) {
	cs := clients(t, masters.Addrs()[:1])
	ctx := context.Background()
	n := NewNode(cs[0])
	mine, gone, theirs := testKey(t), testKey(t), testKey(t)
	cs[0].Set(ctx, mine, "v", time.Second)
	cs[0].Set(ctx, theirs, foreign, time.Second)
	if err := cs[0].ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []ExtendRequest{{mine, "v", time.Minute}, {gone, "v", time.Minute}, {theirs, "v", time.Minute}}
	ok, errs := n.(BatchExtender).ExtendBatch(ctx, reqs)
	if len(ok) != 3 || len(errs) != 3 || !ok[0] || ok[1] || ok[2] || errors.Join(errs...) != nil {
		t.Fatalf("ExtendBatch after SCRIPT FLUSH: ok %v, errs %v; want [true false false], no errors", ok, errs)
	}
	if pttl := cs[0].PTTL(ctx, mine).Val(); pttl < 50*time.Second {
		t.Errorf("PTTL %v after extending to a minute", pttl)
	}
	if pttl := cs[0].PTTL(ctx, theirs).Val(); pttl > time.Second {
		t.Errorf("another holder's key extended: PTTL %v", pttl)
	}
	if v := cs[0].Exists(ctx, gone).Val(); v != 0 {
		t.Errorf("ExtendBatch created a key that was gone")
	}

	ok, errs = extendOn(ctx, brokenBatch{n}, reqs)
	if len(ok) != 3 || len(errs) != 3 || errs[0] == nil || ok[0] {
		t.Errorf("extendOn over a broken BatchExtender: ok %v, errs %v; want 3 failures", ok, errs)
	}
}

// brokenBatch is a BatchExtender that returns no results at all.
type brokenBatch struct{ Node }

func (brokenBatch) ExtendBatch(context.Context, []ExtendRequest) ([]bool, []error) { return nil, nil }
