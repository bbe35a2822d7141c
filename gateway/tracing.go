package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
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
}

func newTracer(tp trace.TracerProvider) *tracer {
	if tp == nil {
		return nil
	}
	return &tracer{t: tp.Tracer("github.com/maitred-dev/maitred/gateway")}
}

// spans is what a traced request carries: its server span and the usage
// read from the backend's answer. An untraced request has none.
type spans struct {
	server trace.Span
	ctx    context.Context
	method string
	// queueWait adds up the request's waits in its model's queue.
	queueWait time.Duration
	// rejection is the door's Reason when the door rejected the request.
	rejection string
	usage     usage
}

// usage is what a backend's answer says of itself, read by usageTap
// (a whole body) or from a stream's events.
type usage struct {
	in, out       int
	hasIn, hasOut bool
	model         string
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
// maitred.key: the hook for API keys (never the key itself). There are no
// keys yet; return the key's configured name here once there are.
func keyName(x *exchange) string { return "" }

// start begins the request's server span, the child of the client's
// traceparent when it sent a valid one.
func (t *tracer) start(r *http.Request, x *exchange) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	x.tr = &spans{}
	x.tr.ctx, x.tr.server = t.t.Start(ctx, r.Method+" "+x.endpoint, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(x.start))
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
		_, door := t.t.Start(x.tr.ctx, "door", trace.WithTimestamp(x.readDone))
		door.SetAttributes(
			attribute.Int("maitred.door.prompt_tokens", x.promptTokens),
			attribute.Bool("maitred.door.counted", x.uncounted == ""),
		)
		if x.uncounted != "" {
			door.SetAttributes(attribute.String("maitred.door.uncounted", x.uncounted))
		}
		if x.tr.rejection != "" {
			door.SetAttributes(attribute.String(attrRejection, x.tr.rejection))
			door.SetStatus(codes.Error, x.tr.rejection)
		}
		door.End(trace.WithTimestamp(x.doorDone))
	}
	// The attributes are set once, at the end: one copy into the span.
	attrs := make([]attribute.KeyValue, 0, 20)
	attrs = append(attrs,
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
	attrs = x.tr.usage.attributes(attrs, x)
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
	sp.SetAttributes(attrs...)
	if !x.firstEventAt.IsZero() {
		sp.AddEvent("first_token", trace.WithTimestamp(x.firstEventAt))
	}
	if layer != triage.LayerNone || status >= 500 || x.streamBroke != "" {
		if outcome == "" {
			outcome = strconv.Itoa(status)
		}
		sp.SetStatus(codes.Error, outcome)
	}
	sp.End(trace.WithTimestamp(end))
}

// attributes appends the GenAI usage attributes: the backend's own usage
// when its answer said it, else the door's exact prompt count for a
// request that reached a backend.
func (u *usage) attributes(attrs []attribute.KeyValue, x *exchange) []attribute.KeyValue {
	switch {
	case u.hasIn:
		attrs = append(attrs, attribute.Int(attrInTokens, u.in))
	case x.att != nil && x.uncounted == "" && x.promptTokens > 0:
		attrs = append(attrs, attribute.Int(attrInTokens, x.promptTokens))
	}
	if u.hasOut {
		attrs = append(attrs, attribute.Int(attrOutTokens, u.out))
	}
	if u.model != "" {
		attrs = append(attrs, attribute.String(attrRespModel, u.model))
	}
	return attrs
}

// queued records one wait in the model's queue, from since to now, and
// how it ended.
func (t *tracer) queued(x *exchange, since time.Time, o admission.Outcome, lease *admission.Lease) {
	now := time.Now()
	x.tr.queueWait += now.Sub(since)
	_, sp := t.t.Start(x.tr.ctx, "queue", trace.WithTimestamp(since))
	attrs := []attribute.KeyValue{attribute.String("maitred.queue.outcome", o.String())}
	if lease != nil {
		attrs = append(attrs, attribute.String("maitred.queue.policy", lease.Policy))
	}
	sp.SetAttributes(attrs...)
	if o != admission.Admitted {
		sp.SetStatus(codes.Error, o.String())
	}
	sp.End(trace.WithTimestamp(now))
}

// attempt starts attempt a's CLIENT span, whose context the proxy sends
// to the backend in traceparent, and returns the function that ends it
// once the attempt is over (its answer copied, or failed).
func (t *tracer) attempt(x *exchange, a *attempt, r *http.Request) func() {
	name := r.Method + " " + r.URL.Path
	if op := genAIOperation(x.endpoint); op != "" && x.rt != nil {
		name = op + " " + x.rt.name
	}
	_, a.span = t.t.Start(x.tr.ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	return func() { t.endAttempt(x, a, r) }
}

func (t *tracer) endAttempt(x *exchange, a *attempt, r *http.Request) {
	sp := a.span
	if !sp.IsRecording() {
		sp.End()
		return
	}
	u := a.backend.URL
	attrs := make([]attribute.KeyValue, 0, 14)
	attrs = append(attrs,
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
	if a == x.att {
		attrs = x.tr.usage.attributes(attrs, x)
	}
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
	sp.SetAttributes(attrs...)
	sp.End()
}

// inject puts attempt a's span context in the backend request's headers
// (traceparent, tracestate), replacing the client's.
func (t *tracer) inject(a *attempt, h http.Header) {
	h.Del("Traceparent")
	h.Del("Tracestate")
	t.prop.Inject(trace.ContextWithSpan(context.Background(), a.span), propagation.HeaderCarrier(h))
}

// scan reads the token usage and the model from b, a stretch of a
// backend's JSON answer: every "usage" object (OpenAI's prompt_tokens and
// completion_tokens, or Anthropic's and the Responses API's input_tokens
// and output_tokens; a later one overrides) and the first "model" string.
// Only keys are matched: a quote inside a JSON string is escaped, so the
// text `"usage"` followed by a colon is a key, never content, and no
// content is read.
func (u *usage) scan(b []byte) {
	for rest := b; ; {
		obj, next := valueAfterKey(rest, `"usage"`)
		if next < 0 {
			break
		}
		rest = rest[next:]
		if len(obj) == 0 || obj[0] != '{' {
			continue
		}
		if n, ok := intMember(obj, `"prompt_tokens"`, `"input_tokens"`); ok {
			u.in, u.hasIn = n, true
		}
		if n, ok := intMember(obj, `"completion_tokens"`, `"output_tokens"`); ok {
			u.out, u.hasOut = n, true
		}
	}
	if u.model == "" {
		if v, _ := valueAfterKey(b, `"model"`); len(v) > 2 && len(v) <= 258 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
			u.model = string(v[1 : len(v)-1])
		}
	}
}

// intMember is the first of keys in obj (a usage object) that holds a
// non-negative integer.
func intMember(obj []byte, keys ...string) (int, bool) {
	for _, k := range keys {
		i := bytes.Index(obj, []byte(k))
		if i < 0 {
			continue
		}
		j := skipSpace(obj, i+len(k))
		if j >= len(obj) || obj[j] != ':' {
			continue
		}
		j = skipSpace(obj, j+1)
		n, digits := 0, 0
		for ; j < len(obj) && obj[j] >= '0' && obj[j] <= '9' && digits < 12; j++ {
			n = n*10 + int(obj[j]-'0')
			digits++
		}
		if digits > 0 && j < len(obj) && (obj[j] == ',' || obj[j] == '}' || obj[j] == ' ' || obj[j] == '\n') {
			return n, true
		}
	}
	return 0, false
}

// valueAfterKey finds the first key (with its quotes) followed by a colon
// in b and returns the object or string after it, whole; next is the
// offset just past the key (-1: no such key). A value of another kind, or
// one cut off at the end of b, is nil.
func valueAfterKey(b []byte, key string) (v []byte, next int) {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(key))
		if i < 0 {
			return nil, -1
		}
		i += off + len(key)
		off = i
		j := skipSpace(b, i)
		if j >= len(b) || b[j] != ':' {
			continue
		}
		j = skipSpace(b, j+1)
		if end := valueEnd(b, j); end > 0 {
			return b[j:end], i
		}
		return nil, i
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd is the end of the object or string starting at b[i], -1 when it
// is another kind or does not end within b.
func valueEnd(b []byte, i int) int {
	if i >= len(b) || (b[i] != '{' && b[i] != '"') {
		return -1
	}
	depth, inStr := 0, false
	for j := i; j < len(b); j++ {
		c := b[j]
		switch {
		case inStr && c == '\\':
			j++
		case c == '"':
			inStr = !inStr
			if !inStr && depth == 0 {
				return j + 1 // a string value
			}
		case inStr:
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// usageTap reads a non-streaming answer through, keeping its last bytes
// (where "usage" is) and, of a longer body, its first (where "model" is),
// and scans them at the end. Only traced requests pay for it.
type usageTap struct {
	body       io.ReadCloser
	u          *usage
	head, tail []byte
	done       bool
}

const (
	tapHead = 512
	tapTail = 4 << 10
)

func (t *usageTap) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	if n > 0 {
		t.tail = append(t.tail, p[:n]...)
		if len(t.tail) > 2*tapTail {
			if t.head == nil { // the first bytes go: keep where "model" is
				t.head = append([]byte(nil), t.tail[:tapHead]...)
			}
			t.tail = t.tail[:copy(t.tail, t.tail[len(t.tail)-tapTail:])]
		}
	}
	if err == io.EOF && !t.done {
		t.done = true
		t.u.scan(t.head) // nil when the whole body is in tail
		t.u.scan(t.tail)
	}
	return n, err
}

func (t *usageTap) Close() error { return t.body.Close() }
