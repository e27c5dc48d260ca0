// Command redlock takes one Redlock lock across N independent Redis masters
// from the shell: run a command while holding it (exec), or report who holds
// it (status). Run "redlock help" for the commands, the masters' URLs and the
// exit statuses.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"
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

	// ---- chaos: wired at merge, from the chaos branch ----
	// The chaos package (func Command(ctx, args, stdout, stderr) int) is not on
	// this branch. At merge: import "github.com/redlock/redlock/chaos", replace
	// this case's body with
	//	return chaos.Command(ctx, rest, stdout, stderr)
	// (cancel ctx on SIGINT/SIGTERM if chaos expects it: signal.NotifyContext),
	// and add chaos to mainUsage in help.go.
	case "chaos":
		fmt.Fprintln(stderr, "redlock: the chaos command is not built into this binary")
		return exitUsage
	// ---- end chaos ----

	case "help", "-h", "-help", "--help":
		return cmdHelp(rest, stdout, stderr)
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
	default:
		fmt.Fprintf(stderr, "redlock help: unknown command %q; the commands are exec and status\n", args[0])
		return exitUsage
	}
	return exitOK
}
