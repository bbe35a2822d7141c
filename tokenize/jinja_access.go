package tokenize

import (
	"strings"
	"unicode/utf8"
)

// Attribute and item access, as jinja2's sandboxed getattr and getitem.

var (
	strMethods  = setOf("capitalize casefold center count encode endswith expandtabs find format format_map index isalnum isalpha isascii isdecimal isdigit isidentifier islower isnumeric isprintable isspace istitle isupper join ljust lower lstrip maketrans partition removeprefix removesuffix replace rfind rindex rjust rpartition rsplit rstrip split splitlines startswith strip swapcase title translate upper zfill")
	listMethods = setOf("append clear copy count extend index insert pop remove reverse sort")
	dictMethods = setOf("clear copy fromkeys get items keys pop popitem setdefault update values")
	numAttrs    = setOf("real imag numerator denominator conjugate bit_length bit_count as_integer_ratio to_bytes from_bytes is_integer hex fromhex")
)

func setOf(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

func method(recv value, name string) value {
	return value{k: kFunc, p: &funcVal{name: name, recv: recv}}
}

// attrFlags records which types have a method or attribute of a name.
type attrFlags uint8

const (
	flDictMethod attrFlags = 1 << iota
	flStrMethod
	flListMethod
	flNumAttr
)

func flagsOf(name string) attrFlags {
	var f attrFlags
	if dictMethods[name] {
		f |= flDictMethod
	}
	if strMethods[name] {
		f |= flStrMethod
	}
	if listMethods[name] {
		f |= flListMethod
	}
	if numAttrs[name] {
		f |= flNumAttr
	}
	return f
}

func getAttr(o value, name string) (value, error) {
	switch o.k {
	case kMap:
		if dictMethods[name] {
			return method(o, name), nil
		}
		v, _ := o.mapGet(name)
		return v, nil
	case kStr:
		if strMethods[name] {
			return method(o, name), nil
		}
	case kSeq:
		if listMethods[name] {
			return method(o, name), nil
		}
	case kNS:
		v, _ := o.p.(*nsVal).get(name)
		return v, nil
	case kLoop:
		return loopAttr(o.p.(*loopState), name)
	case kUndef:
		return undef, errPyRaises("UndefinedError: attribute of an undefined value")
	case kNone, kBool, kInt, kFloat:
		if numAttrs[name] {
			return undef, errNotPython("a number's attribute")
		}
	case kFunc, kMacro:
		return undef, errNotPython("an attribute of a function")
	}
	return undef, nil
}

func loopAttr(l *loopState, name string) (value, error) {
	switch name {
	case "index":
		return intV(int64(l.i + 1)), nil
	case "index0":
		return intV(int64(l.i)), nil
	case "revindex":
		return intV(int64(l.n - l.i)), nil
	case "revindex0":
		return intV(int64(l.n - l.i - 1)), nil
	case "first":
		return boolV(l.i == 0), nil
	case "last":
		return boolV(l.i == l.n-1), nil
	case "length":
		return intV(int64(l.n)), nil
	case "depth":
		return intV(1), nil
	case "depth0":
		return intV(0), nil
	case "previtem":
		if l.i == 0 {
			return undef, nil
		}
		return l.at(l.i - 1), nil
	case "nextitem":
		if l.i+1 >= l.n {
			return undef, nil
		}
		return l.at(l.i + 1), nil
	}
	return undef, errNotPython("loop." + name)
}

func getItem(o, k value) (value, error) {
	switch o.k {
	case kMap:
		if k.k == kStr {
			if v, ok := o.mapGet(k.s); ok {
				return v, nil
			}
			if dictMethods[k.s] {
				return method(o, k.s), nil
			}
		}
		return undef, nil
	case kSeq:
		if k.k == kInt || k.k == kBool {
			if o.k == kSeq && o.p.(*seqVal).lazy {
				return undef, nil // a generator is not subscriptable
			}
			n := int64(o.seqLen())
			i := k.n
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return undef, nil
			}
			return o.seqAt(int(i)), nil
		}
		if k.k == kStr {
			return getAttr(o, k.s)
		}
		return undef, nil
	case kStr:
		if k.k == kInt || k.k == kBool {
			i := k.n
			if i < 0 {
				i += int64(utf8.RuneCountInString(o.s))
			}
			if i < 0 {
				return undef, nil
			}
			for _, c := range o.s {
				if i == 0 {
					return strV(string(c)), nil
				}
				i--
			}
			return undef, nil
		}
		if k.k == kStr {
			return getAttr(o, k.s)
		}
		return undef, nil
	case kUndef:
		return undef, errPyRaises("UndefinedError: item of an undefined value")
	case kNS, kLoop:
		if k.k == kStr {
			return getAttr(o, k.s)
		}
		return undef, nil
	case kFunc, kMacro:
		return undef, errNotPython("an item of a function")
	}
	return undef, nil
}

func (r *renderer) evalSlice(n *sliceExpr) (value, error) {
	o, err := r.eval(n.obj)
	if err != nil {
		return undef, err
	}
	if isMarkup(o) {
		return undef, errMarkup("a slice")
	}
	var b [3]value
	for i, x := range []expr{n.lo, n.hi, n.step} {
		b[i] = noneV
		if x != nil {
			if b[i], err = r.eval(x); err != nil {
				return undef, err
			}
		}
	}
	for _, x := range b {
		if x.k != kNone && x.k != kInt && x.k != kBool {
			if o.k == kUndef {
				return undef, errPyRaises("UndefinedError: slice of an undefined value")
			}
			return undef, nil // TypeError, which jinja2's getitem turns into Undefined
		}
	}
	step := int64(1)
	if b[2].k != kNone {
		step = b[2].n
	}
	if step == 0 {
		return undef, errPyRaises("ValueError: slice step cannot be zero")
	}
	var n0 int
	var chars []value
	switch o.k {
	case kSeq:
		if o.k == kSeq && o.p.(*seqVal).lazy {
			return undef, nil
		}
		n0 = o.seqLen()
	case kStr:
		if isASCIIStr(o.s) {
			n0 = len(o.s)
		} else {
			for _, c := range o.s {
				chars = append(chars, strV(string(c)))
			}
			n0 = len(chars)
		}
	case kUndef:
		return undef, errPyRaises("UndefinedError: slice of an undefined value")
	default:
		return undef, nil
	}
	start, stop := sliceIndices(b[0], b[1], step, int64(n0))
	if o.k == kStr {
		if chars == nil && step == 1 {
			if start >= stop {
				return emptyS, nil
			}
			return strV(o.s[start:stop]), nil
		}
		var sb strings.Builder
		for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
			if chars == nil {
				sb.WriteByte(o.s[i])
			} else {
				sb.WriteString(chars[i].s)
			}
		}
		return strV(sb.String()), nil
	}
	var items []value
	if o.k == kSeq && step == 1 && start < stop {
		// A list is never modified in place: the slice shares its items.
		sv := o.p.(*seqVal)
		return value{k: kSeq, p: &seqVal{items: sv.items[start:stop:stop], tuple: sv.tuple}}, nil
	}
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		items = append(items, o.seqAt(int(i)))
	}
	if items == nil {
		items = []value{}
	}
	return value{k: kSeq, p: &seqVal{items: items, tuple: o.k == kSeq && o.p.(*seqVal).tuple}}, nil
}

// sliceIndices is Python's slice.indices(n) (for step != 0).
func sliceIndices(lo, hi value, step, n int64) (int64, int64) {
	clamp := func(v value, def int64) int64 {
		if v.k == kNone {
			return def
		}
		i := v.n
		if i < 0 {
			i += n
			if i < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		} else if i >= n {
			if step < 0 {
				return n - 1
			}
			return n
		}
		return i
	}
	if step > 0 {
		return clamp(lo, 0), clamp(hi, n)
	}
	return clamp(lo, n-1), clamp(hi, -1)
}

func isASCIIStr(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
