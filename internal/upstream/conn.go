package upstream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// conn is one connection to a backend, owned by one request at a time
// (or idle in the pool).
type conn struct {
	t      *Transport
	addr   string
	nc     net.Conn
	br     *bufio.Reader // reads through the conn itself (Read)
	peek   *peeker
	w      reqWriter // the request's writer, kept: no allocation a request
	idleAt time.Time
	reused bool // taken from the pool by this request
	// nread counts the bytes this request read, written those it wrote;
	// limit, while the head is read, is where reading it fails (0: none).
	nread, written, limit int64
}

func newConn(t *Transport, addr string, nc net.Conn) *conn {
	c := &conn{t: t, addr: addr, nc: nc, peek: newPeeker(nc)}
	c.br = bufio.NewReaderSize(c, orDefault(t.ReadBufferSize, defaultReadBuffer))
	return c
}

// errHeadTooLarge is the answer's head past maxHeaderBytes.
var errHeadTooLarge = fmt.Errorf("upstream: the backend's response headers exceed %d bytes", maxHeaderBytes)

// Read reads from the connection for the reader, counting the bytes.
func (c *conn) Read(p []byte) (int, error) {
	if c.limit > 0 && c.nread >= c.limit {
		return 0, errHeadTooLarge
	}
	n, err := c.nc.Read(p)
	c.nread += int64(n)
	return n, err
}

// alive reports whether an idle connection may carry a request: the
// backend has not closed it nor sent anything unasked (peeker).
func (c *conn) alive() bool {
	return c.br.Buffered() == 0 && !c.peek.closed()
}

// roundTrip writes req on c and reads its answer's head. Until the body
// ends, the request's context closes c when done.
func (c *conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	c.nread, c.written = 0, 0
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.nc.Close()
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		return nil, err
	}
	if err := c.write(req); err != nil {
		return fail(err)
	}
	c.limit = maxHeaderBytes
	res, err := c.readHead(req)
	c.limit = 0
	if err != nil {
		if c.nread == 0 {
			err = &NoAnswerError{Err: err}
		}
		return fail(err)
	}
	b := &body{c: c, rc: res.Body, stop: stop, ctx: ctx, keep: !res.Close && !req.Close}
	if res.Body == http.NoBody {
		b.release(b.keep) // nothing to read: the connection is free now
		return res, nil
	}
	res.Body = b
	return res, nil
}

// readHead reads the answer's head, past any 1xx interim answers (101
// Switching Protocols is final), as net/http does.
func (c *conn) readHead(req *http.Request) (*http.Response, error) {
	// The first byte apart, as net/http reads it: a connection that ends
	// before any byte is io.EOF, not a head cut short.
	if _, err := c.br.Peek(1); err != nil {
		return nil, err
	}
	for {
		res, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		if res.StatusCode < 100 || res.StatusCode > 199 || res.StatusCode == http.StatusSwitchingProtocols {
			return res, nil
		}
	}
}

// NoAnswerError is a connection that failed before a single byte of an
// answer came: the request may or may not have reached the backend (see
// the gateway's retry rule).
type NoAnswerError struct{ Err error }

func (e *NoAnswerError) Error() string {
	return "upstream: the connection ended before any answer byte: " + e.Err.Error()
}

func (e *NoAnswerError) Unwrap() error { return e.Err }

// write writes req through a pooled buffer: in one write when its head
// and body fit. c.written counts what the connection took.
func (c *conn) write(req *http.Request) error {
	bp := c.t.writeBuffer()
	w := &c.w
	*w = reqWriter{c: c, buf: (*bp)[:0]}
	defer func() {
		w.buf = nil
		c.t.putWriteBuffer(bp)
	}()
	if err := req.Write(w); err != nil {
		if w.err != nil {
			return w.err
		}
		return err
	}
	return w.flush()
}

// reqWriter is the buffer req.Write writes into: a ByteWriter, so that
// net/http adds no buffer of its own, and a ReaderFrom, so that the body
// is read into it rather than through a copy buffer. err is the first
// write error of the connection.
type reqWriter struct {
	c   *conn
	buf []byte
	err error
}

func (w *reqWriter) flush() error {
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	var n int
	n, w.err = w.c.nc.Write(w.buf)
	w.c.written += int64(n)
	w.buf = w.buf[:0]
	return w.err
}

func (w *reqWriter) Write(p []byte) (int, error)       { return writeInto(w, p) }
func (w *reqWriter) WriteString(s string) (int, error) { return writeInto(w, s) }

// writeInto copies p into w's buffer, flushing it whenever it is full.
func writeInto[S []byte | string](w *reqWriter, p S) (int, error) {
	n := 0
	for len(p) > 0 {
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
		m := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+m]
		p = p[m:]
		n += m
	}
	return n, w.err
}

func (w *reqWriter) WriteByte(b byte) error {
	_, err := w.Write([]byte{b})
	return err
}

func (w *reqWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
		m, err := r.Read(w.buf[len(w.buf):cap(w.buf)])
		w.buf = w.buf[:len(w.buf)+m]
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// body is an answer's body: net/http's reader of its framing over the
// connection. Read to its end, it puts the connection back in the pool;
// closed before, it closes it.
type body struct {
	c    *conn // nil once the connection is given back or closed
	rc   io.ReadCloser
	stop func() bool
	ctx  context.Context
	keep bool // the connection may carry another request
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == nil || b.c == nil {
		return n, err
	}
	if err == io.EOF {
		b.release(b.keep)
		return n, err
	}
	b.release(false)
	if cause := context.Cause(b.ctx); cause != nil {
		err = cause
	}
	return n, err
}

func (b *body) Close() error {
	if b.c == nil {
		return nil
	}
	// Closed before its end: the connection goes first, so that
	// net/http's body, which reads a body to its end on Close, ends at
	// once.
	b.release(false)
	b.rc.Close()
	return nil
}

// release lets go of the connection: to the pool when keep (and the
// context did not close it), closed otherwise.
func (b *body) release(keep bool) {
	c := b.c
	b.c = nil
	if b.stop() && keep && c.br.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.nc.Close()
}
