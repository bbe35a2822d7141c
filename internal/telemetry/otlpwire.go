package telemetry

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
// wire format straight from the SDK's spans, with no intermediate
// messages: the same message the standard OTLP exporter builds (its
// spans grouped by resource, then by instrumentation scope, in the order
// they first appear), field for field. Its buffer and grouping scratch
// are reused from one request to the next; it is not safe for concurrent
// use.
type spanEncoder struct {
	b         []byte
	resources []resourceGroup
	scopes    []scopeGroup
	of        []int32 // the scope group of each span; -1 for a nil span
}

// resourceGroup is one resource of a request and its scope groups.
type resourceGroup struct {
	res   *resource.Resource
	key   attribute.Distinct
	first int32 // its first scope group
}

// scopeGroup is the spans of one resource and scope.
type scopeGroup struct {
	scope instrumentation.Scope
	next  int32 // the resource's next scope group, -1 for none
}

// encode returns the request for spans, in the encoder's buffer (valid
// until the next call).
func (e *spanEncoder) encode(spans []sdktrace.ReadOnlySpan) []byte {
	e.group(spans)
	e.b = e.b[:0]
	for ri := range e.resources {
		r := &e.resources[ri]
		rs := e.open(fRequestResourceSpans)
		if r.res != nil {
			m := e.open(fResourceSpansResource)
			for it := r.res.Iter(); it.Next(); {
				e.keyValue(fResourceAttributes, it.Attribute())
			}
			e.close(m)
		}
		for si := r.first; si >= 0; si = e.scopes[si].next {
			e.scopeSpans(spans, si)
		}
		if r.res != nil {
			e.string(fResourceSpansSchemaURL, r.res.SchemaURL())
		}
		e.close(rs)
	}
	return e.b
}

// group finds the resources and scopes of spans, in the order they first
// appear, and the scope group of each span.
func (e *spanEncoder) group(spans []sdktrace.ReadOnlySpan) {
	e.resources, e.scopes, e.of = e.resources[:0], e.scopes[:0], e.of[:0]
	for _, sd := range spans {
		if sd == nil {
			e.of = append(e.of, -1)
			continue
		}
		res, scope := sd.Resource(), sd.InstrumentationScope()
		var key attribute.Distinct
		if res != nil {
			key = res.Equivalent()
		}
		ri := -1
		for k := range e.resources {
			if r := &e.resources[k]; r.res == res || (r.res != nil && res != nil && r.key == key) {
				ri = k
				break
			}
		}
		if ri < 0 {
			ri = len(e.resources)
			e.resources = append(e.resources, resourceGroup{res: res, key: key, first: -1})
		}
		r := &e.resources[ri]
		si, last := r.first, int32(-1)
		for ; si >= 0 && e.scopes[si].scope != scope; si = e.scopes[si].next {
			last = si
		}
		if si < 0 {
			si = int32(len(e.scopes))
			e.scopes = append(e.scopes, scopeGroup{scope: scope, next: -1})
			if last < 0 {
				r.first = si
			} else {
				e.scopes[last].next = si
			}
		}
		e.of = append(e.of, si)
	}
}

func (e *spanEncoder) scopeSpans(spans []sdktrace.ReadOnlySpan, si int32) {
	scope := &e.scopes[si].scope
	ss := e.open(fResourceSpansScopeSpans)
	if *scope != (instrumentation.Scope{}) {
		sc := e.open(fScopeSpansScope)
		e.string(fScopeName, scope.Name)
		e.string(fScopeVersion, scope.Version)
		for it := scope.Attributes.Iter(); it.Next(); {
			e.keyValue(fScopeAttributes, it.Attribute())
		}
		e.close(sc)
	}
	for i, of := range e.of {
		if of == si {
			e.span(spans[i])
		}
	}
	e.string(fScopeSpansSchemaURL, scope.SchemaURL)
	e.close(ss)
}

func (e *spanEncoder) span(sd sdktrace.ReadOnlySpan) {
	s := e.open(fScopeSpansSpans)
	sc := sd.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(fSpanTraceID, tid[:])
	e.bytes(fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		e.string(fSpanTraceState, ts.String())
	}
	parent := sd.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		e.bytes(fSpanParentSpanID, psid[:])
	}
	e.string(fSpanName, sd.Name())
	e.uint(fSpanKind, spanKind(sd.SpanKind()))
	e.fixed64(fSpanStart, unixNano(sd.StartTime().UnixNano()))
	e.fixed64(fSpanEnd, unixNano(sd.EndTime().UnixNano()))
	for _, kv := range sd.Attributes() {
		e.keyValue(fSpanAttributes, kv)
	}
	e.uint(fSpanDroppedAttributes, uint64(clampUint32(sd.DroppedAttributes())))
	for _, ev := range sd.Events() {
		m := e.open(fSpanEvents)
		e.fixed64(fEventTime, unixNano(ev.Time.UnixNano()))
		e.string(fEventName, ev.Name)
		for _, kv := range ev.Attributes {
			e.keyValue(fEventAttributes, kv)
		}
		e.uint(fEventDroppedAttributes, uint64(clampUint32(ev.DroppedAttributeCount)))
		e.close(m)
	}
	e.uint(fSpanDroppedEvents, uint64(clampUint32(sd.DroppedEvents())))
	for _, l := range sd.Links() {
		// As the standard exporter: a link carries no trace state.
		m := e.open(fSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytes(fLinkTraceID, ltid[:])
		e.bytes(fLinkSpanID, lsid[:])
		for _, kv := range l.Attributes {
			e.keyValue(fLinkAttributes, kv)
		}
		e.uint(fLinkDroppedAttributes, uint64(clampUint32(l.DroppedAttributeCount)))
		e.fixed32(fLinkFlags, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		e.close(m)
	}
	e.uint(fSpanDroppedLinks, uint64(clampUint32(sd.DroppedLinks())))
	st := e.open(fSpanStatus) // always present, as the standard exporter sends it
	status := sd.Status()
	e.string(fStatusMessage, status.Description)
	switch status.Code {
	case codes.Ok:
		e.uint(fStatusCode, statusCodeOk)
	case codes.Error:
		e.uint(fStatusCode, statusCodeError)
	}
	e.close(st)
	e.fixed32(fSpanFlags, spanFlags(sc.TraceFlags(), parent))
	e.close(s)
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

// spanFlags are the trace flags, with whether the context (parent, for a
// span; the linked context, for a link) is remote.
func spanFlags(tf trace.TraceFlags, ctx trace.SpanContext) uint32 {
	f := uint32(tf) | flagsContextHasIsRemote
	if ctx.IsRemote() {
		f |= flagsContextIsRemote
	}
	return f
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampUint32(v int) uint32 {
	if v < 0 {
		return 0
	}
	if int64(v) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// keyValue writes kv as a KeyValue in field num.
func (e *spanEncoder) keyValue(num protowire.Number, kv attribute.KeyValue) {
	if e.scalarKeyValue(num, kv) {
		return
	}
	m := e.open(num)
	e.string(fKeyValueKey, string(kv.Key))
	e.value(fKeyValueValue, kv.Value)
	e.close(m)
}

// value writes v as an AnyValue in field num: present even when empty,
// its one field present even when zero, as the oneof requires.
func (e *spanEncoder) value(num protowire.Number, v attribute.Value) {
	m := e.open(num)
	switch v.Type() {
	case attribute.EMPTY:
	case attribute.BOOL:
		e.b = protowire.AppendTag(e.b, fAnyBool, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		e.b = protowire.AppendTag(e.b, fAnyInt, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.b = protowire.AppendTag(e.b, fAnyDouble, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		e.b = protowire.AppendTag(e.b, fAnyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, v.AsString())
	case attribute.BYTESLICE:
		e.b = protowire.AppendTag(e.b, fAnyBytes, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		array(e, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		array(e, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		array(e, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		array(e, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		array(e, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	case attribute.MAP:
		a := e.open(fAnyKvlist)
		for _, kv := range v.AsMap() {
			e.keyValue(fKvlistValues, kv)
		}
		e.close(a)
	default: // a type this encoder does not know, as the standard exporter says it
		e.b = protowire.AppendTag(e.b, fAnyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, "INVALID")
	}
	e.close(m)
}

// array writes xs as an ArrayValue (AnyValue's array_value), each item
// as the attribute value as makes of it.
func array[T any](e *spanEncoder, xs []T, as func(T) attribute.Value) {
	a := e.open(fAnyArray)
	for _, x := range xs {
		e.value(fArrayValues, as(x))
	}
	e.close(a)
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

// scalarKeyValue writes kv, whose value is a string, bool, int64 or
// float64 (nearly every attribute), with its lengths worked out first
// instead of written after; false for any other kind of value.
func (e *spanEncoder) scalarKeyValue(num protowire.Number, kv attribute.KeyValue) bool {
	var inner int // the AnyValue's content: its one field
	switch kv.Value.Type() {
	case attribute.STRING:
		n := len(kv.Value.AsString())
		inner = 1 + protowire.SizeVarint(uint64(n)) + n
	case attribute.BOOL:
		inner = 2
	case attribute.INT64:
		inner = 1 + protowire.SizeVarint(uint64(kv.Value.AsInt64()))
	case attribute.FLOAT64:
		inner = 9
	default:
		return false
	}
	kvLen := 1 + protowire.SizeVarint(uint64(inner)) + inner // the value field
	if k := len(kv.Key); k > 0 {
		kvLen += 1 + protowire.SizeVarint(uint64(k)) + k
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(kvLen))
	e.string(fKeyValueKey, string(kv.Key))
	e.b = protowire.AppendTag(e.b, fKeyValueValue, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(inner))
	switch kv.Value.Type() {
	case attribute.STRING:
		e.b = protowire.AppendTag(e.b, fAnyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, kv.Value.AsString())
	case attribute.BOOL:
		e.b = protowire.AppendTag(e.b, fAnyBool, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, protowire.EncodeBool(kv.Value.AsBool()))
	case attribute.INT64:
		e.b = protowire.AppendTag(e.b, fAnyInt, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(kv.Value.AsInt64()))
	case attribute.FLOAT64:
		e.b = protowire.AppendTag(e.b, fAnyDouble, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, math.Float64bits(kv.Value.AsFloat64()))
	}
	return true
}
