// Package redistest starts and stops real redis-server processes for tests,
// benchmarks and the chaos harness.
//
// Each [Server] runs in its own temporary directory on a free loopback port
// that stays the same across [Server.Restart], so clients can keep their
// address while the process behind it is killed, paused or restarted. A
// [Cluster] is a set of independent servers (not a Redis Cluster), as the
// Redlock algorithm wants. A [RedisCluster] is one Redis Cluster of
// cluster-enabled servers, slots assigned, for a Redlock master that is a
// cluster.
//
// A running server holds one goroutine that reaps its process; [Server.Stop]
// and [Cluster.Stop] end it, so stop every server before checking for leaked
// goroutines.
//
// The processes are started in their own process group, so a Ctrl-C on the
// terminal reaches only the test binary, and with a parent-death signal, so
// they do not outlive a test binary that dies.
package redistest
