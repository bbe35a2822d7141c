package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// benchResource is the resource of the benchmarks' spans.
var benchResource = resource.NewSchemaless(attribute.String("service.name", "maitred"), attribute.String("service.version", "v1.0.0"))

// recordGatewayTrace records one request's trace as the gateway does: a
// server span with its attributes and a first_token event, and its door,
// queue and attempt children. i varies the values.
func recordGatewayTrace(p *Provider, i int) *Trace {
	now := time.Now()
	tr := p.Begin(context.Background(), "POST", "/v1/chat/completions", trace.SpanKindServer, now)
	door := tr.Start("door", "", trace.SpanKindInternal, now)
	door.Int("maitred.door.prompt_tokens", int64(20+i%7))
	door.Bool("maitred.door.counted", true)
	door.End(now)
	q := tr.Start("queue", "", trace.SpanKindInternal, now)
	q.String("maitred.queue.outcome", "admitted")
	q.String("maitred.queue.policy", "fifo")
	q.End(now)
	at := tr.Start("chat", "qwen3", trace.SpanKindClient, now)
	at.String("http.request.method", "POST")
	at.String("server.address", "10.0.0.7")
	at.String("url.full", "http://10.0.0.7:8000/v1/chat/completions")
	at.Int("server.port", 8000)
	at.String("gen_ai.operation.name", "chat")
	at.String("gen_ai.request.model", "qwen3")
	at.Int("http.response.status_code", 200)
	at.String("maitred.upstream_request_id", "chatcmpl-123")
	at.Int("gen_ai.usage.input_tokens", 20)
	at.Int("gen_ai.usage.output_tokens", int64(7+i%100))
	at.End(now)
	sp := tr.Root()
	sp.String("http.request.method", "POST")
	sp.String("http.route", "/v1/chat/completions")
	sp.String("maitred.request_id", "0123456789abcdef")
	sp.Int("http.response.status_code", 200)
	sp.String("gen_ai.operation.name", "chat")
	sp.String("gen_ai.request.model", "qwen3")
	sp.Int("gen_ai.request.max_tokens", 256)
	sp.Bool("maitred.stream", true)
	sp.Int("gen_ai.usage.input_tokens", 20)
	sp.Int("gen_ai.usage.output_tokens", int64(7+i%100))
	sp.String("maitred.usage.from", "usage")
	sp.String("gen_ai.response.model", "qwen3")
	sp.String("maitred.outcome", "ok")
	sp.Float("maitred.queue_wait_ms", 0.25)
	sp.String("maitred.key", "team-a")
	sp.Event("first_token", now)
	if i%10 == 0 {
		sp.Fail("backend_down")
	}
	sp.End(now)
	return tr
}

// gatewayTraces are n requests' traces (4n spans).
func gatewayTraces(n int) []*Trace {
	p := testProvider(sdktrace.AlwaysSample(), nil)
	out := make([]*Trace, n)
	for i := range out {
		out[i] = recordGatewayTrace(p, i)
	}
	return out
}

// BenchmarkExportSpans exports a full batch (512 spans: 128 requests'
// traces) to an in-process collector that discards it: through the
// standard otlptracehttp exporter (the same spans as the SDK's read-only
// spans, converted once, outside the loop), through ours encoding the
// spans, and through ours with the spans pre-encoded as Finish leaves
// them for the batcher. The figure per op is a batch; per request is
// /128.
func BenchmarkExportSpans(b *testing.B) {
	traces := gatewayTraces(128)
	p := testProvider(sdktrace.AlwaysSample(), nil)
	wired := make([]*Trace, 128)
	for i := range wired {
		wired[i] = p.carry(recordGatewayTrace(p, i))
	}
	coll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer coll.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	std, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(coll.URL+"/v1/traces"), otlptracehttp.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		b.Fatal(err)
	}
	defer std.Shutdown(context.Background())
	ours, err := newHTTPExporter(coll.URL+"/v1/traces", httpSettings{timeout: 10 * time.Second}, "bench", newSpanEncoder(benchResource.Attributes(), ScopeName))
	if err != nil {
		b.Fatal(err)
	}
	defer ours.shutdown(context.Background())
	spans := appendSnapshots(nil, traces, benchResource, instrumentation.Scope{Name: ScopeName})
	for _, c := range []struct {
		name   string
		export func() error
	}{
		{"otlptracehttp", func() error { return std.ExportSpans(context.Background(), spans) }},
		{"maitred", func() error { return ours.export(context.Background(), traces) }},
		{"maitred-preencoded", func() error { return ours.export(context.Background(), wired) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.export(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/128, "ns/request")
		})
	}
}

// BenchmarkEncodeSpans is the encoding alone: our encoder over the batch
// BenchmarkExportSpans sends.
func BenchmarkEncodeSpans(b *testing.B) {
	traces := gatewayTraces(128)
	e := newSpanEncoder(benchResource.Attributes(), ScopeName)
	b.ReportAllocs()
	for b.Loop() {
		b.SetBytes(int64(len(e.encode(traces))))
	}
}

// BenchmarkRecordTrace is a request's share of tracing on its own
// goroutine: recording its trace, and finishing it into a batcher that
// pre-encodes its spans (the batcher's exports go to an exporter that
// drops them).
func BenchmarkRecordTrace(b *testing.B) {
	p := testProvider(sdktrace.AlwaysSample(), &countExporter{})
	p.queue = newBatcher(discardExporter{}, batchSettings{delay: time.Second, timeout: time.Second, maxQueue: 2048, maxBatch: 512}, p.release)
	p.wire = true
	defer p.Shutdown(context.Background())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.Finish(recordGatewayTrace(p, i))
		i++
	}
}

// discardExporter drops what it is given; it is safe for concurrent use.
type discardExporter struct{}

func (discardExporter) export(context.Context, []*Trace) error { return nil }
func (discardExporter) shutdown(context.Context) error         { return nil }
