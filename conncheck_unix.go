//go:build unix

package redlock

import (
	"io"
	"net"
	"syscall"
)

// connAlive reports, without reading anything, whether the peer has closed
// conn (io.EOF) or the socket failed. Data waiting to be read counts as
// alive. Connections that do not expose their socket (or a TLS connection's,
// through NetConn) are assumed alive.
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
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || n > 0:
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
