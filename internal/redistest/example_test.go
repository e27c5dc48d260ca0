package redistest_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/internal/redistest"
)

func Example() {
	c, err := redistest.Start(3, redistest.Options{AppendOnly: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Stop()

	ctx := context.Background()
	s := c.Servers[0]
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	client.Set(ctx, "k", "v", 0)

	s.Kill()        // SIGKILL: nothing flushed, but AOF fsyncs every write
	s.Restart(true) // same address, data kept
	fmt.Println(client.Get(ctx, "k").Val())
	s.Restart(false) // same address, data deleted
	fmt.Println(client.Exists(ctx, "k").Val())
	// Output:
	// v
	// 0
}
