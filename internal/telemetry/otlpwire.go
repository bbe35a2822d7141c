package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the OTLP trace protobuf messages
// (opentelemetry/proto/collector/trace/v1, trace/v1, common/v1,
// resource/v1) that the encoder writes.
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	fResourceSpansSchemaURL  = 3

	fResourceAttributes = 1

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID           = 1
	fSpanSpanID            = 2
	fSpanTraceState        = 3
	fSpanParentSpanID      = 4
	fSpanName              = 5
	fSpanKind              = 6
	fSpanStart             = 7
	fSpanEnd               = 8
	fSpanAttributes        = 9
	fSpanDroppedAttributes = 10
	fSpanEvents            = 11
	fSpanDroppedEvents     = 12
	fSpanLinks             = 13
	fSpanDroppedLinks      = 14
	fSpanStatus            = 15
	fSpanFlags             = 16

	fEventTime              = 1
	fEventName              = 2
	fEventAttributes        = 3
	fEventDroppedAttributes = 4

	fLinkTraceID           = 1
	fLinkSpanID            = 2
	fLinkAttributes        = 4
	fLinkDroppedAttributes = 5
	fLinkFlags             = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKvlist = 6
	fAnyBytes  = 7

	fArrayValues  = 1 // ArrayValue.values
	fKvlistValues = 1 // KeyValueList.values
)

// OTLP enum values the encoder writes.
const (
	statusCodeOk    = 1 // STATUS_CODE_OK
	statusCodeError = 2 // STATUS_CODE_ERROR

	flagsContextHasIsRemote = 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	flagsContextIsRemote    = 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)

// spanEncoder writes ExportTraceServiceRequest messages in the protobuf
// wire format straight from Traces, with no intermediate messages: the
// message the standard OTLP exporter builds from the same spans (one
// resource, one instrumentation scope), field for field (a differential
// test holds them equal). The resource and scope, the same for every
// span, are encoded once. Its buffer is reused from one request to the
// next; it is not safe for concurrent use.
type spanEncoder struct {
	b        []byte
	resource []byte // the Resource message's content
	scope    []byte // the InstrumentationScope message's content
}

// newSpanEncoder encodes the resource (its attributes, in the order
// given: the SDK's resource sorts them by key) and the scope's name once.
func newSpanEncoder(resource []attribute.KeyValue, scopeName string) *spanEncoder {
	e := &spanEncoder{}
	for _, kv := range resource {
		e.attr(fResourceAttributes, attrOf(kv))
	}
	e.resource = e.b
	e.b = nil
	e.string(fScopeName, scopeName)
	e.scope = e.b
	e.b = nil
	return e
}

// encode returns the request for the traces' spans, in the encoder's
// buffer (valid until the next call).
func (e *spanEncoder) encode(traces []*Trace) []byte {
	e.b = e.b[:0]
	rs := e.open(fRequestResourceSpans)
	e.message(fResourceSpansResource, e.resource)
	ss := e.open(fResourceSpansScopeSpans)
	e.message(fScopeSpansScope, e.scope)
	for _, t := range traces {
		if t.carrier {
			e.b = append(e.b, t.wire...)
			continue
		}
		for i, s := range t.spans {
			e.span(t, i, s)
		}
	}
	e.close(ss)
	e.close(rs)
	return e.b
}

// appendSpans appends t's spans in the wire format to b.
func (t *Trace) appendSpans(b []byte) []byte {
	e := spanEncoder{b: b}
	for i, s := range t.spans {
		e.span(t, i, s)
	}
	return e.b
}

// span writes t's span s, the root when i is 0.
func (e *spanEncoder) span(t *Trace, i int, s *Span) {
	m := e.open(fScopeSpansSpans)
	e.bytes(fSpanTraceID, t.id[:])
	e.bytes(fSpanSpanID, s.id[:])
	if t.state.Len() > 0 {
		e.string(fSpanTraceState, t.state.String())
	}
	flags := uint32(t.flags) | flagsContextHasIsRemote
	switch {
	case i > 0:
		e.bytes(fSpanParentSpanID, t.spans[0].id[:])
	case t.parent.IsValid():
		psid := t.parent.SpanID()
		e.bytes(fSpanParentSpanID, psid[:])
		if t.parent.IsRemote() {
			flags |= flagsContextIsRemote
		}
	}
	if s.name2 == "" {
		e.string(fSpanName, s.name)
	} else {
		e.b = protowire.AppendTag(e.b, fSpanName, protowire.BytesType)
		e.b = protowire.AppendVarint(e.b, uint64(len(s.name)+1+len(s.name2)))
		e.b = append(append(append(e.b, s.name...), ' '), s.name2...)
	}
	e.uint(fSpanKind, spanKind(s.kind))
	e.fixed64(fSpanStart, unixNano(s.start))
	e.fixed64(fSpanEnd, unixNano(s.end))
	for _, a := range s.attrs {
		e.attr(fSpanAttributes, a)
	}
	if s.event != "" {
		ev := e.open(fSpanEvents)
		e.fixed64(fEventTime, unixNano(s.eventAt))
		e.string(fEventName, s.event)
		e.close(ev)
	}
	st := e.open(fSpanStatus) // always present, as the standard exporter sends it
	if s.failed {
		e.string(fStatusMessage, s.status)
		e.uint(fStatusCode, statusCodeError)
	}
	e.close(st)
	e.fixed32(fSpanFlags, flags)
	e.close(m)
}

// spanKind is the OTLP Span.SpanKind of k.
func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	}
	return 0
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

// message writes content, already encoded, as an embedded message in
// field num (present even when empty).
func (e *spanEncoder) message(num protowire.Number, content []byte) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, content)
}

// open starts an embedded message in field num, with room for a one-byte
// length, and returns where its content starts, for close.
func (e *spanEncoder) open(num protowire.Number) int {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = append(e.b, 0)
	return len(e.b)
}

// close writes the length of the message open returned start for, moving
// its content on when the length takes more than one byte.
func (e *spanEncoder) close(start int) {
	n := len(e.b) - start
	if n < 0x80 {
		e.b[start-1] = byte(n)
		return
	}
	extra := protowire.SizeVarint(uint64(n)) - 1
	e.b = append(e.b, make([]byte, extra)...)
	copy(e.b[start+extra:], e.b[start:start+n])
	protowire.AppendVarint(e.b[:start-1], uint64(n))
}

// Scalar fields, left out when zero as proto3 does.

func (e *spanEncoder) string(num protowire.Number, s string) {
	if s == "" {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *spanEncoder) bytes(num protowire.Number, p []byte) {
	if len(p) == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, p)
}

func (e *spanEncoder) uint(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
}

func (e *spanEncoder) fixed64(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.Fixed64Type)
	e.b = protowire.AppendFixed64(e.b, v)
}

func (e *spanEncoder) fixed32(num protowire.Number, v uint32) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.Fixed32Type)
	e.b = protowire.AppendFixed32(e.b, v)
}

// attr writes a as a KeyValue in field num, its lengths worked out first
// instead of written after.
func (e *spanEncoder) attr(num protowire.Number, a Attr) {
	var inner int // the AnyValue's content: its one field
	switch a.kind {
	case attrString:
		inner = 1 + protowire.SizeVarint(uint64(len(a.str))) + len(a.str)
	case attrBool:
		inner = 2
	case attrInt:
		inner = 1 + protowire.SizeVarint(a.num)
	case attrFloat:
		inner = 9
	}
	kvLen := 1 + protowire.SizeVarint(uint64(inner)) + inner // the value field
	if k := len(a.Key); k > 0 {
		kvLen += 1 + protowire.SizeVarint(uint64(k)) + k
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(kvLen))
	e.string(fKeyValueKey, a.Key)
	e.b = protowire.AppendTag(e.b, fKeyValueValue, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(inner))
	switch a.kind {
	case attrString:
		e.b = protowire.AppendTag(e.b, fAnyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, a.str)
	case attrBool:
		e.b = protowire.AppendTag(e.b, fAnyBool, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, a.num)
	case attrInt:
		e.b = protowire.AppendTag(e.b, fAnyInt, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, a.num)
	case attrFloat:
		e.b = protowire.AppendTag(e.b, fAnyDouble, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, a.num)
	}
}
