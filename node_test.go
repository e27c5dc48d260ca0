package redlock

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNodeSendsWhatTheRequestSays: a Node wrapper may change a request the
// lane boxed for every master (a key prefix, say): the go-redis Node sends
// the request as it now stands. A request of an unknown Op is not sent.
func TestNodeSendsWhatTheRequestSays(t *testing.T) {
	cs := clients(t, masters.Addrs()[:1])
	inner := NewNode(cs[0])
	prefixed := NodeFunc(inner.Name(), func(ctx context.Context, q *Request) {
		q.Key, q.Value, q.TTL = "tenant:"+q.Key, q.Value+"!", 2*q.TTL
		inner.Exec(ctx, []*Request{q})
	})
	r := newRedlock(t, []Node{prefixed})
	key := testKey(t)
	l, err := r.TryLock(context.Background(), key, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v := cs[0].Get(ctx, "tenant:"+key).Val(); v != l.Value()+"!" {
		t.Errorf("tenant:%s holds %q, want the wrapper's value %q", key, v, l.Value()+"!")
	}
	if pttl := cs[0].PTTL(ctx, "tenant:"+key).Val(); pttl <= time.Minute {
		t.Errorf("PTTL %v, want the wrapper's doubled TTL", pttl)
	}
	if n := cs[0].Exists(ctx, key).Val(); n != 0 {
		t.Errorf("the unprefixed key %s was set", key)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	before := cs[0].Info(ctx, "stats").Val()
	q := &Request{Op: Op(99), Key: key}
	inner.Exec(ctx, []*Request{q})
	if q.Err == nil || q.OK || !strings.Contains(q.Err.Error(), "unknown request") {
		t.Errorf("unknown Op: OK %v, err %v; want an error saying so", q.OK, q.Err)
	}
	if after := cs[0].Info(ctx, "stats").Val(); statLine(after, "total_commands_processed") != statLine(before, "total_commands_processed")+1 {
		t.Errorf("the unknown request reached the master (commands before %d, after %d; one is the INFO)",
			statLine(before, "total_commands_processed"), statLine(after, "total_commands_processed"))
	}
}

// statLine reads an integer field of an INFO reply.
func statLine(info, field string) int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n := 0
			for _, c := range v {
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return -1
}
