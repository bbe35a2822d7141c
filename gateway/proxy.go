package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/triage"
)

type ctxKey struct{}

// completions handles POST /v1/chat/completions and /v1/completions: read
// the body once, put it through the door (admission.Door: shape, model,
// template, context), pick a ready backend and forward the bytes the door
// approved, which are the client's own unless max_tokens was clamped.
func (g *Gateway) completions(ep admission.Endpoint) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		if e := checkContentType(r.Header.Get("Content-Type")); e != nil {
			return g.rejected(x, e)
		}
		body, err := g.readBody(w, r, x)
		x.bytesIn = len(body)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Status == http.StatusRequestEntityTooLarge {
				return g.rejected(x, e)
			}
			return err
		}
		x.readDone = time.Now()
		dec, rej := g.door.Check(ep, body)
		x.doorDone = time.Now()
		if rej != nil {
			if rej.Model != "" {
				x.rt = g.models[rej.Ref]
			}
			if ci := rej.Context; ci != nil {
				x.promptTokens, x.maxTokens, x.maxModelLen = ci.PromptTokens, ci.MaxTokens, ci.MaxModelLen
			}
			return g.rejected(x, rejection(rej))
		}
		rt := g.models[dec.Ref]
		x.rt, x.stream, x.promptTokens, x.maxTokens = rt, dec.Stream, dec.PromptTokens, dec.MaxTokens
		if dec.Uncounted != admission.Counted {
			x.uncounted = dec.Uncounted.String()
			rt.metrics.uncounted.WithLabelValues(x.uncounted).Inc()
		}
		if dec.ClampedFrom > 0 {
			w.Header().Set("X-Maitred-Max-Tokens-Clamped", strconv.Itoa(dec.MaxTokens))
		}
		rt.metrics.inFlight.Inc()
		defer rt.metrics.inFlight.Dec()
		class, className := g.class(r)
		t := ticket(rt, dec, len(body), class)
		if rt.affinity > 0 {
			t.Affinity = prefixHash(rt, ep, dec.Request)
		}
		err = g.dispatch(w, r, x, t, className, dec.Body)
		if err == nil && dec.Uncounted == admission.Counted {
			g.checker.maybeCheck(rt, x.att.backend, ep, dec)
		}
		return err
	}
}

// dispatch waits in the model's queue for a backend with room, then sends
// body to it. Each try is an attempt of its own; a backend that cannot be
// connected to has received nothing, so the request goes back for another
// backend; once it has reached one it is never sent again.
func (g *Gateway) dispatch(w http.ResponseWriter, r *http.Request, x *exchange, t admission.Ticket, class string, body []byte) error {
	rt := x.rt
	var lastErr error
	for {
		lease, o := rt.pool.Acquire(r.Context(), t)
		rt.metrics.admissions.WithLabelValues(o.String()).Inc()
		if o != admission.Admitted {
			if lastErr != nil && o == admission.NoBackend {
				return lastErr
			}
			return g.queueError(rt, o, t)
		}
		rt.metrics.queueWait.WithLabelValues(class).Observe(lease.Waited.Seconds())
		a := x.newAttempt(rt.backends[lease.Slot.Index])
		res := g.forwardLease(w, r, a, lease, body)
		if res.err == nil {
			g.fleet.ReportSuccess(a.backend)
			return nil
		}
		if !res.retry {
			return res.err
		}
		g.fleet.ReportConnectFailure(rt.fm, a.backend, a.proxyErr)
		lastErr = res.err
		x.retries++
		t.Exclude = append(t.Exclude, lease.Slot.Index)
	}
}

// forwardLease runs attempt a while holding its lease and its backend's
// in-flight count. Both are released in a defer: the proxy aborts a broken
// response by panicking with http.ErrAbortHandler, and capacity must not
// leak then.
func (g *Gateway) forwardLease(w http.ResponseWriter, r *http.Request, a *attempt, lease *admission.Lease, body []byte) (res attemptResult) {
	defer a.backend.Acquire()()
	defer func() {
		p := recover()
		lease.Release(a.poolResult(res, p != nil))
		if p != nil {
			panic(p)
		}
	}()
	return g.forward(w, r, a, body)
}

// rejected counts a door rejection in maitred_rejections_total under its
// outcome (an admission.Reason) and returns it for serve to render: the
// metric, the access log and triage name it alike.
func (g *Gateway) rejected(x *exchange, e *Error) error {
	g.metricsOf(x).rejections.WithLabelValues(e.outcome()).Inc()
	return e
}

// forward runs attempt a: it sends body to a.backend through the reverse
// proxy and returns how the try ended.
//
// The upstream request has its own context: cancelled when the client
// leaves, when no response headers came within the first-byte timeout, when
// a stream goes silent for the idle timeout, and at the drain deadline.
// Each of these is told apart afterwards by the flag its timer set on the
// attempt.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, a *attempt, body []byte) attemptResult {
	x := a.x
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	a.cancel = cancel
	stopHard := context.AfterFunc(g.stopCtx, func() { a.shutdown.Store(true); cancel() })
	defer stopHard()
	a.firstByte = time.AfterFunc(x.rt.firstByte, func() { a.timedOut.Store(true); cancel() })
	defer a.firstByte.Stop()
	if rec, ok := w.(*recorder); ok {
		// A client that stops reading must not hold the backend forever:
		// each write to it gets stream_idle_timeout to complete.
		rec.writeIdle = x.rt.streamIdle
	}

	x.sentAt, x.headersAt, x.firstEventAt, x.lastEventAt, x.events = time.Now(), time.Time{}, time.Time{}, time.Time{}, 0
	out := r.WithContext(context.WithValue(ctx, ctxKey{}, a))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	// One framing upstream: the length of the bytes the door read, even
	// when the client sent them chunked.
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	out.Trailer = nil
	g.proxy.ServeHTTP(w, out)
	if a.proxyErr != nil {
		return g.classify(r, a)
	}
	return attemptResult{}
}

func (g *Gateway) notReady(rt *modelRuntime) *Error {
	var states []string
	for _, b := range rt.backends {
		s := b.Status()
		st := b.URL.Host + " " + s.State.String()
		if s.Reason != "" {
			st += " (" + s.Reason + ")"
		}
		states = append(states, st)
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelNotReady, Layer: triage.LayerUnready,
		Message:    fmt.Sprintf("Model %q has no ready backend: %s.", rt.name, strings.Join(states, "; ")),
		RetryAfter: g.cfg.Health.Interval.D()}
}

// classify turns a transport failure before any response header into the
// gateway's answer: a client that left gets nothing (logged as 499), the
// drain deadline 503, a backend that sent no headers in time 504, one that
// could not be reached or failed before answering 502. Each has its own
// code and its own kind in maitred_backend_errors_total. Only a request
// that never reached a live backend may be retried.
func (g *Gateway) classify(r *http.Request, a *attempt) attemptResult {
	x, err := a.x, a.proxyErr
	if r.Context().Err() != nil {
		return attemptResult{err: errClientGone}
	}
	host := a.backend.URL.Host
	var oe *net.OpError
	switch {
	case a.shutdown.Load():
		return attemptResult{err: &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeShuttingDown, Layer: triage.LayerNone,
			Message: "The gateway is shutting down; retry on another instance.", RetryAfter: time.Second, Cause: err}}
	case a.timedOut.Load():
		g.backendError(a, "first_byte_timeout")
		// A stream's headers come at once: none in time is a connection
		// that failed; a non-streaming answer's come after generating.
		layer := triage.LayerPrefill
		if x.stream {
			layer = triage.LayerConnect
		}
		return attemptResult{err: &Error{Status: http.StatusGatewayTimeout, Type: typeServer, Code: codeBackendTimeout, Layer: layer,
			Message: fmt.Sprintf("Backend %s of model %q sent no response headers within %s.", host, x.rt.name, x.rt.firstByte), Cause: err}}
	case errors.As(err, &oe) && (oe.Op == "dial" || oe.Op == "write" || oe.Op == "readfrom"):
		// Refused, or written into a connection the backend had already
		// closed (a pooled connection to a process that died): the request
		// never reached a live server, so another backend may take it.
		g.backendError(a, "connect_failed")
		return attemptResult{retry: true, err: &Error{Status: http.StatusBadGateway, Type: typeServer, Code: codeBackendDown, Layer: triage.LayerConnect,
			Message: fmt.Sprintf("Backend %s of model %q could not be reached: %s.", host, x.rt.name, dialReason(err)), Cause: err}}
	default:
		g.backendError(a, "failed_before_headers")
		return attemptResult{err: &Error{Status: http.StatusBadGateway, Type: typeServer, Code: codeBackendDown, Layer: triage.LayerConnect,
			Message: fmt.Sprintf("Backend %s of model %q failed before answering.", host, x.rt.name), Cause: err}}
	}
}

func (g *Gateway) backendError(a *attempt, kind string) {
	a.x.rt.metrics.backendErrors.WithLabelValues(a.backend.URL.Host, kind).Inc()
}

func dialReason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		return "connection closed by the backend"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "connect timed out"
	}
	return "connect failed"
}

// copyBuffers are the proxy's copy buffers: 8 KiB rather than
// ReverseProxy's default 32 KiB, because a stream holds its buffer for as
// long as it is open (an SSE event is far smaller), and pooled, because a
// short request gives it back at once.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// clientOnlyHeaders never reach a backend: the client's credentials
// (Authorization, API-key headers, cookies), the client's claim to an
// address (X-Real-IP; the gateway sets X-Forwarded-For itself), and
// Expect: the gateway already holds the whole body, and a backend's own
// 100 Continue relayed by the proxy would be the client's second.
var clientOnlyHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "X-Real-Ip", "Expect"}

// newProxy builds the one reverse proxy every backend request goes through.
// The backend is chosen per request and travels in the request context.
func (g *Gateway) newProxy(rt http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: rt,
		// Flush every write: SSE events must reach the client as they come.
		FlushInterval: -1,
		BufferPool:    copyBuffers{},
		Rewrite: func(pr *httputil.ProxyRequest) {
			a := pr.In.Context().Value(ctxKey{}).(*attempt)
			pr.SetURL(a.backend.URL)
			pr.SetXForwarded()
			h := pr.Out.Header
			// The client's credentials are for the gateway, never for a
			// backend; the backend gets its own key from the config.
			for _, k := range clientOnlyHeaders {
				h.Del(k)
			}
			for k := range h {
				if strings.HasPrefix(k, "X-Maitred-") {
					delete(h, k) // the gateway's own (priority, probe marks)
				}
			}
			if a.backend.Key != "" {
				h.Set("Authorization", "Bearer "+a.backend.Key)
			}
			a.upstreamID = newID()
			h.Set("X-Request-Id", a.upstreamID)
		},
		ModifyResponse: func(res *http.Response) error {
			a := res.Request.Context().Value(ctxKey{}).(*attempt)
			x := a.x
			a.firstByte.Stop()
			a.upstreamStatus = res.StatusCode
			x.headersAt = time.Now()
			// Server-Timing: the phases known before the headers go out.
			// For a non-streaming answer "backend" is the whole generation.
			res.Header.Set("Server-Timing", fmt.Sprintf("door;dur=%.3f, queue;dur=%.3f, backend;dur=%.3f",
				ms(x.doorDone.Sub(x.readDone)), ms(x.sentAt.Sub(x.doorDone)), ms(x.headersAt.Sub(x.sentAt))))
			// The client's id is already on the response (serve set it);
			// the backend's echo of its own id would add a second value.
			res.Header.Del("X-Request-Id")
			idle := x.rt.streamIdle
			onIdle := func() { a.stalled.Store(true); a.cancel() }
			if res.StatusCode == http.StatusOK && isEventStream(res.Header.Get("Content-Type")) {
				guard := newStreamGuard(res.Body, x.clientCtx, func(cause error) []byte {
					return g.streamBroken(a, cause)
				})
				guard.onEvents = func(n int, at time.Time) {
					if x.events == 0 {
						x.firstEventAt = at
					}
					x.events += n
					x.lastEventAt = at
				}
				if idle > 0 {
					guard.watchIdle(idle, onIdle)
				}
				res.Body = guard
			} else {
				res.Body = newBodyGuard(res.Body, idle, onIdle, func(cause error) { g.bodyBroken(a, cause) })
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a := r.Context().Value(ctxKey{}).(*attempt)
			a.proxyErr = err
		},
		ErrorLog: mustStdLogAt(g.log.Named("proxy"), zap.WarnLevel),
	}
}

func isEventStream(ct string) bool {
	return strings.HasPrefix(ct, "text/event-stream")
}

// streamBroken is called when a backend stream ends without [DONE]; it
// returns the events that end the client's stream, naming why: the drain
// deadline, a silent backend, or a backend that went away.
func (g *Gateway) streamBroken(a *attempt, cause error) []byte {
	x := a.x
	var code, kind, msg string
	switch {
	case a.shutdown.Load():
		code, kind = codeShuttingDown, "shutdown"
		msg = "The gateway is shutting down and ended this stream; the answer is truncated."
	case a.stalled.Load():
		code, kind = codeStalled, "stream_stalled"
		msg = fmt.Sprintf("The backend sent nothing for %s; the stream was cancelled and the answer is truncated.", x.rt.streamIdle)
	default:
		code, kind = codeDisconnected, "stream_disconnected"
		msg = "The backend stream broke before it was complete"
		if cause != nil {
			msg += " (" + cause.Error() + ")"
		}
		msg += "; the answer is truncated."
	}
	x.streamBroke = code
	x.rt.metrics.streamErrors.WithLabelValues(code).Inc()
	if kind != "shutdown" {
		g.backendError(a, kind)
	}
	e := &Error{Type: typeServer, Code: code, Message: msg + " Request id " + x.id + "."}
	return e.sseEvent()
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
		x.streamBroke = codeShuttingDown
	case a.stalled.Load():
		x.streamBroke = codeStalled
		g.backendError(a, "body_stalled")
	default:
		x.streamBroke = codeDisconnected
		g.backendError(a, "body_disconnected")
	}
}

func mustStdLogAt(l *zap.Logger, lvl zapcore.Level) *log.Logger {
	std, err := zap.NewStdLogAt(l, lvl)
	if err != nil {
		return zap.NewStdLog(l)
	}
	return std
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
