package gateway

import (
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/telemetry"
	"github.com/maitred-dev/maitred/triage"
)

// tracer is the gateway's OpenTelemetry tracing, nil when tracing is off
// (Options.Tracing nil): then no span is started, nothing is measured
// for it, and a client's traceparent and tracestate pass through to the
// backend untouched.
//
// When it is on, every request served through serve gets a trace
// (telemetry.Trace): a SERVER span (the child of the client's
// traceparent, when it sent a valid one) with children: the door (its
// count), each wait in the model's queue, and each attempt at a backend,
// a CLIENT span whose context is what the backend receives in
// traceparent, so vLLM's span is the attempt's child. Spans carry numbers
// and names only: never prompt or completion text, never a key. The
// trace is plain data the request fills as it goes and hands to the
// provider at its end, whole.
//
// A request is marked traced at its start (start), but its trace begins
// (begin: the caller's context read, the sampler asked, the root span
// started at the request's arrival) in admit, or at its first use by a
// request that has no admit. Beginning takes about 2 KiB of stack
// (Provider.Begin's frame and the four of the SDK's parent-based
// sampler): on the handler's goroutine, over net/http's frames, it grew
// the stack from the 4 KiB it starts with to 8, kept while the request
// waits in the queue. In admit it runs aside with the door while
// requests are waiting (admitAside), and a traced handler parks on 4 KiB
// like an untraced one (TestTracedWaitingHandlerParksOnSmallStack).
type tracer struct {
	p    *telemetry.Provider
	prop propagation.TraceContext
}

func newTracer(p *telemetry.Provider) *tracer {
	if p == nil {
		return nil
	}
	return &tracer{p: p}
}

// spans is what a traced request carries: its trace and what its spans
// are told at their end; an untraced request's is empty. The usage
// attributes come from the attempt's usageMeter, the one reader of the
// answer's usage.
type spans struct {
	// t is the request's trace once it has begun (tracer.begin), nil
	// before; traced is whether it will.
	t      *telemetry.Trace
	traced bool
	// queueWait adds up the request's waits in its model's queue.
	queueWait time.Duration
	// rejection is the door's Reason when the door rejected the request.
	rejection string
}

// on is whether the request is traced.
func (s *spans) on() bool { return s.traced }

// Attribute keys: OpenTelemetry's GenAI and HTTP semantic conventions,
// and maitred's own.
const (
	attrOperation   = "gen_ai.operation.name"
	attrReqModel    = "gen_ai.request.model"
	attrMaxTokens   = "gen_ai.request.max_tokens"
	attrInTokens    = "gen_ai.usage.input_tokens"
	attrOutTokens   = "gen_ai.usage.output_tokens"
	attrRespModel   = "gen_ai.response.model"
	attrOutcome     = "maitred.outcome"
	attrRejection   = "maitred.rejection_reason"
	attrLayer       = "maitred.layer"
	attrQueueWaitMs = "maitred.queue_wait_ms"
	attrKey         = "maitred.key"
	attrUsageFrom   = "maitred.usage.from"
)

// genAIOperation is gen_ai.operation.name for x's endpoint: the
// convention's names where one fits (chat, text_completion, embeddings),
// the endpoint family's otherwise; "" for an endpoint that is no model
// API (probes, pages, tokenizer work).
func genAIOperation(x *exchange) string { return x.spec.operation }

// keyName is the name of the API key the request came with, for
// maitred.key (never the key itself); "" when the gateway is open or the
// request presented no valid key.
func keyName(x *exchange) string {
	if x.key == nil {
		return ""
	}
	return x.key.name
}

// start marks the request traced; its trace begins later (begin).
func (t *tracer) start(x *exchange) { x.tr = spans{traced: true} }

// begin begins the request's trace unless it has begun: its root span,
// started at the request's arrival, the child of the client's
// traceparent when it sent a valid one.
func (t *tracer) begin(x *exchange) {
	if x.tr.t != nil {
		return
	}
	r := x.in
	ctx := r.Context()
	if r.Header["Traceparent"] != nil { // the propagator's lookups canonicalize their keys: skip them when there is nothing to find
		ctx = t.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	x.tr.t = t.p.Begin(ctx, r.Method, x.endpoint, trace.SpanKindServer, x.start)
}

// trace is the request's trace, begun if it has not (begin).
func (t *tracer) trace(x *exchange) *telemetry.Trace {
	t.begin(x)
	return x.tr.t
}

// end closes the request's spans once its answer is over: the door's
// (built from the phase clock), then the server span with what the
// request came to, and hands the trace over for export. A failure (a
// layer named, or a 5xx) is an error status described by its outcome.
func (t *tracer) end(x *exchange, res *Result) {
	status, layer, end := res.Status, res.Layer, res.End
	tr := t.trace(x)
	defer t.p.Finish(tr)
	sp := tr.Root()
	if !tr.Sampled() {
		return
	}
	if !x.doorDone.IsZero() {
		door := tr.Start("door", "", trace.SpanKindInternal, x.readDone)
		door.Int("maitred.door.prompt_tokens", int64(x.promptTokens))
		door.Bool("maitred.door.counted", x.uncounted == "")
		if x.uncounted != "" {
			door.String("maitred.door.uncounted", x.uncounted)
		}
		if x.tr.rejection != "" {
			door.String(attrRejection, x.tr.rejection)
			door.Fail(x.tr.rejection)
		}
		door.End(x.doorDone)
	}
	sp.String("http.request.method", x.in.Method)
	sp.String("http.route", x.endpoint)
	sp.String("maitred.request_id", x.id)
	sp.Int("http.response.status_code", int64(status))
	if op := genAIOperation(x); op != "" {
		sp.String(attrOperation, op)
	}
	if x.rt != nil {
		sp.String(attrReqModel, x.rt.name)
	}
	if x.maxTokens > 0 {
		sp.Int(attrMaxTokens, int64(x.maxTokens))
	}
	if x.stream {
		sp.Bool("maitred.stream", true)
	}
	if x.att != nil {
		usageAttributes(sp, x.att.tracedUsage) // read at the attempt's end
	}
	outcome := res.Code
	if outcome != "" {
		sp.String(attrOutcome, outcome)
	}
	if x.tr.rejection != "" {
		sp.String(attrRejection, x.tr.rejection)
	}
	if layer != triage.LayerNone {
		sp.String(attrLayer, string(layer))
	}
	if x.att != nil || x.tr.queueWait > 0 {
		sp.Float(attrQueueWaitMs, ms(x.tr.queueWait))
	}
	if res.Retries > 0 {
		sp.Int("maitred.retries", int64(res.Retries))
	}
	if k := keyName(x); k != "" {
		sp.String(attrKey, k)
	}
	if x.att != nil && !x.att.firstEventAt.IsZero() {
		sp.Event("first_token", x.att.firstEventAt)
	}
	if layer != triage.LayerNone || status >= 500 || res.Broke != "" {
		if outcome == "" {
			outcome = strconv.Itoa(status)
		}
		sp.Fail(outcome)
	}
	sp.End(end)
}

// usageAttributes sets the GenAI usage attributes of an attempt's
// answer, as its usageMeter read them (usageMeter.parts): the tokens the
// answer reported, else what the gateway counted (the door's prompt
// count; a stream's text with the model's tokenizer), and
// maitred.usage.from saying which ("usage": all reported; "counted": the
// gateway counted a part). A refused or failed answer has none.
func usageAttributes(sp *telemetry.Span, p usageParts) {
	if p.promptFrom != usageUnknown {
		sp.Int(attrInTokens, p.prompt)
	}
	if p.completionFrom != usageUnknown {
		sp.Int(attrOutTokens, p.completion)
	}
	switch {
	case p.promptFrom == usageCounted || p.completionFrom == usageCounted:
		sp.String(attrUsageFrom, "counted")
	case p.promptFrom == usageReported || p.completionFrom == usageReported:
		sp.String(attrUsageFrom, "usage")
	}
	if p.model != "" {
		sp.String(attrRespModel, p.model)
	}
}

// queued records one wait in the model's queue, from since to now, and
// how it ended.
func (t *tracer) queued(x *exchange, since time.Time, o admission.Outcome, lease *admission.Lease) {
	now := time.Now()
	x.tr.queueWait += now.Sub(since)
	tr := t.trace(x)
	if !tr.Sampled() {
		return
	}
	sp := tr.Start("queue", "", trace.SpanKindInternal, since)
	sp.String("maitred.queue.outcome", queueLabel(o))
	if lease != nil {
		sp.String("maitred.queue.policy", lease.Policy)
		if lease.Policy == "precise" || lease.Cached > 0 {
			sp.Int("maitred.prefix.cached_tokens", int64(lease.Cached))
		}
	}
	if o != admission.Admitted {
		sp.Fail(queueLabel(o))
	}
	sp.End(now)
}

// attempt starts attempt a's CLIENT span, whose context the proxy sends
// to the backend in traceparent; endAttempt ends it once the attempt is
// over (its answer copied, or failed).
func (t *tracer) attempt(x *exchange, a *attempt, r *http.Request) {
	tr := t.trace(x)
	if op := genAIOperation(x); op != "" && x.rt != nil {
		a.span = tr.Start(op, x.rt.name, trace.SpanKindClient, time.Now())
	} else {
		a.span = tr.Start(r.Method, r.URL.Path, trace.SpanKindClient, time.Now())
	}
}

func (t *tracer) endAttempt(x *exchange, a *attempt, r *http.Request) {
	sp := a.span
	if !x.tr.t.Sampled() {
		return
	}
	u := a.backend.URL
	sp.String("http.request.method", r.Method)
	sp.String("server.address", u.Hostname())
	sp.String("url.full", u.Scheme+"://"+u.Host+r.URL.Path)
	if p, err := strconv.Atoi(u.Port()); err == nil {
		sp.Int("server.port", int64(p))
	} else if u.Scheme == "https" { // a backend is http or https (config)
		sp.Int("server.port", 443)
	} else {
		sp.Int("server.port", 80)
	}
	if op := genAIOperation(x); op != "" {
		sp.String(attrOperation, op)
	}
	if x.rt != nil {
		sp.String(attrReqModel, x.rt.name)
	}
	if x.retries > 0 {
		sp.Int("maitred.attempt", int64(x.retries))
	}
	if a.upstreamStatus > 0 {
		sp.Int("http.response.status_code", int64(a.upstreamStatus))
	}
	if a.upstreamID != "" {
		sp.String("maitred.upstream_request_id", a.upstreamID)
	}
	a.tracedUsage = a.usage.parts()
	usageAttributes(sp, a.tracedUsage)
	errType := ""
	switch {
	case a.res.fail != nil:
		// The attempt failed before any response header: its failure's
		// code (failures.go), as the request's outcome names it.
		errType = a.res.fail.code
	case a.broke != "":
		errType = a.broke
	case a.upstreamStatus >= 400:
		errType = strconv.Itoa(a.upstreamStatus)
	}
	if errType != "" {
		sp.String("error.type", errType)
		sp.Fail(errType)
	}
	sp.End(time.Now())
}

// inject puts attempt a's span context in the backend request's headers
// (traceparent, tracestate), replacing the client's.
func (t *tracer) inject(a *attempt, h http.Header) {
	x := a.x
	a.traceparent[0] = x.tr.t.Traceparent(a.span)
	h["Traceparent"] = a.traceparent[:]
	if ts := x.tr.t.Tracestate(); ts != "" {
		h["Tracestate"] = []string{ts}
	} else {
		delete(h, "Tracestate")
	}
}
