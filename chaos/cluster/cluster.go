// Package cluster gives the chaos harness N independent Redis masters that
// faults can be injected into: kill, start, restart with or without data,
// pause, and network partition.
//
// [Cluster] is the backend-neutral contract. [Docker] implements it with one
// container per master, managed through github.com/ory/dockertest/v3;
// [Process] with local redis-server processes, each behind a fault-injecting
// TCP proxy (no Docker needed).
//
// What a client sees under each fault (measured against the Docker backend,
// see [Docker] for the details):
//
//   - Kill: open connections read EOF at once; new connections time out
//     (the master's address is gone from the network: not refused).
//   - Pause: every request times out; the kernel still accepts connections.
//   - Partition: every request and every new connection times out.
//
// [Process] differs for Kill (the proxy closes the connection at once: an
// error, not a timeout), so the harness should depend only on "fails" versus "times out",
// not on the exact error.
package cluster

import "errors"

// Cluster is N independent Redis masters that faults can be injected into.
// Index i is 0..N-1; an index out of range is an error, not a panic.
//
// Addresses never change for the life of the cluster: a master restarted,
// empty or not, comes back at the same address. Faults are orthogonal: a
// partitioned master that is killed and started again is still partitioned
// until Heal.
//
// Implementations are safe for concurrent use; faults on different masters
// may run at the same time.
type Cluster interface {
	// Addrs returns the "host:port" of each master, reachable from this
	// process. The slice is a copy.
	Addrs() []string
	// Kill sends SIGKILL to the master; whatever it had not written to disk
	// is gone. Killing a master that is not running is not an error.
	Kill(i int) error
	// Start starts a killed master again with its data directory: with
	// persistence on, its data survives. Starting a running master is not an
	// error. Start returns once the master answers PING, unless it is paused
	// or partitioned (then once its process runs).
	Start(i int) error
	// Restart kills the master and starts it again. keepData=false brings
	// it back EMPTY at the same address, as a master that lost its disk.
	// A paused master comes back running.
	Restart(i int, keepData bool) error
	// Pause freezes the master (every process in it stops being scheduled).
	Pause(i int) error
	// Resume undoes Pause. Resuming a master that is not paused is not an
	// error.
	Resume(i int) error
	// Partition cuts the master off the network: clients see timeouts.
	// Partitioning a partitioned master is not an error.
	Partition(i int) error
	// Heal undoes Partition and returns once the master answers again
	// (unless it is killed or paused). Healing a master that is not
	// partitioned is not an error.
	Heal(i int) error
	// Close removes everything the cluster made. It is idempotent; the other
	// methods return ErrClosed after it.
	Close() error
}

// Options configures a cluster. The zero value is not valid: N must be at
// least 1.
type Options struct {
	// N is the number of masters, at least 1.
	N int
	// Persistence turns on the append-only file with fsync on every write
	// (appendonly yes, appendfsync always), so that a killed master keeps
	// every acknowledged write. Off (the default), a master keeps nothing
	// across a kill: no AOF, no RDB snapshots.
	Persistence bool
	// Image is the container image (Docker backend only). Default: the
	// environment variable REDLOCK_CHAOS_IMAGE; else "redlock-redis:local"
	// when present; else "redis:7-alpine", present or pulled; else
	// [LocalImage] built from this host's redis-server, its shared
	// libraries and the dynamic loader (no base image, no registry). The
	// image must have redis-server on its PATH; the entrypoint is replaced.
	Image string
}

// ErrClosed is returned by the methods of a closed cluster.
var ErrClosed = errors.New("cluster: closed")
