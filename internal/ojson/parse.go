package ojson

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultMaxDepth is the nesting limit Parse applies when given 0.
const DefaultMaxDepth = 64

// SyntaxError describes why an input was rejected and where.
type SyntaxError struct {
	// Offset is the byte offset of the problem in the input.
	Offset int
	// Path locates the value being read, e.g. "messages[2].content"; empty at
	// the top level.
	Path string
	// Msg says what is wrong, without the location.
	Msg string
}

func (e *SyntaxError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s (at byte %d)", e.Msg, e.Offset)
	}
	return fmt.Sprintf("%s at %s (byte %d)", e.Msg, e.Path, e.Offset)
}

// Parse reads exactly one JSON value from data. maxDepth bounds the nesting
// of arrays and objects (0 means DefaultMaxDepth).
func Parse(data []byte, maxDepth int) (*Value, error) {
	return parse(data, maxDepth, nil)
}

// TooManyValuesError is ParseLimited's answer to an input holding more
// values than its limit: the parse stopped there, having built no more.
type TooManyValuesError struct {
	Limit int
	// Path locates the value past the limit, e.g. "prompt[4096]".
	Path string
}

func (e *TooManyValuesError) Error() string {
	return fmt.Sprintf("the document holds more than %d values (at %s)", e.Limit, e.Path)
}

// ParseLimited is Parse for an input that may hold at most maxValues
// values (each string, number, literal, array and object is one; 0: no
// limit). A Value costs some hundred bytes, so a body of short numbers
// ("1,1,1,…") parsed whole costs fifty times its size; a caller that
// knows how many values a valid request can hold stops there, at the
// cost of the values it allowed.
func ParseLimited(data []byte, maxDepth, maxValues int) (*Value, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	p := parser{data: data, maxDepth: maxDepth, maxValues: maxValues}
	return p.run()
}

// parse is Parse with strings read by strRead when it is not nil (the
// tests' byte-by-byte reference reader).
func parse(data []byte, maxDepth int, strRead func(*parser) (string, error)) (*Value, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	p := parser{data: data, maxDepth: maxDepth, strRead: strRead}
	return p.run()
}

func (p *parser) run() (*Value, error) {
	data := p.data
	p.items, p.members, p.path = p.itemStack[:0], p.memberStack[:0], p.pathStack[:0]
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

// pathElem is one step of the path to the value being parsed: a key or an
// array index. The path is only formatted when an error is reported.
type pathElem struct {
	key   string
	index int // -1 for a key
}

type parser struct {
	data     []byte
	pos      int
	maxDepth int
	// values counts the values read so far, against maxValues (0: no
	// limit).
	values, maxValues int
	path              []pathElem
	slab              []Value
	// items and members are stacks of the elements of the arrays and
	// objects being read (nested ones above their parents'); a finished
	// container's are copied out to an exact-size slice carved from
	// itemSlab or memberSlab.
	items      []*Value
	members    []Member
	itemSlab   []*Value
	memberSlab []Member
	// The sizes of the last blocks allocated.
	slabLen, itemLen, memberLen int
	// The stacks' first blocks, enough for a chat's messages (and the
	// path of a message's content part).
	itemStack   [32]*Value
	memberStack [16]Member
	pathStack   [6]pathElem
	// strRead, when set, reads every string instead of str's scans: the
	// tests compare the scans with a byte-by-byte reader through it.
	strRead func(*parser) (string, error)
}

// grow is the size of the next block of nodes (Values, members or items)
// after one of size last: blocks double from 16 up to 256, so that a small
// document allocates little and a large one a few blocks.
func grow(last, need int) int {
	return max(need, min(max(2*last, 16), 256))
}

// bytesPerValue is about how many input bytes a chat request spends per
// Value (a message of a few sentences is an object and two strings in
// some 200 bytes): the first block of Values is sized from the input's
// length with it, so that a conversation's nodes fit in one block instead
// of three doubling ones that leave most of the last unused.
const bytesPerValue = 64

// firstSlab is the size of the first block of Values for an input of n
// bytes: n/bytesPerValue, within grow's bounds.
func firstSlab(n int) int { return min(max(n/bytesPerValue, 16), 256) }

// alloc hands out Values from a block so a document costs a few allocations
// rather than one per node.
func (p *parser) alloc() *Value {
	if len(p.slab) == 0 {
		if p.slabLen == 0 {
			p.slabLen = firstSlab(len(p.data))
		} else {
			p.slabLen = grow(p.slabLen, 1)
		}
		p.slab = make([]Value, p.slabLen)
	}
	v := &p.slab[0]
	p.slab = p.slab[1:]
	return v
}

// finishItems moves the items stacked since base into an exact-size
// slice (capacity = length: an append by a caller copies) and pops them.
func (p *parser) finishItems(base int) []*Value {
	n := len(p.items) - base
	if n > len(p.itemSlab) {
		p.itemLen = grow(p.itemLen, n)
		p.itemSlab = make([]*Value, p.itemLen)
	}
	out := p.itemSlab[:n:n]
	p.itemSlab = p.itemSlab[n:]
	copy(out, p.items[base:])
	clear(p.items[base:])
	p.items = p.items[:base]
	return out
}

// finishMembers is finishItems for an object's members.
func (p *parser) finishMembers(base int) []Member {
	n := len(p.members) - base
	if n > len(p.memberSlab) {
		p.memberLen = grow(p.memberLen, n)
		p.memberSlab = make([]Member, p.memberLen)
	}
	out := p.memberSlab[:n:n]
	p.memberSlab = p.memberSlab[n:]
	copy(out, p.members[base:])
	clear(p.members[base:])
	p.members = p.members[:base]
	return out
}

func (p *parser) pathString() string {
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

func (p *parser) errorf(off int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Offset: off, Path: p.pathString(), Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() (*Value, error) {
	if p.values++; p.maxValues > 0 && p.values > p.maxValues {
		return nil, &TooManyValuesError{Limit: p.maxValues, Path: p.pathString()}
	}
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
		return nil, p.errorf(p.pos, "invalid character %s looking for the beginning of a value", quoteByte(c))
	}
}

func (p *parser) literal(word string, k Kind, b bool) (*Value, error) {
	start := p.pos
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return nil, p.errorf(p.pos, "invalid literal, expected %q", word)
	}
	p.pos += len(word)
	v := p.alloc()
	*v = Value{Kind: k, Bool: b, Start: start, End: p.pos}
	return v, nil
}

func (p *parser) number() (*Value, error) {
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

func (p *parser) enter(off int) error {
	if len(p.path) >= p.maxDepth {
		return p.errorf(off, "nesting deeper than %d levels", p.maxDepth)
	}
	return nil
}

func (p *parser) array() (*Value, error) {
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
	p.path = append(p.path, pathElem{index: 0})
	base := len(p.items)
	for {
		p.path[len(p.path)-1].index = len(p.items) - base
		p.skipSpace()
		item, err := p.value()
		if err != nil {
			return nil, err
		}
		p.items = append(p.items, item)
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
			v.Items = p.finishItems(base)
			v.End = p.pos
			return v, nil
		default:
			return nil, p.errorf(p.pos, "invalid character %s after an array element", quoteByte(p.data[p.pos]))
		}
	}
}

// smallObject is the member count up to which duplicate keys are found by
// a scan; beyond it a set takes over, so that an object of n keys costs
// O(n), not O(n²) (200,000 keys in a 2 MB body took a minute of CPU by
// scanning alone).
const smallObject = 16

// duplicate reports whether key is already among members, keeping *seen
// in step once the object outgrows smallObject.
func duplicate(members []Member, seen *map[string]struct{}, key string) bool {
	if len(members) < smallObject {
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

func (p *parser) object() (*Value, error) {
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
	p.path = append(p.path, pathElem{index: -1})
	base := len(p.members)
	var seen map[string]struct{}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf(p.pos, "unexpected end of JSON input in an object")
		}
		if p.data[p.pos] != '"' {
			return nil, p.errorf(p.pos, "invalid character %s looking for an object key", quoteByte(p.data[p.pos]))
		}
		keyStart := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if duplicate(p.members[base:], &seen, key) {
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
		p.members = append(p.members, Member{Key: key, KeyStart: keyStart, Value: val})
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
			v.Members = p.finishMembers(base)
			v.End = p.pos
			return v, nil
		default:
			return nil, p.errorf(p.pos, "invalid character %s after an object member", quoteByte(p.data[p.pos]))
		}
	}
}
