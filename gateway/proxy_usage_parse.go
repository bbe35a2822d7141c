package gateway

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// The usage meter's fast read of a stream event: one pass over the
// event's JSON, without allocating, that takes exactly what encoding/json
// would take into the family's struct (meterOpenAIEventJSON,
// meterResponsesEventJSON, meterAnthropicEventJSON), for the shapes vLLM
// sends. Each family names the objects it reads and their members
// (eventMembers); the parser reads those and checks and skips the rest.
// Anything it cannot read exactly (invalid JSON, a member of another type,
// a member named twice or only under case folding, an escaped or
// non-ASCII member name, too many texts, too deep a value) makes it
// report false: encoding/json reads that event then.

// maxChunkTexts bounds the texts one event's fast read keeps in hand: an
// OpenAI chunk with more (many choices, many tool calls) is read by
// encoding/json instead.
const maxChunkTexts = 16

// maxSkipDepth bounds the nesting of a value the meter does not read
// (logprobs, say); a deeper one is left to encoding/json.
const maxSkipDepth = 64

// chunkText is a JSON string in an event: its bytes between the quotes,
// and whether they are the text as they are (no escape, valid UTF-8) or
// must be unquoted. start == end: none (absent, null or empty).
type chunkText struct {
	start, end int
	plain      bool
}

// span is a value's place in the event's data; end 0: absent.
type span struct{ start, end int }

// meteredEvent is what the meter takes from one stream event, by offsets
// into its data (the event is the caller's, on its stack): the texts in
// the order the family's struct streams them, the usage objects read
// (usage; startUsage: an Anthropic message_start's), where the model and
// a Responses event's id are, and the event's type (Responses, Anthropic).
type meteredEvent struct {
	texts             [maxChunkTexts]chunkText
	n                 int
	usage, startUsage usageValues
	model, id         span
	typ               chunkText
}

// eventParser reads one event: b from i on, into e; u is the usage
// object being read (see usage). choice and call are the first of the texts of
// the OpenAI choice and of the tool call being read.
type eventParser struct {
	b            []byte
	i            int
	e            *meteredEvent
	u            usageValues
	choice, call int
}

// The objects of an event the meter reads (eventObject), and the member
// names of each that its family's struct reads.
type eventObject uint8

const (
	// An OpenAI chunk (proxy_usage_chunk.go).
	topObject eventObject = iota
	choiceObject
	deltaObject
	toolCallObject
	functionObject
	// A usage object of any family (proxy_usage_decode.go).
	usageObject
	// A Responses event and its response (proxy_usage_events.go).
	responsesObject
	responseObject
	// An Anthropic Messages event, its message and its delta
	// (proxy_usage_events.go).
	anthropicObject
	messageObject
	anthropicDeltaObject
)

var eventMembers = [...][]string{
	topObject:            {"choices", "usage", "model"},
	choiceObject:         {"text", "delta"},
	deltaObject:          {"content", "reasoning_content", "reasoning", "tool_calls"},
	toolCallObject:       {"function"},
	functionObject:       {"name", "arguments"},
	usageObject:          usageKeys[:],
	responsesObject:      {"type", "delta", "response"},
	responseObject:       {"id", "usage", "model"},
	anthropicObject:      {"type", "message", "delta", "usage"},
	messageObject:        {"usage", "model"},
	anthropicDeltaObject: {"text", "partial_json", "thinking"},
}

// member reads the value of member k of object o, by its family.
func (p *eventParser) member(o eventObject, k int) bool {
	switch {
	case o <= functionObject:
		return p.chunkMember(o, k)
	case o == usageObject:
		return p.usageNumber(k)
	}
	return p.eventMember(o, k)
}

// object reads the object o (or null) at i, each member's value by
// member (a member the struct does not read is skipped). A member named
// twice, or a name that matches one only under case folding, fails it.
func (p *eventParser) object(o eventObject) bool {
	p.i = skipWS(p.b, p.i)
	if p.literal("null") {
		return true
	}
	if !p.byte('{') {
		return false
	}
	p.i = skipWS(p.b, p.i)
	if p.byte('}') {
		return true
	}
	var seen uint8
	for {
		name, ok := p.name()
		if !ok {
			return false
		}
		p.i = skipWS(p.b, p.i)
		if !p.byte(':') {
			return false
		}
		p.i = skipWS(p.b, p.i)
		switch k := memberIndex(eventMembers[o], name); {
		case k == -2:
			return false
		case k == -1:
			if !p.skip(0) {
				return false
			}
		case seen&(1<<k) != 0:
			return false
		default:
			seen |= 1 << k
			if !p.member(o, k) {
				return false
			}
		}
		p.i = skipWS(p.b, p.i)
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
		p.i = skipWS(p.b, p.i)
	}
}

// array reads the array (or null) at i whose elements are objects o.
func (p *eventParser) array(o eventObject) bool {
	if p.literal("null") {
		return true
	}
	if !p.byte('[') {
		return false
	}
	p.i = skipWS(p.b, p.i)
	if p.byte(']') {
		return true
	}
	for {
		p.i = skipWS(p.b, p.i)
		if !p.element(o) {
			return false
		}
		p.i = skipWS(p.b, p.i)
		if p.byte(']') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// anyValue reads any value at i (checked, not kept) into s.
func (p *eventParser) anyValue(s *span) bool {
	start := p.i
	if !p.skip(0) {
		return false
	}
	*s = span{start, p.i}
	return true
}

// text reads a string (or null) into t.
func (p *eventParser) text(t *chunkText) bool {
	if p.literal("null") {
		return true
	}
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	start := p.i + 1
	plain, ok := p.str()
	*t = chunkText{start: start, end: p.i - 1, plain: plain}
	return ok
}

// name reads a member name: a string of printable ASCII without escapes
// (any other is left to encoding/json).
func (p *eventParser) name() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	j := p.i + 1
	for j < len(p.b) && p.b[j] != '"' && p.b[j] != '\\' && p.b[j] >= 0x20 && p.b[j] < 0x80 {
		j++
	}
	if j >= len(p.b) || p.b[j] != '"' {
		return nil, false
	}
	name := p.b[p.i+1 : j]
	p.i = j + 1
	return name, true
}

// str moves past the string at i (its opening quote), checking it as
// JSON does; plain: it has no escape and is valid UTF-8.
func (p *eventParser) str() (plain, ok bool) {
	j := p.i + 1
	plain = true
	ascii := true
	for j < len(p.b) {
		c := p.b[j]
		switch {
		case c == '"':
			if !ascii && plain {
				plain = utf8.Valid(p.b[p.i+1 : j])
			}
			p.i = j + 1
			return plain, true
		case c < 0x20:
			return false, false
		case c == '\\':
			plain = false
			if j+1 >= len(p.b) {
				return false, false
			}
			switch p.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if hex4(p.b[j+2:]) < 0 {
					return false, false
				}
				j += 6
			default:
				return false, false
			}
			continue
		case c >= 0x80:
			ascii = false
		}
		j++
	}
	return false, false
}

// skip moves past the value at i, checking it as JSON does.
func (p *eventParser) skip(depth int) bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '{' || c == '[':
		if depth >= maxSkipDepth {
			return false
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		p.i = skipWS(p.b, p.i+1)
		if p.byte(end) {
			return true
		}
		for {
			if c == '{' {
				if p.i >= len(p.b) || p.b[p.i] != '"' {
					return false
				}
				if _, ok := p.str(); !ok {
					return false
				}
				p.i = skipWS(p.b, p.i)
				if !p.byte(':') {
					return false
				}
				p.i = skipWS(p.b, p.i)
			}
			if !p.skip(depth + 1) {
				return false
			}
			p.i = skipWS(p.b, p.i)
			if p.byte(end) {
				return true
			}
			if !p.byte(',') {
				return false
			}
			p.i = skipWS(p.b, p.i)
		}
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.number()
}

// number moves past a JSON number at i.
func (p *eventParser) number() bool {
	b := p.b
	j, ok := intEnd(b, p.i)
	if !ok {
		return false
	}
	if j < len(b) && b[j] == '.' {
		k := digits(b, j+1)
		if k == j+1 {
			return false
		}
		j = k
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := digits(b, j)
		if k == j {
			return false
		}
		j = k
	}
	p.i = j
	return true
}

// intEnd is the end of the integer part of a JSON number at j (a minus
// if any, then 0 or digits not led by 0); ok is false when there is none.
func intEnd(b []byte, j int) (end int, ok bool) {
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		return j + 1, true
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		return digits(b, j), true
	}
	return j, false
}

// digits is the end of the run of decimal digits at j.
func digits(b []byte, j int) int {
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return j
}

func (p *eventParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *eventParser) literal(s string) bool {
	if p.i+len(s) <= len(p.b) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// memberIndex is name's index in names, -1 when it is none of them, -2
// when it matches one only under case folding (encoding/json would take
// it: left to it).
func memberIndex(names []string, name []byte) int {
	for k, n := range names {
		if string(name) == n {
			return k
		}
	}
	for _, n := range names {
		if len(n) == len(name) && bytes.EqualFold(name, []byte(n)) {
			return -2
		}
	}
	return -1
}

// hex4 is the value of the four hex digits b starts with, -1 if it does
// not.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// appendUnquoted appends the JSON string body s (checked by str) to dst
// as encoding/json decodes it: escapes resolved, a lone or broken
// surrogate and each invalid UTF-8 byte as U+FFFD.
func appendUnquoted(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch s[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if d := utf16.DecodeRune(r, hex4(s[i+2:])); d != utf8.RuneError {
							i += 6
							dst = utf8.AppendRune(dst, d)
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // " \ /
				dst = append(dst, s[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}
