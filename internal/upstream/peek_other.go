//go:build !unix

package upstream

import "net"

// peeker takes an idle connection as open where a socket cannot be
// peeked without blocking: a request on one the backend closed fails
// before any answer byte and is sent once more (see RoundTrip).
type peeker struct{}

func newPeeker(net.Conn) *peeker { return &peeker{} }

func (*peeker) closed() bool { return false }
