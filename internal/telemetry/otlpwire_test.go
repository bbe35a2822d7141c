package telemetry

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// collector is an in-process OTLP/HTTP collector that keeps the bodies
// it is sent.
type collector struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	reqs   []*http.Request
}

func newCollector(t *testing.T, answer http.HandlerFunc) *collector {
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		c.mu.Lock()
		c.bodies = append(c.bodies, b)
		c.reqs = append(c.reqs, r)
		c.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) requests(t *testing.T) []*coltracepb.ExportTraceServiceRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*coltracepb.ExportTraceServiceRequest
	for _, b := range c.bodies {
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatalf("the collector cannot decode what it was sent: %v", err)
		}
		out = append(out, &m)
	}
	return out
}

// exportBoth sends spans through the standard otlptracehttp exporter and
// through ours, each to its own collector, and returns the two requests
// decoded, their resources in one order (the standard exporter's order
// of resources is a map's).
func exportBoth(t *testing.T, spans []sdktrace.ReadOnlySpan) (std, ours *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	cs, co := newCollector(t, nil), newCollector(t, nil)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	se, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(cs.URL+"/v1/traces"), otlptracehttp.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	oe, err := newHTTPExporter(co.URL+"/v1/traces", httpSettings{timeout: time.Second}, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []sdktrace.SpanExporter{se, oe} {
		if err := e.ExportSpans(t.Context(), spans); err != nil {
			t.Fatal(err)
		}
		if err := e.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	rs, ro := cs.requests(t), co.requests(t)
	if len(rs) != 1 || len(ro) != 1 {
		t.Fatalf("requests: standard %d, ours %d; want 1 each", len(rs), len(ro))
	}
	for _, r := range []*coltracepb.ExportTraceServiceRequest{rs[0], ro[0]} {
		slices.SortStableFunc(r.ResourceSpans, func(a, b *tracepb.ResourceSpans) int {
			return compareStrings(a.GetSchemaUrl(), b.GetSchemaUrl())
		})
	}
	return rs[0], ro[0]
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// record runs f with tracers of a provider whose spans are recorded, and
// returns the spans.
func record(t *testing.T, res *resource.Resource, limits sdktrace.SpanLimits, f func(tp trace.TracerProvider)) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits))
	f(tp)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rec.Ended()
}

// everyAttribute is an attribute of every attribute.Type, zero values and
// nesting included.
func everyAttribute() []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("s", "text"),
		attribute.String("s.empty", ""),
		attribute.String("s.long", string(make([]byte, 300))),
		attribute.Bool("b.true", true),
		attribute.Bool("b.false", false),
		attribute.Int64("i", -42),
		attribute.Int64("i.zero", 0),
		attribute.Int64("i.max", math.MaxInt64),
		attribute.Int64("i.min", math.MinInt64),
		attribute.Float64("f", 3.25),
		attribute.Float64("f.zero", 0),
		attribute.Float64("f.neg0", math.Copysign(0, -1)),
		attribute.Float64("f.inf", math.Inf(-1)),
		attribute.BoolSlice("bs", []bool{true, false}),
		attribute.BoolSlice("bs.empty", []bool{}),
		attribute.Int64Slice("is", []int64{1, 0, -1, 1 << 40}),
		attribute.Float64Slice("fs", []float64{0.5, 0, -2}),
		attribute.StringSlice("ss", []string{"a", "", "ccc"}),
		attribute.StringSlice("ss.empty", nil),
		attribute.ByteSlice("bytes", []byte{0, 1, 2, 255}),
		attribute.ByteSlice("bytes.empty", nil),
		attribute.Slice("slice", attribute.StringValue("x"), attribute.IntValue(7), attribute.BoolValue(false),
			attribute.SliceValue(attribute.Float64Value(1.5)), attribute.MapValue(attribute.String("k", "v")), attribute.Value{}),
		attribute.Map("map", attribute.String("a", "b"), attribute.Int("n", 0),
			attribute.Map("inner", attribute.StringSlice("l", []string{"z"})), attribute.KeyValue{Key: "empty"}),
		{Key: "empty.value"},
		attribute.String("", "empty key"),
	}
}

// TestEncoderMatchesStandardExporter is the differential test: the same
// spans, sent by otlptracehttp and by our exporter, decode to equal
// requests.
func TestEncoderMatchesStandardExporter(t *testing.T) {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "maitred"), attribute.String("service.version", "v1.2.3"))
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled, Remote: true,
	})
	ts, err := trace.ParseTraceState("vendor=value,other=x")
	if err != nil {
		t.Fatal(err)
	}
	remoteWithState := remote.WithTraceState(ts)
	t0 := time.Date(2026, 12, 4, 8, 0, 0, 123456789, time.UTC)

	tests := []struct {
		name   string
		limits sdktrace.SpanLimits
		run    func(tp trace.TracerProvider)
	}{
		{"one server span", sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
			_, sp := tp.Tracer("gw").Start(context.Background(), "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer))
			sp.SetAttributes(attribute.String("http.route", "/v1/chat/completions"), attribute.Int("http.response.status_code", 200))
			sp.End()
		}},
		{"every attribute type, event and link", sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), remoteWithState)
			_, sp := tp.Tracer("gw", trace.WithInstrumentationVersion("v9"), trace.WithSchemaURL("https://s/1"),
				trace.WithInstrumentationAttributes(attribute.String("scope.attr", "x"), attribute.Int("n", 3))).
				Start(ctx, "every", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(t0),
					trace.WithLinks(trace.Link{SpanContext: remoteWithState, Attributes: everyAttribute()},
						trace.Link{SpanContext: remote.WithRemote(false).WithTraceFlags(0)}))
			sp.SetAttributes(everyAttribute()...)
			sp.AddEvent("first_token", trace.WithTimestamp(t0.Add(time.Millisecond)))
			sp.AddEvent("with attributes", trace.WithTimestamp(t0.Add(2*time.Millisecond)), trace.WithAttributes(everyAttribute()...))
			sp.SetStatus(codes.Error, "backend_down")
			sp.End(trace.WithTimestamp(t0.Add(time.Second)))
		}},
		{"a tree of every kind and status", sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
			tr := tp.Tracer("gw")
			ctx, root := tr.Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindServer))
			for i, k := range []trace.SpanKind{trace.SpanKindUnspecified, trace.SpanKindInternal, trace.SpanKindClient, trace.SpanKindProducer, trace.SpanKindConsumer} {
				_, sp := tr.Start(ctx, "child", trace.WithSpanKind(k))
				switch i % 3 {
				case 0:
					sp.SetStatus(codes.Ok, "ignored for ok")
				case 1:
					sp.SetStatus(codes.Error, "")
				}
				sp.End()
			}
			root.End()
		}},
		{"dropped attributes, events and links", sdktrace.SpanLimits{AttributeCountLimit: 2, EventCountLimit: 1, LinkCountLimit: 1,
			AttributePerEventCountLimit: 1, AttributePerLinkCountLimit: 1, AttributeValueLengthLimit: 4}, func(tp trace.TracerProvider) {
			_, sp := tp.Tracer("gw").Start(context.Background(), "limited",
				trace.WithLinks(trace.Link{SpanContext: remote, Attributes: everyAttribute()}, trace.Link{SpanContext: remote}))
			sp.SetAttributes(everyAttribute()...)
			sp.AddEvent("e1", trace.WithAttributes(everyAttribute()...))
			sp.AddEvent("e2")
			sp.End()
		}},
		{"several scopes, interleaved", sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
			for i := range 6 {
				name := []string{"a", "b", "c"}[i%3]
				_, sp := tp.Tracer(name).Start(context.Background(), name)
				sp.End()
			}
			_, sp := tp.Tracer("").Start(context.Background(), "no scope name")
			sp.End()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spans := record(t, res, tt.limits, tt.run)
			std, ours := exportBoth(t, spans)
			if !proto.Equal(std, ours) {
				t.Fatalf("our request differs from otlptracehttp's (std, then ours):\n%s", textDiff(std, ours))
			}
		})
	}

	t.Run("several resources", func(t *testing.T) {
		var spans []sdktrace.ReadOnlySpan
		for i, r := range []*resource.Resource{
			resource.NewWithAttributes("https://s/a", attribute.String("service.name", "a")),
			resource.NewWithAttributes("https://s/b", attribute.String("service.name", "b")),
			resource.Empty(),
		} {
			spans = append(spans, record(t, r, sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
				for j := range i + 2 {
					_, sp := tp.Tracer([]string{"x", "y"}[j%2]).Start(context.Background(), "s")
					sp.End()
				}
			})...)
		}
		// Interleave them: spans of one resource are not next to each other.
		spans = []sdktrace.ReadOnlySpan{spans[0], spans[2], spans[5], spans[1], spans[3], spans[6], spans[4], spans[7], spans[8]}
		std, ours := exportBoth(t, spans)
		if len(std.ResourceSpans) != 3 || !proto.Equal(std, ours) {
			t.Fatalf("our request differs from otlptracehttp's (std, then ours):\n%s", textDiff(std, ours))
		}
	})
}

// TestEncoderReusesItsBuffer: encoding one batch after another gives
// each its own bytes, the first unaffected by a larger second.
func TestEncoderReusesItsBuffer(t *testing.T) {
	res := resource.NewSchemaless(attribute.String("service.name", "maitred"))
	small := record(t, res, sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
		_, sp := tp.Tracer("gw").Start(context.Background(), "one")
		sp.End()
	})
	big := record(t, res, sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
		for range 200 {
			_, sp := tp.Tracer("gw").Start(context.Background(), "many")
			sp.SetAttributes(everyAttribute()...)
			sp.End()
		}
	})
	var e spanEncoder
	first := slices.Clone(e.encode(small))
	e.encode(big)
	again := e.encode(small)
	if string(first) != string(again) {
		t.Fatal("the same spans encoded twice differ")
	}
	var m coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(e.encode(big), &m); err != nil {
		t.Fatal(err)
	}
	if n := len(m.ResourceSpans[0].ScopeSpans[0].Spans); n != 200 {
		t.Fatalf("spans = %d, want 200", n)
	}
}

// textDiff shows two messages, for a failure.
func textDiff(a, b proto.Message) string {
	o := prototext.MarshalOptions{Multiline: true}
	return o.Format(a) + "\n----\n" + o.Format(b)
}
