//go:build !unix

package upstream

import "net"

// peekClosed takes an idle connection as open where a socket cannot be
// peeked without blocking: a request on one the backend closed fails
// before any answer byte and is sent once more (see RoundTrip).
func peekClosed(net.Conn) bool { return false }
