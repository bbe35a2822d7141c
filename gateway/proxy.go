package gateway

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ctxKey carries a request's current attempt to the proxy's hooks.
type ctxKey struct{}

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
			if a.span != nil {
				// vLLM's span is the attempt's child. Untraced, the
				// client's traceparent passes through as it came.
				g.tr.inject(a, h)
			}
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
				guard.isEnd = x.streamShape().end
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
				res.Body = a.usage.follow(x, res.StatusCode, guard, true)
			} else {
				res.Body = a.usage.follow(x, res.StatusCode,
					newBodyGuard(res.Body, idle, onIdle, func(cause error) { g.bodyBroken(a, cause) }), false)
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
