//go:build unix

package redlock

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// connAlive reports, without reading anything, whether an idle conn, one
// on which no reply is due, can take a request: not when the peer has closed
// it (io.EOF), the socket failed, or bytes are waiting. A RESP2 master sends
// nothing unasked, so waiting bytes are a reply nobody asked for (which the
// next request would take for its own) or, under TLS, the master's
// close_notify before its FIN: what a master sends when it closes a TLS
// connection (CLIENT KILL, its idle timeout). Connections that do not expose
// their socket (or a TLS connection's, through NetConn) are assumed alive.
func connAlive(conn net.Conn) error {
	for range 4 {
		if sc, ok := conn.(syscall.Conn); ok {
			return peek(sc)
		}
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		conn = u.NetConn()
	}
	return nil
}

// errIdleBytes is connAlive's verdict on a connection with bytes waiting.
var errIdleBytes = errors.New("bytes waiting on an idle connection")

func peek(sc syscall.Conn) error {
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var res error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n == 0 && err == nil:
			res = io.EOF
		case n > 0:
			res = errIdleBytes
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			res = nil
		default:
			res = err
		}
		return true
	})
	if err != nil {
		return err
	}
	return res
}
