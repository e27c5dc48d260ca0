package redistest

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Options configures the redis-server processes that [StartServer] and
// [Start] launch. The zero value starts an empty, non-persistent server
// found through $REDIS_SERVER or $PATH.
type Options struct {
	// AppendOnly starts the server with --appendonly yes --appendfsync
	// always, so that data written before a Kill survives a Restart that
	// keeps the data. Default: false (no persistence at all; a restart
	// always comes back empty).
	AppendOnly bool

	// Args are extra redis-server arguments, appended after the ones this
	// package sets, so they override them (for example "--hz", "100").
	Args []string

	// TLS, when set, makes the server listen with TLS only: its port (and
	// Addr) is the TLS port, and the readiness probe speaks TLS with
	// TLS.ClientConfig. [GenerateTLS] makes throwaway files. Default: nil,
	// plain TCP.
	TLS *TLSFiles

	// Sentinel, when not empty, starts a Sentinel (redis-server CONFIG
	// --sentinel) instead of a data server, watching the masters it maps:
	// the name Sentinel knows each by to its "host:port", with quorum 1.
	// Sentinel rewrites its configuration file, kept in the server's
	// temporary directory. Default: nil, a data server.
	Sentinel map[string]string

	// Binary is the path of redis-server. Default: $REDIS_SERVER if set,
	// else "redis-server" looked up on $PATH. Do not resolve symlinks: some
	// distributions install redis-server as a link to redis-check-rdb, and
	// the binary picks its mode from the name it was started under.
	Binary string
}

// binary returns the redis-server executable to run, or an error that says
// how to provide one.
func (o Options) binary() (string, error) {
	name := o.Binary
	if name == "" {
		name = os.Getenv("REDIS_SERVER")
	}
	if name == "" {
		name = "redis-server"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redistest: redis-server binary %q not found (set Options.Binary or $REDIS_SERVER): %w", name, err)
	}
	return path, nil
}

// args returns the redis-server command line for a server listening on
// port, with its data in dataDir and its log in logFile; a Sentinel's reads
// confFile.
func (o Options) args(port int, dataDir, logFile, confFile string) []string {
	appendOnly := "no"
	if o.AppendOnly {
		appendOnly = "yes"
	}
	listen := []string{"--port", strconv.Itoa(port)}
	if o.TLS != nil {
		listen = append([]string{"--port", "0", "--tls-port", strconv.Itoa(port)}, o.TLS.args()...)
	}
	args := []string{
		"--bind", "127.0.0.1",
		"--dir", dataDir,
		"--save", "", // no RDB snapshots, not even at shutdown
		"--appendonly", appendOnly,
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", logFile,
	}
	if o.AppendOnly {
		args = append(args, "--appendfsync", "always")
	}
	args = append(listen, args...)
	if o.Sentinel != nil {
		// The configuration file comes first, the mode after it.
		args = append(append([]string{confFile}, args...), "--sentinel")
	}
	return append(args, o.Args...)
}

// sentinelConf is the configuration file of a Sentinel watching masters.
func (o Options) sentinelConf() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(o.Sentinel)) {
		host, port, _ := strings.Cut(o.Sentinel[name], ":")
		fmt.Fprintf(&b, "sentinel monitor %s %s %s 1\n", name, host, port)
	}
	return b.String()
}
