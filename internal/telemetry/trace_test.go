package telemetry

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// testProvider is a provider that samples with sampler and exports each
// trace at its finish to exp (Options.Sync), with no batcher: what New
// builds, without an OTLP exporter. exp may be nil when no sampled trace
// is finished.
func testProvider(sampler sdktrace.Sampler, exp exporter) *Provider {
	return &Provider{Settings: Settings{Sampler: sampler}, exp: exp}
}

// fakeExporter records the batches it is given, as span names per batch
// ("root child child"), in order.
type fakeExporter struct {
	mu        sync.Mutex
	batches   [][]string
	traces    int
	wired     int // traces with their spans pre-encoded (Trace.wire)
	shutdowns int
	// Each optional: started receives a batch's span count as its export
	// begins; block, when set, holds every export until it is closed;
	// exported receives a batch's span names once it is recorded; err is
	// what export returns.
	started  chan int
	block    chan struct{}
	exported chan []string
	err      error
}

func (f *fakeExporter) export(ctx context.Context, traces []*Trace) error {
	var names []string
	for _, t := range traces {
		for _, s := range t.spans {
			names = append(names, s.name)
		}
	}
	if f.started != nil {
		f.started <- len(names)
	}
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	f.batches = append(f.batches, names)
	f.traces += len(traces)
	for _, t := range traces {
		if len(t.wire) > 0 {
			f.wired++
		}
	}
	f.mu.Unlock()
	if f.exported != nil {
		f.exported <- names
	}
	return f.err
}

func (f *fakeExporter) shutdown(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shutdowns++
	return nil
}

// got is the batches exported so far and the exporter's shutdowns.
func (f *fakeExporter) got() ([][]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches), f.shutdowns
}

// countExporter counts the traces it is given, allocating nothing.
type countExporter struct{ traces int }

func (c *countExporter) export(_ context.Context, traces []*Trace) error {
	c.traces += len(traces)
	return nil
}

func (c *countExporter) shutdown(context.Context) error { return nil }

// remoteContext is a context carrying a caller's span context, as the
// W3C propagator extracts it from a traceparent and tracestate.
func remoteContext(t testing.TB, flags trace.TraceFlags, state string) (context.Context, trace.SpanContext) {
	t.Helper()
	ts, err := trace.ParseTraceState(state)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: flags, TraceState: ts, Remote: true,
	})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc), sc
}

// attrSampler samples everything, adding an attribute to the root span
// and a tracestate entry, as a sampler may.
type attrSampler struct{ decision sdktrace.SamplingDecision }

func (s attrSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	ts, _ := trace.SpanContextFromContext(p.ParentContext).TraceState().Insert("smp", "1")
	return sdktrace.SamplingResult{Decision: s.decision, Attributes: []attribute.KeyValue{attribute.Int("sampler.rate", 4)}, Tracestate: ts}
}

func (attrSampler) Description() string { return "attrSampler" }

// TestBegin: the root span is the child of the caller's span when there is
// one (same trace ID, its flags but for the sampled bit, its tracestate),
// and the sampler decides whether the trace is sampled; an unsampled
// trace still has IDs to propagate.
func TestBegin(t *testing.T) {
	const state = "vendor=value,other=x"
	tests := []struct {
		name      string
		sampler   sdktrace.Sampler
		flags     trace.TraceFlags // the caller's; 0xff: no caller
		sampled   bool
		wantFlags trace.TraceFlags
		wantState string
		wantAttrs []Attr
	}{
		{name: "no caller, always on", sampler: sdktrace.AlwaysSample(), flags: 0xff, sampled: true, wantFlags: trace.FlagsSampled},
		{name: "no caller, never", sampler: sdktrace.NeverSample(), flags: 0xff},
		{name: "no caller, parent-based on", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample()), flags: 0xff, sampled: true, wantFlags: trace.FlagsSampled},
		{name: "sampled caller, parent-based off", sampler: sdktrace.ParentBased(sdktrace.NeverSample()), flags: trace.FlagsSampled,
			sampled: true, wantFlags: trace.FlagsSampled, wantState: state},
		{name: "unsampled caller, parent-based on", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample()), flags: 0, wantState: state},
		{name: "sampled caller, never: the sampled bit cleared, other flags kept", sampler: sdktrace.NeverSample(), flags: trace.FlagsSampled | 0x02,
			wantFlags: 0x02, wantState: state},
		{name: "unsampled caller, always on: the sampled bit set", sampler: sdktrace.AlwaysSample(), flags: 0x02,
			sampled: true, wantFlags: trace.FlagsSampled | 0x02, wantState: state},
		{name: "the sampler's attributes and tracestate", sampler: attrSampler{sdktrace.RecordAndSample}, flags: trace.FlagsSampled,
			sampled: true, wantFlags: trace.FlagsSampled, wantState: "smp=1," + state, wantAttrs: []Attr{{Key: "sampler.rate", kind: attrInt, num: 4}}},
		{name: "record only is not sampled", sampler: attrSampler{sdktrace.RecordOnly}, flags: 0xff,
			wantState: "smp=1", wantAttrs: []Attr{{Key: "sampler.rate", kind: attrInt, num: 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, caller := context.Background(), trace.SpanContext{}
			if tt.flags != 0xff {
				ctx, caller = remoteContext(t, tt.flags, state)
			}
			p := testProvider(tt.sampler, nil)
			start := time.Unix(1000, 5)
			tr := p.Begin(ctx, "POST", "/v1/chat/completions", trace.SpanKindServer, start)
			if tr.Sampled() != tt.sampled {
				t.Errorf("Sampled() = %v, want %v", tr.Sampled(), tt.sampled)
			}
			if !tr.id.IsValid() || !tr.Root().id.IsValid() {
				t.Errorf("trace %v, root span %v: want valid IDs", tr.id, tr.Root().id)
			}
			if caller.IsValid() {
				if tr.id != caller.TraceID() || !tr.parent.Equal(caller) {
					t.Errorf("trace %v, parent %v; want the caller's %v", tr.id, tr.parent, caller)
				}
			} else if tr.parent.IsValid() {
				t.Errorf("parent %v without a caller", tr.parent)
			}
			if tr.flags != tt.wantFlags || tr.Tracestate() != tt.wantState {
				t.Errorf("flags %v, tracestate %q; want %v, %q", tr.flags, tr.Tracestate(), tt.wantFlags, tt.wantState)
			}
			root := tr.Root()
			if len(tr.spans) != 1 || root.name != "POST" || root.name2 != "/v1/chat/completions" || root.kind != trace.SpanKindServer || root.start != start.UnixNano() {
				t.Errorf("root %+v", root)
			}
			if !slices.Equal(root.attrs, tt.wantAttrs) {
				t.Errorf("root attributes %+v, want %+v", root.attrs, tt.wantAttrs)
			}
		})
	}
}

// TestFinish: a sampled trace is exported, an unsampled one never; either
// way the trace goes back to the free list, once.
func TestFinish(t *testing.T) {
	for _, sampler := range []sdktrace.Sampler{sdktrace.AlwaysSample(), sdktrace.NeverSample()} {
		t.Run(sampler.Description(), func(t *testing.T) {
			f := &fakeExporter{}
			p := testProvider(sampler, f)
			tr := p.Begin(context.Background(), "root", "", trace.SpanKindServer, time.Now())
			tr.Start("child", "", trace.SpanKindInternal, time.Now()).End(time.Now())
			tr.Root().End(time.Now())
			sampled := tr.Sampled()
			p.Finish(tr)
			p.Finish(nil) // nothing
			batches, _ := f.got()
			if want := map[bool]int{true: 1, false: 0}[sampled]; len(batches) != want {
				t.Fatalf("exports %v, want %d", batches, want)
			}
			if sampled && !slices.Equal(batches[0], []string{"root", "child"}) {
				t.Fatalf("exported %v", batches[0])
			}
			if len(p.free) != 1 || p.free[0] != tr {
				t.Fatalf("free list %v, want the finished trace", p.free)
			}
			if again := p.Begin(context.Background(), "next", "", trace.SpanKindServer, time.Now()); again != tr || len(p.free) != 0 {
				t.Fatal("the released trace was not reused")
			}
		})
	}
	t.Run("an export error is handled, the trace still released", func(t *testing.T) {
		p := testProvider(sdktrace.AlwaysSample(), &fakeExporter{err: errors.New("collector down (expected by the test)")})
		tr := p.Begin(context.Background(), "root", "", trace.SpanKindServer, time.Now())
		p.Finish(tr)
		if len(p.free) != 1 {
			t.Fatal("the trace was not released")
		}
	})
	t.Run("the free list is bounded", func(t *testing.T) {
		p := testProvider(sdktrace.NeverSample(), nil)
		var trs []*Trace
		for range maxFree + 10 {
			trs = append(trs, p.Begin(context.Background(), "r", "", trace.SpanKindServer, time.Now()))
		}
		for _, tr := range trs {
			p.Finish(tr)
		}
		if len(p.free) != maxFree {
			t.Fatalf("free list of %d, want %d", len(p.free), maxFree)
		}
	})
}

// TestIDsAreDistinct: trace and span IDs are valid and never repeat.
func TestIDsAreDistinct(t *testing.T) {
	p := testProvider(sdktrace.NeverSample(), nil)
	traces, spans := map[trace.TraceID]bool{}, map[trace.SpanID]bool{}
	for range 2000 {
		tr := p.Begin(context.Background(), "r", "", trace.SpanKindServer, time.Now())
		tr.Start("a", "", trace.SpanKindInternal, time.Now())
		tr.Start("b", "", trace.SpanKindClient, time.Now())
		if !tr.id.IsValid() || traces[tr.id] {
			t.Fatalf("trace ID %v invalid or repeated", tr.id)
		}
		traces[tr.id] = true
		for _, s := range tr.spans {
			if !s.id.IsValid() || spans[s.id] {
				t.Fatalf("span ID %v invalid or repeated", s.id)
			}
			spans[s.id] = true
		}
		p.Finish(tr) // reused: its IDs must be new ones all the same
	}
}

// TestTraceparent: the header is W3C's exact form, and the standard
// propagator reads back the trace, the span it names, the flags and the
// tracestate.
func TestTraceparent(t *testing.T) {
	form := regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)
	for _, tt := range []struct {
		name    string
		sampler sdktrace.Sampler
		flags   trace.TraceFlags // 0xff: no caller
		state   string
	}{
		{"sampled, no caller", sdktrace.AlwaysSample(), 0xff, ""},
		{"unsampled, no caller", sdktrace.NeverSample(), 0xff, ""},
		{"caller's tracestate and flags", sdktrace.ParentBased(sdktrace.AlwaysSample()), trace.FlagsSampled | 0x02, "a=b,c=d"},
		{"unsampled caller", sdktrace.ParentBased(sdktrace.AlwaysSample()), 0, "a=b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.flags != 0xff {
				ctx, _ = remoteContext(t, tt.flags, tt.state)
			}
			p := testProvider(tt.sampler, nil)
			tr := p.Begin(ctx, "r", "", trace.SpanKindServer, time.Now())
			for _, s := range []*Span{tr.Root(), tr.Start("attempt", "", trace.SpanKindClient, time.Now())} {
				h := tr.Traceparent(s)
				if !form.MatchString(h) {
					t.Fatalf("traceparent %q is not 00-<32 hex>-<16 hex>-<2 hex>", h)
				}
				got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
					propagation.MapCarrier{"traceparent": h, "tracestate": tr.Tracestate()}))
				if got.TraceID() != tr.id || got.SpanID() != s.id || got.TraceFlags() != tr.flags || got.IsSampled() != tr.Sampled() ||
					got.TraceState().String() != tt.state {
					t.Fatalf("traceparent %q, tracestate %q read back as %v %v %v %q; want %v %v %v %q",
						h, tr.Tracestate(), got.TraceID(), got.SpanID(), got.TraceFlags(), got.TraceState(), tr.id, s.id, tr.flags, tt.state)
				}
			}
		})
	}
}

// fillTrace gives tr n children of every kind of content: attributes of
// each type, an event, a failure.
func fillTrace(tr *Trace, n int) {
	now := time.Now()
	root := tr.Root()
	root.String("http.route", "/v1/chat/completions")
	root.Int("http.response.status_code", 500)
	root.Event("first_token", now)
	root.Fail("backend_down")
	for i := range n {
		s := tr.Start("child", "with name2", trace.SpanKindClient, now)
		s.String("s", "value")
		s.Int("i", int64(i))
		s.Float("f", 0.5)
		s.Bool("b", true)
		s.Event("e", now)
		s.Fail("failed")
		s.End(now)
	}
	root.End(now)
}

// TestTraceReuse: a Trace taken from the free list carries nothing of its
// previous use, through either release path (an unsampled finish, an
// export by the batcher with the spans pre-encoded), and encodes only its
// new spans.
func TestTraceReuse(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "unsampled", true: "exported by the batcher"}[batched], func(t *testing.T) {
			var p *Provider
			if batched {
				f := &fakeExporter{}
				p = testProvider(sdktrace.AlwaysSample(), f)
				p.queue = newBatcher(f, batchSettings{delay: time.Hour, timeout: time.Second, maxQueue: 100, maxBatch: 100}, p.release)
				p.wire = true
				defer p.Shutdown(context.Background())
			} else {
				p = testProvider(sdktrace.ParentBased(sdktrace.AlwaysSample()), nil)
			}
			ctx, _ := remoteContext(t, 0x02|map[bool]trace.TraceFlags{true: trace.FlagsSampled}[batched], "vendor=v")
			old := p.Begin(ctx, "old", "name2", trace.SpanKindServer, time.Now())
			fillTrace(old, 5)
			if batched != old.Sampled() {
				t.Fatalf("sampled %v", old.Sampled())
			}
			p.Finish(old)
			if batched {
				if err := p.ForceFlush(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			tr := p.Begin(context.Background(), "new", "", trace.SpanKindServer, time.Unix(7, 0))
			if tr != old {
				t.Fatal("the finished trace was not reused")
			}
			if tr.parent.IsValid() || tr.state.Len() != 0 || len(tr.wire) != 0 || len(tr.spans) != 1 || tr.flags != trace.FlagsSampled || !tr.Sampled() {
				t.Fatalf("reused trace: parent %v, state %q, wire %d bytes, %d spans, flags %v, sampled %v",
					tr.parent, tr.state, len(tr.wire), len(tr.spans), tr.flags, tr.Sampled())
			}
			child := tr.Start("c", "", trace.SpanKindInternal, time.Unix(8, 0))
			for _, s := range tr.spans {
				if s.name2 != "" || len(s.attrs) != 0 || s.event != "" || s.eventAt != 0 || s.failed || s.status != "" || s.end != 0 {
					t.Fatalf("reused span %+v", s)
				}
				for _, a := range s.attrs[:cap(s.attrs)] {
					if a != (Attr{}) {
						t.Fatalf("a reused span's attribute array holds %+v", a)
					}
				}
			}
			child.End(time.Unix(9, 0))
			tr.Root().End(time.Unix(10, 0))
			var m coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(newSpanEncoder(nil, ScopeName).encode([]*Trace{tr}), &m); err != nil {
				t.Fatal(err)
			}
			spans := m.ResourceSpans[0].ScopeSpans[0].Spans
			if len(spans) != 2 || spans[0].Name != "new" || spans[1].Name != "c" || len(spans[0].ParentSpanId) != 0 || spans[0].TraceState != "" ||
				len(spans[0].Attributes)+len(spans[1].Attributes)+len(spans[0].Events) != 0 || spans[0].Status.Code != 0 {
				t.Fatalf("the reused trace encodes as %v", &m)
			}
		})
	}
}

// TestTraceAllocs: recording a request's trace allocates nothing once the
// free list is warm, unsampled or sampled and exported at its finish,
// but for the one-trace slice handed to the exporter.
func TestTraceAllocs(t *testing.T) {
	for _, tt := range []struct {
		name     string
		sampler  sdktrace.Sampler
		allocs   float64
		exported int // the warm-up, AllocsPerRun's own and its 100
	}{
		{"unsampled", sdktrace.NeverSample(), 0, 0},
		{"sampled, exported at its finish", sdktrace.ParentBased(sdktrace.AlwaysSample()), 1, 102}, // []*Trace{t} for the exporter (Options.Sync only)
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &countExporter{}
			p := testProvider(tt.sampler, c)
			ctx, _ := remoteContext(t, trace.FlagsSampled, "a=b")
			record := func() {
				now := time.Now()
				tr := p.Begin(ctx, "POST", "/v1/chat/completions", trace.SpanKindServer, now)
				root := tr.Root()
				root.String("http.request.method", "POST")
				root.Int("http.response.status_code", 200)
				root.Float("maitred.queue_wait_ms", 0.25)
				root.Bool("maitred.stream", true)
				root.Event("first_token", now)
				for range 3 {
					s := tr.Start("attempt", "qwen3", trace.SpanKindClient, now)
					s.String("server.address", "10.0.0.7")
					s.Int("server.port", 8000)
					s.Fail("backend_down")
					s.End(now)
				}
				root.End(now)
				p.Finish(tr)
			}
			record()
			if got := testing.AllocsPerRun(100, record); got > tt.allocs {
				t.Fatalf("%v allocations per trace, want at most %v", got, tt.allocs)
			}
			if c.traces != tt.exported {
				t.Fatalf("%d traces exported, want %d", c.traces, tt.exported)
			}
		})
	}
}
