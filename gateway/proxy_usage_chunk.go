package gateway

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// The usage meter's fast read of an OpenAI stream chunk (chat,
// completions, audio): what meterOpenAIEvent takes of one, read in one
// pass without allocating, exactly as encoding/json would read it into
// the meter's struct, for the shape vLLM sends. Anything else is left to
// encoding/json.

// maxChunkTexts bounds the texts one chunk's fast read keeps in hand: a
// chunk with more (many choices, many tool calls) is read by
// encoding/json instead.
const maxChunkTexts = 16

// maxSkipDepth bounds the nesting of a value the meter does not read
// (logprobs, say); a deeper one is left to encoding/json.
const maxSkipDepth = 64

// chunkText is a JSON string in a chunk: its bytes between the quotes,
// and whether they are the text as they are (no escape, valid UTF-8) or
// must be unquoted. start == end: none (absent, null or empty).
type chunkText struct {
	start, end int
	plain      bool
}

// openAIChunk is what the meter takes from an OpenAI stream chunk: its
// texts in the order meterOpenAIEvent's struct streams them (per choice:
// text, content, reasoning_content, reasoning, then each tool call's name
// and arguments), and where its "usage" and "model" values are (usage
// and model, end 0: absent; usage absent when null too). Offsets, not
// slices: the chunk is the caller's, on its stack.
type openAIChunk struct {
	texts        [maxChunkTexts]chunkText
	n            int
	usage, model span
}

// span is a value's place in the chunk's data.
type span struct{ start, end int }

// decodeOpenAIChunk reads data as json.Unmarshal into meterOpenAIEvent's
// struct would, for the shape vLLM sends: an object whose members the
// struct names are of their own types or null, each named once and
// exactly. It reports false for anything else (invalid JSON, a member of
// another type, a member named twice or only under case folding, an
// escaped or non-ASCII member name, more than maxChunkTexts texts, a
// value nested deeper than maxSkipDepth): encoding/json reads it then.
func decodeOpenAIChunk(data []byte, c *openAIChunk) bool {
	c.n, c.usage, c.model = 0, span{}, span{}
	p := chunkParser{b: data, c: c}
	return p.object(topObject) && skipWS(data, p.i) == len(data)
}

// chunkParser reads one chunk: b from i on. choice and call are the
// first of the texts of the choice and of the tool call being read.
type chunkParser struct {
	b            []byte
	i            int
	c            *openAIChunk
	choice, call int
}

// The objects of a chunk the meter reads (chunkObject), and the member
// names of each that its struct reads.
type chunkObject uint8

const (
	topObject chunkObject = iota
	choiceObject
	deltaObject
	toolCallObject
	functionObject
)

var chunkMembers = [...][]string{
	topObject:      {"choices", "usage", "model"},
	choiceObject:   {"text", "delta"},
	deltaObject:    {"content", "reasoning_content", "reasoning", "tool_calls"},
	toolCallObject: {"function"},
	functionObject: {"name", "arguments"},
}

// object reads the object o (or null) at i, each member's value by
// member (a member the struct does not read is skipped). A member named
// twice, or a name that matches one only under case folding, fails it.
func (p *chunkParser) object(o chunkObject) bool {
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
		switch k := memberIndex(chunkMembers[o], name); {
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
func (p *chunkParser) array(o chunkObject) bool {
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

// element reads an array's element: a choice takes the four slots of its
// texts first (its tool calls' come after them), a tool call reads its
// function.
func (p *chunkParser) element(o chunkObject) bool {
	if p.literal("null") {
		return true
	}
	if o == choiceObject {
		if p.c.n+4 > maxChunkTexts {
			return false
		}
		p.choice = p.c.n
		p.c.n += 4
		p.c.texts[p.choice] = chunkText{}
		p.c.texts[p.choice+1] = chunkText{}
		p.c.texts[p.choice+2] = chunkText{}
		p.c.texts[p.choice+3] = chunkText{}
	}
	return p.object(o)
}

// member reads the value of member k of object o.
func (p *chunkParser) member(o chunkObject, k int) bool {
	switch o {
	case topObject:
		return p.top(k)
	case choiceObject:
		if k == 0 {
			return p.text(&p.c.texts[p.choice])
		}
		return p.object(deltaObject)
	case deltaObject:
		if k == 3 {
			return p.array(toolCallObject)
		}
		return p.text(&p.c.texts[p.choice+1+k])
	case toolCallObject:
		if p.literal("null") {
			return true
		}
		if p.c.n+2 > maxChunkTexts {
			return false
		}
		p.call = p.c.n
		p.c.n += 2
		p.c.texts[p.call], p.c.texts[p.call+1] = chunkText{}, chunkText{}
		return p.object(functionObject)
	}
	return p.text(&p.c.texts[p.call+k])
}

// top reads a member of the chunk: choices, usage (an object or null,
// kept as it is for decodeUsage), model (any value, kept as it is).
func (p *chunkParser) top(k int) bool {
	start := p.i
	switch k {
	case 0:
		return p.array(choiceObject)
	case 1:
		if p.literal("null") {
			return true
		}
		if p.i >= len(p.b) || p.b[p.i] != '{' || !p.skip(0) {
			return false
		}
		p.c.usage = span{start, p.i}
	default:
		if !p.skip(0) {
			return false
		}
		p.c.model = span{start, p.i}
	}
	return true
}

// text reads a string (or null) into t.
func (p *chunkParser) text(t *chunkText) bool {
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
func (p *chunkParser) name() ([]byte, bool) {
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
func (p *chunkParser) str() (plain, ok bool) {
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
func (p *chunkParser) skip(depth int) bool {
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
func (p *chunkParser) number() bool {
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

func (p *chunkParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *chunkParser) literal(s string) bool {
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
