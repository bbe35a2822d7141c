package ojson

// This file is the parser as it was before strings were scanned in runs
// and containers' elements carved from slabs, kept as the reference the
// current one must match exactly (values, spans, errors with their offsets
// and paths): TestParseMatchesReference and FuzzParseMatchesReference.

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// refParse reads exactly one JSON value from data. maxDepth bounds the nesting
// of arrays and objects (0 means DefaultMaxDepth).
func refParse(data []byte, maxDepth int) (*Value, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	p := refParser{data: data, maxDepth: maxDepth}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(data) {
		return nil, p.errorf(p.pos, "unexpected data after the JSON value")
	}
	return v, nil
}

// refPathElem is one step of the path to the value being parsed: a key or an
// array index. The path is only formatted when an error is reported.
type refPathElem struct {
	key   string
	index int // -1 for a key
}

type refParser struct {
	data     []byte
	pos      int
	maxDepth int
	path     []refPathElem
	slab     []Value
}

// alloc hands out Values from a block so a document costs a few allocations
// rather than one per node.
func (p *refParser) alloc() *Value {
	if len(p.slab) == 0 {
		n := len(p.data) / 16
		if n < 8 {
			n = 8
		} else if n > 256 {
			n = 256
		}
		p.slab = make([]Value, n)
	}
	v := &p.slab[0]
	p.slab = p.slab[1:]
	return v
}

func (p *refParser) pathString() string {
	var b strings.Builder
	for _, e := range p.path {
		if e.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(e.index))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.key)
	}
	return b.String()
}

func (p *refParser) errorf(off int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Offset: off, Path: p.pathString(), Msg: fmt.Sprintf(format, args...)}
}

func (p *refParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *refParser) value() (*Value, error) {
	if p.pos >= len(p.data) {
		if len(p.data) == 0 {
			return nil, p.errorf(0, "empty body")
		}
		return nil, p.errorf(p.pos, "unexpected end of JSON input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		start := p.pos
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		v := p.alloc()
		*v = Value{Kind: String, Str: s, Start: start, End: p.pos}
		return v, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", Bool, true)
	case c == 'f':
		return p.literal("false", Bool, false)
	case c == 'n':
		return p.literal("null", Null, false)
	case c == 'N' || c == 'I':
		return nil, p.errorf(p.pos, "NaN and Infinity are not valid JSON numbers")
	default:
		return nil, p.errorf(p.pos, "invalid character %s looking for the beginning of a value", refQuoteByte(c))
	}
}

func (p *refParser) literal(word string, k Kind, b bool) (*Value, error) {
	start := p.pos
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return nil, p.errorf(p.pos, "invalid literal, expected %q", word)
	}
	p.pos += len(word)
	v := p.alloc()
	*v = Value{Kind: k, Bool: b, Start: start, End: p.pos}
	return v, nil
}

func (p *refParser) number() (*Value, error) {
	start := p.pos
	d := p.data
	i := p.pos
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		if i < len(d) && (d[i] == 'I' || d[i] == 'N') {
			return nil, p.errorf(start, "NaN and Infinity are not valid JSON numbers")
		}
		return nil, p.errorf(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return nil, p.errorf(i, "invalid number: digit expected after the decimal point")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return nil, p.errorf(i, "invalid number: digit expected in the exponent")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	p.pos = i
	v := p.alloc()
	*v = Value{Kind: Number, Str: string(d[start:i]), Start: start, End: i}
	return v, nil
}

func (p *refParser) enter(off int) error {
	if len(p.path) >= p.maxDepth {
		return p.errorf(off, "nesting deeper than %d levels", p.maxDepth)
	}
	return nil
}

func (p *refParser) array() (*Value, error) {
	start := p.pos
	if err := p.enter(start); err != nil {
		return nil, err
	}
	p.pos++ // '['
	v := p.alloc()
	*v = Value{Kind: Array, Start: start}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		v.End = p.pos
		return v, nil
	}
	p.path = append(p.path, refPathElem{index: 0})
	for {
		p.path[len(p.path)-1].index = len(v.Items)
		p.skipSpace()
		item, err := p.value()
		if err != nil {
			return nil, err
		}
		v.Items = append(v.Items, item)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf(p.pos, "unexpected end of JSON input in an array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.path = p.path[:len(p.path)-1]
			v.End = p.pos
			return v, nil
		default:
			return nil, p.errorf(p.pos, "invalid character %s after an array element", refQuoteByte(p.data[p.pos]))
		}
	}
}

// refSmallObject is the member count up to which refDuplicate keys are found by
// a scan; beyond it a set takes over, so that an object of n keys costs
// O(n), not O(n²) (200,000 keys in a 2 MB body took a minute of CPU by
// scanning alone).
const refSmallObject = 16

// refDuplicate reports whether key is already among members, keeping *seen
// in step once the object outgrows refSmallObject.
func refDuplicate(members []Member, seen *map[string]struct{}, key string) bool {
	if len(members) < refSmallObject {
		for i := range members {
			if members[i].Key == key {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*len(members))
		for i := range members {
			(*seen)[members[i].Key] = struct{}{}
		}
	}
	if _, dup := (*seen)[key]; dup {
		return true
	}
	(*seen)[key] = struct{}{}
	return false
}

func (p *refParser) object() (*Value, error) {
	start := p.pos
	if err := p.enter(start); err != nil {
		return nil, err
	}
	p.pos++ // '{'
	v := p.alloc()
	*v = Value{Kind: Object, Start: start}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		v.End = p.pos
		return v, nil
	}
	p.path = append(p.path, refPathElem{index: -1})
	var seen map[string]struct{}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf(p.pos, "unexpected end of JSON input in an object")
		}
		if p.data[p.pos] != '"' {
			return nil, p.errorf(p.pos, "invalid character %s looking for an object key", refQuoteByte(p.data[p.pos]))
		}
		keyStart := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if refDuplicate(v.Members, &seen, key) {
			p.path[len(p.path)-1].key = key
			return nil, p.errorf(keyStart, "duplicate key %q", key)
		}
		p.path[len(p.path)-1].key = key
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf(p.pos, "expected ':' after an object key")
		}
		p.pos++
		p.skipSpace()
		val, err := p.value()
		if err != nil {
			return nil, err
		}
		v.Members = append(v.Members, Member{Key: key, KeyStart: keyStart, Value: val})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf(p.pos, "unexpected end of JSON input in an object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			p.path = p.path[:len(p.path)-1]
			v.End = p.pos
			return v, nil
		default:
			return nil, p.errorf(p.pos, "invalid character %s after an object member", refQuoteByte(p.data[p.pos]))
		}
	}
}

// str reads a string starting at the opening quote and returns its
// unescaped value. Strings without escapes are copied in one step.
func (p *refParser) str() (string, error) {
	d := p.data
	start := p.pos + 1
	// refPlainASCII stops only at a quote, a backslash, a control character
	// or a non-ASCII byte.
	for i := refPlainASCII(d, start); i < len(d); i = refPlainASCII(d, i) {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return string(d[start:i]), nil
		case c == '\\':
			return p.strSlow(start, i)
		case c < 0x20:
			return "", p.errorf(i, "control character %s in a string", refQuoteByte(c))
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.errorf(i, "invalid UTF-8 in a string")
			}
			i += size
		}
	}
	return "", p.errorf(len(d), "unexpected end of JSON input in a string")
}

// refPlainASCII returns the index of the first byte at or after i that a
// string scan must look at: a quote, a backslash, a control character or a
// non-ASCII byte. It tests eight bytes at a time (prompts are mostly long
// plain runs; this is the door's hottest loop on a large body).
func refPlainASCII(d []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(d); i += 8 {
		x := binary.LittleEndian.Uint64(d[i:])
		q := x ^ ('"' * ones)
		b := x ^ ('\\' * ones)
		special := x | // any byte >= 0x80
			((x - 0x20*ones) &^ x) | // any byte < 0x20
			((q - ones) &^ q) | // any '"'
			((b - ones) &^ b) // any '\\'
		if special&highs != 0 {
			break
		}
	}
	for i < len(d) {
		c := d[i]
		if c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return i
		}
		i++
	}
	return i
}

func (p *refParser) strSlow(start, i int) (string, error) {
	d := p.data
	buf := make([]byte, 0, i-start+16)
	buf = append(buf, d[start:i]...)
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return string(buf), nil
		case c == '\\':
			if i+1 >= len(d) {
				return "", p.errorf(i, "unexpected end of JSON input in a string")
			}
			e := d[i+1]
			i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := refHex4(d, i)
				if !ok {
					return "", p.errorf(i-2, "invalid \\u escape")
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(d) && d[i] == '\\' && d[i+1] == 'u' {
						r2, ok = refHex4(d, i+2)
						if !ok {
							r2 = -1
						}
					}
					dec := utf16.DecodeRune(r, r2)
					if dec == utf8.RuneError {
						return "", p.errorf(i-6, "invalid \\u escape: unpaired surrogate")
					}
					i += 6
					r = dec
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", p.errorf(i-2, "invalid escape %s in a string", refQuoteByte(e))
			}
		case c < 0x20:
			return "", p.errorf(i, "control character %s in a string", refQuoteByte(c))
		case c < utf8.RuneSelf:
			// A plain run, copied whole (a prompt with newlines is
			// escapes between long runs).
			j := refPlainASCII(d, i+1)
			buf = append(buf, d[i:j]...)
			i = j
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.errorf(i, "invalid UTF-8 in a string")
			}
			buf = append(buf, d[i:i+size]...)
			i += size
		}
	}
	return "", p.errorf(len(d), "unexpected end of JSON input in a string")
}

func refHex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

func refQuoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("0x%02x", c)
}
