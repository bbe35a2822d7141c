package gateway

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/triage"
)

// tracer is the gateway's OpenTelemetry tracing, nil when tracing is off
// (Options.TracerProvider nil): then no span is started, nothing is
// measured for it, and a client's traceparent and tracestate pass through
// to the backend untouched.
//
// When it is on, every request served through serve gets a SERVER span
// (the child of the client's traceparent, when it sent a valid one) with
// children: the door (its count), each wait in the model's queue, and
// each attempt at a backend, a CLIENT span whose context is what the
// backend receives in traceparent, so vLLM's span is the attempt's child.
// Spans carry numbers and names only: never prompt or completion text,
// never a key.
type tracer struct {
	t    trace.Tracer
	prop propagation.TraceContext
	// attrs holds attribute buffers (*[]attribute.KeyValue) for the
	// SetAttributes of a span's end: the SDK copies what it is given, so
	// a request's attributes need not cost an allocation of their own.
	attrs sync.Pool
	// server and client are the span-kind options, made once: an option
	// is a value, and a new one costs an allocation.
	server, client trace.SpanStartOption
}

// attrBuf is an empty attribute buffer, from the pool when there is one.
func (t *tracer) attrBuf() *[]attribute.KeyValue {
	if p, ok := t.attrs.Get().(*[]attribute.KeyValue); ok {
		return p
	}
	b := make([]attribute.KeyValue, 0, 24)
	return &b
}

// setAttributes sets the buffer's attributes on sp and gives the buffer
// back to the pool when sp is the SDK's, which copies them; a span of
// another TracerProvider may keep the slice, so the buffer is then left
// to it.
func (t *tracer) setAttributes(sp trace.Span, p *[]attribute.KeyValue) {
	sp.SetAttributes(*p...)
	if _, copied := sp.(sdktrace.ReadWriteSpan); !copied || cap(*p) > 64 {
		return
	}
	clear(*p)
	*p = (*p)[:0]
	t.attrs.Put(p)
}

func newTracer(tp trace.TracerProvider) *tracer {
	if tp == nil {
		return nil
	}
	return &tracer{
		t:      tp.Tracer("github.com/maitred-dev/maitred/gateway"),
		server: trace.WithSpanKind(trace.SpanKindServer),
		client: trace.WithSpanKind(trace.SpanKindClient),
	}
}

// spans is what a traced request carries: its server span and what its
// spans are told at their end. An untraced request has none. The usage
// attributes come from the attempt's usageMeter, the one reader of the
// answer's usage.
type spans struct {
	server trace.Span
	ctx    context.Context
	method string
	// queueWait adds up the request's waits in its model's queue.
	queueWait time.Duration
	// rejection is the door's Reason when the door rejected the request.
	rejection string
	// Room for the options of one Start or End call: passed in a slice
	// of its own, they would cost an allocation each call.
	startOpts [2]trace.SpanStartOption
	endOpts   [1]trace.SpanEndOption
}

// at is the options of a Start: its kind, if not nil, and its time.
func (s *spans) at(kind trace.SpanStartOption, ts time.Time) []trace.SpanStartOption {
	o := append(s.startOpts[:0], trace.WithTimestamp(ts))
	if kind != nil {
		o = append(o, kind)
	}
	return o
}

// endAt is the options of an End at ts.
func (s *spans) endAt(ts time.Time) []trace.SpanEndOption {
	return append(s.endOpts[:0], trace.WithTimestamp(ts))
}

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

// genAIOperation is gen_ai.operation.name for an endpoint: the
// convention's names where one fits (chat, text_completion, embeddings),
// the endpoint family's otherwise; "" for an endpoint that is no model
// API (probes, pages, tokenizer work).
func genAIOperation(endpoint string) string {
	switch endpoint {
	case "/v1/chat/completions", "/v1/messages", "/v1/responses":
		return "chat"
	case "/v1/completions":
		return "text_completion"
	case "/v1/embeddings":
		return "embeddings"
	case "/pooling":
		return "pooling"
	case "/classify":
		return "classify"
	case "/score", "/v1/score":
		return "score"
	case "/rerank", "/v1/rerank", "/v2/rerank":
		return "rerank"
	case "/v1/audio/transcriptions":
		return "transcription"
	case "/v1/audio/translations":
		return "translation"
	}
	return ""
}

// keyName is the name of the API key the request came with, for
// maitred.key (never the key itself); "" when the gateway is open or the
// request presented no valid key.
func keyName(x *exchange) string {
	if x.key == nil {
		return ""
	}
	return x.key.name
}

// start begins the request's server span, the child of the client's
// traceparent when it sent a valid one.
func (t *tracer) start(r *http.Request, x *exchange) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	x.tr = &spans{}
	x.tr.ctx, x.tr.server = t.t.Start(ctx, r.Method+" "+x.endpoint, x.tr.at(t.server, x.start)...)
	x.tr.method = r.Method
}

// end closes the request's spans once its answer is over: the door's
// (built from the phase clock), then the server span with what the
// request came to. A failure (a layer named, or a 5xx) is an error
// status described by its outcome.
func (t *tracer) end(x *exchange, status int, layer triage.Layer, end time.Time) {
	sp := x.tr.server
	if !sp.IsRecording() {
		sp.End()
		return
	}
	if !x.doorDone.IsZero() {
		_, door := t.t.Start(x.tr.ctx, "door", x.tr.at(nil, x.readDone)...)
		p := t.attrBuf()
		*p = append(*p,
			attribute.Int("maitred.door.prompt_tokens", x.promptTokens),
			attribute.Bool("maitred.door.counted", x.uncounted == ""))
		if x.uncounted != "" {
			*p = append(*p, attribute.String("maitred.door.uncounted", x.uncounted))
		}
		if x.tr.rejection != "" {
			*p = append(*p, attribute.String(attrRejection, x.tr.rejection))
			door.SetStatus(codes.Error, x.tr.rejection)
		}
		t.setAttributes(door, p)
		door.End(x.tr.endAt(x.doorDone)...)
	}
	// The attributes are set once, at the end: one copy into the span.
	p := t.attrBuf()
	attrs := append(*p,
		attribute.String("http.request.method", x.tr.method),
		attribute.String("http.route", x.endpoint),
		attribute.String("maitred.request_id", x.id),
		attribute.Int("http.response.status_code", status))
	if op := genAIOperation(x.endpoint); op != "" {
		attrs = append(attrs, attribute.String(attrOperation, op))
	}
	if x.rt != nil {
		attrs = append(attrs, attribute.String(attrReqModel, x.rt.name))
	}
	if x.maxTokens > 0 {
		attrs = append(attrs, attribute.Int(attrMaxTokens, x.maxTokens))
	}
	if x.stream {
		attrs = append(attrs, attribute.Bool("maitred.stream", true))
	}
	if x.att != nil {
		attrs = usageAttributes(attrs, &x.att.usage)
	}
	outcome := x.outcome
	if outcome == "" {
		outcome = x.streamBroke
	}
	if outcome != "" {
		attrs = append(attrs, attribute.String(attrOutcome, outcome))
	}
	if x.tr.rejection != "" {
		attrs = append(attrs, attribute.String(attrRejection, x.tr.rejection))
	}
	if layer != triage.LayerNone {
		attrs = append(attrs, attribute.String(attrLayer, string(layer)))
	}
	if x.att != nil || x.tr.queueWait > 0 {
		attrs = append(attrs, attribute.Float64(attrQueueWaitMs, ms(x.tr.queueWait)))
	}
	if x.retries > 0 {
		attrs = append(attrs, attribute.Int("maitred.retries", x.retries))
	}
	if k := keyName(x); k != "" {
		attrs = append(attrs, attribute.String(attrKey, k))
	}
	*p = attrs
	t.setAttributes(sp, p)
	if !x.firstEventAt.IsZero() {
		sp.AddEvent("first_token", trace.WithTimestamp(x.firstEventAt))
	}
	if layer != triage.LayerNone || status >= 500 || x.streamBroke != "" {
		if outcome == "" {
			outcome = strconv.Itoa(status)
		}
		sp.SetStatus(codes.Error, outcome)
	}
	sp.End(x.tr.endAt(end)...)
}

// usageAttributes appends the GenAI usage attributes of an attempt's
// answer, read by its usageMeter: the tokens the answer reported, else
// what the gateway counted (the door's prompt count; a stream's text with
// the model's tokenizer), and maitred.usage.from saying which ("usage":
// all reported; "counted": the gateway counted a part). A refused or
// failed answer has none.
func usageAttributes(attrs []attribute.KeyValue, m *usageMeter) []attribute.KeyValue {
	p := m.parts()
	if p.promptFrom != usageUnknown {
		attrs = append(attrs, attribute.Int64(attrInTokens, p.prompt))
	}
	if p.completionFrom != usageUnknown {
		attrs = append(attrs, attribute.Int64(attrOutTokens, p.completion))
	}
	switch {
	case p.promptFrom == usageCounted || p.completionFrom == usageCounted:
		attrs = append(attrs, attribute.String(attrUsageFrom, "counted"))
	case p.promptFrom == usageReported || p.completionFrom == usageReported:
		attrs = append(attrs, attribute.String(attrUsageFrom, "usage"))
	}
	if p.model != "" {
		attrs = append(attrs, attribute.String(attrRespModel, p.model))
	}
	return attrs
}

// queued records one wait in the model's queue, from since to now, and
// how it ended.
func (t *tracer) queued(x *exchange, since time.Time, o admission.Outcome, lease *admission.Lease) {
	now := time.Now()
	x.tr.queueWait += now.Sub(since)
	_, sp := t.t.Start(x.tr.ctx, "queue", x.tr.at(nil, since)...)
	p := t.attrBuf()
	*p = append(*p, attribute.String("maitred.queue.outcome", o.String()))
	if lease != nil {
		*p = append(*p, attribute.String("maitred.queue.policy", lease.Policy))
	}
	t.setAttributes(sp, p)
	if o != admission.Admitted {
		sp.SetStatus(codes.Error, o.String())
	}
	sp.End(x.tr.endAt(now)...)
}

// attempt starts attempt a's CLIENT span, whose context the proxy sends
// to the backend in traceparent; endAttempt ends it once the attempt is
// over (its answer copied, or failed).
func (t *tracer) attempt(x *exchange, a *attempt, r *http.Request) {
	var name string
	if op := genAIOperation(x.endpoint); op != "" && x.rt != nil {
		name = op + " " + x.rt.name
	} else {
		name = r.Method + " " + r.URL.Path
	}
	opts := append(x.tr.startOpts[:0], t.client)
	_, a.span = t.t.Start(x.tr.ctx, name, opts...)
}

func (t *tracer) endAttempt(x *exchange, a *attempt, r *http.Request) {
	sp := a.span
	if !sp.IsRecording() {
		sp.End()
		return
	}
	u := a.backend.URL
	p := t.attrBuf()
	attrs := append(*p,
		attribute.String("http.request.method", r.Method),
		attribute.String("server.address", u.Hostname()),
		attribute.String("url.full", u.Scheme+"://"+u.Host+r.URL.Path))
	if p, err := strconv.Atoi(u.Port()); err == nil {
		attrs = append(attrs, attribute.Int("server.port", p))
	} else if port, err := net.LookupPort("tcp", u.Scheme); err == nil {
		attrs = append(attrs, attribute.Int("server.port", port))
	}
	if op := genAIOperation(x.endpoint); op != "" {
		attrs = append(attrs, attribute.String(attrOperation, op))
	}
	if x.rt != nil {
		attrs = append(attrs, attribute.String(attrReqModel, x.rt.name))
	}
	if x.retries > 0 {
		attrs = append(attrs, attribute.Int("maitred.attempt", x.retries))
	}
	if a.upstreamStatus > 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", a.upstreamStatus))
	}
	if a.upstreamID != "" {
		attrs = append(attrs, attribute.String("maitred.upstream_request_id", a.upstreamID))
	}
	attrs = usageAttributes(attrs, &a.usage)
	errType := ""
	switch {
	case a.proxyErr != nil && a.shutdown.Load():
		errType = codeShuttingDown
	case a.proxyErr != nil && a.timedOut.Load():
		errType = codeBackendTimeout
	case a.proxyErr != nil && x.clientCtx.Err() != nil:
		errType = outcomeClientClosed
	case a.proxyErr != nil:
		errType = codeBackendDown
	case x.streamBroke != "" && a == x.att:
		errType = x.streamBroke
	case a.upstreamStatus >= 400:
		errType = strconv.Itoa(a.upstreamStatus)
	}
	if errType != "" {
		attrs = append(attrs, attribute.String("error.type", errType))
		sp.SetStatus(codes.Error, errType)
	}
	*p = attrs
	t.setAttributes(sp, p)
	sp.End()
}

// inject puts attempt a's span context in the backend request's headers
// (traceparent, tracestate), replacing the client's.
func (t *tracer) inject(a *attempt, h http.Header) {
	h.Del("Traceparent")
	h.Del("Tracestate")
	t.prop.Inject(trace.ContextWithSpan(context.Background(), a.span), propagation.HeaderCarrier(h))
}
