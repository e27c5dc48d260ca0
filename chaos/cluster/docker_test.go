package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"github.com/redis/go-redis/v9"
)

// needDocker skips the test when no Docker engine answers, unless
// REDLOCK_REQUIRE_DOCKER=1 makes that a failure.
func needDocker(t *testing.T) {
	t.Helper()
	if err := DockerAvailable(); err != nil {
		if os.Getenv("REDLOCK_REQUIRE_DOCKER") == "1" {
			t.Fatalf("REDLOCK_REQUIRE_DOCKER=1 but: %v", err)
		}
		t.Skipf("no Docker: %v", err)
	}
}

// newCluster starts a cluster and removes it when the test ends.
func newCluster(t *testing.T, opts Options) *Docker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	d, err := NewDocker(ctx, opts)
	if err != nil {
		t.Fatalf("NewDocker(%+v): %v", opts, err)
	}
	t.Logf("NewDocker(N=%d, persistence=%v) with %s: %v; addrs %v",
		opts.N, opts.Persistence, d.image, time.Since(start), d.Addrs())
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// client returns a go-redis client with 200 ms timeouts and no retries, so
// that a fault shows in the first reply.
func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		DialTimeout:     200 * time.Millisecond,
		ReadTimeout:     200 * time.Millisecond,
		WriteTimeout:    200 * time.Millisecond,
		MaxRetries:      -1,
		DialerRetries:   1,
		DisableIdentity: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// timed runs f and reports how long it took.
func timed(t *testing.T, what string, f func() error) {
	t.Helper()
	start := time.Now()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s: %v", what, time.Since(start))
}

// wantTimeout checks that GET fails by timing out: not at once with an
// error, and not with a reply.
func wantTimeout(t *testing.T, c *redis.Client, what string) {
	t.Helper()
	start := time.Now()
	err := c.Get(context.Background(), "k").Err()
	took := time.Since(start)
	if !isTimeout(err) || took < 150*time.Millisecond {
		t.Fatalf("%s: GET = %v after %v, want a timeout after ~200ms", what, err, took)
	}
	t.Logf("%s: GET: %v after %v", what, err, took)
}

func set(t *testing.T, c *redis.Client, key, val string) {
	t.Helper()
	if err := c.Set(context.Background(), key, val, 0).Err(); err != nil {
		t.Fatalf("SET %s at %s: %v", key, c.Options().Addr, err)
	}
}

// get returns the value of key, "" when there is none.
func get(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s at %s: %v", key, c.Options().Addr, err)
	}
	return v
}

// labelled lists the containers and networks with a label filter.
func labelled(t *testing.T, filter string) (containers, networks int) {
	t.Helper()
	pool, err := dockertest.NewPool("")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := pool.Client.ListContainers(dc.ListContainersOptions{
		All: true, Filters: map[string][]string{"label": {filter}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := pool.Client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {filter: true}})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs), len(ns)
}

func TestDockerFaults(t *testing.T) {
	needDocker(t)
	d := newCluster(t, Options{N: 3})
	addrs := d.Addrs()
	cs := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		cs[i] = client(t, addr)
		set(t, cs[i], "k", addr)
		if got := get(t, cs[i], "k"); got != addr {
			t.Fatalf("GET k at %s = %q, want %q", addr, got, addr)
		}
	}

	timed(t, "Kill(1)", func() error { return d.Kill(1) })
	if err := cs[1].Get(context.Background(), "k").Err(); err == nil {
		t.Fatal("GET on a killed master succeeded")
	} else {
		t.Logf("killed master: open connection: %v", err)
	}
	if err := cs[1].Get(context.Background(), "k").Err(); err == nil {
		t.Fatal("GET on a killed master succeeded")
	} else {
		t.Logf("killed master: new connection: %v", err)
	}
	if err := d.Kill(1); err != nil {
		t.Fatalf("Kill of a killed master: %v", err)
	}
	timed(t, "Start(1)", func() error { return d.Start(1) })
	if got := get(t, cs[1], "k"); got != "" {
		t.Fatalf("without persistence, k survived a kill: %q", got)
	}
	set(t, cs[1], "k", "after-start")

	timed(t, "Pause(0)", func() error { return d.Pause(0) })
	wantTimeout(t, cs[0], "paused")
	timed(t, "Resume(0)", func() error { return d.Resume(0) })
	if got := get(t, cs[0], "k"); got != addrs[0] {
		t.Fatalf("after Resume, GET k = %q, want %q", got, addrs[0])
	}

	timed(t, "Partition(2)", func() error { return d.Partition(2) })
	wantTimeout(t, cs[2], "partitioned")
	wantTimeout(t, cs[2], "partitioned, again")
	timed(t, "Heal(2)", func() error { return d.Heal(2) })
	if got := get(t, cs[2], "k"); got != addrs[2] {
		t.Fatalf("after Heal, GET k = %q, want %q", got, addrs[2])
	}

	// Faults compose: a partitioned master restarted empty stays partitioned.
	if err := d.Partition(1); err != nil {
		t.Fatal(err)
	}
	timed(t, "Restart(1, false) while partitioned", func() error { return d.Restart(1, false) })
	wantTimeout(t, cs[1], "restarted while partitioned")
	if err := d.Heal(1); err != nil {
		t.Fatal(err)
	}
	if got := get(t, cs[1], "k"); got != "" {
		t.Fatalf("Restart(1, false) kept k = %q", got)
	}

	// A master killed while partitioned starts partitioned.
	if err := d.Partition(0); err != nil {
		t.Fatal(err)
	}
	if err := d.Kill(0); err != nil {
		t.Fatal(err)
	}
	if err := d.Pause(0); err == nil {
		t.Fatal("Pause of a killed master succeeded")
	}
	timed(t, "Start(0) while partitioned", func() error { return d.Start(0) })
	wantTimeout(t, cs[0], "started while partitioned")
	timed(t, "Heal(0)", func() error { return d.Heal(0) })
	if got := get(t, cs[0], "k"); got != "" {
		t.Fatalf("without persistence, k survived a kill: %q", got)
	}

	for _, i := range []int{-1, 3} {
		if err := d.Kill(i); err == nil {
			t.Fatalf("Kill(%d) of 3 masters succeeded", i)
		}
	}

	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n, m := labelled(t, labelCluster+"="+d.id); n != 0 || m != 0 {
		t.Fatalf("after Close, %d containers and %d networks of the cluster remain", n, m)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := d.Kill(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Kill after Close = %v, want ErrClosed", err)
	}
}

func TestDockerPersistence(t *testing.T) {
	needDocker(t)
	d := newCluster(t, Options{N: 1, Persistence: true})
	addr := d.Addrs()[0]
	c := client(t, addr)
	set(t, c, "k", "v")

	timed(t, "Kill(0)", func() error { return d.Kill(0) })
	timed(t, "Start(0)", func() error { return d.Start(0) })
	if got := get(t, c, "k"); got != "v" {
		t.Fatalf("with persistence, after Kill+Start GET k = %q, want v", got)
	}

	timed(t, "Restart(0, true)", func() error { return d.Restart(0, true) })
	if got := get(t, c, "k"); got != "v" {
		t.Fatalf("after Restart(0, true) GET k = %q, want v", got)
	}

	// A paused master restarts too.
	if err := d.Pause(0); err != nil {
		t.Fatal(err)
	}
	timed(t, "Restart(0, false)", func() error { return d.Restart(0, false) })
	if got := d.Addrs()[0]; got != addr {
		t.Fatalf("Restart moved the master from %s to %s", addr, got)
	}
	if got := get(t, c, "k"); got != "" {
		t.Fatalf("after Restart(0, false) GET k = %q, want nothing", got)
	}
	aof, err := c.ConfigGet(context.Background(), "appendfsync").Result()
	if err != nil || aof["appendfsync"] != "always" {
		t.Fatalf("appendfsync = %v, %v; want always", aof, err)
	}
}

// TestNewDockerCleansUp makes NewDocker fail after it created its network
// and containers (an image with no redis-server: start fails) and checks
// that nothing of it remains.
func TestNewDockerCleansUp(t *testing.T) {
	needDocker(t)
	pool, err := dockertest.NewPool("")
	if err != nil {
		t.Fatal(err)
	}
	const empty = "redlock-chaos-empty:test"
	dir := t.TempDir()
	tarPath := dir + "/empty.tar"
	if err := writeRootfsFile(tarPath, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	repo, tag := splitRef(empty)
	if err := pool.Client.ImportImage(dc.ImportImageOptions{
		Repository: repo, Tag: tag, Source: "-", InputStream: f, OutputStream: io.Discard,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Client.RemoveImage(empty) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := NewDocker(ctx, Options{N: 2, Image: empty})
	if err == nil {
		d.Close()
		t.Fatal("NewDocker with an image without redis-server succeeded")
	}
	t.Logf("NewDocker: %v", err)
	if !strings.Contains(err.Error(), "start container") {
		t.Fatalf("NewDocker failed before it made its containers: %v", err)
	}
	if n, m := labelled(t, labelOwner+"="+ownerLabel()); n != 0 || m != 0 {
		t.Fatalf("after a failed NewDocker, %d containers and %d networks remain", n, m)
	}
}

func TestNewDockerRejectsN(t *testing.T) {
	if _, err := NewDocker(context.Background(), Options{N: 0}); err == nil {
		t.Fatal("NewDocker accepted N=0")
	}
}

// TestPrune leaves a container and a network labelled as made by a process
// that is gone, and checks that Prune removes them and spares a live
// cluster.
func TestPrune(t *testing.T) {
	needDocker(t)
	live := newCluster(t, Options{N: 1})
	pool, err := dockertest.NewPool("")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	dead := map[string]string{Label: "1", labelCluster: "prune-test", labelOwner: host + "/2147483646"}
	t.Cleanup(func() {
		_ = removeLabelled(context.Background(), pool.Client, labelCluster+"=prune-test", nil)
	})
	if _, err := pool.CreateNetwork("redlock-chaos-prune-test", func(o *dc.CreateNetworkOptions) {
		o.Labels = dead
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Client.CreateContainer(dc.CreateContainerOptions{
		Name:   "redlock-chaos-prune-test-0",
		Config: &dc.Config{Image: live.image, Entrypoint: []string{"redis-server"}, Labels: dead},
	}); err != nil {
		t.Fatal(err)
	}

	if err := Prune(context.Background()); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if n, m := labelled(t, labelCluster+"=prune-test"); n != 0 || m != 0 {
		t.Fatalf("after Prune, %d containers and %d networks of a dead owner remain", n, m)
	}
	if n, m := labelled(t, labelCluster+"="+live.id); n != 1 || m != 1 {
		t.Fatalf("Prune removed a live cluster: %d containers and %d networks remain, want 1 and 1", n, m)
	}
	if got := get(t, client(t, live.Addrs()[0]), "k"); got != "" {
		t.Fatalf("GET k on a fresh master = %q", got)
	}
}
