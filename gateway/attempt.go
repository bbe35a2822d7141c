package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/telemetry"
	"github.com/maitred-dev/maitred/triage"
)

// attempt is one try of a request at one backend, created where the try
// starts (dispatch, or /tokenize's pass-through) and owned by the
// request's goroutine. The proxy's hooks find it in the upstream request's
// context; the timers that cancel the upstream request run on other
// goroutines and only set its atomic flags and cancel.
type attempt struct {
	x       *exchange // the request it belongs to
	backend *fleet.Backend
	// cancel cancels the upstream request only.
	cancel    context.CancelFunc
	firstByte *time.Timer
	// upstreamID is the X-Request-Id sent to the backend: fresh for each
	// attempt, never the client's, which vLLM versions before 0.11.1 took
	// as the engine's request id (two clients sending the same one
	// collided, and one's disconnect aborted the other's request).
	upstreamID string
	// upstreamStatus is the backend's status code, once its headers came.
	upstreamStatus int
	// proxyErr is the transport error the reverse proxy reported, if any.
	proxyErr error
	// conn traces the connection the transport gave the request;
	// reusedIdle: it had served another request and waited in the pool.
	conn       httptrace.ClientTrace
	reusedIdle bool
	// usage follows the answer to the client and tells what it used
	// (usage.go); it is the response body the proxy reads.
	usage usageMeter
	// span is the attempt's CLIENT span when the request is traced; its
	// context goes to the backend in traceparent.
	span *telemetry.Span
	// traceparent is the header's value, in room of its own (a header
	// value is a slice).
	traceparent [1]string
	// tracedUsage is what usage read at the attempt's end, for its span
	// and the request's (read once for both).
	tracedUsage usageParts
	// Set by timers on other goroutines, read after the proxy returns:
	// no headers within the first-byte timeout, an answer silent for the
	// idle timeout, the drain deadline.
	timedOut, stalled, shutdown atomic.Bool
}

// newAttempt starts a try at b; it becomes the request's current attempt
// (the one its access line names).
func (x *exchange) newAttempt(b *fleet.Backend) *attempt {
	a := &attempt{x: x, backend: b}
	x.att = a
	return a
}

// attemptResult is how an attempt ended: err is the gateway's answer when
// it failed before any backend headers (nil when the backend answered),
// and retry says the request never reached a live backend, so another may
// take it.
type attemptResult struct {
	err   error
	retry bool
}

// poolResult tells the pool what the attempt says about its backend, for
// outlier ejection; aborted: the proxy aborted the answer's body.
func (a *attempt) poolResult(res attemptResult, aborted bool) admission.Result {
	x := a.x
	if aborted {
		// The proxy aborts when a body copy fails: a write to the client
		// (it left, or stopped reading until its write timed out, which
		// also cancels its context) or a read from the backend.
		// A stream or body the drain deadline ended is nobody's failure.
		if x.clientCtx.Err() != nil || x.clientWriteErr != nil || a.shutdown.Load() {
			return admission.Abandoned
		}
		return admission.ServerError
	}
	switch {
	case a.shutdown.Load() || errors.Is(res.err, errClientGone):
		return admission.Abandoned
	case res.err == nil && (a.upstreamStatus >= 500 || x.streamBroke != ""):
		return admission.ServerError
	case res.err == nil:
		return admission.Succeeded
	case res.retry:
		return admission.ConnectFailed
	}
	return admission.ServerError
}

// dispatch waits in the model's queue for a backend with room, then sends
// body to it. Each try is an attempt of its own; a backend that cannot be
// connected to has received nothing, so the request goes back for another
// backend; once it has reached one it is never sent again.
func (g *Gateway) dispatch(w http.ResponseWriter, r *http.Request, x *exchange, t admission.Ticket, class string, body []byte) error {
	rt := x.rt
	var lastErr error
	for {
		var queuedAt time.Time
		if x.tr.on() {
			queuedAt = time.Now()
		}
		lease, o := rt.pool.Acquire(r.Context(), t)
		if x.tr.on() {
			g.tr.queued(x, queuedAt, o, lease)
		}
		if o != admission.Admitted {
			rt.metrics.admissions.WithLabelValues(o.String()).Inc()
			if lastErr != nil && o == admission.NoBackend {
				return lastErr
			}
			return g.queueError(rt, o, t)
		}
		rt.metrics.admitted.Inc()
		rt.metrics.queueWait.WithLabelValues(class).Observe(lease.Waited.Seconds())
		b := rt.backend(lease.Slot.Name)
		if b == nil {
			// Forgotten since the grant (a removed model, or drain_timeout
			// passed): nothing was sent; another backend may take it.
			lease.Release(admission.Abandoned)
			t.Exclude = append(t.Exclude, lease.Slot.Name)
			continue
		}
		a := x.newAttempt(b)
		res := g.forwardLease(w, r, a, lease, body)
		if x.adapter != "" && a.upstreamStatus == http.StatusNotFound {
			// The backend no longer has the adapter (unloaded since it was
			// last listed): its 404 passes through, and its adapters are
			// listed again now rather than at the next health interval.
			a.backend.RefreshAdapters()
		}
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
		t.Exclude = append(t.Exclude, lease.Slot.Name)
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
		if p == nil && res.err == nil && g.shared != nil {
			// The answer is relayed: its last bytes go out before the
			// shared store's release round trip, not after it.
			http.NewResponseController(w).Flush()
		}
		lease.Release(a.poolResult(res, p != nil))
		if p != nil {
			panic(p)
		}
	}()
	return g.forward(w, r, a, body)
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
	if x.tr.on() {
		g.tr.attempt(x, a, r)
		defer g.tr.endAttempt(x, a, r)
	}
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
	// One framing upstream: the length of the bytes the door read, even
	// when the client sent them chunked.
	var out io.ReadCloser = http.NoBody // a GET: no framing at all
	var getBody func() (io.ReadCloser, error)
	length := int64(len(body))
	switch {
	case x.upload != nil:
		out, getBody, length = x.upload.attach()
	case len(body) > 0:
		out = io.NopCloser(bytes.NewReader(body))
		getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	g.relay(ctx, w, r, a, out, length, getBody)
	if a.proxyErr != nil {
		return g.classify(r, a)
	}
	return attemptResult{}
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
	case a.neverSent():
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
