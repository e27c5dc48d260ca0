package redlockotel_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/redlockotel"
)

func ExampleNewObserver() {
	var nodes []redlock.Node
	for _, addr := range strings.Split(os.Getenv("REDLOCK_MASTERS"), ",") {
		nodes = append(nodes, redlock.NewNode(redis.NewClient(&redis.Options{Addr: addr})))
	}
	// In a service: redlockotel.NewObserver() reports to the global
	// providers. Here a ManualReader shows what was recorded.
	reader := sdkmetric.NewManualReader()
	obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		panic(err)
	}
	rl, _ := redlock.New(nodes, redlock.WithObserver(obs))
	defer rl.Close()
	ctx := context.Background()
	lock, _ := rl.Lock(ctx, "invoice:8")
	lock.Unlock(ctx)

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			fmt.Println(m.Name, sum.DataPoints[0].Value)
		}
	}
	// Output:
	// redlock.acquires 1
	// redlock.releases 1
	// redlock.locks.held 0
}
