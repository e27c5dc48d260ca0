package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// createNetwork creates the cluster's private bridge network with a subnet
// written into its IPAM config: Docker gives a container a fixed address (so
// that Heal and Restart keep it) only on a network with a user-configured
// subnet. To pick a subnet that clashes with nothing on this host, it lets
// Docker choose one first (a probe network, removed at once), then creates
// the real network with that subnet. If another network takes the subnet in
// between, it tries again.
func createNetwork(ctx context.Context, pool *dockertest.Pool, name string, labels map[string]string) (_ *dockertest.Network, subnet netip.Prefix, gateway netip.Addr, _ error) {
	var lastErr error
	for range 5 {
		probe, err := pool.CreateNetwork(name, func(o *dc.CreateNetworkOptions) {
			o.Driver = "bridge"
			o.Labels = labels
			o.Context = ctx
		})
		if err != nil {
			return nil, subnet, gateway, fmt.Errorf("create network: %w", err)
		}
		info, err := pool.Client.NetworkInfo(probe.Network.ID)
		if err == nil {
			subnet, gateway, err = ipv4Config(info)
		}
		if rmErr := pool.Client.RemoveNetwork(probe.Network.ID); rmErr != nil {
			return nil, subnet, gateway, errors.Join(err, fmt.Errorf("remove probe network: %w", rmErr))
		}
		if err != nil {
			return nil, subnet, gateway, err
		}
		nw, err := pool.CreateNetwork(name, func(o *dc.CreateNetworkOptions) {
			o.Driver = "bridge"
			o.Labels = labels
			o.Context = ctx
			o.IPAM = &dc.IPAMOptions{
				Driver: "default",
				Config: []dc.IPAMConfig{{Subnet: subnet.String(), Gateway: gateway.String()}},
			}
		})
		if err == nil {
			return nw, subnet, gateway, nil
		}
		lastErr = err
		if !strings.Contains(strings.ToLower(err.Error()), "overlap") {
			break
		}
	}
	return nil, subnet, gateway, fmt.Errorf("create network: %w", lastErr)
}

// ipv4Config returns the IPv4 subnet and gateway Docker gave a network.
func ipv4Config(nw *dc.Network) (netip.Prefix, netip.Addr, error) {
	for _, c := range nw.IPAM.Config {
		subnet, err := netip.ParsePrefix(c.Subnet)
		if err != nil || !subnet.Addr().Is4() {
			continue
		}
		subnet = subnet.Masked()
		gateway, err := netip.ParseAddr(c.Gateway)
		if err != nil {
			gateway = subnet.Addr().Next()
		}
		return subnet, gateway, nil
	}
	return netip.Prefix{}, netip.Addr{}, fmt.Errorf("network %s has no IPv4 subnet (IPAM %+v)", nw.Name, nw.IPAM.Config)
}

// hostAddrs returns n addresses of subnet for the masters, skipping the
// network address and the gateway, or an error when the subnet is too small.
func hostAddrs(subnet netip.Prefix, gateway netip.Addr, n int) ([]netip.Addr, error) {
	addrs := make([]netip.Addr, 0, n)
	for a := subnet.Addr().Next(); len(addrs) < n; a = a.Next() {
		if !subnet.Contains(a.Next()) { // a is the broadcast address
			return nil, fmt.Errorf("subnet %s has room for %d masters, want %d", subnet, len(addrs), n)
		}
		if a != gateway {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}
