package upstream

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// Transport carries requests to http:// backends on pooled HTTP/1.1
// connections (see the package doc). Set its fields before its first
// request; the zero value dials with a plain net.Dialer and keeps no
// idle connections past the defaults below.
type Transport struct {
	// DialContext dials a backend; nil: a net.Dialer's.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdleConns caps the idle connections in all, MaxIdleConnsPerHost
	// those of one host (0: 1,024 and 256; MaxIdleConns < 0: no cap in
	// all, as for the fleet's probes and scrapes, two a backend at any
	// number of backends); IdleConnTimeout closes one idle that long (0:
	// 90 s).
	MaxIdleConns, MaxIdleConnsPerHost int
	IdleConnTimeout                   time.Duration
	// WriteBufferSize is the buffer a request is written through (0:
	// 8 KiB): a request whose head and body fit goes out in one write.
	// It is pooled: a connection holds none between writes.
	WriteBufferSize int
	// ReadBufferSize is each connection's reader (0: 1 KiB, what an
	// answer's head and an SSE event need). A connection holds it for as
	// long as it lives; a larger one reads a large chunked answer (a
	// /metrics page in 2 KiB chunks) in fewer reads: a chunk's header
	// fills the reader, and only its remainder bypasses it.
	ReadBufferSize int

	bufsOnce sync.Once
	bufs     sync.Pool // *[]byte of WriteBufferSize

	netOnce sync.Once
	netHTTP *http.Transport // https (NetHTTP)

	mu        sync.Mutex
	idle      map[string][]*conn // by host:port, the most recent last
	nIdle     int
	lastSweep time.Time
}

// Defaults of the zero fields.
const (
	defaultMaxIdle        = 1024
	defaultMaxIdlePerHost = 256
	defaultIdleTimeout    = 90 * time.Second
	defaultWriteBuffer    = 8 << 10
	// defaultReadBuffer is a connection's reader: an answer's head and
	// an SSE event fit; a body read into a larger buffer bypasses it.
	defaultReadBuffer = 1 << 10
	// maxHeaderBytes bounds an answer's head (1xx heads included), as
	// net/http's MaxResponseHeaderBytes default does.
	maxHeaderBytes = 10 << 20
)

// RoundTrip sends req and returns its answer, with a body read from the
// connection (http.RoundTripper).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return t.NetHTTP().RoundTrip(req)
	}
	ctx := req.Context()
	addr := hostPort(req)
	for again := false; ; again = true {
		if err := context.Cause(ctx); err != nil {
			closeBody(req)
			return nil, err
		}
		c, err := t.conn(ctx, addr, again)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		res, err := c.roundTrip(ctx, req)
		if err == nil {
			return res, nil
		}
		if again || !c.reused || c.nread > 0 || context.Cause(ctx) != nil || !resendable(req, c.written) {
			return nil, err
		}
		// The reused connection failed before any answer byte: the
		// backend closed it as the request went out. Once more, fresh.
		if req, err = rewound(req); err != nil {
			return nil, err
		}
	}
}

// resendable is net/http's rule for a request whose reused connection
// failed before any byte of an answer: it is sent again on a fresh one
// when none of it reached the connection (written == 0) and its body can
// be read again, or when it is idempotent (GET, HEAD, OPTIONS, TRACE, or
// with an Idempotency-Key) and replayable. Any other request fails: the
// gateway's retry rule decides (a POST may have reached the backend).
func resendable(req *http.Request, written int64) bool {
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if written == 0 || !replayable {
		return replayable
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// rewound returns req with its body from the start again (GetBody), or
// req itself when it has none.
func rewound(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	if req.GetBody == nil {
		return nil, errors.New("upstream: the backend closed the connection and the request body cannot be read again")
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r2 := *req
	r2.Body = body
	return &r2, nil
}

// CloseIdleConnections closes the pool's idle connections, and NetHTTP's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.nIdle = nil, 0
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.nc.Close()
		}
	}
	t.NetHTTP().CloseIdleConnections()
}

// IdleConns returns how many connections the pool holds idle.
func (t *Transport) IdleConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nIdle
}

// NetHTTP is the net/http transport that carries what this one does not
// (https backends), made once from t's fields: its dialer, its idle
// pool's sizes and timeout, its buffer sizes, no proxy (backends are
// addressed directly) and no transparent compression (bodies pass through
// as they come). Set its TLS settings before the first https request.
func (t *Transport) NetHTTP() *http.Transport {
	t.netOnce.Do(func() {
		maxIdle := 0 // net/http's "no cap"
		if t.MaxIdleConns >= 0 {
			maxIdle = t.maxIdle()
		}
		t.netHTTP = &http.Transport{
			Proxy:               nil,
			DialContext:         t.DialContext,
			MaxIdleConns:        maxIdle,
			MaxIdleConnsPerHost: t.maxIdlePerHost(),
			IdleConnTimeout:     t.idleTimeout(),
			DisableCompression:  true,
			WriteBufferSize:     t.WriteBufferSize,
			ReadBufferSize:      t.ReadBufferSize,
		}
	})
	return t.netHTTP
}

// conn returns a connection to addr: the pool's most recent live one
// (unless fresh), or a new one. It tells the request's trace (GotConn).
func (t *Transport) conn(ctx context.Context, addr string, fresh bool) (*conn, error) {
	trace := httptrace.ContextClientTrace(ctx)
	if !fresh {
		for {
			c, idleFor := t.take(addr)
			if c == nil {
				break
			}
			if !c.alive() {
				c.nc.Close()
				continue
			}
			c.reused = true
			if trace != nil && trace.GotConn != nil {
				trace.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: true, WasIdle: true, IdleTime: idleFor})
			}
			return c, nil
		}
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := newConn(t, addr, nc)
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: nc})
	}
	return c, nil
}

// take pops addr's most recent idle connection, closing those idle past
// the timeout, and returns it with how long it was idle.
func (t *Transport) take(addr string) (*conn, time.Duration) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.idle[addr]
	for len(cs) > 0 {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		cs = cs[:len(cs)-1]
		t.nIdle--
		if idleFor := now.Sub(c.idleAt); idleFor < t.idleTimeout() {
			t.setIdle(addr, cs)
			return c, idleFor
		}
		c.nc.Close()
	}
	t.setIdle(addr, cs)
	return nil, 0
}

func (t *Transport) setIdle(addr string, cs []*conn) {
	if len(cs) == 0 {
		delete(t.idle, addr)
		return
	}
	t.idle[addr] = cs
}

// put returns c to the pool, or closes it when the pool is full.
func (t *Transport) put(c *conn) {
	now := time.Now()
	c.idleAt = now
	t.mu.Lock()
	if now.Sub(t.lastSweep) > t.idleTimeout()/2 {
		t.sweepLocked(now)
	}
	cs := t.idle[c.addr]
	if t.nIdle >= t.maxIdle() || len(cs) >= t.maxIdlePerHost() {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	if t.idle == nil {
		t.idle = make(map[string][]*conn)
	}
	t.idle[c.addr] = append(cs, c)
	t.nIdle++
	t.mu.Unlock()
}

// sweepLocked closes every connection idle past the timeout (those of
// hosts no request goes to any more).
func (t *Transport) sweepLocked(now time.Time) {
	t.lastSweep = now
	for addr, cs := range t.idle {
		keep := cs[:0]
		for _, c := range cs {
			if now.Sub(c.idleAt) < t.idleTimeout() {
				keep = append(keep, c)
				continue
			}
			c.nc.Close()
			t.nIdle--
		}
		clear(cs[len(keep):])
		t.setIdle(addr, keep)
	}
}

func (t *Transport) idleTimeout() time.Duration {
	return orDefault(t.IdleConnTimeout, defaultIdleTimeout)
}
func (t *Transport) maxIdle() int {
	if t.MaxIdleConns < 0 {
		return math.MaxInt
	}
	return orDefault(t.MaxIdleConns, defaultMaxIdle)
}
func (t *Transport) maxIdlePerHost() int {
	return orDefault(t.MaxIdleConnsPerHost, defaultMaxIdlePerHost)
}

func orDefault[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// writeBuffer returns a pooled write buffer; putWriteBuffer gives it back.
func (t *Transport) writeBuffer() *[]byte {
	t.bufsOnce.Do(func() {
		size := orDefault(t.WriteBufferSize, defaultWriteBuffer)
		t.bufs.New = func() any { b := make([]byte, size); return &b }
	})
	return t.bufs.Get().(*[]byte)
}

func (t *Transport) putWriteBuffer(b *[]byte) { t.bufs.Put(b) }

// hostPort is req's backend address, port 80 when its URL names none.
func hostPort(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
