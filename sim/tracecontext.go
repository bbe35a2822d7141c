package sim

import "strings"

// TraceContext is the W3C trace context a request carried, as vLLM reads
// it: vLLM takes the traceparent and tracestate headers and makes its own
// request span the child of the span they name (an invalid traceparent
// is ignored and the span starts a trace of its own). The simulator
// exports no spans; it records what it was given (Received.Trace), so
// tests can check that maitred's backend span is the parent vLLM sees.
type TraceContext struct {
	// Valid says the traceparent header parsed; the other fields are
	// empty otherwise.
	Valid bool
	// TraceID (32 lowercase hex digits) and ParentID (16: the caller's
	// span id, the parent of vLLM's span).
	TraceID, ParentID string
	// Sampled is the sampled flag (bit 0 of trace-flags).
	Sampled bool
	// State is the tracestate header as received ("" when absent), kept
	// only with a valid traceparent, as the W3C propagator does.
	State string
}

// ParseTraceContext parses a traceparent header (and its tracestate) by
// the W3C Trace Context rules: version-traceid-parentid-flags in lowercase
// hex; version ff is invalid; an all-zero trace or parent id is invalid;
// version 00 has exactly these four fields, and a later version may add
// fields after a dash, which are ignored.
func ParseTraceContext(traceparent, tracestate string) TraceContext {
	p := strings.TrimSpace(traceparent)
	if len(p) < 55 || p[2] != '-' || p[35] != '-' || p[52] != '-' {
		return TraceContext{}
	}
	version, traceID, parentID, flags := p[:2], p[3:35], p[36:52], p[53:55]
	if !lowerHex(version) || version == "ff" || !lowerHex(traceID) || !lowerHex(parentID) || !lowerHex(flags) {
		return TraceContext{}
	}
	if version == "00" && len(p) != 55 || version != "00" && len(p) > 55 && p[55] != '-' {
		return TraceContext{}
	}
	if allZero(traceID) || allZero(parentID) {
		return TraceContext{}
	}
	return TraceContext{
		Valid: true, TraceID: traceID, ParentID: parentID,
		Sampled: hexVal(flags[1])&1 == 1, State: strings.TrimSpace(tracestate),
	}
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }

func hexVal(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}
