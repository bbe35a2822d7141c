package telemetry

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A Trace is one request's spans, as the gateway records them: a root
// span (the request's SERVER span, the child of the caller's traceparent
// when it sent one) and its children (the door, queue waits, backend
// attempts). It is plain data filled by one goroutine, the request's, and
// then handed over whole by Provider.Finish: for OTLP/HTTP its spans are
// encoded in the wire format there and then, straight from these fields,
// and the Trace goes back to the provider's free list at once (the bytes
// wait for the batcher in a carrier); for gRPC the Trace itself waits for
// the batcher. No span object per span, no attribute copies, no snapshot
// at a span's end: that is what makes tracing every request cheap (the
// SDK's spans cost several times more, in allocations above all).
//
// A Trace is not safe for concurrent use, and must not be touched after
// Finish.
type Trace struct {
	id     trace.TraceID
	parent trace.SpanContext // the caller's, when valid (remote)
	flags  trace.TraceFlags  // the parent's, with the sampled bit decided here
	state  trace.TraceState
	// sampled is the sampler's decision: an unsampled trace still has
	// IDs (its context is propagated, flagged unsampled) but is never
	// exported.
	sampled bool
	// spans[0] is the root; the slice's *Span values are kept from one
	// use of the Trace to the next, so that spans cost no allocation once
	// the free list is warm.
	spans []*Span
	// A carrier (Provider.carry, when the exporter sends the OTLP wire
	// format) is a Trace that holds only wire, its n spans in that format
	// (ScopeSpans.spans fields), written on the request's goroutine while
	// the spans are still in its cache instead of on the exporter's long
	// after. wire's capacity is kept for reuse.
	wire    []byte
	carrier bool
	n       int
}

// spanCount is the number of spans t holds, or carries encoded.
func (t *Trace) spanCount() int {
	if t.carrier {
		return t.n
	}
	return len(t.spans)
}

// A Span is one operation of a Trace. Its name is Name, or Name and Name2
// joined by a space (so that a request need not concatenate them).
// Attribute keys are set once each: a span's keys are distinct by
// construction, so nothing deduplicates them. Names, string values, the
// event's name and the status are made valid UTF-8 as they are set (keys
// are the caller's constants).
type Span struct {
	id          trace.SpanID
	name, name2 string
	kind        trace.SpanKind
	start, end  int64 // Unix nanoseconds
	attrs       []Attr
	// event is the span's one event (maitred records at most one per
	// span: a stream's first token), "" for none.
	event   string
	eventAt int64
	failed  bool // status ERROR with description status; else UNSET
	status  string
}

// Attr is an attribute: a key and a string, integer, float or boolean.
type Attr struct {
	Key  string
	kind attrKind
	str  string
	num  uint64 // the int64, the float64's bits, or 0/1
}

type attrKind uint8

const (
	attrString attrKind = iota
	attrInt
	attrFloat
	attrBool
)

// Begin starts a request's trace with its root span, the child of the
// span context in ctx when there is one (a caller's traceparent,
// extracted by the W3C propagator); the provider's sampler decides
// whether it is sampled. The span's name is name, or name and name2
// joined by a space.
func (p *Provider) Begin(ctx context.Context, name, name2 string, kind trace.SpanKind, start time.Time) *Trace {
	t := p.get()
	t.parent = trace.SpanContextFromContext(ctx)
	if t.parent.IsValid() {
		t.id = t.parent.TraceID()
	} else {
		t.parent = trace.SpanContext{}
		t.id = newTraceID()
	}
	res := p.Settings.Sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: t.id, Name: name, Kind: kind})
	t.sampled = res.Decision == sdktrace.RecordAndSample
	t.flags = t.parent.TraceFlags().WithSampled(t.sampled)
	t.state = res.Tracestate
	root := t.Start(name, name2, kind, start)
	for _, kv := range res.Attributes {
		root.attrs = append(root.attrs, attrOf(kv))
	}
	return t
}

// Finish hands t over for export when it was sampled (and recycles it
// otherwise): its spans must all have ended. t is not the caller's any
// more.
func (p *Provider) Finish(t *Trace) {
	if t == nil {
		return
	}
	switch {
	case !t.sampled:
	case p.queue == nil:
		p.syncMu.Lock()
		if err := p.exp.export(context.Background(), []*Trace{t}); err != nil {
			otel.Handle(err)
		}
		p.syncMu.Unlock()
	case p.wire:
		// The batcher gets the spans encoded, in a carrier: t goes back
		// to the free list at once, to serve the next request while it
		// is still in the cache, and what waits for export is bytes the
		// garbage collector need not scan.
		if c := p.carry(t); !p.queue.add(c) {
			p.release(c)
		}
		return
	case p.queue.add(t):
		return // the batcher's now
	}
	p.release(t)
}

// carry encodes t's spans into a carrier, releases t and returns the
// carrier.
func (p *Provider) carry(t *Trace) *Trace {
	c := p.getCarrier()
	c.wire, c.n = t.appendSpans(c.wire[:0]), len(t.spans)
	p.release(t)
	return c
}

// getCarrier takes a carrier (a Trace holding only encoded spans) from
// its free list, or makes one.
func (p *Provider) getCarrier() *Trace {
	if c := p.pop(&p.carriers); c != nil {
		return c
	}
	return &Trace{carrier: true}
}

// get takes a Trace from the free list, or makes one.
func (p *Provider) get() *Trace {
	if t := p.pop(&p.free); t != nil {
		return t
	}
	return &Trace{}
}

// release resets t and puts it back on its free list, unless the list is
// full (then the garbage collector has it).
func (p *Provider) release(t *Trace) {
	if t.carrier {
		t.wire, t.n = t.wire[:0], 0
		p.push(&p.carriers, t)
		return
	}
	for _, s := range t.spans {
		clear(s.attrs)
		*s = Span{attrs: s.attrs[:0]}
	}
	t.spans = t.spans[:0]
	t.parent, t.state = trace.SpanContext{}, trace.TraceState{}
	p.push(&p.free, t)
}

// pop takes the last Trace off a free list; nil when it is empty.
func (p *Provider) pop(list *[]*Trace) *Trace {
	p.freeMu.Lock()
	defer p.freeMu.Unlock()
	n := len(*list)
	if n == 0 {
		return nil
	}
	t := (*list)[n-1]
	(*list)[n-1] = nil
	*list = (*list)[:n-1]
	return t
}

// push puts t on a free list that has room.
func (p *Provider) push(list *[]*Trace, t *Trace) {
	p.freeMu.Lock()
	if len(*list) < maxFree {
		*list = append(*list, t)
	}
	p.freeMu.Unlock()
}

// maxFree bounds the free list: enough for the batcher's default queue
// (2048 spans, about 500 traces) and the requests in flight beside it.
// A free list, not a sync.Pool: a pool is emptied by every other garbage
// collection, and tracing every request would then rebuild its traces,
// spans and attribute slices over and over.
const maxFree = 1024

// Sampled is whether the trace will be exported: when it is not,
// recording attributes is wasted work.
func (t *Trace) Sampled() bool { return t.sampled }

// Root is the trace's root span.
func (t *Trace) Root() *Span { return t.spans[0] }

// Start adds a span started at start, a child of the root span (the first
// span started is the root itself).
func (t *Trace) Start(name, name2 string, kind trace.SpanKind, start time.Time) *Span {
	n := len(t.spans)
	var s *Span
	if n < cap(t.spans) {
		t.spans = t.spans[:n+1]
		s = t.spans[n]
	}
	if s == nil {
		s = &Span{}
		if n < len(t.spans) {
			t.spans[n] = s
		} else {
			t.spans = append(t.spans, s)
		}
	}
	s.id = newSpanID()
	s.name, s.name2, s.kind, s.start = validUTF8(name), validUTF8(name2), kind, start.UnixNano()
	return s
}

// Traceparent is the W3C traceparent header naming s: the value a
// backend receives so that its span is s's child.
func (t *Trace) Traceparent(s *Span) string {
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], t.id[:])
	b[35] = '-'
	hex.Encode(b[36:52], s.id[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(t.flags)})
	return string(b[:])
}

// Tracestate is the W3C tracestate header to send with Traceparent, ""
// for none.
func (t *Trace) Tracestate() string { return t.state.String() }

// End ends s at end.
func (s *Span) End(end time.Time) { s.end = end.UnixNano() }

// Fail sets s's status to ERROR with a description.
func (s *Span) Fail(description string) { s.failed, s.status = true, validUTF8(description) }

// Event records s's one event.
func (s *Span) Event(name string, at time.Time) { s.event, s.eventAt = validUTF8(name), at.UnixNano() }

// String sets a string attribute. A value that is not valid UTF-8 has its
// invalid bytes replaced: a collector rejects a whole request for one
// such string.
func (s *Span) String(k, v string) {
	s.attrs = append(s.attrs, Attr{Key: k, kind: attrString, str: validUTF8(v)})
}

// validUTF8 is s with each run of invalid bytes replaced by U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Int sets an integer attribute.
func (s *Span) Int(k string, v int64) {
	s.attrs = append(s.attrs, Attr{Key: k, kind: attrInt, num: uint64(v)})
}

// Float sets a floating-point attribute.
func (s *Span) Float(k string, v float64) {
	s.attrs = append(s.attrs, Attr{Key: k, kind: attrFloat, num: math.Float64bits(v)})
}

// Bool sets a boolean attribute.
func (s *Span) Bool(k string, v bool) {
	a := Attr{Key: k, kind: attrBool}
	if v {
		a.num = 1
	}
	s.attrs = append(s.attrs, a)
}

// attrOf is kv as an Attr: a value of another type than string, integer,
// float or boolean is written as its string form.
func attrOf(kv attribute.KeyValue) Attr {
	a := Attr{Key: string(kv.Key)}
	switch kv.Value.Type() {
	case attribute.INT64:
		a.kind, a.num = attrInt, uint64(kv.Value.AsInt64())
	case attribute.FLOAT64:
		a.kind, a.num = attrFloat, math.Float64bits(kv.Value.AsFloat64())
	case attribute.BOOL:
		a.kind = attrBool
		if kv.Value.AsBool() {
			a.num = 1
		}
	default:
		a.kind, a.str = attrString, kv.Value.Emit()
	}
	return a
}

// newTraceID and newSpanID are random, never zero (math/rand/v2's
// generator: per-thread, lock-free, seeded from the system).
func newTraceID() (id trace.TraceID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func newSpanID() (id trace.SpanID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}
