package faultproxy_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

func Example() {
	s, err := redistest.StartServer(redistest.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Stop()
	p, err := faultproxy.New(s.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	ctx := context.Background()
	client := redis.NewClient(&redis.Options{
		Addr:        p.Addr(), // talk to the server through the proxy
		MaxRetries:  -1,
		ReadTimeout: 100 * time.Millisecond,
	})
	defer client.Close()

	p.SetLatency(20 * time.Millisecond)
	begin := time.Now()
	client.Ping(ctx)
	fmt.Println("slow:", time.Since(begin) >= 20*time.Millisecond)

	p.SetLatency(0)
	p.Blackhole() // silent partition: requests time out
	fmt.Println("partitioned:", client.Ping(ctx).Err() != nil)

	p.Heal() // new connections work again
	fmt.Println("healed:", client.Ping(ctx).Err() == nil)
	// Output:
	// slow: true
	// partitioned: true
	// healed: true
}
