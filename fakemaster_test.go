package redlock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeMaster is a tiny server speaking RESP on loopback, for the one thing a
// real master cannot be made to do: answer garbage. It completes go-redis's
// connection handshake (HELLO is refused, so the client falls back to RESP2;
// CLIENT SETINFO is accepted) and answers every other command with the same
// canned bytes. With hangUp it closes the connection after each answer, so a
// truncated frame ends in EOF at once; without, the client waits for the rest
// until its deadline.
type fakeMaster struct {
	ln     net.Listener
	reply  []byte
	hangUp bool

	wg    sync.WaitGroup
	mu    sync.Mutex // guards conns
	conns map[net.Conn]bool
}

// startFake starts a fakeMaster answering reply on a loopback port; it stops
// with the test.
func startFake(t testing.TB, reply []byte, hangUp bool) *fakeMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := pipeFake(t, reply, hangUp)
	f.ln = ln
	f.wg.Add(1)
	go f.accept()
	return f
}

// pipeFake returns a fakeMaster without a port: its clients (pipeNode) reach
// it over in-memory pipes, so a fuzzer can dial it thousands of times a
// second without running the machine out of ports. It stops with the test.
func pipeFake(t testing.TB, reply []byte, hangUp bool) *fakeMaster {
	f := &fakeMaster{reply: reply, hangUp: hangUp, conns: map[net.Conn]bool{}}
	t.Cleanup(f.stop)
	return f
}

func (f *fakeMaster) Addr() string { return f.ln.Addr().String() }

// pipeNode returns a function that makes a Node on a client of its own,
// connected to f over in-memory pipes.
func (f *fakeMaster) pipeNode(t testing.TB) func() Node {
	return func() Node {
		c := redis.NewClient(&redis.Options{Addr: "192.0.2.1:6379", // TEST-NET: an IP, so nothing is looked up, MaxRetries: -1, DialerRetries: 1,
			ContextTimeoutEnabled: true,
			// go-redis replays once, after a backoff, a command whose
			// connection dropped before it was written; no waiting here.
			MinRetryBackoff: -1, MaxRetryBackoff: -1,
			Dialer: func(context.Context, string, string) (net.Conn, error) {
				client, server := net.Pipe()
				f.track(server)
				return client, nil
			}})
		t.Cleanup(func() { c.Close() })
		return NewNode(c)
	}
}

// client returns a go-redis client for the fake, without retries, that
// keeps to the context's deadline (go-redis ignores it otherwise and waits
// for its ReadTimeout).
func (f *fakeMaster) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: f.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// node returns a function that makes a Node on a client of its own.
func (f *fakeMaster) node(t testing.TB) func() Node {
	return func() Node { return NewNode(f.client(t)) }
}

func (f *fakeMaster) stop() {
	if f.ln != nil {
		f.ln.Close()
	}
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeMaster) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.track(c)
	}
}

// track serves c until it closes or f stops.
func (f *fakeMaster) track(c net.Conn) {
	f.mu.Lock()
	f.conns[c] = true
	f.mu.Unlock()
	f.wg.Add(1)
	go f.serve(c)
}

func (f *fakeMaster) serve(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		switch cmd {
		case "HELLO":
			_, err = io.WriteString(c, "-ERR unknown command 'HELLO'\r\n")
		case "CLIENT":
			_, err = io.WriteString(c, "+OK\r\n")
		default:
			_, err = c.Write(f.reply)
			if f.hangUp {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readCommand reads one command (an array of bulk strings) and returns its
// name in upper case.
func readCommand(r *bufio.Reader) (string, error) {
	n, err := readHeader(r, '*')
	if err != nil {
		return "", err
	}
	var name string
	for i := range n {
		size, err := readHeader(r, '$')
		if err != nil {
			return "", err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if i == 0 {
			name = strings.ToUpper(string(buf[:size]))
		}
	}
	return name, nil
}

func readHeader(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimRight(line, "\r\n")
	if len(line) < 2 || line[0] != kind {
		return 0, fmt.Errorf("fake master: want %c, got %q", kind, line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("fake master: bad length %q", line)
	}
	return n, nil
}
