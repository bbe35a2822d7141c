package tokenize

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// This file holds the Python semantics the template engine lacks: str() and
// repr() of values, float repr, json.dumps as transformers' tojson calls it,
// and strftime. They are installed as filters and globals (see
// template.go), never by changing the engine.

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

// pyStr is Python's str(v) as Jinja's {{ }} and |string print it.
// Undefined prints as "" (jinja2's default Undefined).
func pyStr(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return ""
	case v.IsString():
		return v.AsString()
	}
	var b strings.Builder
	pyRepr(&b, v)
	return b.String()
}

// pyRepr writes Python's repr(v).
func pyRepr(b *strings.Builder, v jinja.Value) {
	switch {
	case v.IsUndefined():
		// str() of an Undefined nested in a container is "" in jinja2.
	case v.IsNone():
		b.WriteString("None")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloatRepr(v.AsFloat()))
	case v.IsString():
		pyReprString(b, v.AsString())
	case v.IsList():
		b.WriteByte('[')
		for i, it := range v.AsList().Items {
			if i > 0 {
				b.WriteString(", ")
			}
			pyRepr(b, it)
		}
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		b.WriteByte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyReprString(b, k)
			b.WriteString(": ")
			pyRepr(b, d.Data[k])
		}
		b.WriteByte('}')
	case v.IsCallable():
		fmt.Fprintf(b, "<function %s>", v.AsCallable().Name)
	}
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

// pyTypeError is a TypeError Python raises where the engine would render.
type pyTypeError struct{ msg string }

func (e *pyTypeError) Error() string { return e.msg }

// pyJSONDumps is json.dumps(v, **opts) for template values.
func pyJSONDumps(b *strings.Builder, v jinja.Value, o *jsonOpts, level int) error {
	switch {
	case v.IsUndefined():
		return &pyTypeError{"Object of type Undefined is not JSON serializable"}
	case v.IsCallable():
		return &pyTypeError{"Object of type function is not JSON serializable"}
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case math.IsNaN(f):
			b.WriteString("NaN")
		case math.IsInf(f, 1):
			b.WriteString("Infinity")
		case math.IsInf(f, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(f))
		}
	case v.IsString():
		pyJSONString(b, v.AsString(), o.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newlineIndent(b, o, level+1)
			if err := pyJSONDumps(b, it, o, level+1); err != nil {
				return err
			}
		}
		newlineIndent(b, o, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if len(d.Keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newlineIndent(b, o, level+1)
			pyJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := pyJSONDumps(b, d.Data[k], o, level+1); err != nil {
				return err
			}
		}
		newlineIndent(b, o, level)
		b.WriteByte('}')
	}
	return nil
}

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

// filterToJSON is transformers' tojson:
//
//	json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
func filterToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), &pyTypeError{"tojson() missing 1 required positional argument: 'x'"}
	}
	get := func(pos int, name string) (jinja.Value, bool) {
		if v, ok := kwargs[name]; ok {
			return v, true
		}
		if pos < len(args) {
			return args[pos], true
		}
		return jinja.Undefined(), false
	}
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	if v, ok := get(1, "ensure_ascii"); ok {
		o.ensureASCII = v.IsTruthy()
	}
	if v, ok := get(2, "indent"); ok && !v.IsNone() && !v.IsUndefined() {
		var ind string
		switch {
		case v.IsString():
			ind = v.AsString()
		case v.IsInt():
			if n := v.AsInt(); n > 0 && n < 1<<10 {
				ind = strings.Repeat(" ", int(n))
			}
		default:
			return jinja.Undefined(), errUnsupported("tojson indent that is not an int or a string")
		}
		o.indent = &ind
		o.itemSep = ","
	}
	if v, ok := get(3, "separators"); ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), errUnsupported("tojson separators that are not two strings")
		}
		o.itemSep = v.AsList().Items[0].AsString()
		o.keySep = v.AsList().Items[1].AsString()
	}
	if v, ok := get(4, "sort_keys"); ok {
		o.sortKeys = v.IsTruthy()
	}
	var b strings.Builder
	if err := pyJSONDumps(&b, args[0], &o, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

// filterStr is {{ }} output and |string: Python's str().
func filterStr(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	if args[0].IsString() {
		return args[0], nil
	}
	return jinja.NewString(pyStr(args[0])), nil
}

// filterTrim is jinja2's trim: str(value).strip(chars).
func filterTrim(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	s := pyStr(args[0])
	chars, ok := kwargs["chars"]
	if !ok && len(args) > 1 {
		chars, ok = args[1], true
	}
	if ok && !chars.IsNone() && !chars.IsUndefined() {
		cs := pyStr(chars)
		return jinja.NewString(strings.Trim(s, cs)), nil
	}
	return jinja.NewString(strings.TrimFunc(s, pyIsSpace)), nil
}

// filterFormat is jinja2's format filter, Python's `value % args`, for the
// conversions whose output this package reproduces exactly: %s, %r, %d,
// %i, %f and %.Nf, and %%. Anything else (widths, flags, %x, %e, %(name)s,
// a count mismatch, which Python raises on) is unsupported: the request is
// forwarded uncounted.
func filterFormat(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() || len(kwargs) > 0 {
		return jinja.Undefined(), errUnsupported("format of a non-string or with keyword arguments")
	}
	vals := args[1:]
	out, err := pyPercent(args[0].AsString(), len(vals), func(b *strings.Builder, i int, conv byte, prec int) error {
		v := vals[i]
		switch {
		case conv == 's' && prec < 0:
			b.WriteString(pyStr(v))
		case conv == 'r' && prec < 0:
			pyRepr(b, v)
		case (conv == 'd' || conv == 'i') && prec < 0 && v.IsBool():
			b.WriteString(strconv.Itoa(boolInt(v.AsBool())))
		case (conv == 'd' || conv == 'i') && prec < 0 && v.IsInt():
			b.WriteString(strconv.FormatInt(v.AsInt(), 10))
		case conv == 'f' && v.IsFloat():
			return pyFixed(b, v.AsFloat(), prec)
		case conv == 'f' && v.IsInt():
			return pyFixed(b, float64(v.AsInt()), prec)
		default:
			return errUnsupported(fmt.Sprintf("format conversion %%%c", conv))
		}
		return nil
	})
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(out), nil
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

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pyIter is what iterating v yields in Python: a list's items, a string's
// characters, a dict's keys; an Undefined is empty (jinja2's Undefined
// iterates as nothing). ok is false for anything else.
func pyIter(v jinja.Value) (items []jinja.Value, ok bool) {
	switch {
	case v.IsList():
		return v.AsList().Items, true
	case v.IsString():
		for _, r := range v.AsString() {
			items = append(items, jinja.NewString(string(r)))
		}
		return items, true
	case v.IsDict():
		for _, k := range v.AsDict().Keys {
			items = append(items, jinja.NewString(k))
		}
		return items, true
	case v.IsUndefined():
		return nil, true
	}
	return nil, false
}

// filterList is jinja2's list filter, Python's list(value): a dict gives
// its keys (the engine's gives [dict]).
func filterList(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errUnsupported("list without a value")
	}
	items, ok := pyIter(args[0])
	if !ok {
		return jinja.Undefined(), errUnsupported("list of a non-iterable value")
	}
	return jinja.NewList(append([]jinja.Value(nil), items...)), nil
}

// filterJoin is jinja2's join(value, d=”, attribute=None) with str() of
// each item.
func filterJoin(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	sep := ""
	if v, ok := kwargs["d"]; ok {
		sep = pyStr(v)
	} else if len(args) > 1 {
		sep = pyStr(args[1])
	}
	attr, hasAttr := kwargs["attribute"]
	if !hasAttr && len(args) > 2 {
		attr, hasAttr = args[2], true
	}
	items, ok := pyIter(args[0])
	if !ok {
		return jinja.Undefined(), errUnsupported("join over a non-iterable value")
	}
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		if hasAttr && !attr.IsNone() {
			if !it.IsDict() || !attr.IsString() {
				return jinja.Undefined(), errUnsupported("join attribute on a non-mapping")
			}
			it, _ = it.AsDict().Get(attr.AsString())
		}
		b.WriteString(pyStr(it))
	}
	return jinja.NewString(b.String()), nil
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
