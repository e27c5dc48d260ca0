package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redlock/redlock/internal/cliflag"
)

// usageError is bad input from the command line: what was wrong and what
// would be right.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// newFlagSet returns a flag set that reports nothing itself: parseFlags does.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs. It returns done = true with the exit
// status when the caller should stop: after printing help for -h, or a usage
// error (which names flags --name, as the help does).
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (status int, done bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return exitOK, true
	}
	if err != nil {
		return usageFail(stderr, fs.Name(), cliflag.Error(err)), true
	}
	return 0, false
}

// usageFail reports a usage error of command cmd and returns exitUsage.
func usageFail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "redlock %s: %v\nRun 'redlock %s -h' for usage.\n", cmd, err, cmd)
	return exitUsage
}

// masterURLs splits the --masters value, or $REDLOCK_MASTERS when the flag is
// empty, into URLs.
func masterURLs(flagValue string) ([]string, error) {
	list, from := flagValue, "--masters"
	if list == "" {
		list, from = os.Getenv("REDLOCK_MASTERS"), "$REDLOCK_MASTERS"
	}
	if strings.TrimSpace(list) == "" {
		return nil, usagef("no masters: pass --masters redis://host:port,... or set REDLOCK_MASTERS")
	}
	urls := strings.Split(list, ",")
	for i, u := range urls {
		urls[i] = strings.TrimSpace(u)
		if urls[i] == "" {
			return nil, usagef("%s: master %d of %d is empty; separate URLs with single commas", from, i+1, len(urls))
		}
	}
	return urls, nil
}
