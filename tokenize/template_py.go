package tokenize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// This file holds the Python formatting the owned evaluator's values
// (jinja_value.go, jinja_filters.go) are printed with: str.isspace, float
// repr, string repr, json.dumps' string escaping as transformers' tojson
// calls it, %-formatting and strftime.

// pyIsSpace reports whether r is whitespace for Python's str.isspace and
// the re module's \s: Go's unicode.IsSpace plus the four ASCII separators
// U+001C..U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyFloatRepr formats f as Python's float.__repr__ does: the shortest
// digits that round-trip, fixed notation when the decimal exponent is in
// [-4, 16), scientific otherwise, and always a fraction or an exponent.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
	}
	ei := strings.IndexByte(s, 'e')
	mant, expStr := s[:ei], s[ei+1:]
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	n := len(digits)
	switch {
	case exp >= 16 || exp < -4:
		b.WriteByte(digits[0])
		if n > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if exp < 0 {
			b.WriteByte('-')
			exp = -exp
		} else {
			b.WriteByte('+')
		}
		if exp < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.Itoa(exp))
	case exp >= 0:
		if n <= exp+1 {
			b.WriteString(digits)
			b.WriteString(strings.Repeat("0", exp+1-n))
			b.WriteString(".0")
		} else {
			b.WriteString(digits[:exp+1])
			b.WriteByte('.')
			b.WriteString(digits[exp+1:])
		}
	default:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -exp-1))
		b.WriteString(digits)
	}
	return b.String()
}

// pyReprString writes Python's repr of a str: single quotes unless the
// text holds a single quote and no double quote; \\, the quote, \t \n \r
// escaped; other non-printable characters as \xNN, \uNNNN or \UNNNNNNNN.
func pyReprString(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// jsonOpts are json.dumps' options as transformers' tojson passes them.
type jsonOpts struct {
	ensureASCII bool
	indent      *string // nil: no indent
	itemSep     string
	keySep      string
	sortKeys    bool
}

// pyTypeError is a TypeError Python raises, with its message.
type pyTypeError struct{ msg string }

func (e *pyTypeError) Error() string { return e.msg }

func newlineIndent(b *strings.Builder, o *jsonOpts, level int) {
	if o.indent == nil {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(*o.indent)
	}
}

const hexDigits = "0123456789abcdef"

// pyJSONString writes s as json.dumps does (py_encode_basestring and its
// ASCII variant).
func pyJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hexDigits[r>>12&0xf])
		b.WriteByte(hexDigits[r>>8&0xf])
		b.WriteByte(hexDigits[r>>4&0xf])
		b.WriteByte(hexDigits[r&0xf])
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 || (ensureASCII && c == 0x7f) {
					u4(rune(c))
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !ensureASCII {
			b.WriteString(s[i : i+size])
		} else if r >= 0x10000 {
			r -= 0x10000
			u4(0xd800 | (r>>10)&0x3ff)
			u4(0xdc00 | r&0x3ff)
		} else {
			u4(r)
		}
		i += size
	}
	b.WriteByte('"')
}

// pyPercent is Python's `f % args` for n arguments: it copies f, turns %%
// into %, reads each other conversion's letter and optional .N precision,
// and has conv write argument i. A count of conversions other than n, or
// f ending in %, is unsupported (Python raises on the first; neither
// appears in chat templates).
func pyPercent(f string, n int, conv func(b *strings.Builder, i int, conv byte, prec int) error) (string, error) {
	var b strings.Builder
	next := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		i++
		prec := -1
		if i+1 < len(f) && f[i] == '.' && f[i+1] >= '0' && f[i+1] <= '9' {
			prec = 0
			for i++; i < len(f) && f[i] >= '0' && f[i] <= '9'; i++ {
				prec = prec*10 + int(f[i]-'0')
			}
		}
		if i >= len(f) {
			return "", errUnsupported("format string ending in %")
		}
		if f[i] == '%' && prec < 0 {
			b.WriteByte('%')
			continue
		}
		if next >= n {
			return "", errUnsupported("format with fewer arguments than conversions")
		}
		if err := conv(&b, next, f[i], prec); err != nil {
			return "", err
		}
		next++
	}
	if next != n {
		return "", errUnsupported("format with more arguments than conversions")
	}
	return b.String(), nil
}

// pyFixed writes x as %f (precision 6) or %.Nf; inf and nan are
// unsupported (Python writes them its own way).
func pyFixed(b *strings.Builder, x float64, prec int) error {
	if prec < 0 {
		prec = 6
	}
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return errUnsupported("format of inf or nan")
	}
	b.WriteString(strconv.FormatFloat(x, 'f', prec, 64))
	return nil
}

// unsupportedError marks a template feature this package does not
// reproduce exactly; the count is then reported as not exact.
type unsupportedError struct{ what string }

func (e *unsupportedError) Error() string { return "unsupported template feature: " + e.what }

func errUnsupported(what string) error { return &unsupportedError{what} }

func isUnsupported(err error) bool {
	var u *unsupportedError
	return errors.As(err, &u)
}

// pyStrftime formats t as Python's datetime.strftime with glibc's
// directives (naive datetime: %Z and %z are empty). Unknown directives are
// copied through, as glibc does.
func pyStrftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if !noPad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch format[i] {
		case 'Y':
			num(t.Year(), 4)
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if noPad {
				num(t.Day(), 1)
			} else {
				fmt.Fprintf(&b, "%2d", t.Day())
			}
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			num(int(t.Weekday()), 1)
		case 'Z', 'z':
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
