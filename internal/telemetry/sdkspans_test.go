package telemetry

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// appendSnapshots appends the traces' spans as the SDK's read-only spans,
// with the resource and scope given: what the standard exporters take,
// for the differential tests and benchmarks that hold maitred's encoder
// against them. Test code only: production never builds SDK spans.
func appendSnapshots(out []sdktrace.ReadOnlySpan, traces []*Trace, res *resource.Resource, scope instrumentation.Scope) []sdktrace.ReadOnlySpan {
	for _, t := range traces {
		sc := func(id trace.SpanID) trace.SpanContext {
			return trace.NewSpanContext(trace.SpanContextConfig{TraceID: t.id, SpanID: id, TraceFlags: t.flags, TraceState: t.state})
		}
		for i, s := range t.spans {
			parent := t.parent
			if i > 0 {
				parent = sc(t.spans[0].id)
			}
			name := s.name
			if s.name2 != "" {
				name += " " + s.name2
			}
			stub := tracetest.SpanStub{
				Name:                 name,
				SpanContext:          sc(s.id),
				Parent:               parent,
				SpanKind:             s.kind,
				StartTime:            time.Unix(0, s.start),
				EndTime:              time.Unix(0, s.end),
				Resource:             res,
				InstrumentationScope: scope,
			}
			for _, a := range s.attrs {
				stub.Attributes = append(stub.Attributes, a.keyValue())
			}
			if s.event != "" {
				stub.Events = []sdktrace.Event{{Name: s.event, Time: time.Unix(0, s.eventAt)}}
			}
			if s.failed {
				stub.Status = sdktrace.Status{Code: codes.Error, Description: s.status}
			}
			out = append(out, stub.Snapshot())
		}
	}
	return out
}

// keyValue is a as the OpenTelemetry API's attribute.
func (a Attr) keyValue() attribute.KeyValue {
	k := attribute.Key(a.Key)
	switch a.kind {
	case attrInt:
		return k.Int64(int64(a.num))
	case attrFloat:
		return k.Float64(math.Float64frombits(a.num))
	case attrBool:
		return k.Bool(a.num != 0)
	}
	return k.String(a.str)
}
