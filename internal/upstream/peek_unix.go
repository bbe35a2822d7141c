//go:build unix

package upstream

import (
	"net"
	"syscall"
)

// peeker is a connection's non-blocking peek, made once with the
// connection so that checking it when it is taken from the pool
// allocates nothing.
type peeker struct {
	raw  syscall.RawConn // nil: not a socket
	try  func(fd uintptr) bool
	one  [1]byte
	open bool
}

func newPeeker(nc net.Conn) *peeker {
	p := &peeker{}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			p.raw = raw
			p.try = p.peek
		}
	}
	return p
}

// peek reads one byte without taking it and without waiting: none ready
// (EAGAIN) is a connection still open and quiet.
func (p *peeker) peek(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), p.one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	p.open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
	return true
}

// closed reports whether the peer of an idle connection closed it or
// sent it something: one non-blocking peek on a socket. A connection that
// is not a socket is taken as open.
func (p *peeker) closed() bool {
	if p.raw == nil {
		return false
	}
	p.open = false
	return p.raw.Read(p.try) != nil || !p.open
}
