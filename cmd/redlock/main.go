// Command redlock takes one Redlock lock across N independent Redis masters
// from the shell: run a command while holding it (exec), report who holds
// it (status), or run the fault-injection harness on masters it starts
// itself (chaos). Run "redlock help" for the commands, the masters' URLs and the
// exit statuses.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/chaos"
)

// quiet drops go-redis's own log lines (a failed dial per retry): the
// commands report what failed, once, naming the master.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a command and returns the process's exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "exec":
		return cmdExec(ctx, rest, stdout, stderr)
	case "status":
		return cmdStatus(ctx, rest, stdout, stderr)

	case "chaos":
		// Ctrl-C cancels the run; the harness then removes every master it
		// started before it returns. (exec forwards signals itself instead.)
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return chaos.Command(ctx, rest, stdout, stderr)

	case "help", "-h", "-help", "--help":
		return cmdHelp(rest, stdout, stderr)
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, version(debug.ReadBuildInfo()))
		return exitOK
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n\n%s", cmd, mainUsage)
		return exitUsage
	}
}

// cmdHelp prints the help of the command named in args, or the overview.
func cmdHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, mainUsage)
		return exitOK
	}
	switch args[0] {
	case "exec":
		fmt.Fprint(stdout, execUsage)
	case "status":
		fmt.Fprint(stdout, statusUsage)
	case "chaos":
		return chaos.Command(context.Background(), []string{"-h"}, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "redlock help: unknown command %q; the commands are exec, status and chaos\n", args[0])
		return exitUsage
	}
	return exitOK
}
