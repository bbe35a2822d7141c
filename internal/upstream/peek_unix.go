//go:build unix

package upstream

import (
	"net"
	"syscall"
)

// peekClosed reports whether the peer of an idle connection closed it or
// sent it something: one non-blocking peek on a socket. A connection that
// is not a socket is taken as open.
func peekClosed(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	var one [1]byte
	open := false
	err = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return err != nil || !open
}
