package redlockrueidis_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/redlockrueidis"
)

// A Redlock over three masters reached through rueidis clients, made as
// the README says: ForceSingleClient, so that a master down at start still
// gives a client (with the dial's error); DisableCache; a dial timeout.
func ExampleNewNode() {
	var nodes []redlock.Node
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		opt := rueidis.ClientOption{InitAddress: []string{addr},
			ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: time.Second}}
		c, err := rueidis.NewClient(opt)
		if c == nil {
			fmt.Println(err)
			return
		}
		defer c.Close()
		nodes = append(nodes, redlockrueidis.NewNode(c, opt))
	}
	rl, err := redlock.New(nodes, redlock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	ctx := context.Background()
	lock, err := rl.Lock(ctx, "order:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(ctx)
	// ... work, and finish before lock.Until()
}
