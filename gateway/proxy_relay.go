package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// copyBuffers are the proxy's copy buffers: 8 KiB (an SSE event is far
// smaller), pooled, because a short answer gives its buffer back at once
// and a stream gives it back whenever it waits on its backend.
var copyBuffers = newBufferPool(8 << 10)

// bufferPool is a pool of byte buffers of one size that counts those
// out of it (held): what the open answers hold at once.
type bufferPool struct {
	pool sync.Pool
	held atomic.Int64
}

func newBufferPool(size int) *bufferPool {
	p := &bufferPool{}
	p.pool.New = func() any { b := make([]byte, size); return &b }
	return p
}

func (p *bufferPool) get() *[]byte {
	p.held.Add(1)
	return p.pool.Get().(*[]byte)
}

func (p *bufferPool) put(b *[]byte) {
	p.held.Add(-1)
	p.pool.Put(b)
}

// dataAwaiter is a body that can wait for its next bytes holding no
// buffer (a stream's guard, through the usage meter): awaitData returns
// once a Read has something to return, or false at once when the body
// cannot wait so (the copy then keeps its buffer).
type dataAwaiter interface{ awaitData() bool }

// clientOnlyHeaders never reach a backend: the client's credentials
// (Authorization, API-key headers, cookies), the client's claim to an
// address (X-Real-IP; the gateway sets X-Forwarded-For itself), and
// Expect: the gateway already holds the whole body, and a backend's own
// 100 Continue relayed by the proxy would be the client's second.
var clientOnlyHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "X-Real-Ip", "Expect"}

// hopByHop are the headers of one connection, never relayed in either
// direction (RFC 9110 section 7.6.1), besides those a Connection header names.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forwardedHeaders are the client's claims about earlier hops; the gateway
// states the one hop it saw itself.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// The relay sends attempt a's request to its backend and relays the
// answer to w: sendHead, copyAnswer and bodyRelayed, run by the attempt's
// try (attempt.go). It is the gateway's reverse proxy: the request it
// builds carries the body the door read (an in-memory body goes out with
// its headers in one write) and the client's end-to-end headers less
// credentials, hop-by-hop and forwarding claims; the answer's headers and
// body pass through as they come, every write flushed (a stream's
// headers, and those of an answer of unknown length, at once; those of
// any other answer with its first bytes). The body is the attempt's
// (a.body; none: a GET, or the request's upload). How the relay ended
// (ended: the attempt's a.res) is a failure before any response header
// (failed), with nothing written, or a failure while copying the body
// (cut), once the status line is out: the edge then aborts the client's
// response (HTTP/1.1 closes the connection without the terminating chunk,
// HTTP/2 resets the stream). A stream the backend broke fails the copy
// too (errStreamCut), once its error event is out.

// sendHead sends attempt a's request (ctx is the upstream request's)
// and, once the backend's headers came, writes them to w (flushed when the answer is a stream or of
// unknown length): the part of the relay before its body, in a call of
// its own, so that its locals (the upstream request, the header copy)
// are off the stack while the body is copied, and a stream waiting for
// its next event parks with a shallow stack (the runtime halves a stack
// only when under a quarter of it is in use).
//
//go:noinline
func (g *Gateway) sendHead(ctx context.Context, w http.ResponseWriter, in *http.Request, a *attempt) (*http.Response, error) {
	x := a.x
	// One framing upstream: the length of the bytes the door read, even
	// when the client sent them chunked.
	var out io.ReadCloser = http.NoBody // a GET: no framing at all
	var getBody func() (io.ReadCloser, error)
	length := int64(len(a.body))
	switch {
	case x.upload != nil:
		out, getBody, length = x.upload.attach()
	case len(a.body) > 0:
		out, getBody = &sentBody{a: a}, a.bodyAgain
	}
	req := (&http.Request{
		Method:        in.Method,
		URL:           backendURL(a.backend.URL, in.URL),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        upstreamHeader(in, a),
		Body:          out,
		GetBody:       getBody,
		ContentLength: length,
	}).WithContext(a.traceConn(ctx))
	if a.span != nil {
		// vLLM's span is the attempt's child. Untraced, the client's
		// traceparent passes through as it came.
		g.tr.inject(a, req.Header)
	}
	res, err := g.upstream.RoundTrip(req)
	if err == nil && res.StatusCode == http.StatusSwitchingProtocols {
		// The gateway never asks for an upgrade (Upgrade is hop-by-hop).
		res.Body.Close()
		err = errors.New("the backend switched protocols unasked")
	}
	if err != nil {
		return nil, err
	}
	// The upstream request (its header, its context) is not needed once
	// its answer came: an open stream does not keep it.
	res.Request = nil
	dropHopByHop(res.Header)
	flushHeaders := g.onResponse(res, a)
	h := w.Header()
	for k, vs := range res.Header {
		if have := h[k]; have != nil {
			h[k] = append(have, vs...)
		} else {
			h[k] = vs // the answer's own: shared, not copied
		}
	}
	if len(res.Trailer) > 0 {
		names := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			names = append(names, k)
		}
		h.Add("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if flushHeaders {
		// A stream's headers go out before its first event; an answer
		// of known length sends them with its first bytes.
		flush(w)
	}
	return res, nil
}

// bodyRelayed ends a relay whose body was copied (cut: the copy's
// failure): it closes the body, sets the answer's trailers on a whole
// one, and notes how the relay ended.
//
//go:noinline
func (g *Gateway) bodyRelayed(w http.ResponseWriter, in *http.Request, a *attempt, res *http.Response, cut error) {
	res.Body.Close() // before the trailers: closing reads them
	if cut != nil {
		g.ended(in, a, relayResult{cut: cut})
		return
	}
	if len(res.Trailer) > 0 {
		relayTrailers(w.Header(), res.Trailer)
	}
	g.ended(in, a, relayResult{})
}

// relayTrailers sets the answer's trailers on h.
func relayTrailers(h, trailer http.Header) {
	for k, vs := range trailer {
		h[http.TrailerPrefix+k] = vs
	}
}

// sentBody is an attempt's request body as the transport reads it: from
// the attempt (a.body), so that the bytes have one holder, which drops
// them once the answer's headers came (dropBody), however long the
// answer then takes. The transport's rewind for a retry on a fresh
// connection (bodyAgain) reads them from the start again.
type sentBody struct {
	a    *attempt
	off  int
	done bool
}

func (b *sentBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n := copy(p, b.a.body[b.off:])
	b.off += n
	if b.off == len(b.a.body) {
		b.done = true
		b.a.bodyRead.Store(true)
	}
	return n, nil
}

func (b *sentBody) Close() error { return nil }

// bodyAgain is the request's GetBody: the body from its start.
func (a *attempt) bodyAgain() (io.ReadCloser, error) { return &sentBody{a: a}, nil }

// dropBody lets go of the request body once the answer's headers came
// (no attempt follows one that was answered) and the transport has read
// it all (a backend may answer before it has read the request). The
// exchange drops it too: an open stream holds no copy of its request.
func (a *attempt) dropBody() {
	if a.bodyRead.Load() {
		a.body, a.x.body = nil, nil
	}
}

// relayResult is how a relay ended: failed, a transport failure before
// any response header (nothing was written); cut, the copy of the answer
// failing after its headers went out; neither, the answer relayed whole.
type relayResult struct {
	failed, cut error
}

// traceConn returns ctx with a hook that notes whether the transport gave
// the attempt a reused idle connection (neverSent).
func (a *attempt) traceConn(ctx context.Context) context.Context {
	a.conn.GotConn = func(c httptrace.GotConnInfo) { a.reusedIdle = c.Reused && c.WasIdle }
	return httptrace.WithClientTrace(ctx, &a.conn)
}

// upstreamHeader is the header a backend gets: the client's end-to-end
// headers (values shared, not copied: neither side changes them), less its
// credentials, the hop-by-hop ones and those its Connection header names,
// its forwarding claims and the gateway's own X-Maitred- headers; plus the
// one hop the gateway saw (X-Forwarded-*), the backend's own key and a
// fresh request id.
func upstreamHeader(in *http.Request, a *attempt) http.Header {
	h := make(http.Header, len(in.Header)+6)
	for k, vs := range in.Header {
		if !relayedHeader(k) {
			continue
		}
		h[k] = vs
	}
	for f := range headerTokens(in.Header["Connection"]) {
		delete(h, http.CanonicalHeaderKey(f))
	}
	if hasToken(in.Header["Te"], "trailers") {
		h["Te"] = teTrailers // the one TE a hop may pass on
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = emptyValue // not Go's default (none came, or Connection named it)
	}
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		h["X-Forwarded-For"] = []string{ip}
	}
	h["X-Forwarded-Host"] = []string{in.Host}
	if in.TLS != nil {
		h["X-Forwarded-Proto"] = httpsValue
	} else {
		h["X-Forwarded-Proto"] = httpValue
	}
	if a.backend.Key != "" {
		h["Authorization"] = []string{"Bearer " + a.backend.Key}
	}
	a.upstreamID = newID()
	h["X-Request-Id"] = []string{a.upstreamID}
	return h
}

// Header values every upstream request shares: read only.
var (
	teTrailers = []string{"trailers"}
	emptyValue = []string{""}
	httpValue  = []string{"http"}
	httpsValue = []string{"https"}
)

// headerTokens yields the elements of a comma-separated header's values,
// trimmed, without their parameters, empty ones skipped.
func headerTokens(values []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, v := range values {
			for f := range strings.SplitSeq(v, ",") {
				f, _, _ = strings.Cut(f, ";")
				if f = textproto.TrimString(f); f != "" && !yield(f) {
					return
				}
			}
		}
	}
}

// hasToken reports whether a comma-separated header's values name token
// (case-insensitive).
func hasToken(values []string, token string) bool {
	for f := range headerTokens(values) {
		if strings.EqualFold(f, token) {
			return true
		}
	}
	return false
}

// unrelayed are the client headers (canonical names) that never reach a
// backend, besides the gateway's own X-Maitred- ones.
var unrelayed = func() map[string]bool {
	m := map[string]bool{}
	for _, list := range [][]string{hopByHop, clientOnlyHeaders, forwardedHeaders} {
		for _, k := range list {
			m[k] = true
		}
	}
	return m
}()

// relayedHeader reports whether a client's header (canonical name) may
// reach a backend.
func relayedHeader(k string) bool {
	return !unrelayed[k] && !strings.HasPrefix(k, "X-Maitred-") // the gateway's own (priority, probe marks)
}

// dropHopByHop removes a backend answer's hop-by-hop headers and those its
// Connection header names.
func dropHopByHop(h http.Header) {
	for f := range headerTokens(h["Connection"]) {
		h.Del(f)
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
}

// backendURL is the request's URL on backend b: b's scheme and host, b's
// path joined with the request's, and both queries (a request's empty
// "?" kept).
func backendURL(b, in *url.URL) *url.URL {
	u := &url.URL{Scheme: b.Scheme, Host: b.Host, RawQuery: in.RawQuery, ForceQuery: in.ForceQuery}
	switch {
	case b.RawQuery == "":
	case in.RawQuery == "":
		u.RawQuery = b.RawQuery
	default:
		u.RawQuery = b.RawQuery + "&" + in.RawQuery
	}
	if b.Path == "" || b.Path == "/" {
		u.Path, u.RawPath = in.Path, in.RawPath
		return u
	}
	if b.RawPath == "" && in.RawPath == "" {
		u.Path = joinSlash(b.Path, in.Path)
		return u
	}
	// With an escaped form on either side, the slash between them is
	// judged on the escaped forms (a backend path ending in %2F ends in no
	// slash there), and the decoded path joined the same way, so that the
	// two stay one path.
	bp, ip := b.EscapedPath(), in.EscapedPath()
	switch bs, is := strings.HasSuffix(bp, "/"), strings.HasPrefix(ip, "/"); {
	case bs && is:
		u.Path, u.RawPath = b.Path+in.Path[1:], bp+ip[1:]
	case !bs && !is:
		u.Path, u.RawPath = b.Path+"/"+in.Path, bp+"/"+ip
	default:
		u.Path, u.RawPath = b.Path+in.Path, bp+ip
	}
	return u
}

// joinSlash joins two path parts with exactly one slash between them.
func joinSlash(a, b string) string {
	switch as, bs := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/"); {
	case as && bs:
		return a + b[1:]
	case !as && !bs && b != "":
		return a + "/" + b
	}
	return a + b
}

// onResponse runs when a backend's headers came: it stops the first-byte
// timer, notes the status, sets Server-Timing, and wraps the body in its
// guard (a stream's or an answer's) and the usage meter. It returns
// whether the headers go to the client before any body: for a stream, or
// an answer of unknown length.
func (g *Gateway) onResponse(res *http.Response, a *attempt) (flushHeaders bool) {
	x := a.x
	a.firstByte.Stop()
	a.dropBody()
	a.upstreamStatus = res.StatusCode
	a.headersAt = time.Now()
	// Server-Timing: the phases known before the headers go out.
	// For a non-streaming answer "backend" is the whole generation.
	res.Header["Server-Timing"] = []string{serverTimingValue(x, a)}
	// The client's id is already on the response (serve set it);
	// the backend's echo of its own id would add a second value.
	delete(res.Header, "X-Request-Id")
	idle := x.rt.streamIdle
	onIdle := func() { a.stalled.Store(true); a.cancel() }
	events := isEventStream(res.Header.Get("Content-Type"))
	if res.StatusCode == http.StatusOK && events {
		guard := newStreamGuard(res.Body, x.clientCtx, func(cause error) []byte {
			return g.streamBroken(a, cause)
		})
		guard.isEnd = x.streamShape().end
		guard.onEvents = a.clockEvents
		if idle > 0 {
			guard.watchIdle(idle, onIdle)
		}
		res.Body = a.usage.follow(x, res.StatusCode, guard, true)
		return true
	}
	res.Body = a.usage.follow(x, res.StatusCode,
		newBodyGuard(res.Body, idle, onIdle, func(cause error) { g.bodyBroken(a, cause) }), false)
	return events || res.ContentLength < 0
}

// clockEvents stamps the attempt's clock with complete events as they
// arrive: the first is the first token, the last the end of decode.
func (a *attempt) clockEvents(n int, at time.Time) {
	if a.events == 0 {
		a.firstEventAt = at
	}
	a.events += n
	a.lastEventAt = at
	if a.lease != nil {
		a.lease.Charge(n) // an event is about a token: settled to the usage at the end
	}
}

// copyAnswer copies a backend's body to the client through a buffer from
// bufs, flushing each write: what the backend sent is the client's at
// once, and a body the backend cuts short reaches the client as far as it
// came, after its status line. A body that awaits its data (a stream)
// is awaited with the buffer given back, and flushed without it, so that
// an open stream waiting for its next event or for the client holds
// none. It returns the first read error (other
// than EOF) or write error.
func copyAnswer(w http.ResponseWriter, body io.Reader, bufs *bufferPool) error {
	aw, _ := body.(dataAwaiter)
	var bp *[]byte
	defer func() {
		if bp != nil {
			bufs.put(bp)
		}
	}()
	for {
		if aw != nil {
			if bp != nil {
				bufs.put(bp)
				bp = nil
			}
			if !aw.awaitData() {
				aw = nil
			}
		}
		if bp == nil {
			bp = bufs.get()
		}
		n, rerr := body.Read(*bp)
		if n > 0 {
			m, werr := w.Write((*bp)[:n])
			if werr == nil && m < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return werr
			}
			if aw != nil {
				// The flush may wait on the client (over HTTP/2, on
				// its connection's one writer, shared with up to 250
				// streams): a stream waits for it holding no buffer.
				bufs.put(bp)
				bp = nil
			}
			flush(w)
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// flush pushes what w holds to the client; a failure shows in the next
// write (the recorder keeps it).
func flush(w http.ResponseWriter) {
	switch f := w.(type) {
	case interface{ FlushError() error }:
		_ = f.FlushError()
	case http.Flusher:
		f.Flush()
	}
}

func isEventStream(ct string) bool {
	return strings.HasPrefix(ct, "text/event-stream")
}

// streamBroken is called when a backend stream ends without its last
// event; it returns the error event that ends the client's stream, naming
// why: the drain deadline, a silent backend, or a backend that went away.
// The guard then fails the copy and the proxy aborts the response.
func (g *Gateway) streamBroken(a *attempt, cause error) []byte {
	x := a.x
	var f *failure
	var msg string
	switch {
	case a.shutdown.Load():
		f = failShuttingDown
		msg = "The gateway is shutting down and ended this stream; the answer is truncated."
	case a.stalled.Load():
		f = failStalled
		msg = fmt.Sprintf("The backend sent nothing for %s; the stream was cancelled and the answer is truncated.", x.rt.streamIdle)
	default:
		f = failDisconnected
		msg = "The backend stream broke before it was complete"
		if cause != nil {
			msg += " (" + cause.Error() + ")"
		}
		msg += "; the answer is truncated."
	}
	a.broke, a.inStream = f.code, true
	x.rt.metrics.streamErrors.WithLabelValues(f.code).Inc()
	if f != failShuttingDown {
		g.backendError(a, brokenKind(f, true))
	}
	e := &Error{Type: typeServer, Code: f.wireCode(), Message: msg + " Request id " + x.id + "."}
	return x.streamShape().breakEvents(e)
}

// bodyBroken is called when reading a backend's non-SSE body fails after
// its headers went out: it was silent for the idle timeout (backend_stalled),
// ended short of its length or was cut (backend_disconnected), or the drain
// deadline ended it. The proxy then aborts the client's connection; the
// request is logged with that code and counted against the backend. A read
// that failed because the client left (or stopped reading, which cancels
// the request) is the client's and is not reported here.
func (g *Gateway) bodyBroken(a *attempt, cause error) {
	x := a.x
	if x.clientCtx.Err() != nil || x.clientWriteErr != nil {
		return
	}
	switch {
	case a.shutdown.Load():
		a.broke = failShuttingDown.code
	case a.stalled.Load():
		a.broke = failStalled.code
		g.backendError(a, brokenKind(failStalled, false))
	default:
		a.broke = failDisconnected.code
		g.backendError(a, brokenKind(failDisconnected, false))
	}
}

// brokenKind is the kind maitred_backend_errors_total counts an answer
// broken after its headers under: where it broke (a stream or a body)
// and how (stalled, disconnected), e.g. stream_stalled.
func brokenKind(f *failure, stream bool) string {
	where := "body_"
	if stream {
		where = "stream_"
	}
	return where + strings.TrimPrefix(f.code, "backend_")
}
