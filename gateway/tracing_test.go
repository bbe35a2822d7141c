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

func startTraced(t *testing.T, grpcExport bool, mutate func(*config.Config)) *traced {
	t.Helper()
	return startTracedAt(t, grpcExport, 1.0, mutate)
}

// startTracedAt is startTraced sampling new traces at ratio.
func startTracedAt(t *testing.T, grpcExport bool, ratio float64, mutate func(*config.Config)) *traced {
	t.Helper()
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", OutputTokens: 5, MaxModelLen: 256, Tokenizer: sim.ModelTokenizer(tok)}, nil)
	simURL := httptestServer(t, s)
	coll := &otlpCollector{}
	tc := config.TracingConfig{SamplingRatio: &ratio, ServiceName: "maitred-test"}
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
	gw := startGatewayFull(t, tok, extras{tracer: tp}, mutate, simURL)
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
	tr := startTraced(t, false, nil)
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
	tr := startTraced(t, true, nil)
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

// TestTracesEveryEndpointWithKeyName: with API keys configured, every
// endpoint is traced, not only chat (completions, Messages, Responses,
// embeddings, the local tokenizer endpoints, a refused key), each model
// API's spans carry the usage the one usage reader saw, and the server
// span names the key by its configured name, never the key itself.
func TestTracesEveryEndpointWithKeyName(t *testing.T) {
	const key = "sk-traced-zz9-keymaterial"
	tr := startTraced(t, false, withKeys(config.KeyConfig{Name: "team-trace", SHA256: digestOf(key), Models: []string{"*"}}))
	auth := []string{"Authorization", "Bearer " + key}
	reqs := []struct {
		id, path, body string
		status         int
		op             string // gen_ai.operation.name; "": none
		backend        bool   // a backend CLIENT span and usage
		stream         bool
	}{
		{"ep-compl", "/v1/completions", `{"model":"m","max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"prompt":"` + secret + `"}`, 200, "text_completion", true, true},
		{"ep-msg", "/v1/messages", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"` + secret + `"}]}`, 200, "chat", true, false},
		{"ep-msg-stream", "/v1/messages", `{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"` + secret + `"}]}`, 200, "chat", true, true},
		{"ep-resp", "/v1/responses", `{"model":"m","max_output_tokens":16,"input":"` + secret + `"}`, 200, "chat", true, false},
		{"ep-resp-stream", "/v1/responses", `{"model":"m","max_output_tokens":16,"stream":true,"input":"` + secret + `"}`, 200, "chat", true, true},
		{"ep-embed", "/v1/embeddings", `{"model":"m","input":"` + secret + `"}`, 200, "embeddings", true, false},
		{"ep-tokenize", "/tokenize", `{"model":"m","prompt":"` + secret + `"}`, 200, "", false, false},
		{"ep-count", "/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"` + secret + `"}]}`, 200, "", false, false},
	}
	for _, rq := range reqs {
		res := tr.gw.post(t, rq.path, rq.body, append([]string{"X-Request-Id", rq.id}, auth...)...)
		if body := readBodyT(t, res); res.StatusCode != rq.status {
			t.Fatalf("%s: %d %s", rq.id, res.StatusCode, body)
		}
	}
	// A wrong key: refused, traced, and named by no key.
	res := tr.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+secret+`"}]}`,
		"X-Request-Id", "ep-badkey", "Authorization", "Bearer sk-wrong-zz9")
	if body := readBodyT(t, res); res.StatusCode != 401 {
		t.Fatalf("bad key: %d %s", res.StatusCode, body)
	}

	st := tr.flush(t)
	for _, rq := range reqs {
		sp := st.server(t, rq.id)
		kids := st.children(sp)
		if attrStr(sp, "maitred.key") != "team-trace" || attrInt(sp, "http.response.status_code") != int64(rq.status) ||
			attrStr(sp, "gen_ai.operation.name") != rq.op || attrStr(sp, "http.route") != rq.path {
			t.Errorf("%s: server span %q %v", rq.id, sp.Name, sp.Attributes)
		}
		if !rq.backend {
			if len(kids["backend"]) != 0 || attr(sp, "gen_ai.usage.input_tokens") != nil {
				t.Errorf("%s: a local endpoint has no backend span and no usage: %v %v", rq.id, kids, sp.Attributes)
			}
			continue
		}
		if len(kids["backend"]) != 1 {
			t.Errorf("%s: children %v, want one backend span", rq.id, kids)
			continue
		}
		for _, s := range []*tracepb.Span{sp, kids["backend"][0]} {
			if attrInt(s, "gen_ai.usage.input_tokens") <= 0 || attrStr(s, "gen_ai.response.model") != "m" {
				t.Errorf("%s: %s span usage %v", rq.id, s.Name, s.Attributes)
			}
			if rq.op != "embeddings" && attrInt(s, "gen_ai.usage.output_tokens") != 5 {
				t.Errorf("%s: %s span output tokens %v, the simulator answers 5", rq.id, s.Name, s.Attributes)
			}
			if attrStr(s, "maitred.usage.from") != "usage" {
				t.Errorf("%s: %s span usage from %q; the simulator reports its usage", rq.id, s.Name, attrStr(s, "maitred.usage.from"))
			}
		}
		if rq.stream && (len(sp.Events) != 1 || sp.Events[0].Name != "first_token") {
			t.Errorf("%s: events %v, want first_token", rq.id, sp.Events)
		}
	}
	bad := st.server(t, "ep-badkey")
	if attr(bad, "maitred.key") != nil || attrInt(bad, "http.response.status_code") != 401 || len(st.children(bad)) != 0 {
		t.Errorf("bad key: server span %v children %v", bad.Attributes, st.children(bad))
	}
	_, raw := tr.coll.snapshot()
	for _, s := range []string{key, "sk-wrong-zz9", "keymaterial", secret} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("%q found in the exported spans", s)
		}
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

// TestUsageMeterParts: the meter that reads an answer's usage for the
// quota also tells it in parts, with the answer's model, for the span's
// GenAI attributes: a non-streamed body's top-level members (not a
// "usage" quoted in its content), a stream's events, whatever the size
// of the reads.
func TestUsageMeterParts(t *testing.T) {
	tests := []struct {
		name, in      string
		events        func(*usageMeter, []byte)
		inTok, outTok int64
		hasIn, hasOut bool
		model         string
	}{
		{"openai", `{"id":"x","model":"m","choices":[{"message":{"content":"the \"usage\": {\"prompt_tokens\": 99}, \"model\": \"n\""}}],"usage":{"prompt_tokens":20,"total_tokens":27,"completion_tokens":7,"prompt_tokens_details":null}}`, nil, 20, 7, true, true, "m"},
		{"stream chunk without usage", "data: {\"model\":\"m\",\"choices\":[],\"usage\":null}\n\n", meterOpenAIEvent, 0, 0, false, false, "m"},
		{"openai stream", "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"model\":\"other\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", meterOpenAIEvent, 4, 1, true, true, "m"},
		{"anthropic events", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n", meterAnthropicEvent, 12, 9, true, true, "claude"},
		{"responses events", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"r\",\"usage\":null}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"r\",\"usage\":{\"input_tokens\":6,\"output_tokens\":2}}}\n\n", meterResponsesEvent, 6, 2, true, true, "r"},
		{"cut off", `{"usage":{"prompt_tokens":20,"compl`, nil, 0, 0, false, false, ""},
		{"embeddings", `{"object":"list","data":[],"model":"e5","usage":{"prompt_tokens":3,"total_tokens":3}}`, nil, 3, 0, true, false, "e5"},
		{"model after usage", `{"usage":{"input_tokens":2,"output_tokens":3},"model":"late"}`, nil, 2, 3, true, true, "late"},
		{"oversized model", `{"model":"` + strings.Repeat("a", maxModelValue) + `","usage":{"prompt_tokens":1}}`, nil, 1, 0, true, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, step := range []int{1, 5, len(tt.in)} {
				m := &usageMeter{body: io.NopCloser(&stepReader{b: []byte(tt.in), step: step}), status: 200, events: tt.events}
				if _, err := io.Copy(io.Discard, struct{ io.Reader }{m}); err != nil {
					t.Fatal(err)
				}
				p := m.parts()
				hasIn, hasOut := p.promptFrom == usageReported, p.completionFrom == usageReported
				if p.prompt != tt.inTok || p.completion != tt.outTok || hasIn != tt.hasIn || hasOut != tt.hasOut || p.model != tt.model {
					t.Errorf("read %d bytes at a time: parts = %+v", step, p)
				}
				if len(m.scan.val) > maxUsageValue || len(m.scan.model) > maxModelValue {
					t.Errorf("held %d + %d bytes", len(m.scan.val), len(m.scan.model))
				}
			}
			// Untraced (follow sets noModel): the same usage, no model kept.
			m := &usageMeter{body: io.NopCloser(strings.NewReader(tt.in)), status: 200, events: tt.events, noModel: true}
			m.scan.modelDone = true
			if _, err := io.Copy(io.Discard, struct{ io.Reader }{m}); err != nil {
				t.Fatal(err)
			}
			if p := m.parts(); p.model != "" || m.model != "" || len(m.scan.model) != 0 || p.prompt != tt.inTok || p.completion != tt.outTok {
				t.Errorf("untraced: parts = %+v, model kept %q %q", p, m.model, m.scan.model)
			}
		})
	}
}

// stepReader hands out b at most step bytes a read.
type stepReader struct {
	b    []byte
	step int
}

func (r *stepReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.step)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// TestUnsampledTraceStillPropagates samples no new trace (ratio 0): a
// request without a traceparent is not exported, yet the backend gets a
// valid traceparent flagged unsampled (so vLLM does not start a sampled
// trace of its own); a caller's sampled traceparent is followed
// (parent-based), its trace exported with the caller's trace ID, and its
// tracestate passed on.
func TestUnsampledTraceStillPropagates(t *testing.T) {
	tr := startTracedAt(t, false, 0, nil)
	const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	chat := `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`

	res := tr.gw.post(t, "/v1/chat/completions", chat, "X-Request-Id", "unsampled")
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("unsampled: %d %s", res.StatusCode, body)
	}
	res = tr.gw.post(t, "/v1/chat/completions", chat, "X-Request-Id", "followed",
		"traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "tracestate", "vendor=x")
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("followed: %d %s", res.StatusCode, body)
	}
	st := tr.flush(t)
	for _, sp := range st {
		if attrStr(sp, "maitred.request_id") == "unsampled" {
			t.Errorf("an unsampled request was exported: %v", sp)
		}
	}
	followed := st.server(t, "followed")
	if hex.EncodeToString(followed.TraceId) != callerTrace || hex.EncodeToString(followed.ParentSpanId) != callerSpan || followed.TraceState != "vendor=x" {
		t.Errorf("followed: trace %x parent %x state %q; want the caller's", followed.TraceId, followed.ParentSpanId, followed.TraceState)
	}
	backend := st.children(followed)["backend"]
	if len(backend) != 1 {
		t.Fatalf("followed: %d backend spans", len(backend))
	}

	var sawUnsampled, sawFollowed bool
	for _, r := range tr.sim.Received() {
		if r.Header.Get(fleet.ProbeHeader) != "" {
			continue
		}
		tp := r.Header.Get("Traceparent")
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
			t.Errorf("the backend got traceparent %q", tp)
			continue
		}
		switch parts[1] {
		case callerTrace:
			sawFollowed = true
			if parts[2] != hex.EncodeToString(backend[0].SpanId) || parts[3] != "01" || r.Header.Get("Tracestate") != "vendor=x" {
				t.Errorf("followed: the backend got %q (tracestate %q), want the backend span %x sampled", tp, r.Header.Get("Tracestate"), backend[0].SpanId)
			}
		default:
			sawUnsampled = true
			if parts[3] != "00" || parts[1] == strings.Repeat("0", 32) || parts[2] == strings.Repeat("0", 16) {
				t.Errorf("unsampled: the backend got %q, want fresh IDs flagged 00", tp)
			}
		}
	}
	if !sawUnsampled || !sawFollowed {
		t.Errorf("the backend saw unsampled=%v followed=%v, want both", sawUnsampled, sawFollowed)
	}
}
