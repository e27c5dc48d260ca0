package chaos

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The writer is the command that process clients run under
// "redlock exec --fencing": "redlock chaos writer". It reads the lock's key
// and fencing token from the environment exec gives it (REDLOCK_KEY,
// REDLOCK_FENCE), tells the harness's resource that it began, writes to it
// a few times with a pause in between, and tells it that it ended. On
// SIGTERM (exec stopping it because the lock was lost) it finishes as a
// program shutting down cleanly does: one last write, then the end.

// writerArgs are the writer's flags.
type writerArgs struct {
	resource string        // base URL of the harness's resource
	client   int           // the process client's number
	writes   int           // writes per critical section
	hold     time.Duration // pause between writes
	read     bool          // a reader: no token, no writes
}

// runWriter is "redlock chaos writer"; it returns the exit status.
func runWriter(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("redlock chaos writer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var a writerArgs
	fs.StringVar(&a.resource, "resource", "", "base URL of the harness's resource (http://127.0.0.1:PORT)")
	fs.IntVar(&a.client, "client", 0, "process client number")
	fs.IntVar(&a.writes, "writes", 3, "writes per critical section")
	fs.DurationVar(&a.hold, "hold", 20*time.Millisecond, "pause between writes")
	fs.BoolVar(&a.read, "read", false, "hold as a reader (under redlock exec --read): begin, wait as long as the writes would take, end; write nothing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := a.run(); err != nil {
		fmt.Fprintf(stderr, "redlock chaos writer: %v\n", err)
		return 1
	}
	return 0
}

func (a *writerArgs) run() error {
	key, fence := os.Getenv("REDLOCK_KEY"), os.Getenv("REDLOCK_FENCE")
	switch {
	case a.resource == "":
		return errors.New("--resource is required")
	case a.read && key == "":
		return errors.New("REDLOCK_KEY is not set: run me under redlock exec --read")
	case !a.read && (key == "" || fence == ""):
		return errors.New("REDLOCK_KEY and REDLOCK_FENCE are not set: run me under redlock exec --fencing")
	case a.writes < 1:
		return fmt.Errorf("--writes = %d: need at least 1", a.writes)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)

	c := &http.Client{Timeout: 10 * time.Second}
	if a.read {
		fence = "0"
	}
	id, err := post(c, a.resource+"/begin", url.Values{
		"client": {strconv.Itoa(a.client)}, "key": {key}, "token": {fence}, "read": {map[bool]string{true: "1", false: "0"}[a.read]},
		"pid": {strconv.Itoa(os.Getpid())}, "pgid": {strconv.Itoa(syscall.Getpgrp())},
	})
	if err != nil {
		return err
	}
	if a.read {
		select {
		case <-term:
		case <-time.After(time.Duration(a.writes) * a.hold):
		}
		_, err = post(c, a.resource+"/end", url.Values{"id": {id}})
		return err
	}
	write := func() error {
		_, err := post(c, a.resource+"/write", url.Values{"id": {id}})
		return err
	}
	for i := range a.writes {
		if i > 0 {
			select {
			case <-term:
				if err := write(); err != nil { // the last write of a clean shutdown
					return err
				}
				_, err := post(c, a.resource+"/end", url.Values{"id": {id}, "why": {"SIGTERM"}})
				return err
			case <-time.After(a.hold):
			}
		}
		if err := write(); err != nil {
			return err
		}
	}
	_, err = post(c, a.resource+"/end", url.Values{"id": {id}})
	return err
}

// post sends form to u and returns the reply's body.
func post(c *http.Client, u string, form url.Values) (string, error) {
	resp, err := c.PostForm(u, form)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	return strings.TrimSpace(string(b)), nil
}
