package tokenize

import (
	"slices"
	"strconv"
	"strings"
)

// The str and dict methods templates call (s.strip(), d.get(k), ...),
// with Python's semantics, as the sandbox allows them.

// strArg returns a method argument that must be a str (or None when
// noneOK).
func strArg(v value, noneOK bool) (string, bool, error) {
	switch {
	case v.k == kStr:
		return v.s, true, nil
	case v.k == kNone && noneOK:
		return "", false, nil
	}
	return "", false, errPyRaises("TypeError: a str method argument must be str")
}

// strMethod calls the str method name on s.
func strMethod(s, name string, args []value, kwNames []string, kw []value) (value, error) {
	m, ok := strMethodFuncs[name]
	if !ok {
		return undef, errNotPython("str." + name)
	}
	return m(strCall{s: s, name: name, args: args, kwNames: kwNames, kw: kw})
}

// strCall is one str method call: the receiver and the arguments.
type strCall struct {
	s, name string
	args    []value
	kwNames []string
	kw      []value
}

// strMethodFuncs are the str methods the evaluator implements.
var strMethodFuncs = map[string]func(c strCall) (value, error){
	"strip": strStrip, "lstrip": strStrip, "rstrip": strStrip,
	"split": strSplit, "startswith": strStartsEnds, "endswith": strStartsEnds,
	"replace": strReplace, "upper": strCase, "lower": strCase, "title": strTitle,
	"format": func(c strCall) (value, error) { return strFormat(c.s, c.args, c.kwNames, c.kw) },
}

// strStrip is str.strip, lstrip and rstrip, on whitespace or on chars.
func strStrip(c strCall) (value, error) {
	s, name, args := c.s, c.name, c.args
	if len(c.kw) > 0 || len(args) > 1 {
		return undef, errPyRaises("TypeError: strip arguments")
	}
	chars, has := "", false
	if len(args) == 1 {
		var err error
		if chars, has, err = strArg(args[0], true); err != nil {
			return undef, err
		}
	}
	switch {
	case has && name == "strip":
		return strV(strings.Trim(s, chars)), nil
	case has && name == "lstrip":
		return strV(strings.TrimLeft(s, chars)), nil
	case has:
		return strV(strings.TrimRight(s, chars)), nil
	case name == "strip":
		return strV(strings.TrimFunc(s, pyIsSpace)), nil
	case name == "lstrip":
		return strV(strings.TrimLeftFunc(s, pyIsSpace)), nil
	}
	return strV(strings.TrimRightFunc(s, pyIsSpace)), nil
}

// strSplit is str.split(sep=None, maxsplit=-1).
func strSplit(c strCall) (value, error) {
	s, args := c.s, c.args
	sep, maxsplit := noneV, intV(-1)
	if len(args) > 2 {
		return undef, errPyRaises("TypeError: split arguments")
	}
	if len(args) > 0 {
		sep = args[0]
	}
	if len(args) > 1 {
		maxsplit = args[1]
	}
	for i, k := range c.kwNames {
		switch k {
		case "sep":
			sep = c.kw[i]
		case "maxsplit":
			maxsplit = c.kw[i]
		default:
			return undef, errPyRaises("TypeError: split keyword")
		}
	}
	if maxsplit.k != kInt && maxsplit.k != kBool {
		return undef, errPyRaises("TypeError: maxsplit")
	}
	var parts []string
	switch sep.k {
	case kNone:
		if maxsplit.n >= 0 {
			return undef, errUnsupported("split() on whitespace with maxsplit")
		}
		parts = strings.FieldsFunc(s, pyIsSpace)
	case kStr:
		if sep.s == "" {
			return undef, errPyRaises("ValueError: empty separator")
		}
		n := -1
		if maxsplit.n >= 0 {
			n = int(min(maxsplit.n, int64(len(s)))) + 1
		}
		parts = strings.SplitN(s, sep.s, n)
	default:
		return undef, errPyRaises("TypeError: split separator")
	}
	items := make([]value, len(parts))
	for i, p := range parts {
		items[i] = strV(p)
	}
	return value{k: kSeq, p: &seqVal{items: items}}, nil
}

// strStartsEnds is str.startswith and endswith, of a str or a tuple of
// them.
func strStartsEnds(c strCall) (value, error) {
	s, name, args := c.s, c.name, c.args
	if len(c.kw) > 0 || len(args) != 1 {
		return undef, errUnsupported("str." + name + " with start or end")
	}
	var prefixes []string
	switch a := args[0]; {
	case a.k == kStr:
		prefixes = []string{a.s}
	case a.k == kSeq && a.p.(*seqVal).tuple:
		for _, it := range a.p.(*seqVal).items {
			if it.k != kStr {
				return undef, errPyRaises("TypeError: " + name + " tuple of non-str")
			}
			prefixes = append(prefixes, it.s)
		}
	default:
		return undef, errPyRaises("TypeError: " + name + " argument")
	}
	for _, p := range prefixes {
		if name == "startswith" && strings.HasPrefix(s, p) || name == "endswith" && strings.HasSuffix(s, p) {
			return trueV, nil
		}
	}
	return falseV, nil
}

// strReplace is str.replace(old, new, count=-1).
func strReplace(c strCall) (value, error) {
	s, args := c.s, c.args
	if len(args) < 2 || len(args) > 3 || len(c.kw) > 0 {
		return undef, errPyRaises("TypeError: replace arguments")
	}
	if args[0].k != kStr || args[1].k != kStr {
		return undef, errPyRaises("TypeError: replace arguments must be str")
	}
	n := -1
	if len(args) == 3 {
		if args[2].k != kInt && args[2].k != kBool {
			return undef, errPyRaises("TypeError: replace count")
		}
		n = int(max(min(args[2].n, int64(len(s))+1), -1))
	}
	return strV(strings.Replace(s, args[0].s, args[1].s, n)), nil
}

func strCase(c strCall) (value, error) {
	if len(c.args)+len(c.kw) > 0 {
		return undef, errPyRaises("TypeError: " + c.name + " takes no arguments")
	}
	return caseASCII(c.s, c.name == "upper")
}

func strTitle(c strCall) (value, error) {
	if len(c.args)+len(c.kw) > 0 {
		return undef, errPyRaises("TypeError: title takes no arguments")
	}
	return titleASCII(c.s)
}

// strFormat is str.format for replacement fields {}, {0} and {name}, with
// no conversion and a format spec of "", "d" (an int) or "s" (a str);
// anything else is declined.
func strFormat(s string, args []value, kwNames []string, kw []value) (value, error) {
	var b strings.Builder
	auto, manual := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return undef, errPyRaises("ValueError: Single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i+1:], '}')
		if end < 0 {
			return undef, errPyRaises("ValueError: expected '}' before end of string")
		}
		field := s[i+1 : i+1+end]
		i += 1 + end
		name, spec, _ := strings.Cut(field, ":")
		if strings.ContainsAny(field, "{!.[") {
			return undef, errNotPython("str.format field " + strconv.Quote(field))
		}
		var v value
		switch {
		case name == "" || isDigits(name):
			n := auto
			if name == "" {
				if manual {
					return undef, errPyRaises("ValueError: cannot switch from manual field specification to automatic field numbering")
				}
				auto++
			} else {
				if auto > 0 {
					return undef, errPyRaises("ValueError: cannot switch from automatic field numbering to manual field specification")
				}
				manual = true
				var err error
				if n, err = strconv.Atoi(name); err != nil {
					return undef, errUnsupported("str.format index")
				}
			}
			if n >= len(args) {
				return undef, errPyRaises("IndexError: Replacement index out of range")
			}
			v = args[n]
		default:
			j := slices.Index(kwNames, name)
			if j < 0 {
				return undef, errPyRaises("KeyError: " + name)
			}
			v = kw[j]
		}
		switch {
		case spec == "":
			if err := writeStr(&b, v); err != nil {
				return undef, err
			}
		case spec == "d" && (v.k == kInt || v.k == kBool):
			b.WriteString(strconv.FormatInt(v.n, 10))
		case spec == "s" && v.k == kStr:
			b.WriteString(v.s)
		default:
			return undef, errNotPython("str.format spec " + strconv.Quote(spec))
		}
	}
	return strV(b.String()), nil
}

// titleASCII is Python's str.title on ASCII text: a letter after a
// letter is lowered, any other letter raised (digits, apostrophes and
// underscores end a word: "3rd" is "3Rd", "it's" is "It'S").
func titleASCII(s string) (value, error) {
	if !isASCIIStr(s) {
		return undef, errUnsupported("title of non-ASCII text")
	}
	b := []byte(s)
	prevLetter := false
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			if !prevLetter {
				b[i] = c - 'a' + 'A'
			}
			prevLetter = true
		case 'A' <= c && c <= 'Z':
			if prevLetter {
				b[i] = c - 'A' + 'a'
			}
			prevLetter = true
		default:
			prevLetter = false
		}
	}
	return strV(string(b)), nil
}

func caseASCII(s string, upper bool) (value, error) {
	if !isASCIIStr(s) {
		return undef, errUnsupported("upper or lower of non-ASCII text")
	}
	if upper {
		return strV(strings.ToUpper(s)), nil
	}
	return strV(strings.ToLower(s)), nil
}

func dictMethod(o value, name string, args, kw []value) (value, error) {
	switch name {
	case "update", "pop", "popitem", "setdefault", "clear":
		return undef, errPyRaises("SecurityError: access to attribute '" + name + "' of 'dict' object is unsafe.")
	}
	if len(kw) > 0 {
		return undef, errPyRaises("TypeError: dict." + name + " takes no keyword arguments")
	}
	switch name {
	case "get":
		if len(args) == 0 || len(args) > 2 {
			return undef, errPyRaises("TypeError: get arguments")
		}
		if args[0].k == kStr {
			if v, ok := o.mapGet(args[0].s); ok {
				return v, nil
			}
		} else if k := args[0].k; k == kSeq || k == kMap {
			return undef, errPyRaises("TypeError: unhashable type")
		}
		if len(args) == 2 {
			return args[1], nil
		}
		return noneV, nil
	case "items", "keys", "values":
		if len(args) > 0 {
			return undef, errPyRaises("TypeError: " + name + " takes no arguments")
		}
		items := make([]value, o.mapLen())
		for i := range items {
			switch name {
			case "items":
				items[i] = value{k: kSeq, p: &seqVal{items: []value{strV(o.mapKey(i)), o.mapVal(i)}, tuple: true}}
			case "keys":
				items[i] = strV(o.mapKey(i))
			default:
				items[i] = o.mapVal(i)
			}
		}
		return value{k: kSeq, p: &seqVal{items: items, noRepr: "dict." + name + "()"}}, nil
	}
	return undef, errNotPython("dict." + name)
}
