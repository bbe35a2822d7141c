package gateway

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// listener is the gateway's client listener. It caps the connections open
// at once (max_connections: past it Accept waits for one to close, and new
// clients wait in the kernel's backlog), counts them, and wraps each in a
// framedConn that watches request framing.
type listener struct {
	net.Listener
	sem       chan struct{} // nil: no cap
	open      func(delta float64)
	done      chan struct{}
	closeOnce sync.Once
}

// newListener wraps ln; max <= 0 means no cap. open is told of each
// connection opened (+1) and closed (-1).
func newListener(ln net.Listener, max int, open func(float64)) *listener {
	l := &listener{Listener: ln, open: open, done: make(chan struct{})}
	if max > 0 {
		l.sem = make(chan struct{}, max)
	}
	return l
}

func (l *listener) Accept() (net.Conn, error) {
	if l.sem != nil {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		if l.sem != nil {
			<-l.sem
		}
		return nil, err
	}
	l.open(1)
	return &framedConn{Conn: c, release: l.release, scan: newFramingScanner()}, nil
}

func (l *listener) release() {
	l.open(-1)
	if l.sem != nil {
		<-l.sem
	}
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// framedConn is one client connection. It reads the bytes net/http reads,
// through a framing scanner that finds each request's header block: Go's
// server quietly drops a Content-Length that comes with Transfer-Encoding
// (RFC 9112 lets a server do so), so the handler cannot see that a request
// was framed two ways, which is how requests are smuggled past a proxy in
// front. The scanner notes the first such request; the gateway refuses it
// and closes the connection (what docs/admission.md promises, "At the socket").
type framedConn struct {
	net.Conn
	release   func()
	closeOnce sync.Once

	mu   sync.Mutex // net/http reads one at a time; the lock makes it plain
	scan framingScanner
	// ambiguous is the 1-based index of the first request framed both
	// ways (0: none yet); served counts the requests handed to handlers.
	ambiguous atomic.Int64
	served    atomic.Int64
}

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if k := c.scan.feed(p[:n]); k > 0 {
			c.ambiguous.CompareAndSwap(0, int64(k))
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *framedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.release)
	return err
}

// nextRequest is called once per request handed to a handler; it reports
// whether that request was framed both ways.
func (c *framedConn) nextRequest() (ambiguous bool) {
	k := c.served.Add(1)
	return c.ambiguous.Load() == k
}

type connKey struct{}

// connContext puts the framedConn in each request's context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// framingScanner follows an HTTP/1.1 request stream as net/http parses it:
// header block, then a body framed by chunked encoding or Content-Length,
// then the next header block. It only reads; net/http remains the parser
// that decides. When it meets something it cannot follow (net/http then
// refuses the request and closes the connection anyway) it stops; so it
// does at HTTP/2's preface (h2c), whose frames carry their own lengths.
type framingScanner struct {
	state   scanState
	line    []byte // the unfinished line
	remain  int64  // body or chunk bytes still to skip
	index   int    // requests whose header block has been seen
	first   bool   // the next header line is the request line
	hasCL   bool
	hasTE   bool
	chunked bool
	options bool // "OPTIONS *": answered by net/http itself, no handler
}

type scanState uint8

const (
	scanHeader    scanState = iota // reading a header block
	scanBody                       // skipping remain bytes of a Content-Length body
	scanChunkSize                  // reading a chunk-size line
	scanChunkData                  // skipping remain bytes of a chunk
	scanChunkEnd                   // the CRLF after a chunk's data
	scanTrailer                    // reading trailer lines after the last chunk
	scanLost                       // something net/http will refuse: stop following
)

// maxScanLine bounds a line the scanner buffers; net/http refuses longer
// header blocks (max_header_bytes, at most a few MiB) and chunk lines.
const maxScanLine = 4 << 20

// feed follows p and returns the 1-based index of a request whose header
// block carried both Transfer-Encoding and Content-Length, or 0. The index
// counts only requests net/http hands to a handler.
func (s *framingScanner) feed(p []byte) (ambiguous int) {
	for len(p) > 0 {
		switch s.state {
		case scanLost:
			return ambiguous
		case scanBody, scanChunkData:
			n := int64(len(p))
			if n > s.remain {
				n = s.remain
			}
			s.remain -= n
			p = p[n:]
			if s.remain == 0 {
				if s.state == scanBody {
					s.startHeader()
				} else {
					s.state = scanChunkEnd
				}
			}
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(s.line)+len(p) > maxScanLine {
				s.state = scanLost
				return ambiguous
			}
			s.line = append(s.line, p...)
			return ambiguous
		}
		var line []byte
		if len(s.line) > 0 {
			s.line = append(s.line, p[:i]...)
			line = s.line
		} else {
			line = p[:i]
		}
		p = p[i+1:]
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if k := s.onLine(line); k > 0 && ambiguous == 0 {
			ambiguous = k
		}
		s.line = s.line[:0]
	}
	return ambiguous
}

func newFramingScanner() framingScanner { return framingScanner{first: true} }

func (s *framingScanner) startHeader() {
	s.state, s.first, s.hasCL, s.hasTE, s.chunked, s.options = scanHeader, true, false, false, false, false
}

// onLine handles one complete line (without its line ending).
func (s *framingScanner) onLine(line []byte) (ambiguous int) {
	switch s.state {
	case scanHeader:
		if s.first {
			if len(line) == 0 {
				return 0 // blank lines before a request line are skipped
			}
			s.first = false
			if s.index == 0 && bytes.Equal(line, []byte("PRI * HTTP/2.0")) {
				// HTTP/2's preface (h2c): binary frames follow, and
				// HTTP/2 frames each message itself.
				s.state = scanLost
				return 0
			}
			s.options = bytes.HasPrefix(line, []byte("OPTIONS * "))
			return 0
		}
		if len(line) > 0 {
			name, value, ok := bytes.Cut(line, []byte{':'})
			if !ok {
				return 0
			}
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				s.hasCL = true
				if n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64); err == nil && n >= 0 {
					s.remain = n
				} else {
					s.state = scanLost
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				s.hasTE = true
				s.chunked = bytes.EqualFold(bytes.TrimSpace(value), []byte("chunked"))
			}
			return 0
		}
		// The end of the header block.
		if s.state == scanLost {
			return 0
		}
		if !s.options {
			s.index++
			if s.hasTE && s.hasCL {
				ambiguous = s.index
			}
		}
		switch {
		case s.hasTE && s.chunked:
			s.state = scanChunkSize
		case s.hasTE:
			s.state = scanLost // net/http answers 501 and closes
		case s.hasCL && s.remain > 0:
			s.state = scanBody
		default:
			s.startHeader()
		}
		return ambiguous
	case scanChunkSize:
		size, _, _ := bytes.Cut(line, []byte{';'})
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			s.state = scanLost
		case n == 0:
			s.state = scanTrailer
		default:
			s.state, s.remain = scanChunkData, n
		}
	case scanChunkEnd:
		if len(line) != 0 {
			s.state = scanLost
		} else {
			s.state = scanChunkSize
		}
	case scanTrailer:
		if len(line) == 0 {
			s.startHeader()
		}
	}
	return 0
}
