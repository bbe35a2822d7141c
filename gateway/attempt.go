package gateway

import (
	"context"
	"errors"
	"fmt"
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
// starts (queueAndForward, or a pass-through) and owned by the request's
// goroutine. It is a value of its own: its clock, its answer's status and
// usage and how its answer broke are its fields, and forward returns how
// it ended (attemptResult), which the attempt keeps for its span and the
// request's conclusion. The proxy's hooks find it through the guards of
// its answer; the timers that cancel the upstream request run on other
// goroutines and only set its atomic flags and cancel.
type attempt struct {
	x       *exchange // the request it belongs to (read only)
	backend *fleet.Backend
	// body is the request body it sends (sentBody reads it; none for a
	// GET or an upload), until the answer's headers came and it was all
	// read (dropBody); bodyRead
	// is set, by the transport's writer, once it was.
	body     []byte
	bodyRead atomic.Bool
	// cancel cancels the upstream request only; stopHard stops the
	// drain deadline's hook on it.
	cancel    context.CancelFunc
	stopHard  func() bool
	firstByte *time.Timer
	// upstreamID is the X-Request-Id sent to the backend: fresh for each
	// attempt, never the client's, which vLLM versions before 0.11.1 took
	// as the engine's request id (two clients sending the same one
	// collided, and one's disconnect aborted the other's request).
	upstreamID string
	// cached is the cached-prefix tokens its backend was expected to hold
	// (precise routing, when scored is set: the ticket had a prefix).
	cached int
	scored bool
	// upstreamStatus is the backend's status code, once its headers came.
	upstreamStatus int
	// The attempt's clock (phases.go): sent, the answer's headers, its
	// first and last complete SSE event, and how many events came.
	sentAt, headersAt, firstEventAt, lastEventAt time.Time
	events                                       int
	// broke is the failure code (failures.go) the gateway ended the
	// backend's answer with after its headers: a stream (with an error
	// event, then by aborting) or a body (by aborting); inStream says it
	// was a stream, whose error event named it, so that the request's
	// logged outcome stays its status.
	broke    string
	inStream bool
	// res is how the attempt ended, once forward returned.
	res attemptResult
	// conn traces the connection the transport gave the request;
	// reusedIdle: it had served another request and waited in the pool.
	conn       httptrace.ClientTrace
	reusedIdle bool
	// usage follows the answer to the client and tells what it used
	// (proxy_usage.go); it is the response body the proxy reads.
	usage usageMeter
	// lease is the attempt's hold on its backend in the model's queue:
	// under fairness tokens it charges the output as events stream.
	lease *admission.Lease
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

// attemptResult is how an attempt ended, returned by forward: err is the
// gateway's answer when it failed before any backend headers
// (errAnswerCut when the answer was cut after them; nil when the backend
// answered), fail its row of the failure table (nil: answered, or cut),
// cut whether the answer was cut after its headers went out (a broken
// stream or body, a client that left or stopped reading: the edge aborts
// the client's response), cause the transport's error, and neverSent
// whether the request can have reached no live backend (retry.go).
type attemptResult struct {
	err       error
	fail      *failure
	cut       bool
	cause     error
	neverSent bool
}

// errAnswerCut is the result of an attempt whose answer was cut after its
// headers went out. It travels back to the edge (serve), which aborts the
// client's response: net/http's http.ErrAbortHandler, raised there once.
var errAnswerCut = errors.New("the answer was cut after its headers went out")

// poolResult tells the pool what the attempt says about its backend, for
// outlier ejection.
func (a *attempt) poolResult(res attemptResult) admission.Result {
	x := a.x
	if res.cut {
		// The proxy cuts an answer when a body copy fails: a write to the
		// client (it left, or stopped reading until its write timed out,
		// which also cancels its context) or a read from the backend.
		// A stream or body the drain deadline ended is nobody's failure.
		if x.clientCtx.Err() != nil || x.clientWriteErr != nil || a.shutdown.Load() {
			return admission.Abandoned
		}
		return admission.ServerError
	}
	switch {
	case a.shutdown.Load() || res.fail == failClientClosed:
		return admission.Abandoned
	case res.err == nil && (a.upstreamStatus >= 500 || a.broke != ""):
		return admission.ServerError
	case res.err == nil:
		return admission.Succeeded
	case retryable(res):
		return admission.ConnectFailed
	}
	return admission.ServerError
}

// queueAndForward waits in the model's queue for a backend with room,
// then forwards x.body to it, one attempt per lease. A backend that cannot
// be connected to has received nothing, so the request goes back for
// another backend (the retry rule, retry.go); once it has reached one it
// is never sent again, and its body is dropped once the answer's headers
// came (sentBody): an open stream does not hold its request.
//
// Its ticket and priority class are the pipeline's (x.q). The steps
// around each attempt run in calls of their own (granted, tried), so that
// the frame live while an answer streams stays small.
func (g *Gateway) queueAndForward(w http.ResponseWriter, r *http.Request, x *exchange) error {
	var lastErr error
	for {
		a, err := g.granted(r, x, lastErr)
		if a == nil {
			return err
		}
		g.try(w, r, a, x.body) // holding its lease and its backend's in-flight count
		g.leaseEnded(w, a)
		if done, err := g.tried(x, a, &lastErr); done {
			return err
		}
	}
}

// granted waits in the model's queue for a backend with room for x
// (x.q's ticket) and returns the attempt at it, holding its lease; or
// nil and the request's answer (lastErr, the last attempt's, when no
// backend is left to try).
//
//go:noinline
func (g *Gateway) granted(r *http.Request, x *exchange, lastErr error) (*attempt, error) {
	rt, t := x.rt, &x.q.t
	for {
		lease, o := g.acquire(r, x) // the pipeline's first wait (waitTurn), or another
		if o != admission.Admitted {
			if lastErr != nil && o == admission.NoBackend {
				rt.metrics.admissions.WithLabelValues(queueLabel(o)).Inc()
				return nil, lastErr
			}
			return nil, g.queueRefused(rt, o, *t)
		}
		rt.metrics.admitted.Inc()
		rt.metrics.queueWait.WithLabelValues(x.q.class).Observe(lease.Waited.Seconds())
		if x.key != nil {
			rt.metrics.flowWait.WithLabelValues(x.key.name).Observe(lease.Waited.Seconds())
		}
		b := rt.backend(lease.Slot.Name)
		if b == nil {
			// Forgotten since the grant (a removed model, or drain_timeout
			// passed): nothing was sent; another backend may take it.
			lease.Release(admission.Abandoned)
			t.Exclude = append(t.Exclude, lease.Slot.Name)
			continue
		}
		a := x.newAttempt(b)
		a.lease = lease
		b.Enter() // its in-flight count, until leaseEnded
		if t.Prefix != nil {
			a.cached, a.scored = lease.Cached, true
			rt.metrics.prefixHit.Add(float64(lease.Cached))
			rt.metrics.prefixPrompt.Add(float64(t.PromptTokens))
		}
		return a, nil
	}
}

// tried reports what attempt a's end means for the request: done, with
// the request's answer (nil: answered), or another try (the attempt
// never reached a live backend: lastErr is its answer, kept for when no
// backend is left).
//
//go:noinline
func (g *Gateway) tried(x *exchange, a *attempt, lastErr *error) (done bool, err error) {
	res := a.res
	if x.adapter != "" && a.upstreamStatus == http.StatusNotFound && !res.cut {
		// The backend no longer has the adapter (unloaded since it was
		// last listed): its 404 passes through, and its adapters are
		// listed again now rather than at the next health interval.
		a.backend.RefreshAdapters()
	}
	if res.err == nil {
		g.fleet.ReportSuccess(a.backend)
		return true, nil
	}
	if !retryable(res) {
		return true, res.err
	}
	g.fleet.ReportConnectFailure(x.rt.fm, a.backend, res.cause)
	*lastErr = res.err
	x.retries++
	x.q.t.Exclude = append(x.q.t.Exclude, a.lease.Slot.Name)
	return false, nil
}

// leaseEnded settles what attempt a charged its flow, flushes its answer
// and releases its lease and its backend's in-flight count (taken by
// granted) with what the attempt says about the backend.
//
//go:noinline
func (g *Gateway) leaseEnded(w http.ResponseWriter, a *attempt) {
	lease, res := a.lease, a.res
	if lease.Charges() {
		a.settleFlow(res)
	}
	if res.err == nil && g.shared != nil {
		// The answer is relayed: its last bytes go out before the
		// shared store's release round trip, not after it.
		http.NewResponseController(w).Flush()
	}
	lease.Release(a.poolResult(res))
	a.backend.Leave()
}

// forward runs attempt a: it sends body to a.backend through the reverse
// proxy (relay) and returns how the try ended.
//
// The upstream request has its own context: cancelled when the client
// leaves, when no response headers came within the first-byte timeout, when
// a stream goes silent for the idle timeout, and at the drain deadline.
// Each of these is told apart afterwards by the flag its timer set on the
// attempt. What forward sets up is done in calls of their own
// (startAttempt, endAttempt, ended), so that its frame, live while an
// answer streams, stays small.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, a *attempt, body []byte) attemptResult {
	g.try(w, r, a, body)
	return a.res
}

// try is forward with its result left in a.res: the relay (proxy_relay.go's
// sendHead, copyAnswer, bodyRelayed) inside the attempt's timers.
func (g *Gateway) try(w http.ResponseWriter, r *http.Request, a *attempt, body []byte) {
	ctx := g.startAttempt(w, r, a, body)
	defer g.endAttempt(r, a)
	res, err := g.sendHead(ctx, w, r, a)
	if err != nil {
		g.ended(r, a, relayResult{failed: err})
		return
	}
	g.bodyRelayed(w, r, a, res, copyAnswer(w, res.Body, copyBuffers))
}

// startAttempt starts attempt a's clock, span and timers, gives it the
// body it sends (a.body), and returns its upstream request's context.
//
//go:noinline
func (g *Gateway) startAttempt(w http.ResponseWriter, r *http.Request, a *attempt, body []byte) context.Context {
	x := a.x
	a.body = body
	if x.tr.on() {
		g.tr.attempt(x, a, r)
	}
	ctx, cancel := context.WithCancel(r.Context())
	a.cancel = cancel
	a.stopHard = context.AfterFunc(g.stopCtx, func() { a.shutdown.Store(true); cancel() })
	a.firstByte = time.AfterFunc(x.rt.firstByte, func() { a.timedOut.Store(true); cancel() })
	if rec, ok := w.(*recorder); ok {
		// A client that stops reading must not hold the backend forever:
		// each write to it gets stream_idle_timeout to complete.
		rec.writeIdle = x.rt.streamIdle
	}
	a.sentAt = time.Now()
	return ctx
}

// endAttempt stops attempt a's timers, cancels its upstream request and
// ends its span (which reads a.res).
func (g *Gateway) endAttempt(r *http.Request, a *attempt) {
	a.firstByte.Stop()
	a.stopHard()
	a.cancel()
	if a.x.tr.on() {
		g.tr.endAttempt(a.x, a, r)
	}
}

// ended notes how attempt a's relay ended (a.res).
//
//go:noinline
func (g *Gateway) ended(r *http.Request, a *attempt, rr relayResult) {
	switch {
	case rr.failed != nil:
		a.res = g.classify(r, a, rr.failed)
	case rr.cut != nil:
		a.res = attemptResult{err: errAnswerCut, cut: true, cause: rr.cut}
	default:
		a.res = attemptResult{}
	}
}

// classify turns a transport failure before any response header into the
// gateway's answer: a client that left gets nothing (logged as 499), the
// drain deadline 503, a backend that sent no headers in time 504, one that
// could not be reached or failed before answering 502. Each is a row of
// the failure table (failures.go), whose code also labels
// maitred_backend_errors_total. Only a request that never reached a live
// backend may be retried (retry.go).
func (g *Gateway) classify(r *http.Request, a *attempt, err error) attemptResult {
	x := a.x
	res := attemptResult{cause: err, neverSent: neverSent(err, a.reusedIdle)}
	if r.Context().Err() != nil {
		res.err, res.fail = errClientGone, failClientClosed
		return res
	}
	host := a.backend.URL.Host
	var msg string
	switch {
	case a.shutdown.Load():
		res.fail, msg = failShuttingDown, "The gateway is shutting down; retry on another instance."
	case a.timedOut.Load():
		res.fail, msg = failFirstByte, fmt.Sprintf("Backend %s of model %q sent no response headers within %s.", host, x.rt.name, x.rt.firstByte)
	case res.neverSent:
		// Refused, or written into a connection the backend had already
		// closed (a pooled connection to a process that died): the request
		// never reached a live server, so another backend may take it.
		res.fail, msg = failConnect, fmt.Sprintf("Backend %s of model %q could not be reached: %s.", host, x.rt.name, dialReason(err))
	default:
		res.fail, msg = failBeforeHeaders, fmt.Sprintf("Backend %s of model %q failed before answering.", host, x.rt.name)
	}
	e := res.fail.err(msg, err)
	switch res.fail {
	case failShuttingDown:
		e.RetryAfter = time.Second
	case failFirstByte:
		// A stream's headers come at once: none in time is a connection
		// that failed; a non-streaming answer's come after generating.
		if x.stream {
			e.Layer = triage.LayerConnect
		}
		fallthrough
	default:
		g.backendError(a, res.fail.code)
	}
	res.err = e
	return res
}

// backendError counts a backend's failure in maitred_backend_errors_total
// under kind: a failure's code (failures.go), or for an answer broken
// after its headers, where it broke (stream_ or body_) and how.
func (g *Gateway) backendError(a *attempt, kind string) {
	a.x.rt.metrics.backendErrors.WithLabelValues(a.backend.URL.Host, kind).Inc()
}
