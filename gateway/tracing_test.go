package gateway

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/telemetry"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// otlpCollector is an in-process OTLP receiver: over HTTP it decodes the
// real protobuf ExportTraceServiceRequest at /v1/traces; over gRPC it is a
// TraceService server. It keeps every span and the raw bytes received.
type otlpCollector struct {
	mu    sync.Mutex
	raw   [][]byte
	spans []*tracepb.Span
	collectortrace.UnimplementedTraceServiceServer
}

func (c *otlpCollector) add(req *collectortrace.ExportTraceServiceRequest, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.raw = append(c.raw, raw)
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.add(&req, raw)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// Export is the gRPC TraceService.
func (c *otlpCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	raw, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	c.add(req, raw)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *otlpCollector) snapshot() ([]*tracepb.Span, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...), bytes.Join(c.raw, nil)
}

// newTracing resolves the tracing settings from a config section (and an
// empty environment) and starts the provider, shut down at cleanup.
func newTracing(t *testing.T, tc config.TracingConfig) *telemetry.Provider {
	t.Helper()
	s, err := telemetry.Resolve(tc, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	tp, err := telemetry.New(t.Context(), s, telemetry.Options{})
	if err != nil || tp == nil {
		t.Fatalf("telemetry.New = %v, %v", tp, err)
	}
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// spanTree indexes exported spans.
type spanTree []*tracepb.Span

func attr(sp *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range sp.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

func attrStr(sp *tracepb.Span, key string) string {
	if v := attr(sp, key); v != nil {
		return v.GetStringValue()
	}
	return ""
}

// attrInt is an int attribute's value, -1 when absent.
func attrInt(sp *tracepb.Span, key string) int64 {
	if v := attr(sp, key); v != nil {
		if _, ok := v.Value.(*commonpb.AnyValue_IntValue); ok {
			return v.GetIntValue()
		}
	}
	return -1
}

// server finds the SERVER span of the request with X-Request-Id id.
func (st spanTree) server(t *testing.T, id string) *tracepb.Span {
	t.Helper()
	for _, sp := range st {
		if sp.Kind == tracepb.Span_SPAN_KIND_SERVER && attrStr(sp, "maitred.request_id") == id {
			return sp
		}
	}
	t.Fatalf("no server span for request %s among %d spans", id, len(st))
	return nil
}

// children are the spans whose parent is sp.
func (st spanTree) children(sp *tracepb.Span) map[string][]*tracepb.Span {
	out := map[string][]*tracepb.Span{}
	for _, c := range st {
		if bytes.Equal(c.ParentSpanId, sp.SpanId) && bytes.Equal(c.TraceId, sp.TraceId) {
			name := c.Name
			if c.Kind == tracepb.Span_SPAN_KIND_CLIENT {
				name = "backend"
			}
			out[name] = append(out[name], c)
		}
	}
	return out
}

// traced is the simulator (with the qwen3 tokenizer, so the door counts
// exactly) behind a gateway that traces to an in-process collector.
type traced struct {
	sim  *sim.Server
	simU *url.URL
	gw   *testGateway
	coll *otlpCollector
	tp   *telemetry.Provider
}

func startTraced(t *testing.T, grpcExport bool) *traced {
	t.Helper()
	tok, err := tokenize.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", OutputTokens: 5, MaxModelLen: 256, Tokenizer: sim.ModelTokenizer(tok)}, nil)
	simURL := httptestServer(t, s)
	coll := &otlpCollector{}
	one := 1.0
	tc := config.TracingConfig{SamplingRatio: &one, ServiceName: "maitred-test"}
	if grpcExport {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(gs, coll)
		done := make(chan struct{})
		go func() { gs.Serve(ln); close(done) }()
		t.Cleanup(func() { gs.Stop(); <-done })
		tc.Endpoint, tc.Protocol = "http://"+ln.Addr().String(), config.TracingGRPC
	} else {
		srv := httptest.NewServer(coll)
		t.Cleanup(srv.Close)
		tc.Endpoint = srv.URL // no path: /v1/traces is appended
	}
	tp := newTracing(t, tc)
	gw := startGatewayFull(t, tok, extras{tracer: tp}, nil, simURL)
	u, _ := url.Parse(simURL)
	return &traced{sim: s, simU: u, gw: gw, coll: coll, tp: tp}
}

// flush waits for every request to end in its handler (the server span
// ends after the client has its answer) and exports what is buffered.
func (tr *traced) flush(t *testing.T) spanTree {
	t.Helper()
	tr.gw.quiesce()
	if err := tr.tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans, _ := tr.coll.snapshot()
	return spans
}

// received is what the simulator got for the upstream request id.
func (tr *traced) received(t *testing.T, upstreamID string) sim.Received {
	t.Helper()
	for _, r := range tr.sim.Received() {
		if r.Header.Get("X-Request-Id") == upstreamID && r.Header.Get(fleet.ProbeHeader) == "" {
			return r
		}
	}
	t.Fatalf("the simulator received no request %s", upstreamID)
	return sim.Received{}
}

// secret is in every prompt sent: it must appear in no exported byte.
const secret = "zebraquartzsecret"

// TestTracesRequestsIntoTheBackend runs real requests through the
// gateway and the simulator and reads the spans an OTLP/HTTP collector
// received: the span tree (server, then door, queue and the backend
// CLIENT span), the traceparent the simulator received naming the
// backend span, the GenAI token attributes, an incoming traceparent
// honoured, a rejected request's span, and no prompt text anywhere.
func TestTracesRequestsIntoTheBackend(t *testing.T) {
	tr := startTraced(t, false)
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

	// A: non-streaming chat, with the caller's own trace context.
	res := tr.gw.post(t, "/v1/chat/completions",
		`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Tell me about `+secret+`."}]}`,
		"X-Request-Id", "trace-a", "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "tracestate", "caller=1")
	bodyA := readBodyT(t, res)
	if res.StatusCode != 200 {
		t.Fatalf("A: %d %s", res.StatusCode, bodyA)
	}
	var answerA struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(bodyA), &answerA); err != nil || answerA.Usage.PromptTokens == 0 || answerA.Usage.CompletionTokens == 0 {
		t.Fatalf("A: no usage in %s (%v)", bodyA, err)
	}

	// B: a stream with the usage chunk.
	res = tr.gw.post(t, "/v1/chat/completions",
		`{"model":"m","max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"`+secret+` again"}]}`,
		"X-Request-Id", "trace-b")
	if body := readBodyT(t, res); res.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("B: %d %s", res.StatusCode, body)
	}
	// C: over-long: rejected at the door.
	res = tr.gw.post(t, "/v1/chat/completions",
		`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"`+strings.Repeat(secret+" ", 200)+`"}]}`,
		"X-Request-Id", "trace-c")
	if body := readBodyT(t, res); res.StatusCode != 400 || !strings.Contains(body, "context_length_exceeded") {
		t.Fatalf("C: %d %s", res.StatusCode, body)
	}
	// D: embeddings, another model API.
	res = tr.gw.post(t, "/v1/embeddings", `{"model":"m","input":"`+secret+`"}`, "X-Request-Id", "trace-d")
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("D: %d %s", res.StatusCode, body)
	}
	// E: an endpoint that is no model API.
	req, _ := http.NewRequest(http.MethodGet, tr.gw.URL+"/v1/models", nil)
	req.Header.Set("X-Request-Id", "trace-e")
	res, err := tr.gw.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readBodyT(t, res)

	st := tr.flush(t)
	simPort, _ := strconv.Atoi(tr.simU.Port())

	// A's tree: the caller's trace, then server -> door, queue, backend.
	a := st.server(t, "trace-a")
	if hex.EncodeToString(a.TraceId) != callerTrace || hex.EncodeToString(a.ParentSpanId) != callerSpan {
		t.Errorf("A: trace %x parent %x; want the caller's %s, %s", a.TraceId, a.ParentSpanId, callerTrace, callerSpan)
	}
	if a.Name != "POST /v1/chat/completions" || attrStr(a, "gen_ai.operation.name") != "chat" || attrStr(a, "gen_ai.request.model") != "m" {
		t.Errorf("A: server span %q attributes %v", a.Name, a.Attributes)
	}
	kids := st.children(a)
	if len(kids["door"]) != 1 || len(kids["queue"]) != 1 || len(kids["backend"]) != 1 || len(kids) != 3 {
		t.Fatalf("A: children %v, want door, queue and one backend span", kids)
	}
	door, backend := kids["door"][0], kids["backend"][0]
	if attrInt(door, "maitred.door.prompt_tokens") != int64(answerA.Usage.PromptTokens) || attr(door, "maitred.door.counted").GetBoolValue() != true {
		t.Errorf("A: door span %v; the simulator counted %d prompt tokens", door.Attributes, answerA.Usage.PromptTokens)
	}
	if attrStr(kids["queue"][0], "maitred.queue.outcome") != "admitted" {
		t.Errorf("A: queue span %v", kids["queue"][0].Attributes)
	}
	if attrStr(backend, "server.address") != tr.simU.Hostname() || attrInt(backend, "server.port") != int64(simPort) ||
		attrInt(backend, "http.response.status_code") != 200 || backend.Name != "chat m" {
		t.Errorf("A: backend span %q %v; the simulator is at %s", backend.Name, backend.Attributes, tr.simU.Host)
	}
	for _, sp := range []*tracepb.Span{a, backend} {
		if attrInt(sp, "gen_ai.usage.input_tokens") != int64(answerA.Usage.PromptTokens) ||
			attrInt(sp, "gen_ai.usage.output_tokens") != int64(answerA.Usage.CompletionTokens) ||
			attrStr(sp, "gen_ai.response.model") != "m" {
			t.Errorf("A: %s span usage %v; the answer said %+v", sp.Name, sp.Attributes, answerA.Usage)
		}
	}
	if attrInt(a, "gen_ai.request.max_tokens") != 16 || attr(a, "maitred.queue_wait_ms") == nil || a.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("A: server span %v status %v", a.Attributes, a.Status)
	}
	// The simulator's parent is the backend span: vLLM's span is its child.
	got := tr.received(t, attrStr(backend, "maitred.upstream_request_id"))
	if !got.Trace.Valid || got.Trace.TraceID != callerTrace || got.Trace.ParentID != hex.EncodeToString(backend.SpanId) || !got.Trace.Sampled {
		t.Errorf("A: the simulator received trace context %+v; want trace %s, parent %x (the backend span)", got.Trace, callerTrace, backend.SpanId)
	}
	if got.Trace.State != "caller=1" {
		t.Errorf("A: tracestate %q, want the caller's", got.Trace.State)
	}

	// B: the stream's usage chunk and its first token.
	b := st.server(t, "trace-b")
	if attrInt(b, "gen_ai.usage.output_tokens") != 5 || attrInt(b, "gen_ai.usage.input_tokens") <= 0 || !attr(b, "maitred.stream").GetBoolValue() {
		t.Errorf("B: server span %v", b.Attributes)
	}
	if len(b.Events) != 1 || b.Events[0].Name != "first_token" || b.Events[0].TimeUnixNano < b.StartTimeUnixNano || b.Events[0].TimeUnixNano > b.EndTimeUnixNano {
		t.Errorf("B: events %v, want one first_token within the span", b.Events)
	}
	kids = st.children(b)
	if len(kids["backend"]) != 1 {
		t.Fatalf("B: children %v", kids)
	}
	got = tr.received(t, attrStr(kids["backend"][0], "maitred.upstream_request_id"))
	if got.Trace.TraceID != hex.EncodeToString(b.TraceId) || got.Trace.ParentID != hex.EncodeToString(kids["backend"][0].SpanId) {
		t.Errorf("B: the simulator received %+v; want the backend span %x of trace %x", got.Trace, kids["backend"][0].SpanId, b.TraceId)
	}
	if len(b.ParentSpanId) != 0 {
		t.Errorf("B: no caller trace was sent, but the server span has parent %x", b.ParentSpanId)
	}

	// C: rejected at the door: outcome and error, no queue, no backend.
	c := st.server(t, "trace-c")
	if attrStr(c, "maitred.outcome") != "context_length_exceeded" || attrStr(c, "maitred.rejection_reason") != "context_length_exceeded" ||
		attrStr(c, "maitred.layer") != "door" || attrInt(c, "http.response.status_code") != 400 {
		t.Errorf("C: server span %v", c.Attributes)
	}
	if c.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || c.Status.GetMessage() != "context_length_exceeded" {
		t.Errorf("C: status %v", c.Status)
	}
	kids = st.children(c)
	if len(kids) != 1 || len(kids["door"]) != 1 || attrInt(kids["door"][0], "maitred.door.prompt_tokens") <= 256 {
		t.Errorf("C: children %v, want the door span alone, with the count", kids)
	}
	if attr(c, "gen_ai.usage.input_tokens") != nil {
		t.Errorf("C: a rejected request used no tokens: %v", c.Attributes)
	}

	// D: embeddings are traced like chat.
	d := st.server(t, "trace-d")
	kids = st.children(d)
	if attrStr(d, "gen_ai.operation.name") != "embeddings" || len(kids["backend"]) != 1 || attrInt(d, "gen_ai.usage.input_tokens") <= 0 {
		t.Errorf("D: server span %v children %v", d.Attributes, kids)
	}
	// E: a local endpoint has its server span and no children.
	e := st.server(t, "trace-e")
	if e.Name != "GET /v1/models" || len(st.children(e)) != 0 || attrInt(e, "http.response.status_code") != 200 {
		t.Errorf("E: span %q %v children %v", e.Name, e.Attributes, st.children(e))
	}

	// No prompt text in any exported byte.
	_, rawBytes := tr.coll.snapshot()
	if len(rawBytes) == 0 {
		t.Fatal("nothing exported")
	}
	if bytes.Contains(rawBytes, []byte(secret)) || bytes.Contains(rawBytes, []byte("Tell me about")) {
		t.Error("prompt text found in the exported spans")
	}
}

// TestTracesOverGRPC exports through the OTLP gRPC exporter to an
// in-process TraceService: the same server and backend spans arrive.
func TestTracesOverGRPC(t *testing.T) {
	tr := startTraced(t, true)
	res := tr.gw.post(t, "/v1/completions", `{"model":"m","max_tokens":4,"prompt":"`+secret+`"}`, "X-Request-Id", "grpc-a")
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	st := tr.flush(t)
	sp := st.server(t, "grpc-a")
	kids := st.children(sp)
	if attrStr(sp, "gen_ai.operation.name") != "text_completion" || len(kids["backend"]) != 1 || attrInt(sp, "gen_ai.usage.output_tokens") != 4 {
		t.Errorf("server span %v children %v", sp.Attributes, kids)
	}
	got := tr.received(t, attrStr(kids["backend"][0], "maitred.upstream_request_id"))
	if got.Trace.ParentID != hex.EncodeToString(kids["backend"][0].SpanId) {
		t.Errorf("the simulator received %+v, want parent %x", got.Trace, kids["backend"][0].SpanId)
	}
	if _, raw := tr.coll.snapshot(); bytes.Contains(raw, []byte(secret)) {
		t.Error("prompt text found in the exported spans")
	}
}

// TestUntracedPassesTraceparentThrough: with tracing off the gateway
// neither drops nor rewrites the client's trace context; vLLM still
// joins the caller's trace.
func TestUntracedPassesTraceparentThrough(t *testing.T) {
	s := sim.New(sim.Config{Model: "m", OutputTokens: 2}, nil)
	tg := startGateway(t, nil, httptestServer(t, s))
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "traceparent", tp, "tracestate", "caller=1")
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	for _, r := range s.Received() {
		if r.Path == "/v1/chat/completions" && r.Header.Get(fleet.ProbeHeader) == "" {
			if r.Header.Get("Traceparent") != tp || r.Header.Get("Tracestate") != "caller=1" {
				t.Errorf("the simulator received traceparent %q tracestate %q; want the client's", r.Header.Get("Traceparent"), r.Header.Get("Tracestate"))
			}
			return
		}
	}
	t.Fatal("the simulator received no chat request")
}

func TestUsageScan(t *testing.T) {
	tests := []struct {
		name, in      string
		inTok, outTok int
		hasIn, hasOut bool
		model         string
	}{
		{"openai", `{"id":"x","model":"m","choices":[{"message":{"content":"the \"usage\": {\"prompt_tokens\": 99}"}}],"usage":{"prompt_tokens":20,"total_tokens":27,"completion_tokens":7,"prompt_tokens_details":null}}`, 20, 7, true, true, "m"},
		{"stream chunk without usage", "data: {\"model\":\"m\",\"choices\":[],\"usage\":null}\n\n", 0, 0, false, false, "m"},
		{"anthropic events", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n", 12, 9, true, true, "claude"},
		{"cut off", `{"usage":{"prompt_tokens":20,"compl`, 0, 0, false, false, ""},
		{"embeddings", `{"object":"list","data":[],"model":"e5","usage":{"prompt_tokens":3,"total_tokens":3}}`, 3, 0, true, false, "e5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u usage
			u.scan([]byte(tt.in))
			if u.in != tt.inTok || u.out != tt.outTok || u.hasIn != tt.hasIn || u.hasOut != tt.hasOut || u.model != tt.model {
				t.Errorf("scan = %+v", u)
			}
		})
	}
}
