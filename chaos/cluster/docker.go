package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"golang.org/x/sync/errgroup"
)

// opTimeout bounds each fault (its Docker calls and the wait for PING).
const opTimeout = 30 * time.Second

// redisPort is the port every master listens on, at its own address.
const redisPort = "6379"

// Docker is a [Cluster] of Redis masters, one container each, on a private
// bridge network the cluster creates. Make one with [NewDocker]; it is safe
// for concurrent use.
//
// Addresses: the host reaches each master at its container IP on that
// network ("172.18.0.2:6379"; no published ports). That works where the Go
// process runs on the Docker host itself (Linux), which routes the bridge
// subnet; not with a remote engine nor Docker Desktop's VM. Each master has
// a fixed IP, kept across Start, Restart and Heal.
//
// Faults, and what a client on the host sees (measured on Docker 20.10,
// Linux 6.x, with raw sockets and with go-redis v9 at 200 ms timeouts):
//
//   - Kill: docker kill (SIGKILL). The container stops and its network
//     namespace goes with it: open connections read EOF at once (the
//     kernel closes the sockets); new connections time out, because
//     nothing answers ARP for the address any more. go-redis notices the
//     dead pooled connection, dials again, and reports "dial tcp ...: i/o
//     timeout". Start is docker start of the same container: same writable
//     layer, same /data.
//   - Restart(i, false): the container is removed and created again with
//     the same name and IP: an empty master at the same address.
//   - Pause: docker pause (cgroup freezer). The kernel still completes the
//     TCP handshake, but nothing answers: "read tcp ...: i/o timeout".
//   - Partition: docker network disconnect; the container keeps only
//     loopback. Requests on open connections ("read tcp ...: i/o
//     timeout") and new connections ("dial tcp ...: i/o timeout") time
//     out. Only a dial that waits longer than about 3 s fails otherwise,
//     with "connect: no route to host", once ARP gives up. Heal is docker
//     network connect at the same IP; connections opened before the
//     partition work again (their sockets live in the container's network
//     namespace, which the partition leaves alone), though a client that
//     timed out has usually dropped them. A master killed while partitioned
//     could not tell its clients: their connections stay open and time out.
//
// Costs measured here (fuse-overlayfs storage, 2 cores): building
// redlock-redis:local about 0.2 s (once; it is reused); NewDocker with N=3
// about 1 s (0.3 s for the network, then the containers concurrently, each
// 0.2-0.3 s alone, 0.5-0.6 s side by side; PING answers 15-25 ms after
// start); Kill 0.1 s; Start 0.25 s; Restart 0.3-0.4 s with or without data;
// Pause, Resume and Heal 10-40 ms; Partition 50-80 ms.
type Docker struct {
	pool        *dockertest.Pool
	image       string
	id          string            // random; in every name and the cluster label
	labels      map[string]string // on every container and the network
	network     *dockertest.Network
	persistence bool
	nodes       []*node

	closed  atomic.Bool
	closeMu sync.Mutex // serialises Close
}

// node is one master.
type node struct {
	name string // container name
	ip   string
	addr string // ip:port

	mu          sync.Mutex // serialises faults on this master; guards the fields below
	containerID string
	paused      bool
	partitioned bool
}

var _ Cluster = (*Docker)(nil)

// DockerAvailable returns nil when a Docker engine answers a ping within two
// seconds (DOCKER_HOST, else the default socket), else why not.
func DockerAvailable() error {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return fmt.Errorf("cluster: docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return fmt.Errorf("cluster: docker engine does not answer: %w", err)
	}
	return nil
}

// NewDocker starts opts.N masters, each in a container, and returns once
// every one answers PING. ctx bounds the whole start-up, including pulling
// or building the image. If it fails half-way it removes whatever it made.
// The caller must Close the cluster.
func NewDocker(ctx context.Context, opts Options) (_ *Docker, err error) {
	if opts.N < 1 {
		return nil, fmt.Errorf("cluster: Options.N is %d, want at least 1", opts.N)
	}
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("cluster: docker client: %w", err)
	}
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("cluster: docker engine does not answer: %w", err)
	}
	image, err := resolveImage(ctx, pool.Client, opts.Image)
	if err != nil {
		return nil, err
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	d := &Docker{
		pool:        pool,
		image:       image,
		id:          id,
		labels:      map[string]string{Label: "1", labelCluster: id, labelOwner: ownerLabel()},
		persistence: opts.Persistence,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close())
		}
	}()

	prefix := "redlock-chaos-" + id
	nw, subnet, gateway, err := createNetwork(ctx, pool, prefix, d.labels)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	d.network = nw
	ips, err := hostAddrs(subnet, gateway, opts.N)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	for i, ip := range ips {
		d.nodes = append(d.nodes, &node{
			name: fmt.Sprintf("%s-%d", prefix, i),
			ip:   ip.String(),
			addr: net.JoinHostPort(ip.String(), redisPort),
		})
	}

	// Every container is made at once, so that N masters come up in about
	// the time of one (the engine serialises some of the work; the limit
	// keeps a large N from flooding it). The first failure cancels the
	// others; every failure is reported.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxConcurrentOps)
	errs := make([]error, len(d.nodes))
	for i, n := range d.nodes {
		g.Go(func() error {
			n.mu.Lock()
			defer n.mu.Unlock()
			ctx, cancel := context.WithTimeout(gctx, opTimeout)
			defer cancel()
			if err := d.create(ctx, n); err != nil {
				errs[i] = fmt.Errorf("cluster: master %d (%s): %w", i, n.addr, err)
			}
			return errs[i]
		})
	}
	if g.Wait() != nil {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

func randomID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("cluster: random id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// redisArgs is the command line of every master: no RDB snapshots; with
// persistence, an AOF fsynced on every write.
func (d *Docker) redisArgs() []string {
	args := []string{
		"--port", redisPort, "--bind", "0.0.0.0", "--protected-mode", "no",
		"--dir", "/data", "--save", "",
	}
	if d.persistence {
		return append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	return append(args, "--appendonly", "no")
}

// create creates and starts n's container at its fixed IP, disconnected if
// n is partitioned, and waits for PING unless it cannot be reached.
// Caller holds n.mu.
func (d *Docker) create(ctx context.Context, n *node) error {
	netName := d.network.Network.Name
	c, err := d.pool.Client.CreateContainer(dc.CreateContainerOptions{
		Name: n.name,
		Config: &dc.Config{
			Hostname:   n.name,
			Image:      d.image,
			Entrypoint: []string{"redis-server"},
			Cmd:        d.redisArgs(),
			Labels:     d.labels,
		},
		HostConfig: &dc.HostConfig{NetworkMode: netName},
		NetworkingConfig: &dc.NetworkingConfig{EndpointsConfig: map[string]*dc.EndpointConfig{
			netName: {IPAMConfig: &dc.EndpointIPAMConfig{IPv4Address: n.ip}},
		}},
		Context: ctx,
	})
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	n.containerID = c.ID
	n.paused = false
	if n.partitioned {
		if err := d.disconnect(ctx, n); err != nil {
			return err
		}
	}
	return d.start(ctx, n)
}

// start starts n's container (already running is fine) and waits for PING
// unless n is paused or partitioned. Caller holds n.mu.
func (d *Docker) start(ctx context.Context, n *node) error {
	err := d.pool.Client.StartContainerWithContext(n.containerID, nil, ctx)
	var running *dc.ContainerAlreadyRunning
	if err != nil && !errors.As(err, &running) {
		return fmt.Errorf("start container: %w", err)
	}
	if n.paused || n.partitioned {
		return nil
	}
	if err := waitReady(ctx, n.addr); err != nil {
		return fmt.Errorf("%w (is this process on the Docker host, routing %s?)", err, n.ip)
	}
	return nil
}

// kill sends SIGKILL; not running is fine. Caller holds n.mu.
func (d *Docker) kill(ctx context.Context, n *node) error {
	err := d.pool.Client.KillContainer(dc.KillContainerOptions{ID: n.containerID, Signal: dc.SIGKILL, Context: ctx})
	var notRunning *dc.ContainerNotRunning
	if err != nil && !errors.As(err, &notRunning) {
		return fmt.Errorf("kill container: %w", err)
	}
	n.paused = false // a killed container is not paused any more
	return nil
}

func (d *Docker) disconnect(ctx context.Context, n *node) error {
	if err := d.pool.Client.DisconnectNetwork(d.network.Network.ID, dc.NetworkConnectionOptions{
		Container: n.containerID, Context: ctx,
	}); err != nil {
		return fmt.Errorf("disconnect from network: %w", err)
	}
	return nil
}

// do runs op on master i, under its lock, bounded by opTimeout.
func (d *Docker) do(i int, what string, op func(ctx context.Context, n *node) error) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if i < 0 || i >= len(d.nodes) {
		return fmt.Errorf("cluster: %s: master %d out of range [0, %d)", what, i, len(d.nodes))
	}
	n := d.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if d.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := op(ctx, n); err != nil {
		return fmt.Errorf("cluster: %s master %d (%s): %w", what, i, n.addr, err)
	}
	return nil
}

// Addrs returns "ip:6379" for each master, in index order.
func (d *Docker) Addrs() []string {
	addrs := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// Kill sends SIGKILL to master i's container.
func (d *Docker) Kill(i int) error {
	return d.do(i, "kill", d.kill)
}

// Start starts master i's container again, with the data it had on disk.
func (d *Docker) Start(i int) error {
	return d.do(i, "start", d.start)
}

// Restart kills master i and starts it again: the same container when
// keepData, else a new, empty one at the same address.
func (d *Docker) Restart(i int, keepData bool) error {
	return d.do(i, "restart", func(ctx context.Context, n *node) error {
		if keepData {
			if err := d.kill(ctx, n); err != nil {
				return err
			}
			return d.start(ctx, n)
		}
		// Force removal kills the container first. By name: a failed
		// Restart may have left a container whose id n does not hold.
		err := d.pool.Client.RemoveContainer(dc.RemoveContainerOptions{
			ID: n.name, Force: true, RemoveVolumes: true, Context: ctx,
		})
		var gone *dc.NoSuchContainer
		if err != nil && !errors.As(err, &gone) {
			return fmt.Errorf("remove container: %w", err)
		}
		return d.create(ctx, n)
	})
}

// Pause freezes master i's container (docker pause).
func (d *Docker) Pause(i int) error {
	return d.do(i, "pause", func(ctx context.Context, n *node) error {
		if n.paused {
			return nil
		}
		if err := d.pool.Client.PauseContainer(n.containerID); err != nil {
			return fmt.Errorf("pause container: %w", err)
		}
		n.paused = true
		return nil
	})
}

// Resume unfreezes master i's container (docker unpause).
func (d *Docker) Resume(i int) error {
	return d.do(i, "resume", func(ctx context.Context, n *node) error {
		if !n.paused {
			return nil
		}
		if err := d.pool.Client.UnpauseContainer(n.containerID); err != nil {
			return fmt.Errorf("unpause container: %w", err)
		}
		n.paused = false
		return nil
	})
}

// Partition disconnects master i's container from the cluster network.
func (d *Docker) Partition(i int) error {
	return d.do(i, "partition", func(ctx context.Context, n *node) error {
		if n.partitioned {
			return nil
		}
		if err := d.disconnect(ctx, n); err != nil {
			return err
		}
		n.partitioned = true
		return nil
	})
}

// Heal connects master i's container to the cluster network again, at the
// same IP, and waits for PING if the master is running and not paused.
func (d *Docker) Heal(i int) error {
	return d.do(i, "heal", func(ctx context.Context, n *node) error {
		if !n.partitioned {
			return nil
		}
		if err := d.pool.Client.ConnectNetwork(d.network.Network.ID, dc.NetworkConnectionOptions{
			Container:      n.containerID,
			EndpointConfig: &dc.EndpointConfig{IPAMConfig: &dc.EndpointIPAMConfig{IPv4Address: n.ip}},
			Context:        ctx,
		}); err != nil {
			return fmt.Errorf("connect to network: %w", err)
		}
		n.partitioned = false
		c, err := d.pool.Client.InspectContainerWithContext(n.containerID, ctx)
		if err != nil {
			return fmt.Errorf("inspect container: %w", err)
		}
		if !c.State.Running || c.State.Paused {
			return nil
		}
		return waitReady(ctx, n.addr)
	})
}

// Close removes every container and the network of the cluster, found by
// its label, so that it also removes what a failed NewDocker left half-made.
// It waits for faults in flight. It is idempotent.
func (d *Docker) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	d.closed.Store(true)
	for _, n := range d.nodes {
		n.mu.Lock()
		defer n.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return removeLabelled(ctx, d.pool.Client, labelCluster+"="+d.id, nil)
}
