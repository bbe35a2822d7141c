package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/triage"
)

// Result is what a finished request came to, concluded once (conclude)
// when its answer is over. The access-log line, the request metrics, the
// span's attributes and the triage sample are all written from it, so
// they name a request alike.
type Result struct {
	// Status is the status logged: the answer's, or 499 for a client
	// that left or stopped reading.
	Status int
	// Code is the failure's code (a row of the failure table,
	// failures.go); "" when the request succeeded.
	Code string
	// InStream: Code is how the backend's stream broke, told in the
	// stream's error event; the answer's status stands and the access
	// log names it as stream_error, not as the outcome.
	InStream bool
	// Broke is the code the gateway ended the backend's answer with
	// after its headers ("" when it did not): the log's stream_error.
	Broke string
	// Layer is where the request's progress stopped (LayerNone on
	// success).
	Layer triage.Layer
	// Phases partition the request's time; Duration is its whole.
	Phases   phases
	Duration time.Duration
	End      time.Time
	Retries  int
	// Err is what the handler returned, logged (nil for an answer cut
	// after its headers: the outcome names it).
	Err error

	failed bool
	att    *attempt
}

// fail records the request's failure the first time it is told: a
// failure is named where it is known, and nothing renames it.
func (res *Result) fail(code string, layer triage.Layer) {
	if !res.failed {
		res.Code, res.Layer, res.failed = code, layer, true
	}
}

// failWith records the failure a handler returned: an *Error names its
// own; a client that left is client_closed; anything else is internal.
func (res *Result) failWith(err error) {
	var e *Error
	switch {
	case errors.As(err, &e):
		res.fail(e.outcome(), e.Layer)
	case err == errClientGoneQueued:
		res.fail(failClientGone.code, failClientGone.layer)
	case errors.Is(err, errClientGone):
		res.fail(failClientClosed.code, failClientClosed.layer)
	default:
		res.fail(failInternal.code, failInternal.layer)
	}
}

// Usage is the tokens the request used (prompt + completion), whether
// that is known, and where the figure came from ("usage": reported;
// "counted"); read from its last attempt's usage meter on demand, as it
// may count streamed text.
func (res *Result) Usage(x *exchange) (tokens int64, known bool, from string) {
	if res.att == nil {
		return 0, false, ""
	}
	tokens, known = x.used()
	return tokens, known, res.att.usage.from()
}

// conclude turns the finished request into its Result: h's err, how
// the client took the answer (rec) and the last attempt's answer.
func conclude(x *exchange, rec *recorder, r *http.Request, err error, end time.Time) Result {
	res := Result{Status: rec.status, Retries: x.retries, Err: err, att: x.att, End: end}
	a := x.att
	if a != nil {
		res.Broke = a.broke
	}
	switch {
	case err == nil:
	case err == errAnswerCut:
		// The answer was cut after its headers: the client's doing, or
		// the backend's (the attempt names it).
		res.Err = nil
		switch {
		case r.Context().Err() != nil || x.clientWriteErr != nil:
			res.fail(clientOutcome(x).code, triage.LayerClient)
		case a != nil && a.inStream:
			// A stream ended with its error event, then aborted: named
			// by its stream_error, as before the abort.
		case res.Broke != "":
			res.fail(res.Broke, x.brokenLayer())
		default:
			res.fail(failAborted.code, failAborted.layer)
		}
	default:
		res.failWith(err)
	}
	if x.clientWriteErr != nil {
		// The answer was complete upstream but did not all reach the client.
		res.fail(clientOutcome(x).code, triage.LayerClient)
	}
	switch {
	case !rec.wroteHeader:
		res.Status = statusClientClosed
		res.fail(failClientClosed.code, failClientClosed.layer)
	case res.Code == outcomeClientClosed || res.Code == outcomeClientStalled:
		// Headers went out, but the client did not take the whole answer.
		res.Status = statusClientClosed
	}
	switch {
	case res.failed:
	case res.Broke != "":
		// The stream already ended with an error event naming it; the
		// request's status stands (stream_error has the code).
		res.Code, res.InStream, res.Layer = res.Broke, true, x.brokenLayer()
	case res.Status >= 500:
		res.Layer = triage.LayerPrefill // the backend answered 5xx itself
	case res.Status >= 400 && x.rt != nil:
		res.fail(failRejected.code, failRejected.layer) // the backend refused it with its own 4xx
	}
	res.Duration = end.Sub(x.start)
	res.Phases = x.phases(end)
	return res
}

// brokenLayer is where a backend's answer broke after its headers went out.
func (x *exchange) brokenLayer() triage.Layer {
	a := x.att
	switch {
	case a.broke == codeShuttingDown:
		return triage.LayerNone
	case x.stream && a.events == 0:
		return triage.LayerPrefill
	}
	// A stream broken after its first token, or a non-streaming body
	// broken after its headers (vLLM sends them when the answer is
	// complete): the backend failed after generating.
	return triage.LayerDecode
}

// finish ends the request: it gives back what the request held, concludes
// it, and writes the conclusion to triage, the trace, the request
// metrics and the access log. It returns the conclusion.
func (g *Gateway) finish(x *exchange, rec *recorder, r *http.Request, err error) Result {
	g.bodies.give(x.bodyHeld)
	x.upload.close()
	res := conclude(x, rec, r, err, time.Now())
	g.observe(x, &res)
	if x.tr.on() {
		g.tr.end(x, &res)
	}
	mm := g.metricsOf(x)
	mm.requests.WithLabelValues(x.endpoint, strconv.Itoa(res.Status)).Inc()
	mm.duration.WithLabelValues(x.endpoint).Observe(res.Duration.Seconds())
	g.logRequest(x, rec, r, &res)
	return res
}

// logRequest writes the request's one access-log line.
func (g *Gateway) logRequest(x *exchange, rec *recorder, r *http.Request, res *Result) {
	// Probes and scrapes are not worth a line each at info level.
	lvl := zap.InfoLevel
	if x.spec.quiet {
		lvl = zap.DebugLevel
	}
	ce := g.log.Check(lvl, "request")
	if ce == nil {
		return
	}
	fields := make([]zap.Field, 0, 24) // room for a full line: no regrowth
	fields = append(fields,
		zap.String("request_id", x.id),
		zap.String("method", r.Method),
		zap.String("endpoint", x.endpoint),
		zap.Int("status", res.Status),
		zap.Int("bytes_in", x.bytesIn),
		zap.Int64("bytes_out", rec.bytes),
		zap.Duration("duration", res.Duration),
		zap.String("remote", r.RemoteAddr),
	)
	fields = requestFields(fields, x)
	if res.Code != "" && !res.InStream {
		fields = append(fields, zap.String("outcome", res.Code))
	}
	fields = doorFields(fields, x)
	if n, ok, from := res.Usage(x); ok {
		fields = append(fields, zap.Int64("used_tokens", n))
		if from != "" {
			fields = append(fields, zap.String("used_from", from))
		}
	}
	if res.Broke != "" {
		fields = append(fields, zap.String("stream_error", res.Broke))
	}
	if x.rt != nil {
		fields = append(fields, zap.Object("phases", res.Phases))
		if res.Layer != triage.LayerNone {
			fields = append(fields, zap.String("layer", string(res.Layer)))
		}
	}
	if res.Retries > 0 {
		fields = append(fields, zap.Int("retries", res.Retries))
	}
	if res.Err != nil {
		fields = append(fields, zap.String("error", logText(res.Err)))
	}
	ce.Write(fields...)
}

// requestFields are the access line's fields of what the request named
// and where it went: model, adapter, key, backend, stream.
func requestFields(fields []zap.Field, x *exchange) []zap.Field {
	if x.rt != nil {
		fields = append(fields, zap.String("model", x.rt.name))
	}
	if x.adapter != "" {
		fields = append(fields, zap.String("adapter", x.adapter))
	}
	if x.key != nil {
		fields = append(fields, zap.String("key", x.key.name))
	}
	if x.flowed {
		fields = append(fields, zap.String("flow", x.flowName()))
	}
	if a := x.att; a != nil {
		fields = append(fields, zap.String("backend", a.backend.URL.Host))
		if a.scored {
			fields = append(fields, zap.Int("cached_tokens", a.cached))
		}
		if a.upstreamID != "" {
			fields = append(fields, zap.String("upstream_request_id", a.upstreamID))
		}
	}
	if x.stream {
		fields = append(fields, zap.Bool("stream", true))
	}
	return fields
}

// doorFields are the access line's fields of the door's numbers.
func doorFields(fields []zap.Field, x *exchange) []zap.Field {
	if x.promptTokens > 0 {
		fields = append(fields, zap.Int("prompt_tokens", x.promptTokens))
	}
	if x.maxTokens > 0 {
		fields = append(fields, zap.Int("max_tokens", x.maxTokens))
	}
	if x.maxModelLen > 0 {
		fields = append(fields, zap.Int("max_model_len", x.maxModelLen))
	}
	if x.uncounted != "" {
		fields = append(fields, zap.String("uncounted", x.uncounted))
	}
	return fields
}
