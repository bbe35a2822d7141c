package tokenize

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The owned evaluator's tests and filters, with Python jinja2's
// semantics (jinja2/tests.py, jinja2/filters.py, and transformers'
// tojson).

// Tests, as jinja2's tests.py.

func applyTest(name string, v value, args []value) (bool, error) {
	switch name {
	case "defined":
		return v.k != kUndef, nil
	case "undefined":
		return v.k == kUndef, nil
	case "none":
		return v.k == kNone, nil
	case "string":
		return v.k == kStr, nil
	case "number":
		return v.isNumber(), nil
	case "integer":
		return v.k == kInt, nil
	case "float":
		return v.k == kFloat, nil
	case "boolean":
		return v.k == kBool, nil
	case "mapping":
		return v.isMap(), nil
	case "iterable":
		switch v.k {
		case kStr, kList, kSeq, kDict, kMap, kUndef, kLoop:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.k {
		case kStr, kList, kDict, kMap, kUndef:
			return true, nil
		case kSeq:
			sv := v.p.(*seqVal)
			return !sv.lazy && (sv.noRepr == "" || sv.noRepr == "a range"), nil
		case kLoop:
			return false, nil
		}
		return false, nil
	case "callable":
		switch v.k {
		case kFunc, kMacro, kUndef, kLoop:
			return true, nil
		}
		return false, nil
	case "true":
		return v.k == kBool && v.n != 0, nil
	case "false":
		return v.k == kBool && v.n == 0, nil
	case "odd", "even", "divisibleby":
		d := intV(2)
		if name == "divisibleby" {
			d = args[0]
		}
		if (v.k != kInt && v.k != kBool) || (d.k != kInt && d.k != kBool) {
			if v.k == kUndef {
				return false, errPyRaises("UndefinedError in a test")
			}
			return false, errUnsupported("test " + name + " of a non-integer")
		}
		m, err := arith("%", v, d)
		if err != nil {
			return false, err
		}
		switch name {
		case "odd":
			return m.n == 1, nil
		case "even":
			return m.n == 0, nil
		}
		return m.n == 0, nil
	case "eq", "equalto", "==":
		return pyEq(v, args[0]), nil
	case "ne", "!=":
		return !pyEq(v, args[0]), nil
	case "lt", "lessthan", "<":
		return compare("<", v, args[0])
	case "le", "<=":
		return compare("<=", v, args[0])
	case "gt", "greaterthan", ">":
		return compare(">", v, args[0])
	case "ge", ">=":
		return compare(">=", v, args[0])
	case "in":
		return pyIn(v, args[0])
	}
	return false, errNotPython("test " + name)
}

// Filters.

// filterArg returns a filter's argument by position or keyword.
func filterArg(c *callExpr, args, kw []value, pos int, name string) (value, bool) {
	for i, k := range c.kwNames {
		if k == name {
			return kw[i], true
		}
	}
	if pos >= 0 && pos < len(args) {
		return args[pos], true
	}
	return undef, false
}

// pyIterValues is what iterating v yields in Python.
func pyIterValues(v value) ([]value, error) {
	ls, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]value, ls.n)
	for i := range out {
		out[i] = ls.at(i)
	}
	return out, nil
}

// markupFilters are the filters that treat a Markup value as the plain
// str it is (their result is not Markup, or is the value itself).
var markupFilters = map[string]bool{
	"tojson": true, "join": true, "list": true, "length": true, "count": true,
	"default": true, "d": true, "first": true, "last": true, "safe": true, "string": true,
}

func (r *renderer) evalFilter(n *filterExpr) (value, error) {
	v, err := r.ev(n.arg)
	if err != nil {
		return undef, err
	}
	mark := len(r.args)
	defer func() { r.args = r.args[:mark] }()
	args, _, kw, err := r.evalArgs(n.call)
	if err != nil {
		return undef, err
	}
	c := n.call
	if isMarkup(v) && !markupFilters[n.name] {
		return undef, errMarkup("filter " + n.name)
	}
	switch n.name {
	case "safe":
		// markupsafe.Markup(value): str(value), marked.
		s, err := pyStrV(v)
		return markupV(s), err
	case "tojson":
		var b strings.Builder
		if err := r.tojsonArgs(&b, v, c, args, kw); err != nil {
			return undef, err
		}
		return strV(b.String()), nil
	case "string":
		if isMarkup(v) {
			return v, nil // soft_str keeps a str (Markup) as it is
		}
		s, err := pyStrV(v)
		return strV(s), err
	case "trim":
		s, err := pyStrV(v)
		if err != nil {
			return undef, err
		}
		if chars, ok := filterArg(c, args, kw, 0, "chars"); ok && chars.k != kNone && chars.k != kUndef {
			if chars.k != kStr {
				return undef, errPyRaises("TypeError: strip arg must be None or str")
			}
			return strV(strings.Trim(s, chars.s)), nil
		}
		return strV(strings.TrimFunc(s, pyIsSpace)), nil
	case "join":
		sep := ""
		if d, ok := filterArg(c, args, kw, 0, "d"); ok {
			if sep, err = pyStrV(d); err != nil {
				return undef, err
			}
		}
		attr, hasAttr := filterArg(c, args, kw, 1, "attribute")
		items, err := pyIterValues(v)
		if err != nil {
			return undef, errUnsupported("join over a non-iterable value")
		}
		var b strings.Builder
		for i, it := range items {
			if i > 0 {
				b.WriteString(sep)
			}
			if hasAttr && attr.k != kNone {
				if !it.isMap() || attr.k != kStr {
					return undef, errUnsupported("join attribute on a non-mapping")
				}
				if strings.IndexByte(attr.s, '.') >= 0 || isDigits(attr.s) {
					return undef, errNotPython("join with a dotted attribute")
				}
				it, _ = it.mapGet(attr.s)
			}
			if err := writeStr(&b, it); err != nil {
				return undef, err
			}
		}
		return strV(b.String()), nil
	case "list":
		items, err := pyIterValues(v)
		if err != nil {
			return undef, errUnsupported("list of a non-iterable value")
		}
		return value{k: kSeq, p: &seqVal{items: items}}, nil
	case "format":
		return formatFilter(v, args)
	case "length", "count":
		return filterLength(v)
	case "default", "d":
		def := emptyS
		if d, ok := filterArg(c, args, kw, 0, "default_value"); ok {
			def = d
		}
		boolean, _ := filterArg(c, args, kw, 1, "boolean")
		if v.k == kUndef || boolean.truth() && !v.truth() {
			return def, nil
		}
		return v, nil
	case "upper", "lower":
		s, err := pyStrV(v)
		if err != nil {
			return undef, err
		}
		return caseASCII(s, n.name == "upper")
	case "replace":
		// str(s).replace(str(old), str(new), count), autoescape off.
		s, err := pyStrV(v)
		if err != nil {
			return undef, err
		}
		old, _ := filterArg(c, args, kw, 0, "old")
		nw, _ := filterArg(c, args, kw, 1, "new")
		os, err := pyStrV(old)
		if err != nil {
			return undef, err
		}
		ns, err := pyStrV(nw)
		if err != nil {
			return undef, err
		}
		n := -1
		if cnt, ok := filterArg(c, args, kw, 2, "count"); ok && cnt.k != kNone {
			if cnt.k != kInt {
				return undef, errNotPython("replace with a count that is not an int")
			}
			n = int(max(cnt.n, -1))
		}
		return strV(strings.Replace(s, os, ns, n)), nil
	case "min", "max":
		// Numbers only: jinja2 compares strings case-insensitively.
		items, err := pyIterValues(v)
		if err != nil {
			return undef, err
		}
		if len(items) == 0 {
			return undef, nil // jinja2: an Undefined, "No aggregated item"
		}
		best := items[0]
		for _, it := range items {
			if !it.isNumber() {
				return undef, errNotPython(n.name + " over values that are not numbers")
			}
			bf, _ := best.num()
			f, _ := it.num()
			if n.name == "min" && f < bf || n.name == "max" && f > bf {
				best = it
			}
		}
		return best, nil
	case "capitalize":
		s, err := pyStrV(v)
		if err != nil {
			return undef, err
		}
		if !isASCIIStr(s) {
			return undef, errUnsupported("capitalize of non-ASCII text")
		}
		if s == "" {
			return strV(s), nil
		}
		return strV(strings.ToUpper(s[:1]) + strings.ToLower(s[1:])), nil
	case "first", "last":
		switch v.k {
		case kStr, kList, kSeq, kDict, kMap, kUndef:
		default:
			return undef, errPyRaises("TypeError: object is not iterable")
		}
		if v.k == kSeq && v.p.(*seqVal).lazy && n.name == "last" {
			return undef, errPyRaises("TypeError: generator is not reversible")
		}
		items, err := pyIterValues(v)
		if err != nil {
			return undef, err
		}
		if len(items) == 0 {
			return undef, nil
		}
		if n.name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "items":
		switch v.k {
		case kUndef:
			return value{k: kSeq, p: &seqVal{items: []value{}, lazy: true, noRepr: "an iterator"}}, nil
		case kDict, kMap:
			items := make([]value, v.mapLen())
			for i := range items {
				items[i] = value{k: kSeq, p: &seqVal{items: []value{strV(v.mapKey(i)), v.mapVal(i)}, tuple: true}}
			}
			return value{k: kSeq, p: &seqVal{items: items, lazy: true, noRepr: "an iterator"}}, nil
		}
		return undef, errPyRaises("TypeError: items of a non-mapping")
	case "map":
		if len(c.args) > 0 {
			// map('filter', args...): the filter on every item.
			items, err := pyIterValues(v)
			if err != nil {
				return undef, err
			}
			out := make([]value, len(items))
			for i, it := range items {
				x, err := r.evalFilter(&filterExpr{arg: &litExpr{it}, name: args[0].s, call: &callExpr{args: c.args[1:]}})
				if err != nil {
					return undef, err
				}
				out[i] = x
			}
			return value{k: kSeq, p: &seqVal{items: out, lazy: true, noRepr: "a generator"}}, nil
		}
		attr, _ := filterArg(c, args, kw, -1, "attribute")
		def, hasDef := filterArg(c, args, kw, -1, "default")
		items, err := pyIterValues(v)
		if err != nil {
			return undef, err
		}
		out := make([]value, len(items))
		for i, it := range items {
			x, err := attrPath(it, attr)
			if err != nil {
				return undef, err
			}
			if x.k == kUndef && hasDef {
				x = def
			}
			out[i] = x
		}
		return value{k: kSeq, p: &seqVal{items: out, lazy: true, noRepr: "a generator"}}, nil
	case "select", "reject", "selectattr", "rejectattr":
		items, err := pyIterValues(v)
		if err != nil {
			return undef, err
		}
		rest := args
		var attr value
		if n.name == "selectattr" || n.name == "rejectattr" {
			attr, rest = args[0], args[1:]
		}
		want := n.name == "select" || n.name == "selectattr"
		var out []value
		for _, it := range items {
			x := it
			if attr.k != kUndef {
				if x, err = attrPath(it, attr); err != nil {
					return undef, err
				}
			}
			var ok bool
			if len(rest) == 0 {
				ok = x.truth()
			} else if ok, err = applyTest(rest[0].s, x, rest[1:]); err != nil {
				return undef, err
			}
			if ok == want {
				out = append(out, it)
			}
		}
		return value{k: kSeq, p: &seqVal{items: out, lazy: true, noRepr: "a generator"}}, nil
	}
	return undef, errNotPython("filter " + n.name)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// attrPath is jinja2's make_attrgetter: the attribute's dotted parts
// looked up with getitem, digit parts as integers.
func attrPath(it, attr value) (value, error) {
	if attr.k != kStr {
		return undef, errNotPython("an attribute that is not a string")
	}
	x := it
	for _, part := range strings.Split(attr.s, ".") {
		k := strV(part)
		if isDigits(part) {
			n, err := strconv.ParseInt(part, 10, 64)
			if err != nil {
				return undef, errUnsupported("attribute index")
			}
			k = intV(n)
		}
		if x.isMap() && k.k == kStr {
			if _, ok := x.mapGet(part); !ok && dictMethods[part] {
				return undef, errNotPython("an attribute naming a dict method")
			}
		}
		var err error
		if x, err = getItem(x, k); err != nil {
			return undef, err
		}
		if x.k == kFunc {
			return undef, errNotPython("an attribute naming a method")
		}
	}
	return x, nil
}

func (r *renderer) tojson(b *strings.Builder, v value, c *callExpr) error {
	mark := len(r.args)
	defer func() { r.args = r.args[:mark] }()
	args, _, kw, err := r.evalArgs(c)
	if err != nil {
		return err
	}
	return r.tojsonArgs(b, v, c, args, kw)
}

// tojsonArgs is transformers' tojson, as filterToJSON.
func (r *renderer) tojsonArgs(b *strings.Builder, v value, c *callExpr, args, kw []value) error {
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	if a, ok := filterArg(c, args, kw, 0, "ensure_ascii"); ok {
		o.ensureASCII = a.truth()
	}
	if a, ok := filterArg(c, args, kw, 1, "indent"); ok && a.k != kNone && a.k != kUndef {
		var ind string
		switch a.k {
		case kStr:
			ind = a.s
		case kInt:
			if a.n > 0 && a.n < 1<<10 {
				ind = strings.Repeat(" ", int(a.n))
			}
		default:
			return errUnsupported("tojson indent that is not an int or a string")
		}
		o.indent = &ind
		o.itemSep = ","
	}
	if a, ok := filterArg(c, args, kw, 2, "separators"); ok && a.k != kNone && a.k != kUndef {
		if !a.isSeq() || a.seqLen() != 2 || a.seqAt(0).k != kStr || a.seqAt(1).k != kStr {
			return errUnsupported("tojson separators that are not two strings")
		}
		o.itemSep, o.keySep = a.seqAt(0).s, a.seqAt(1).s
	}
	if a, ok := filterArg(c, args, kw, 3, "sort_keys"); ok {
		o.sortKeys = a.truth()
	}
	if v.k == kSeq && v.p.(*seqVal).noRepr != "" {
		return errPyRaises("TypeError: not JSON serializable")
	}
	return jsonDumps(b, v, &o, 0)
}

// formatFilter is filterFormat for the owned values.
func formatFilter(fv value, vals []value) (value, error) {
	if fv.k != kStr {
		return undef, errUnsupported("format of a non-string or with keyword arguments")
	}
	out, err := pyPercent(fv.s, len(vals), func(b *strings.Builder, i int, conv byte, prec int) error {
		v := vals[i]
		switch {
		case conv == 's' && prec < 0:
			return writeStr(b, v)
		case conv == 'r' && prec < 0:
			if v.k == kUndef {
				return errNotPython("%r of an undefined value")
			}
			return writeRepr(b, v)
		case (conv == 'd' || conv == 'i') && prec < 0 && (v.k == kBool || v.k == kInt):
			b.WriteString(strconv.FormatInt(v.n, 10))
			return nil
		case conv == 'f' && (v.k == kInt || v.k == kFloat):
			x, _ := v.num()
			return pyFixed(b, x, prec)
		}
		return errUnsupported(fmt.Sprintf("format conversion %%%c", conv))
	})
	if err != nil {
		return undef, err
	}
	return strV(out), nil
}

// filterLength is the length filter.
func filterLength(v value) (value, error) {
	switch v.k {
	case kStr:
		return intV(int64(utf8.RuneCountInString(v.s))), nil
	case kList:
		return intV(int64(v.seqLen())), nil
	case kSeq:
		if v.p.(*seqVal).lazy {
			return undef, errPyRaises("TypeError: object of type 'generator' has no len()")
		}
		return intV(int64(v.seqLen())), nil
	case kDict, kMap:
		return intV(int64(v.mapLen())), nil
	case kUndef:
		return intV(0), nil
	case kLoop:
		return undef, errNotPython("length of loop")
	}
	return undef, errPyRaises("TypeError: object has no len()")
}
