package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlockotel"
)

var masters *redistest.Cluster

var runs atomic.Int64

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(redistest.Main(m, 2, redistest.Options{}, func(c *redistest.Cluster) {
		masters = c
		os.Setenv("REDLOCK_MASTERS", strings.Join(c.Addrs(), ",")) // for the example
	}))
}

// setup returns a Redlock over three masters: two shared ones behind
// proxies that add 40 ms to every round trip, and one of the test's own,
// with the function that kills it. So a phase hears first from the third
// master (its reply, or at once its error once killed), and the counts of
// every phase are the same from run to run.
func setup(t *testing.T, opts ...redlock.Option) (r *redlock.Redlock, direct []*redis.Client, kill func()) {
	spare := redistest.StartT(t, 1, redistest.Options{})
	var addrs []string
	for _, a := range masters.Addrs() {
		px, err := faultproxy.New(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		px.SetLatency(40 * time.Millisecond)
		addrs = append(addrs, px.Addr())
	}
	addrs = append(addrs, spare.Addrs()[0])
	var nodes []redlock.Node
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, redlock.NewNode(c))
	}
	for _, a := range masters.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { c.Close() })
		direct = append(direct, c)
	}
	r, err := redlock.New(nodes, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, direct, func() {
		if err := spare.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScriptedRun takes, refuses, extends, releases and loses locks, with
// one master killed halfway, and checks every metric and span.
func TestScriptedRun(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	r, _, kill := setup(t, redlock.WithObserver(obs))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "test")
	run := fmt.Sprintf("%s:%d", t.Name(), runs.Add(1)) // keys of this run only (-count)
	k1, k2, k3, k4 := run+":1", run+":2", run+":3", run+":4"

	l1, err := r.Lock(ctx, k1, redlock.WithFencing()) // obtained
	must(t, err)
	if _, err := r.TryLock(ctx, k1); !errors.Is(err, redlock.ErrNotObtained) { // refused
		t.Fatal(err)
	}
	if _, err := r.Lock(ctx, k1, redlock.WithRetry(2)); !errors.Is(err, redlock.ErrNotObtained) { // 2 attempts
		t.Fatal(err)
	}
	must(t, l1.Extend(ctx, 5*time.Second))
	kill()
	must(t, l1.Unlock(ctx)) // the killed master fails
	must(t, r.Do(ctx, k2, func(context.Context) error { return nil }))
	_, err = r.Lock(ctx, k3, redlock.WithAutoExtend()) // lost when r closes
	must(t, err)
	_, err = r.Lock(ctx, k4) // still held at the end
	must(t, err)
	must(t, r.Close())
	parent.End()

	var rm metricdata.ResourceMetrics
	must(t, reader.Collect(context.Background(), &rm))
	got := flatten(rm)
	want := map[string]string{
		"redlock.acquires{redlock.call=Lock,redlock.outcome=obtained}":                "4",
		"redlock.acquires{redlock.call=Lock,redlock.outcome=not_obtained}":            "1",
		"redlock.acquires{redlock.call=TryLock,redlock.outcome=not_obtained}":         "1",
		"redlock.acquire.attempts{redlock.call=Lock,redlock.outcome=obtained}":        "count=4 sum=4",
		"redlock.acquire.attempts{redlock.call=Lock,redlock.outcome=not_obtained}":    "count=1 sum=2",
		"redlock.acquire.attempts{redlock.call=TryLock,redlock.outcome=not_obtained}": "count=1 sum=1",
		"redlock.acquire.duration{redlock.call=Lock,redlock.outcome=obtained}":        "count=4",
		"redlock.acquire.duration{redlock.call=Lock,redlock.outcome=not_obtained}":    "count=1",
		"redlock.acquire.duration{redlock.call=TryLock,redlock.outcome=not_obtained}": "count=1",
		"redlock.extends{redlock.call=Extend,redlock.outcome=ok}":                     "1",
		"redlock.releases{redlock.outcome=ok}":                                        "2",
		"redlock.locks.held{}":                                                        "1",
		"redlock.locks.lost{}":                                                        "1",
		// After the kill: l1's release, k2's acquire and release, k3's and k4's acquires.
		"redlock.master.failures{redlock.master=" + r.Nodes()[2].Name() + ",redlock.phase=acquire}": "3",
		"redlock.master.failures{redlock.master=" + r.Nodes()[2].Name() + ",redlock.phase=release}": "2",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %q", k, v)
		}
	}

	// Spans: one per call, under the caller's (Do's Lock and Unlock under
	// Do's); an event per acquire attempt or other phase, and one per master
	// reply heard before the decision.
	var lines []string
	byID := map[string]string{}
	for _, s := range spans.Ended() {
		byID[s.SpanContext().SpanID().String()] = s.Name()
	}
	for _, s := range spans.Ended() {
		if s.Name() == "test" {
			continue
		}
		replies, phases := 0, []string{}
		for _, e := range s.Events() {
			if e.Name == "redlock.reply" {
				replies++
			} else {
				phases = append(phases, e.Name)
			}
		}
		attrs := map[attribute.Key]string{}
		for _, a := range s.Attributes() {
			attrs[a.Key] = a.Value.String()
		}
		lines = append(lines, fmt.Sprintf("%s parent=%s key=%s counts=%s/%s/%s of quorum %s status=%s phases=%s replies=%d fenced=%v",
			s.Name(), byID[s.Parent().SpanID().String()], strings.TrimPrefix(attrs["redlock.key"], run),
			attrs["redlock.succeeded"], attrs["redlock.refused"], attrs["redlock.failed"], attrs["redlock.quorum"],
			s.Status().Code, strings.Join(phases, ","), replies, attrs["redlock.fence"] != ""))
	}
	wantSpans := []string{
		"redlock.Lock parent=test key=:1 counts=2/0/0 of quorum 2 status=Unset phases=redlock.acquire replies=2 fenced=true",
		"redlock.TryLock parent=test key=:1 counts=0/2/0 of quorum 2 status=Error phases=redlock.acquire replies=2 fenced=false",
		"redlock.Lock parent=test key=:1 counts=0/2/0 of quorum 2 status=Error phases=redlock.acquire,redlock.subscribe,redlock.acquire replies=7 fenced=false",
		"redlock.Extend parent=test key=:1 counts=2/0/0 of quorum 2 status=Unset phases=redlock.extend replies=2 fenced=false",
		"redlock.Unlock parent=test key=:1 counts=2/0/1 of quorum 2 status=Unset phases=redlock.release replies=3 fenced=false",
		"redlock.Lock parent=redlock.Do key=:2 counts=2/0/1 of quorum 2 status=Unset phases=redlock.acquire replies=3 fenced=false",
		"redlock.Unlock parent=redlock.Do key=:2 counts=2/0/1 of quorum 2 status=Unset phases=redlock.release replies=3 fenced=false",
		"redlock.Do parent=test key=:2 counts=// of quorum  status=Unset phases= replies=0 fenced=false",
		"redlock.Lock parent=test key=:3 counts=2/0/1 of quorum 2 status=Unset phases=redlock.acquire replies=3 fenced=false",
		"redlock.Lock parent=test key=:4 counts=2/0/1 of quorum 2 status=Unset phases=redlock.acquire replies=3 fenced=false",
	}
	if strings.Join(lines, "\n") != strings.Join(wantSpans, "\n") {
		t.Errorf("spans:\n\t%s\nwant\n\t%s", strings.Join(lines, "\n\t"), strings.Join(wantSpans, "\n\t"))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// flatten maps "name{attr=value,...}" to a sum's value or a histogram's
// count (and sum, for the attempts).
func flatten(rm metricdata.ResourceMetrics) map[string]string {
	out := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			key := func(set attribute.Set) string {
				var kv []string
				for _, a := range set.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.String())
				}
				sort.Strings(kv)
				return m.Name + "{" + strings.Join(kv, ",") + "}"
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] = fmt.Sprint(p.Value)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] = fmt.Sprintf("count=%d sum=%d", p.Count, p.Sum)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] = fmt.Sprintf("count=%d", p.Count)
				}
			default:
				out[m.Name] = fmt.Sprintf("unexpected type %T", d)
			}
		}
	}
	return out
}
