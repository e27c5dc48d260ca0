// Command redlock is the command-line tool. This minimal entry point knows
// one subcommand, "chaos" (the fault-injection harness, [chaos.Command]); it
// is meant to be merged into the full CLI.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redlock/redlock/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatchSubcommand(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// dispatchSubcommand runs the subcommand named by args[0] and returns the
// exit status. Ctrl-C cancels ctx; the subcommand cleans up before it
// returns.
func dispatchSubcommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: redlock chaos [flags]   (redlock chaos -h for the flags)")
		return 2
	}
	switch args[0] {
	case "chaos":
		return chaos.Command(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "redlock: unknown command %q; known: chaos\n", args[0])
	return 2
}
