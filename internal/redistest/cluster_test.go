package redistest

import (
	"fmt"
	"testing"
)

func TestClusterServersAreIndependent(t *testing.T) {
	c := StartT(t, 3, Options{})
	addrs := c.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs() = %v; want 3", addrs)
	}
	seen := map[string]bool{}
	for i, addr := range addrs {
		if seen[addr] {
			t.Fatalf("address %s used twice in %v", addr, addrs)
		}
		seen[addr] = true
		mustSet(t, newClient(t, addr), "k", fmt.Sprint("v", i))
	}
	for i, addr := range addrs {
		mustGet(t, newClient(t, addr), "k", fmt.Sprint("v", i))
	}
}

func TestClusterStopStopsAll(t *testing.T) {
	c, err := Start(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{c.Servers[0].Pid(), c.Servers[1].Pid()}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !pidGone(pid) {
			t.Errorf("pid %d still exists after Cluster.Stop", pid)
		}
	}
}

func TestStartFailsCleanly(t *testing.T) {
	if _, err := Start(0, Options{}); err == nil {
		t.Error("Start(0) succeeded")
	}
	if _, err := Start(2, Options{Args: []string{"--no-such-directive", "x"}}); err == nil {
		t.Error("Start with a bad directive succeeded")
	}
}
