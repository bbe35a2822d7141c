package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// gatewaySpans are n requests' spans as the gateway records them: a
// server span with its attributes and a first_token event, and its door,
// queue and attempt children.
func gatewaySpans(b testing.TB, n int) []sdktrace.ReadOnlySpan {
	res := resource.NewSchemaless(attribute.String("service.name", "maitred"), attribute.String("service.version", "v1.0.0"))
	return record(&testing.T{}, res, sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
		tr := tp.Tracer("github.com/maitred-dev/maitred/gateway")
		for i := range n {
			ctx, sp := tr.Start(context.Background(), "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer))
			_, door := tr.Start(ctx, "door")
			door.SetAttributes(attribute.Int("maitred.door.prompt_tokens", 20+i%7), attribute.Bool("maitred.door.counted", true))
			door.End()
			_, q := tr.Start(ctx, "queue")
			q.SetAttributes(attribute.String("maitred.queue.outcome", "admitted"), attribute.String("maitred.queue.policy", "fifo"))
			q.End()
			_, at := tr.Start(ctx, "chat qwen3", trace.WithSpanKind(trace.SpanKindClient))
			at.SetAttributes(attribute.String("http.request.method", "POST"), attribute.String("server.address", "10.0.0.7"),
				attribute.String("url.full", "http://10.0.0.7:8000/v1/chat/completions"), attribute.Int("server.port", 8000),
				attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.request.model", "qwen3"),
				attribute.Int("http.response.status_code", 200), attribute.String("maitred.upstream_request_id", "chatcmpl-123"),
				attribute.Int64("gen_ai.usage.input_tokens", 20), attribute.Int64("gen_ai.usage.output_tokens", int64(7+i%100)),
				attribute.String("maitred.usage.from", "usage"), attribute.String("gen_ai.response.model", "qwen3"))
			at.End()
			sp.SetAttributes(attribute.String("http.request.method", "POST"), attribute.String("http.route", "/v1/chat/completions"),
				attribute.String("maitred.request_id", "0123456789abcdef"), attribute.Int("http.response.status_code", 200),
				attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.request.model", "qwen3"),
				attribute.Int("gen_ai.request.max_tokens", 256), attribute.Bool("maitred.stream", true),
				attribute.Int64("gen_ai.usage.input_tokens", 20), attribute.Int64("gen_ai.usage.output_tokens", int64(7+i%100)),
				attribute.String("maitred.usage.from", "usage"), attribute.String("gen_ai.response.model", "qwen3"),
				attribute.String("maitred.outcome", "ok"), attribute.Float64("maitred.queue_wait_ms", 0.25), attribute.String("maitred.key", "team-a"))
			sp.AddEvent("first_token", trace.WithTimestamp(time.Now()))
			if i%10 == 0 {
				sp.SetStatus(codes.Error, "backend_down")
			}
			sp.End()
		}
	})
}

// BenchmarkExportSpans exports a full batch (512 spans: 128 requests'
// trees) to an in-process collector that discards it, through the
// standard otlptracehttp exporter and through ours, side by side. The
// figure per op is a batch; per request is /128.
func BenchmarkExportSpans(b *testing.B) {
	spans := gatewaySpans(b, 128)
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
	ours, err := newHTTPExporter(coll.URL+"/v1/traces", httpSettings{timeout: 10 * time.Second}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		exp  sdktrace.SpanExporter
	}{{"otlptracehttp", std}, {"maitred", ours}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.exp.ExportSpans(context.Background(), spans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/128, "ns/request")
		})
		c.exp.Shutdown(context.Background())
	}
}

// BenchmarkEncodeSpans is the encoding alone: our encoder over the batch
// BenchmarkExportSpans sends.
func BenchmarkEncodeSpans(b *testing.B) {
	spans := gatewaySpans(b, 128)
	var e spanEncoder
	b.ReportAllocs()
	for b.Loop() {
		b.SetBytes(int64(len(e.encode(spans))))
	}
}
