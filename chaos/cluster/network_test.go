package cluster

import (
	"net/netip"
	"testing"
)

func TestHostAddrs(t *testing.T) {
	subnet := netip.MustParsePrefix("172.18.0.0/29") // .1 gateway, .7 broadcast
	gw := netip.MustParseAddr("172.18.0.1")
	got, err := hostAddrs(subnet, gw, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].String() != "172.18.0.2" || got[4].String() != "172.18.0.6" {
		t.Fatalf("hostAddrs = %v, want 172.18.0.2 .. 172.18.0.6", got)
	}
	if _, err := hostAddrs(subnet, gw, 6); err == nil {
		t.Fatal("hostAddrs gave 6 masters on a /29 with a gateway")
	}
}
