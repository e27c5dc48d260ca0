package main

import (
	"strings"
	"sync"
	"testing"

	"github.com/redlock/redlock/internal/redistest"
)

// TestCLIOnRedisClusters: exec and status where the three masters are each
// a Redis Cluster of three shards (redis+cluster:// URLs): racing execs run
// their commands one at a time, and status, run under a fenced, owned
// exec, shows the holder on every cluster (listed by its URL), then the
// key free.
func TestCLIOnRedisClusters(t *testing.T) {
	t.Parallel()
	rcs := make([]*redistest.RedisCluster, 3)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range rcs {
		wg.Go(func() {
			rc := redistest.StartRedisClusterT(t, 3, redistest.Options{})
			mu.Lock()
			rcs[i] = rc
			mu.Unlock()
		})
	}
	wg.Wait()
	var urls []string
	for _, rc := range rcs {
		if rc == nil {
			t.FailNow()
		}
		a := rc.Addrs()
		urls = append(urls, "redis+cluster://"+a[0]+"?addr="+a[1]+"&addr="+a[2])
	}
	list := strings.Join(urls, ",")

	runsOneAtATime(t, list)

	name := lockName(t)
	r := runCLI(t, list, "exec", "--fencing", "--ttl", "20s", "--owner", "job-9", name, "--",
		"sh", "-c", `sleep 0.2; exec "$0" status "$1"`, binary, name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"`+name+`" is held by owner job-9 with 1 hold`) || !strings.Contains(r.stdout, "on 3 of 3 masters") {
		t.Errorf("status under exec on cluster masters:\n%s", r.stdout)
	}
	for _, u := range urls {
		if !strings.Contains(r.stdout, u) {
			t.Errorf("status does not list master %s as given:\n%s", u, r.stdout)
		}
	}
	r = runCLI(t, list, "status", name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "is free") {
		t.Errorf("status after exec on cluster masters:\n%s", r.stdout)
	}
}
