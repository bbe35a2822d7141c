// Package memnet is an in-memory network for tests that run real HTTP
// servers and clients inside a testing/synctest bubble: a listener accepts
// net.Pipe connections dialled by name. Every wait is on a channel, so a
// goroutine blocked on it is durably blocked and the bubble's clock can
// advance; time-shaped scenarios (minutes of traffic) run in virtual time
// while the bytes still go through net/http on both sides.
package memnet

import (
	"context"
	"net"
	"sync"
	"syscall"
)

// Network is a set of listeners by address. The zero value is ready to use.
type Network struct {
	mu  sync.Mutex
	lns map[string]*Listener
}

// Listen registers addr (any string, e.g. "gateway:80").
func (n *Network) Listen(addr string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lns == nil {
		n.lns = map[string]*Listener{}
	}
	if _, ok := n.lns[addr]; ok {
		return nil, &net.OpError{Op: "listen", Net: "mem", Err: syscall.EADDRINUSE}
	}
	l := &Listener{net: n, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.lns[addr] = l
	return l, nil
}

// Dial connects to the listener at addr, as http.Transport.DialContext;
// it fails with ECONNREFUSED when nothing listens there.
func (n *Network) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.lns[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "mem", Err: syscall.ECONNREFUSED}
	}
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "mem", Err: syscall.ECONNREFUSED}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Listener is a net.Listener of a Network.
type Listener struct {
	net   *Network
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// Accept waits for a Dial or Close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and frees the address.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		delete(l.net.lns, l.addr)
		l.net.mu.Unlock()
	})
	return nil
}

// Addr returns the listener's address.
func (l *Listener) Addr() net.Addr { return addr(l.addr) }

type addr string

func (a addr) Network() string { return "mem" }
func (a addr) String() string  { return string(a) }
