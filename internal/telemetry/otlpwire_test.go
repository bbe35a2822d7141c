package telemetry

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
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

// exportBoth sends the traces through the standard otlptracehttp exporter
// (as the SDK's read-only spans, appendSnapshots' conversion) and through
// ours, each to its own collector, and returns the two requests decoded.
func exportBoth(t *testing.T, res *resource.Resource, traces []*Trace) (std, ours *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	cs, co := newCollector(t, nil), newCollector(t, nil)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	se, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(cs.URL+"/v1/traces"), otlptracehttp.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	if err := se.ExportSpans(t.Context(), appendSnapshots(nil, traces, res, instrumentation.Scope{Name: ScopeName})); err != nil {
		t.Fatal(err)
	}
	if err := se.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	oe, err := newHTTPExporter(co.URL+"/v1/traces", httpSettings{timeout: 5 * time.Second}, "test", newSpanEncoder(res.Attributes(), ScopeName))
	if err != nil {
		t.Fatal(err)
	}
	if err := oe.export(t.Context(), traces); err != nil {
		t.Fatal(err)
	}
	if err := oe.shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	rs, ro := cs.requests(t), co.requests(t)
	if len(rs) != 1 || len(ro) != 1 {
		t.Fatalf("requests: standard %d, ours %d; want 1 each", len(rs), len(ro))
	}
	return rs[0], ro[0]
}

// requireSameRequest fails unless the two requests are equal: by
// proto.Equal, and byte for byte once marshalled again (which tells -0
// from +0, and one NaN from another).
func requireSameRequest(t *testing.T, std, ours *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	if !proto.Equal(std, ours) {
		t.Fatalf("our request differs from otlptracehttp's (std, then ours):\n%s", textDiff(std, ours))
	}
	o := proto.MarshalOptions{Deterministic: true}
	a, err := o.Marshal(std)
	if err != nil {
		t.Fatal(err)
	}
	b, err := o.Marshal(ours)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("our request's values differ from otlptracehttp's in their bits (std, then ours):\n%s", textDiff(std, ours))
	}
}

// everyAttr sets an attribute of every kind on s, zero values, edge
// values and long and non-ASCII strings included.
func everyAttr(s *Span) {
	s.String("s", "text")
	s.String("s.empty", "")
	s.String("s.utf8", "héllo wörld ✓ 日本語 🚀")
	s.String("s.long", strings.Repeat("x", 300)) // a length of two varint bytes
	s.String("s.longer", strings.Repeat("é", 9000))
	s.String("", "empty key")
	s.String(strings.Repeat("k", 200), "long key")
	s.Int("i", -42)
	s.Int("i.zero", 0)
	s.Int("i.one", 1)
	s.Int("i.large", 1<<40)
	s.Int("i.max", math.MaxInt64)
	s.Int("i.min", math.MinInt64)
	s.Float("f", 3.25)
	s.Float("f.zero", 0)
	s.Float("f.neg0", math.Copysign(0, -1))
	s.Float("f.inf", math.Inf(1))
	s.Float("f.-inf", math.Inf(-1))
	s.Float("f.nan", math.NaN())
	s.Float("f.tiny", math.SmallestNonzeroFloat64)
	s.Float("f.max", math.MaxFloat64)
	s.Bool("b.true", true)
	s.Bool("b.false", false)
}

// TestEncoderMatchesStandardExporter is the differential test: the same
// traces, sent by otlptracehttp (converted to the SDK's spans) and by our
// exporter, decode to equal requests; and our encoding is the same bytes
// whether a trace's spans were pre-encoded (Finish, for the batcher) or
// not.
func TestEncoderMatchesStandardExporter(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,host.name=h1,zz=last")
	res, err := newResource(Settings{ServiceName: "maitred"}, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if res.Len() != 5 {
		t.Fatalf("resource %v: want service.name, service.version and OTEL_RESOURCE_ATTRIBUTES' three", res)
	}
	t0 := time.Date(2026, 12, 4, 8, 0, 0, 123456789, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	remote, _ := remoteContext(t, trace.FlagsSampled, "vendor=value,other=x")
	remoteRandom, _ := remoteContext(t, trace.FlagsSampled|0x02, "")

	tests := []struct {
		name  string
		build func(p *Provider) []*Trace
	}{
		{"one server span", func(p *Provider) []*Trace {
			tr := p.Begin(context.Background(), "POST", "/v1/chat/completions", trace.SpanKindServer, t0)
			tr.Root().String("http.route", "/v1/chat/completions")
			tr.Root().Int("http.response.status_code", 200)
			tr.Root().End(ms(5))
			return []*Trace{tr}
		}},
		{"a remote parent with a tracestate, every attribute kind, an event, a failure", func(p *Provider) []*Trace {
			tr := p.Begin(remote, "every", "", trace.SpanKindServer, t0)
			root := tr.Root()
			everyAttr(root)
			root.Event("first_token", ms(1))
			root.Fail("backend_down")
			c := tr.Start("attempt", "qwen3", trace.SpanKindClient, ms(1))
			everyAttr(c)
			c.Event("first_token", ms(2))
			c.End(ms(3))
			root.End(ms(4))
			return []*Trace{tr}
		}},
		{"a tree of every kind and status", func(p *Provider) []*Trace {
			tr := p.Begin(context.Background(), "root", "", trace.SpanKindServer, t0)
			for i, k := range []trace.SpanKind{trace.SpanKindInternal, trace.SpanKindClient, trace.SpanKindUnspecified, trace.SpanKindProducer, trace.SpanKindConsumer, trace.SpanKindInternal} {
				s := tr.Start("child", []string{"", "x"}[i%2], k, ms(i))
				switch i % 3 {
				case 0:
					s.Fail("failed")
				case 1:
					s.Fail("") // an error without a description
				}
				s.End(ms(i + 1))
			}
			tr.Root().End(ms(10))
			return []*Trace{tr}
		}},
		{"spans over 127 and 16383 bytes, long names", func(p *Provider) []*Trace {
			tr := p.Begin(remoteRandom, strings.Repeat("n", 130), strings.Repeat("m", 200), trace.SpanKindServer, t0)
			for i := range 400 {
				tr.Root().Int("attr."+strconv.Itoa(i), int64(i))
			}
			c := tr.Start("door", "", trace.SpanKindInternal, ms(1))
			for i := range 10 {
				c.String("door."+strconv.Itoa(i), strings.Repeat("v", 10))
			}
			c.End(ms(2))
			tr.Root().End(ms(3))
			return []*Trace{tr}
		}},
		{"spans not ended, events without a time", func(p *Provider) []*Trace {
			tr := p.Begin(context.Background(), "open", "", trace.SpanKindServer, t0)
			tr.Root().Event("first_token", time.Unix(0, 0))
			tr.Start("child", "", trace.SpanKindInternal, ms(1))
			return []*Trace{tr}
		}},
		{"the sampler's attributes and tracestate", func(p *Provider) []*Trace {
			p.Settings.Sampler = attrSampler{sdktrace.RecordAndSample}
			tr := p.Begin(remote, "sampled", "", trace.SpanKindServer, t0)
			tr.Root().String("after", "the sampler's")
			tr.Root().End(ms(1))
			return []*Trace{tr}
		}},
		{"several traces in one batch", func(p *Provider) []*Trace {
			var trs []*Trace
			for i := range 6 {
				ctx := []context.Context{context.Background(), remote, remoteRandom}[i%3]
				tr := p.Begin(ctx, "POST", []string{"/v1/chat/completions", "", "/v1/completions"}[i%3], trace.SpanKindServer, ms(i))
				tr.Root().Int("i", int64(i))
				for j := range i {
					s := tr.Start("attempt", "m"+strconv.Itoa(j), trace.SpanKindClient, ms(i+j))
					s.Bool("retry", j > 0)
					s.End(ms(i + j + 1))
				}
				tr.Root().End(ms(i + 10))
				trs = append(trs, tr)
			}
			return trs
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testProvider(sdktrace.AlwaysSample(), nil)
			traces := tt.build(p)
			std, ours := exportBoth(t, res, traces)
			requireSameRequest(t, std, ours)

			// The same bytes with the spans pre-encoded, some or all.
			e := newSpanEncoder(res.Attributes(), ScopeName)
			want := slices.Clone(e.encode(traces))
			for i, tr := range traces {
				if i%2 == 0 {
					traces[i] = p.carry(tr)
				}
			}
			if got := e.encode(traces); !bytes.Equal(got, want) {
				t.Fatal("some traces pre-encoded: the request differs")
			}
			for i, tr := range traces {
				if !tr.carrier {
					traces[i] = p.carry(tr)
				}
			}
			if got := e.encode(traces); !bytes.Equal(got, want) {
				t.Fatal("every trace pre-encoded: the request differs")
			}
		})
	}
}

// TestEncoderReusesItsBuffer: encoding one batch after another gives
// each its own bytes, the first unaffected by a larger second, in the
// same buffer, without allocating once it has grown.
func TestEncoderReusesItsBuffer(t *testing.T) {
	p := testProvider(sdktrace.AlwaysSample(), nil)
	one := p.Begin(context.Background(), "one", "", trace.SpanKindServer, time.Now())
	one.Root().End(time.Now())
	small := []*Trace{one}
	var big []*Trace
	for range 200 {
		tr := p.Begin(context.Background(), "many", "", trace.SpanKindServer, time.Now())
		everyAttr(tr.Root())
		tr.Start("child", "", trace.SpanKindClient, time.Now()).End(time.Now())
		tr.Root().End(time.Now())
		big = append(big, tr)
	}
	e := newSpanEncoder(resource.NewSchemaless(attribute.String("service.name", "maitred")).Attributes(), ScopeName)
	first := slices.Clone(e.encode(small))
	e.encode(big)
	again := e.encode(small)
	if string(first) != string(again) {
		t.Fatal("the same spans encoded twice differ")
	}
	if &e.encode(big)[0] != &again[0] {
		t.Fatal("the buffer was not reused")
	}
	if allocs := testing.AllocsPerRun(20, func() { e.encode(big); e.encode(small) }); allocs != 0 {
		t.Fatalf("%v allocations per encoding, want 0", allocs)
	}
	var m coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(e.encode(big), &m); err != nil {
		t.Fatal(err)
	}
	if n := len(m.ResourceSpans[0].ScopeSpans[0].Spans); n != 400 {
		t.Fatalf("spans = %d, want 400", n)
	}
}

// FuzzEncoder: a span's name and attributes, whatever they are, decode
// from our encoding to what was set.
func FuzzEncoder(f *testing.F) {
	f.Add("POST", "/v1/chat/completions", "k", "value", int64(-1), 0.5, true)
	f.Add("", "", "", "", int64(0), 0.0, false)
	f.Add(strings.Repeat("n", 200), "é", strings.Repeat("k", 127), strings.Repeat("v", 16384), int64(math.MinInt64), math.Inf(-1), true)
	f.Add("GET /\xff", "m\xc3", "k", "bad \xe2\x82 utf-8", int64(7), 1.0, false)
	p := testProvider(sdktrace.NeverSample(), nil) // Finish recycles the traces; encode takes them sampled or not
	e := newSpanEncoder(nil, ScopeName)
	f.Fuzz(func(t *testing.T, name, name2, key, str string, i int64, fl float64, b bool) {
		// Protobuf strings are UTF-8 (the decoder refuses others): a
		// span's own strings are made valid as they are set; keys are the
		// caller's constants.
		key = strings.ToValidUTF8(key, "?")
		tr := p.Begin(context.Background(), name, name2, trace.SpanKindServer, time.Unix(1, 0))
		s := tr.Root()
		s.String(key, str)
		name, name2, str = strings.ToValidUTF8(name, "\uFFFD"), strings.ToValidUTF8(name2, "\uFFFD"), strings.ToValidUTF8(str, "\uFFFD")
		s.Int(key, i)
		s.Float(key, fl)
		s.Bool(key, b)
		s.Event(str, time.Unix(2, 0))
		s.Fail(str)
		s.End(time.Unix(3, 0))
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(e.encode([]*Trace{tr}), &m); err != nil {
			t.Fatal(err)
		}
		p.Finish(tr)
		sp := m.ResourceSpans[0].ScopeSpans[0].Spans[0]
		wantName := name
		if name2 != "" {
			wantName += " " + name2
		}
		if sp.Name != wantName || sp.Status.Message != str || sp.Status.Code != tracepb.Status_STATUS_CODE_ERROR {
			t.Fatalf("name %q, status %v; want %q, %q", sp.Name, sp.Status, wantName, str)
		}
		if str != "" && (len(sp.Events) != 1 || sp.Events[0].Name != str) {
			t.Fatalf("events %v, want one named %q", sp.Events, str)
		}
		a := sp.Attributes
		if len(a) != 4 || a[0].Key != key || a[0].Value.GetStringValue() != str || a[1].Value.GetIntValue() != i ||
			math.Float64bits(a[2].Value.GetDoubleValue()) != math.Float64bits(fl) || a[3].Value.GetBoolValue() != b {
			t.Fatalf("attributes %v, want %q: %q, %d, %v, %v", a, key, str, i, fl, b)
		}
		if _, ok := a[0].Value.Value.(*commonpb.AnyValue_StringValue); !ok {
			t.Fatalf("string attribute decoded as %T", a[0].Value.Value)
		}
	})
}

// textDiff shows two messages, for a failure.
func textDiff(a, b proto.Message) string {
	o := prototext.MarshalOptions{Multiline: true}
	return o.Format(a) + "\n----\n" + o.Format(b)
}
