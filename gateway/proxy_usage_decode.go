package gateway

import (
	"encoding/json"
	"strconv"
)

// usageKeys are usageNumbers' JSON names, in field order.
var usageKeys = [...]string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "total_tokens"}

// usageValues is a usage object as the fast read takes it: n[k] is
// usageKeys[k]'s number, when set has bit k (a member absent or null
// has not). It holds no pointers, so that an event read on the stack
// stays there.
type usageValues struct {
	n   [len(usageKeys)]int64
	set uint8
}

// numbers makes u what encoding/json makes of the same object: each
// field set points at v's number, the others nil.
func (v *usageValues) numbers(u *usageNumbers) {
	fields := [...]**int64{&u.PromptTokens, &u.CompletionTokens, &u.InputTokens, &u.OutputTokens, &u.TotalTokens}
	for k, f := range fields {
		*f = nil
		if v.set&(1<<k) != 0 {
			*f = &v.n[k]
		}
	}
}

// decodeUsage reads a usage object into u (zero on entry) exactly as
// json.Unmarshal(b, u) would, and reports whether that succeeded. The
// shape every backend sends, an object whose usageKeys members are
// integers or null, each named once and exactly (any other member any
// value), is read in one pass into v, u's fields pointing into it, without
// allocating; anything else (fractions, escapes in a key, a key that
// matches a field only under case folding or twice, an integer beyond
// int64) is left to encoding/json itself.
func decodeUsage(b []byte, u *usageNumbers, v *usageValues) bool {
	*v = usageValues{}
	p := eventParser{b: b}
	if p.usage(v) && skipWS(b, p.i) == len(b) {
		v.numbers(u)
		return true
	}
	return json.Unmarshal(b, u) == nil
}

// usage reads a usage object (or null) at i into v. Its numbers are
// read into the parser's own u first and copied out: keeping a pointer
// to v in the parser would move the event it is part of to the heap.
func (p *eventParser) usage(v *usageValues) bool {
	p.u = usageValues{}
	ok := p.object(usageObject)
	*v = p.u
	return ok
}

// usageNumber reads member k of a usage object: an integer that fits an
// int64, or null (encoding/json fails on any other value for its *int64).
func (p *eventParser) usageNumber(k int) bool {
	if p.literal("null") {
		return true // the member is named once: nothing was set
	}
	end, ok := intEnd(p.b, p.i)
	if !ok || (end < len(p.b) && (p.b[end] == '.' || p.b[end] == 'e' || p.b[end] == 'E')) {
		return false
	}
	n, err := strconv.ParseInt(string(p.b[p.i:end]), 10, 64)
	if err != nil {
		return false
	}
	p.i = end
	p.u.n[k], p.u.set = n, p.u.set|1<<k
	return true
}

// skipWS is the index of the first byte at or after i that is not JSON
// whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
