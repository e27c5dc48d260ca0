package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"testing"
)

// benchWire is the least any client can do for one Lock+Unlock over n
// masters, the floor that lib=wire reports at every node count: one
// goroutine, one TCP connection per master, requests encoded once before the
// loop; it writes SET NX PX to every master, then reads every reply, then
// does the same with EVALSHA of the compare-and-delete script. No quorum, no
// timeouts, no goroutines, no allocations — only the round trips themselves.
//
// It is there to show what the machine allows: on loopback each write also
// runs the receiver's half of the TCP stack, so every master costs its
// kernel work in the client's time as well as in its own, and how
// latency(n)/latency(1) grows says as much about the machine (how long an
// idle core takes to wake, against what a packet costs) as about a library.
func benchWire(b *testing.B, n int) {
	const value = "0123456789abcdefghijkl" // as long as a lock value
	const release = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`
	key := newKey(b)
	set := command("SET", key, value, "NX", "PX", strconv.FormatInt(ttl.Milliseconds(), 10))
	var conns []net.Conn
	var rds []*bufio.Reader
	for _, a := range addrs(n) {
		c, err := net.Dial("tcp", a)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		rds = append(rds, bufio.NewReader(c))
	}
	// The script's SHA1, from the first master, then loaded on every one.
	var sha []byte
	load := command("SCRIPT", "LOAD", release)
	for i, c := range conns {
		if _, err := c.Write(load); err != nil {
			b.Fatal(err)
		}
		if _, err := rds[i].ReadSlice('\n'); err != nil { // $40
			b.Fatal(err)
		}
		line, err := rds[i].ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		sha = bytes.TrimSpace(line)
	}
	del := command("EVALSHA", string(sha), "1", key, value)
	round := func(req []byte, want string) {
		for _, c := range conns {
			if _, err := c.Write(req); err != nil {
				b.Fatal(err)
			}
		}
		for _, r := range rds {
			line, err := r.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if string(line) != want {
				b.Fatalf("reply %q, want %q", line, want)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		round(set, "+OK\r\n")
		round(del, ":1\r\n")
	}
}

// command is args encoded as one RESP2 request.
func command(args ...string) []byte {
	out := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		out = fmt.Appendf(out, "$%d\r\n%s\r\n", len(a), a)
	}
	return out
}
