package ojson

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// str reads a string starting at the opening quote and returns its
// unescaped value. A string without escapes is copied in one step (or not
// at all when it is a common key or role); one with escapes is unescaped
// by strSlow.
func (p *parser) str() (string, error) {
	if p.strRead != nil {
		return p.strRead(p)
	}
	d := p.data
	start := p.pos + 1
	j, wide := plainRun(d, start)
	if wide && !utf8.Valid(d[start:j]) {
		return "", p.errorf(firstInvalid(d, start, j), "invalid UTF-8 in a string")
	}
	if j >= len(d) {
		return "", p.errorf(len(d), "unexpected end of JSON input in a string")
	}
	switch c := d[j]; c {
	case '"':
		p.pos = j + 1
		return common(d[start:j]), nil
	case '\\':
		return p.strSlow(start, j)
	default:
		return "", p.errorf(j, "control character %s in a string", quoteByte(c))
	}
}

// common returns b as a string, without allocating when it is one of the
// keys and values most chat requests repeat.
func common(b []byte) string {
	if len(b) > 21 {
		return string(b)
	}
	switch string(b) {
	case "role":
		return "role"
	case "content":
		return "content"
	case "user":
		return "user"
	case "assistant":
		return "assistant"
	case "system":
		return "system"
	case "model":
		return "model"
	case "messages":
		return "messages"
	case "type":
		return "type"
	case "text":
		return "text"
	case "name":
		return "name"
	case "tool":
		return "tool"
	case "developer":
		return "developer"
	case "max_tokens":
		return "max_tokens"
	case "max_completion_tokens":
		return "max_completion_tokens"
	case "stream":
		return "stream"
	case "temperature":
		return "temperature"
	case "top_p":
		return "top_p"
	case "tools":
		return "tools"
	case "tool_calls":
		return "tool_calls"
	case "tool_call_id":
		return "tool_call_id"
	case "function":
		return "function"
	case "arguments":
		return "arguments"
	case "parameters":
		return "parameters"
	case "description":
		return "description"
	case "properties":
		return "properties"
	case "required":
		return "required"
	case "id":
		return "id"
	case "prompt":
		return "prompt"
	case "input":
		return "input"
	}
	return string(b)
}

// plainRun returns the index of the first byte at or after i that ends a
// plain run of string bytes: a quote, a backslash or a control character
// (len(d) when none). Non-ASCII bytes do not end a run: the caller
// validates UTF-8 in bulk, when wide says some byte of the run (or of the
// word that ends it) is not ASCII. It tests eight bytes at a time
// (prompts are mostly long plain runs; this is the door's hottest loop on
// a large body).
func plainRun(d []byte, i int) (int, bool) {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	var wide uint64
	for ; i+8 <= len(d); i += 8 {
		x := binary.LittleEndian.Uint64(d[i:])
		wide |= x
		q := x ^ ('"' * ones)
		b := x ^ ('\\' * ones)
		// Each term flags, exactly, whether some byte is below 0x20, a
		// quote or a backslash (flags above the first may be spurious:
		// borrows only run upwards, so the lowest flag is true).
		if special := (((x - 0x20*ones) &^ x) | ((q - ones) &^ q) | ((b - ones) &^ b)) & highs; special != 0 {
			return i + bits.TrailingZeros64(special)/8, wide&highs != 0
		}
	}
	for ; i < len(d); i++ {
		c := d[i]
		if c == '"' || c == '\\' || c < 0x20 {
			break
		}
		wide |= uint64(c)
	}
	return i, wide&highs != 0
}

// firstInvalid returns the offset of the first byte in d[i:end] that does
// not start a valid UTF-8 sequence, or end when there is none: where a
// byte-by-byte scan of a string from i meets invalid UTF-8. Escapes are
// ASCII, so it may run over them.
func firstInvalid(d []byte, i, end int) int {
	for i < end {
		if d[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(d[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return end
}

// closingQuote returns the index of the quote that ends a string whose
// first escape is at i (len(d) when there is none): the first quote
// preceded by an even run of backslashes (each backslash escapes the byte
// after it). It bounds the unescaped length at the cost of a vectorised
// search, so the string is unescaped into one buffer.
func closingQuote(d []byte, i int) int {
	for {
		q := bytes.IndexByte(d[i:], '"')
		if q < 0 {
			return len(d)
		}
		q += i
		k := q
		for d[k-1] == '\\' { // d[i] is a backslash: k > i
			k--
		}
		if (q-k)%2 == 0 {
			return q
		}
		i = q + 1
	}
}

// strSlow reads a string whose first escape is at i. A string that ends
// is unescaped by unescape, unless it finds something wrong; then (and for
// a string that does not end) strExact reads it again and reports the
// first error, as a scan byte by byte would.
func (p *parser) strSlow(start, i int) (string, error) {
	d := p.data
	end := closingQuote(d, i)
	if end < len(d) {
		if s, ok := unescape(d, start, i, end); ok {
			p.pos = end + 1
			return s, nil
		}
	}
	return p.strExact(start, i, end)
}

// unescape returns the string d[start:end], whose first escape is at i
// (d[start:i] is valid UTF-8 without control characters), unescaped into
// one buffer of the escaped length (the unescaped text is never longer),
// which becomes the string without a second copy. Escapes are often a few
// dozen bytes apart (a newline per line of code), so the runs between
// them are scanned, checked and copied in one pass, eight bytes at a time:
// each word is stored whole, and the write offset advances to the
// backslash in it, if any. The words also gather whether a control byte or
// a non-ASCII byte was seen; utf8.Valid checks the result only in the
// latter case (escapes add only valid UTF-8, so the result is valid
// exactly when the runs are). It returns false for a string with an escape
// that is not well formed, a control byte or invalid UTF-8, for strExact
// to report.
func unescape(d []byte, start, i, end int) (string, bool) {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	buf := make([]byte, end-start)
	// w <= i-start throughout (an escape is never shorter than what it
	// stands for), so a word stored at w fits whenever i+8 <= end.
	w := copy(buf, d[start:i])
	// ctl and wide gather the words read (and the bytes, as words):
	// (x-0x20*ones)&^x flags a byte below 0x20, x a byte above 0x7f,
	// each in the byte's high bit.
	var ctl, wide uint64
	for {
		// d[i] is a backslash; the byte after it is before end (the
		// closing quote is not escaped).
		if i+1 >= end {
			return "", false
		}
		e := d[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			buf[w] = e
		case 'b':
			buf[w] = '\b'
		case 'f':
			buf[w] = '\f'
		case 'n':
			buf[w] = '\n'
		case 'r':
			buf[w] = '\r'
		case 't':
			buf[w] = '\t'
		case 'u':
			if i+4 > end {
				return "", false
			}
			r, ok := hex4(d, i)
			if !ok {
				return "", false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 > end || d[i] != '\\' || d[i+1] != 'u' {
					return "", false
				}
				r2, ok := hex4(d, i+2)
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
				i += 6
			}
			w += utf8.EncodeRune(buf[w:], r) - 1
		default:
			return "", false
		}
		w++
		// The run up to the next backslash or end.
		for i+8 <= end {
			x := binary.LittleEndian.Uint64(d[i:])
			binary.LittleEndian.PutUint64(buf[w:], x)
			ctl |= (x - 0x20*ones) &^ x
			wide |= x
			y := x ^ ('\\' * ones)
			if z := (y - ones) &^ y & highs; z != 0 {
				t := bits.TrailingZeros64(z) / 8
				w += t
				i += t
				break
			}
			w += 8
			i += 8
		}
		for i < end && d[i] != '\\' {
			c := d[i]
			ctl |= uint64(c-0x20) & 0x80 &^ uint64(c)
			wide |= uint64(c)
			buf[w] = c
			w++
			i++
		}
		if i == end {
			if ctl&highs != 0 || wide&highs != 0 && !utf8.Valid(buf[:w]) {
				return "", false
			}
			return unsafe.String(unsafe.SliceData(buf), w), true
		}
	}
}

// strExact unescapes a string whose first escape is at i and whose
// closing quote closingQuote found at end, in one pass into one buffer of
// the escaped length (an upper bound of the unescaped one), stopping at
// the first error. UTF-8 is validated once, on the result: unescaping
// only adds whole, valid sequences, so the result is valid exactly when
// every plain run is. An error found on the way is reported only if no
// invalid UTF-8 comes before it (strError), as a scan byte by byte would.
func (p *parser) strExact(start, i, end int) (string, error) {
	d := p.data
	buf := make([]byte, 0, end-start)
	buf = append(buf, d[start:i]...)
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", p.errorf(firstInvalid(d, start, i), "invalid UTF-8 in a string")
			}
			p.pos = i + 1
			return unsafe.String(unsafe.SliceData(buf), len(buf)), nil
		case c == '\\':
			if i+1 >= len(d) {
				return "", p.strError(start, i, "unexpected end of JSON input in a string")
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
				r, ok := hex4(d, i)
				if !ok {
					return "", p.strError(start, i-2, "invalid \\u escape")
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(d) && d[i] == '\\' && d[i+1] == 'u' {
						r2, ok = hex4(d, i+2)
						if !ok {
							r2 = -1
						}
					}
					dec := utf16.DecodeRune(r, r2)
					if dec == utf8.RuneError {
						return "", p.strError(start, i-6, "invalid \\u escape: unpaired surrogate")
					}
					i += 6
					r = dec
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", p.strError(start, i-2, fmt.Sprintf("invalid escape %s in a string", quoteByte(e)))
			}
		case c < 0x20:
			return "", p.strError(start, i, fmt.Sprintf("control character %s in a string", quoteByte(c)))
		default:
			// A plain run, copied whole (a prompt with newlines is
			// escapes between long runs).
			j, _ := plainRun(d, i)
			buf = append(buf, d[i:j]...)
			i = j
		}
	}
	return "", p.strError(start, len(d), "unexpected end of JSON input in a string")
}

// strError is the error msg at off in the string that starts at start, or
// the invalid UTF-8 before off that a byte-by-byte scan would meet first.
func (p *parser) strError(start, off int, msg string) *SyntaxError {
	if k := firstInvalid(p.data, start, off); k < off {
		return p.errorf(k, "invalid UTF-8 in a string")
	}
	return p.errorf(off, "%s", msg)
}

func hex4(d []byte, i int) (rune, bool) {
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

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("0x%02x", c)
}
