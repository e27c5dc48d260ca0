package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// errForeign means that a Redis other than ours answered on the port.
var errForeign = errors.New("another redis-server answers on this port")

// probeTimeout bounds one readiness probe, dial included.
const probeTimeout = 250 * time.Millisecond

// probe sends PING and INFO server to addr over a raw connection (TLS when
// tlsConf is not nil). It returns nil when the server answers PONG (so it
// accepts commands: it answers -LOADING while it replays its append-only
// file) and its process_id is pid, errForeign when another process answers.
func probe(addr string, pid int, tlsConf *tls.Config) error {
	d := &net.Dialer{Timeout: probeTimeout}
	var conn net.Conn
	var err error
	if tlsConf != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tlsConf}).Dial("tcp", addr)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(probeTimeout)); err != nil {
		return err
	}
	const req = "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	line, err := readLine(r)
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	info, err := readBulk(r)
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%w (process_id %s, want %d)", errForeign, got, pid)
	}
	return nil
}

// readLine reads one RESP line without its CRLF.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// readBulk reads one RESP bulk string.
func readBulk(r *bufio.Reader) (string, error) {
	head, err := readLine(r)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO answered %q", head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("INFO answered %q", head)
	}
	buf := make([]byte, n+2) // payload and CRLF
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// infoField returns the value of key in an INFO reply, or "".
func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}
