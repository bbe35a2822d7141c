package gateway

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
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
		if x.clientCtx.Err() != nil || x.clientWriteErr != nil {
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
