package config

import (
	"bytes"
	"runtime"
	"strconv"
	"time"
)

// A keys_file written as JSON (a file whose first byte past whitespace is
// `{`) is read by decodeKeysJSON, a decoder of that one shape: yaml.v3
// builds a node per value before decodeStrict walks them, which at 100k
// keys is seconds of a reload (issue 30), where this reads the bytes once.
//
// JSON is YAML, so the file means what yaml.v3 reads it as. The decoder
// only ever accepts: anything it does not read exactly as yaml.v3 does
// (an escape in a string, a byte outside printable ASCII, null, true or
// false, a number that is not a plain integer where one is wanted, an
// unknown or repeated key, anything after the closing brace) makes it
// give up, and the file goes to yaml.v3 and decodeStrict, which refuse it
// (or read it) with their key paths and lines. A differential test holds
// it to yaml.v3's result on the same files, good and bad.

// KeyYieldEvery is how many keys the keys_file's reading (the JSON
// decoder, validation, and the gateway's table build) handles between
// yields to the scheduler (KeyYielder), so that a reload of a large
// file beside requests holds a core for about half a millisecond at a
// time, not the scheduler's 10 ms slice (4,096 keys at a time did: ~9 ms
// on 2 busy cores, the p99 a reload added to requests). A yield costs
// about 0.2 µs: 400 of them at 100k keys, well under a millisecond.
const KeyYieldEvery = 256

// KeyYielder is the yield of a large reading beside requests, called
// every KeyYieldEvery keys: a runtime.Gosched, and every
// parkEveryYields-th time YieldToWaiting.
type KeyYielder struct{ n int }

// parkEveryYields is how often a KeyYielder parks (YieldToWaiting) rather
// than calls runtime.Gosched: every 1,024 keys, about a millisecond of
// reading on a quiet core.
const parkEveryYields = 4

// Yield yields (see KeyYielder).
func (y *KeyYielder) Yield() {
	y.n++
	if y.n%parkEveryYields == 0 {
		YieldToWaiting()
		return
	}
	runtime.Gosched()
}

// YieldToWaiting parks the reading for a moment, so that its P runs the
// goroutines waiting for one, wherever they wait, then takes it back.
// runtime.Gosched alone is not enough: it puts the reading on the global
// run queue, which a P looks at before it steals from another P's queue,
// so while the collector's mark worker held the other P (a reload's
// allocation starts a collection), the requests queued on that P waited
// behind it, 10-15 ms in the runtime trace of a reload beside requests,
// while this P took the reading straight back. A sleep of a microsecond
// is about 0.1 ms of wall time when nothing waits (no CPU; a Gosched is
// 0.1 us), hence a KeyYielder parks only every parkEveryYields yields.
func YieldToWaiting() { time.Sleep(time.Microsecond) }

// decodeKeysJSON decodes a keys_file written as JSON; ok is false when it
// is not one this decoder reads exactly as yaml.v3 would (see above).
func decodeKeysJSON(data []byte) (keys []KeyConfig, ok bool) {
	var y KeyYielder
	return decodeKeysJSONYielding(data, y.Yield)
}

// decodeKeysJSONYielding is decodeKeysJSON calling yield every
// KeyYieldEvery keys.
func decodeKeysJSONYielding(data []byte, yield func()) (keys []KeyConfig, ok bool) {
	s := jsonScanner{b: data, models: map[string]modelsEntry{}, yield: yield}
	// Sized by the names in the file (a hint: an append grows it), so
	// that 100k keys are not copied over and over as the list grows.
	keys = make([]KeyConfig, 0, bytes.Count(data, []byte(`"name"`)))
	present, ok := s.document(func(v *keyView) { keys = append(keys, v.config()) })
	if !ok {
		return nil, false
	}
	if !present {
		return nil, true
	}
	return keys, true
}

// jsonScanner reads one JSON document from b; i is the next byte. models
// interns the keys' model lists by their text, so that keys allowing the
// same models share one list. yield is called every KeyYieldEvery keys.
type jsonScanner struct {
	b      []byte
	i      int
	models map[string]modelsEntry
	yield  func()
}

// modelsEntry is a model list read, and its text (its key in models).
type modelsEntry struct {
	list []string
	text string
}

// document reads the whole keys_file, {"keys": [...]} or {}, calling each
// with every key; present: the keys list was there. The views each gets
// alias b and are valid for the call only.
func (s *jsonScanner) document(each func(v *keyView)) (present, ok bool) {
	if !s.lit('{') {
		return false, false
	}
	if s.lit('}') {
		return false, s.end()
	}
	if name, ok := s.rawString(); !ok || string(name) != "keys" || !s.lit(':') {
		return false, false
	}
	if !s.keyList(each) || !s.lit('}') {
		return true, false
	}
	return true, s.end()
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// lit consumes c (after whitespace) when it is next.
func (s *jsonScanner) lit(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end: nothing but whitespace is left.
func (s *jsonScanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// rawString reads a string of printable ASCII without escapes and returns
// its bytes (aliasing b).
func (s *jsonScanner) rawString() ([]byte, bool) {
	if !s.lit('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

func (s *jsonScanner) str() (string, bool) {
	b, ok := s.rawString()
	return string(b), ok
}

// number reads the bytes that may make a number (after whitespace).
func (s *jsonScanner) number() ([]byte, bool) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && isNumberByte(s.b[s.i]) {
		s.i++
	}
	return s.b[start:s.i], s.i > start
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// integer reads a plain JSON integer (no fraction, no exponent, no
// leading zero) that fits an int64.
func (s *jsonScanner) integer() (int64, bool) {
	b, ok := s.number()
	if !ok {
		return 0, false
	}
	digits := b
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	return v, err == nil
}

// float reads a JSON number.
func (s *jsonScanner) float() (float64, bool) {
	b, ok := s.number()
	if !ok || !jsonNumber(b) {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(b), 64)
	return v, err == nil
}

// jsonNumber: b is a number by JSON's grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func jsonNumber(b []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	start := i
	if n := digits(); n == 0 || (b[start] == '0' && n > 1) {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

// keyList reads the keys list, [] or [{...}, ...], calling each with
// every key.
func (s *jsonScanner) keyList(each func(v *keyView)) bool {
	if !s.lit('[') {
		return false
	}
	if s.lit(']') {
		return true
	}
	var v keyView
	for n := 1; ; n++ {
		v = keyView{}
		if !s.keyView(&v) {
			return false
		}
		each(&v)
		if n%KeyYieldEvery == 0 {
			s.yield()
		}
		if s.lit(']') {
			return true
		}
		if !s.lit(',') {
			return false
		}
	}
}

// object reads {"field": value, ...}, calling field for each value; a
// field read twice, or one field refuses (an unknown one, or a value it
// does not read), gives up. field returns the field's bit, to tell a
// field repeated.
func (s *jsonScanner) object(field func(name []byte) (bit uint, ok bool)) bool {
	if !s.lit('{') {
		return false
	}
	if s.lit('}') {
		return true
	}
	var seen uint
	for {
		name, ok := s.rawString()
		if !ok || !s.lit(':') {
			return false
		}
		bit, ok := field(name)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if s.lit('}') {
			return true
		}
		if !s.lit(',') {
			return false
		}
	}
}

// keyView reads one key's object; its texts alias b.
func (s *jsonScanner) keyView(k *keyView) bool {
	return s.object(func(name []byte) (uint, bool) {
		var ok bool
		switch string(name) {
		case "name":
			k.name, ok = s.rawString()
			return 1 << 0, ok
		case "sha256":
			k.sha256, ok = s.rawString()
			return 1 << 1, ok
		case "env":
			k.env, ok = s.rawString()
			return 1 << 2, ok
		case "models":
			k.models, k.modelsKey, ok = s.modelList()
			k.jsonModels = true
			return 1 << 3, ok
		case "priority":
			k.priority, ok = s.rawString()
			return 1 << 4, ok
		case "limits":
			return 1 << 5, s.limits(&k.limits)
		case "weight":
			k.weight, ok = s.float()
			k.weighted = true
			return 1 << 6, ok
		}
		return 0, false
	})
}

// modelList reads a list of model names; identical lists (by their text)
// share one slice, and text is that text (one string for every key with
// the list). A list read before costs no allocation: its end is found
// first, its text looked up, and only a new list is made.
func (s *jsonScanner) modelList() (models []string, text string, ok bool) {
	s.ws()
	start := s.i
	if !s.skipModelList() {
		return nil, "", false
	}
	raw := s.b[start:s.i]
	if shared, ok := s.models[string(raw)]; ok {
		return shared.list, shared.text, true
	}
	s.i = start
	models = []string{}
	s.lit('[')
	if !s.lit(']') {
		for {
			m, _ := s.str()
			models = append(models, m)
			if s.lit(']') {
				break
			}
			s.lit(',')
		}
	}
	text = string(raw)
	s.models[text] = modelsEntry{models, text}
	return models, text, true
}

// skipModelList reads past a list of strings (modelList's shape) without
// making any.
func (s *jsonScanner) skipModelList() bool {
	if !s.lit('[') {
		return false
	}
	if s.lit(']') {
		return true
	}
	for {
		if _, ok := s.rawString(); !ok {
			return false
		}
		if s.lit(']') {
			return true
		}
		if !s.lit(',') {
			return false
		}
	}
}

// limits reads a key's limits object.
func (s *jsonScanner) limits(l *KeyLimits) bool {
	return s.object(func(name []byte) (uint, bool) {
		var dst *int64
		var bit uint
		switch string(name) {
		case "requests_per_minute":
			dst, bit = &l.RequestsPerMinute, 1<<0
		case "tokens_per_minute":
			dst, bit = &l.TokensPerMinute, 1<<1
		case "max_concurrent":
			dst, bit = &l.MaxConcurrent, 1<<2
		case "tokens_per_day":
			dst, bit = &l.TokensPerDay, 1<<3
		default:
			return 0, false
		}
		v, ok := s.integer()
		*dst = v
		return bit, ok
	})
}
