package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/ojson"
)

type ctxKey struct{}

// completions handles POST /v1/chat/completions and /v1/completions: read
// the body once, put it through the door (admission.Door: shape, model,
// template, context), pick a ready backend and forward the bytes the door
// approved, which are the client's own unless max_tokens was clamped.
func (g *Gateway) completions(ep admission.Endpoint) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
			g.rejected(x, admission.UnsupportedMedia)
			return err
		}
		body, err := readBody(w, r, g.cfg.MaxBodyBytes)
		x.bytesIn = len(body)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Status == http.StatusRequestEntityTooLarge {
				g.rejected(x, admission.TooLarge)
			}
			return err
		}
		dec, rej := g.door.Check(ep, body)
		if rej != nil {
			if rej.Reason != admission.UnknownModel && rej.Reason != admission.MissingModel {
				x.model = modelOf(body)
			}
			if ci := rej.Context; ci != nil {
				x.promptTokens, x.maxTokens, x.maxModelLen = ci.PromptTokens, ci.MaxTokens, ci.MaxModelLen
			}
			g.rejected(x, rej.Reason)
			return rejection(rej)
		}
		x.model, x.stream, x.promptTokens, x.maxTokens = dec.Model, dec.Stream, dec.PromptTokens, dec.MaxTokens
		if dec.Uncounted != admission.Counted {
			x.uncounted = dec.Uncounted.String()
			g.metrics.uncounted.WithLabelValues(dec.Model, x.uncounted).Inc()
		}
		if dec.ClampedFrom > 0 {
			w.Header().Set("X-Maitred-Max-Tokens-Clamped", strconv.Itoa(dec.MaxTokens))
		}
		m, _ := g.fleet.Model(dec.Model)
		g.metrics.inFlight.WithLabelValues(m.Name).Inc()
		defer g.metrics.inFlight.WithLabelValues(m.Name).Dec()
		b := m.Pick()
		if b == nil {
			return g.notReady(m)
		}
		x.backend = b
		release := b.Acquire()
		defer release()
		err = g.forward(w, r, x, dec.Body)
		if err == nil && dec.Uncounted == admission.Counted {
			g.checker.maybeCheck(b, ep, dec, body)
		}
		return err
	}
}

// rejected counts a door rejection.
func (g *Gateway) rejected(x *exchange, reason admission.Reason) {
	x.outcome = reason.String()
	g.metrics.rejections.WithLabelValues(x.model, reason.String()).Inc()
}

// modelOf returns the configured model a rejected body named, for labels.
func modelOf(body []byte) string {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return ""
	}
	if mv := v.Get("model"); mv != nil && mv.Kind == ojson.String {
		return mv.Str
	}
	return ""
}

// forward sends body to x.backend through the reverse proxy and returns the
// classified transport error, if any.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, x *exchange, body []byte) error {
	out := r.WithContext(context.WithValue(r.Context(), ctxKey{}, x))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	g.proxy.ServeHTTP(w, out)
	if x.proxyErr != nil {
		return g.classify(r, x)
	}
	return nil
}

func (g *Gateway) notReady(m *fleet.Model) *Error {
	var states []string
	for _, b := range m.Backends {
		s := b.Status()
		st := b.URL.Host + " " + s.State.String()
		if s.Reason != "" {
			st += " (" + s.Reason + ")"
		}
		states = append(states, st)
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelNotReady,
		Message:    fmt.Sprintf("Model %q has no ready backend: %s.", m.Name, strings.Join(states, "; ")),
		RetryAfter: g.cfg.Health.Interval.D()}
}

// classify turns a transport failure into the gateway's answer: a client
// that left gets nothing, a backend that never answered in time 504, one
// that could not be reached or broke before its headers 502.
func (g *Gateway) classify(r *http.Request, x *exchange) error {
	err := x.proxyErr
	if r.Context().Err() != nil {
		return errClientGone
	}
	host := x.backend.URL.Host
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &oe) && oe.Op == "dial":
		return &Error{Status: http.StatusBadGateway, Type: typeServer, Code: codeBackendDown,
			Message: fmt.Sprintf("Backend %s of model %q could not be reached: %s.", host, x.model, dialReason(err)), Cause: err}
	case errors.As(err, &ne) && ne.Timeout():
		return &Error{Status: http.StatusGatewayTimeout, Type: typeServer, Code: codeBackendTimeout,
			Message: fmt.Sprintf("Backend %s of model %q sent no response headers within %s.", host, x.model, g.cfg.BackendHeaderTimeout.D()), Cause: err}
	default:
		return &Error{Status: http.StatusBadGateway, Type: typeServer, Code: codeBackendDown,
			Message: fmt.Sprintf("Backend %s of model %q failed before answering.", host, x.model), Cause: err}
	}
}

func dialReason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "connect timed out"
	}
	return "connect failed"
}

func checkContentType(ct string) error {
	if ct == "" {
		return nil // curl -d without -H and many scripts send none; the body decides
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeUnsupportedMedia,
		Message: fmt.Sprintf("Content-Type must be application/json, got %q.", ct)}
}

// readBody reads the whole body within the limit. The gateway needs the
// whole JSON before it can route, and forwards the same bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	var buf []byte
	if r.ContentLength > 0 {
		buf = make([]byte, 0, r.ContentLength+1)
	} else {
		buf = make([]byte, 0, 4096)
	}
	for {
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, tooLarge(limit)
			}
			if r.Context().Err() != nil {
				return nil, errClientGone
			}
			return nil, badRequest("body_read_error", "", "The request body could not be read: %v", err)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

func tooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: codeRequestTooLarge,
		Message: fmt.Sprintf("The request body exceeds the gateway's limit of %d bytes.", limit)}
}

// newProxy builds the one reverse proxy every backend request goes through.
// The backend is chosen per request and travels in the request context.
func (g *Gateway) newProxy(rt http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: rt,
		// Flush every write: SSE events must reach the client as they come.
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			x := pr.In.Context().Value(ctxKey{}).(*exchange)
			pr.SetURL(x.backend.URL)
			pr.SetXForwarded()
			h := pr.Out.Header
			// The client's credentials are for the gateway, never for a
			// backend; the backend gets its own key from the config.
			h.Del("Authorization")
			h.Del("Cookie")
			if x.backend.Key != "" {
				h.Set("Authorization", "Bearer "+x.backend.Key)
			}
			h.Set("X-Request-Id", x.id)
		},
		ModifyResponse: func(res *http.Response) error {
			x := res.Request.Context().Value(ctxKey{}).(*exchange)
			res.Header.Set("X-Request-Id", x.id)
			if res.StatusCode == http.StatusOK && isEventStream(res.Header.Get("Content-Type")) {
				res.Body = newStreamGuard(res.Body, res.Request.Context(), func(cause error) []byte {
					return g.streamBroken(x, cause)
				})
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			x := r.Context().Value(ctxKey{}).(*exchange)
			x.proxyErr = err
		},
		ErrorLog: mustStdLogAt(g.log.Named("proxy"), zap.WarnLevel),
	}
}

func isEventStream(ct string) bool {
	return strings.HasPrefix(ct, "text/event-stream")
}

// streamBroken is called when a backend stream ends without [DONE]; it
// returns the events that end the client's stream.
func (g *Gateway) streamBroken(x *exchange, cause error) []byte {
	reason := "backend closed the stream without [DONE]"
	if cause != nil {
		reason = "backend stream failed: " + cause.Error()
	}
	x.streamBroke = reason
	g.metrics.streamErrors.WithLabelValues(x.model, "backend").Inc()
	e := &Error{Type: typeServer, Code: codeStreamBroken,
		Message: fmt.Sprintf("The backend stream broke before it was complete (%s); the answer is truncated. Request id %s.", reason, x.id)}
	return e.sseEvent()
}

func mustStdLogAt(l *zap.Logger, lvl zapcore.Level) *log.Logger {
	std, err := zap.NewStdLogAt(l, lvl)
	if err != nil {
		return zap.NewStdLog(l)
	}
	return std
}
