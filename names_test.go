package redlock

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestNameOfClients: NewNode and NewFailoverNode name each kind of client by
// its addresses, never by a pointer, and in an order-independent way; the
// clients are made without servers (go-redis dials lazily).
func TestNameOfClients(t *testing.T) {
	closeLater := func(c interface{ Close() error }) { t.Cleanup(func() { c.Close() }) }
	failover := func(master string, db int, sentinels ...string) Node {
		o := &redis.FailoverOptions{MasterName: master, SentinelAddrs: sentinels, DB: db, Password: "topsecret"}
		c := redis.NewFailoverClient(o)
		closeLater(c)
		return NewFailoverNode(c, o)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"h2:7001", "h1:7000", "h2:7001"}, Password: "topsecret"})
	closeLater(cluster)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"b": "h2:6379", "a": "h1:6379"}, DB: 2, Password: "topsecret"})
	closeLater(ring)
	plain := redis.NewClient(&redis.Options{Addr: "h:6379", DB: 3, Password: "topsecret"})
	closeLater(plain)
	unnamed := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m1", SentinelAddrs: []string{"s1:26379"}})
	closeLater(unnamed)

	for _, tc := range []struct {
		node Node
		want string
	}{
		{NewNode(plain), "h:6379/3"},
		{NewNode(cluster), "cluster:h1:7000,h2:7001"},
		{NewNode(ring), "ring:a=h1:6379,b=h2:6379/2"},
		{failover("mymaster", 0, "s2:26379", "s1:26379"), "sentinel:mymaster@s1:26379,s2:26379/0"},
		{failover("other", 1, "s1:26379"), "sentinel:other@s1:26379/1"},
		{NewNode(unnamed), "sentinel:?/0"},
		// Not a failover client: named by what it talks to, not by opt.
		{NewFailoverNode(plain, &redis.FailoverOptions{MasterName: "m"}), "h:6379/3"},
	} {
		if got := tc.node.Name(); got != tc.want {
			t.Errorf("Name() = %q; want %q", got, tc.want)
		}
		if n := tc.node.Name(); strings.Contains(n, "topsecret") || strings.Contains(n, "0x") {
			t.Errorf("Name() = %q shows a password or a pointer", n)
		}
	}
	if NewFailoverNode(nil, &redis.FailoverOptions{}) != nil || NewFailoverNode(unnamed, nil) != nil {
		t.Error("NewFailoverNode with a nil client or options is not nil")
	}

	// Two Sentinel-managed masters and a plain one: three masters.
	a, b := failover("m1", 0, "s1:26379"), failover("m2", 0, "s1:26379")
	r, err := New([]Node{a, b, NewNode(plain)})
	if err != nil {
		t.Fatalf("New(two Sentinel-managed masters and a plain one): %v", err)
	}
	r.Close()
	// The same Sentinel-managed master twice, its Sentinels in another order.
	_, err = New([]Node{failover("m1", 0, "s1:26379", "s2:26379"), failover("m1", 0, "s2:26379", "s1:26379"), NewNode(plain)})
	if ce := (*ConfigError)(nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "same master sentinel:m1@s1:26379,s2:26379/0") {
		t.Errorf("New(the same Sentinel-managed master twice) = %v; want a *ConfigError naming it", err)
	}
	// Failover clients NewNode cannot name: New says what to do.
	unnamed2 := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m2", SentinelAddrs: []string{"s1:26379"}})
	closeLater(unnamed2)
	_, err = New([]Node{NewNode(unnamed), NewNode(unnamed2), NewNode(plain)})
	if err == nil || !strings.Contains(err.Error(), "NewFailoverNode") || strings.Contains(err.Error(), "same master") {
		t.Errorf("New(two failover clients through NewNode) = %v; want an error pointing to NewFailoverNode", err)
	}
}
