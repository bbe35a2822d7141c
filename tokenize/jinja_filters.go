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

// filterCall is one filter application: the filtered value, the call as
// written and its evaluated arguments.
type filterCall struct {
	name     string
	v        value
	c        *callExpr
	args, kw []value
}

// arg returns the argument at pos or given as keyword name.
func (fc *filterCall) arg(pos int, name string) (value, bool) {
	return filterArg(fc.c, fc.args, fc.kw, pos, name)
}

// filterFn implements one filter.
type filterFn func(r *renderer, fc filterCall) (value, error)

// filterFuncs are the filters the evaluator implements (filterArgs in
// jinja_parse.go lists their parameters, checked at compile time).
var filterFuncs map[string]filterFn

func init() {
	filterFuncs = map[string]filterFn{
		"safe": filterSafe, "tojson": filterToJSON, "string": filterString, "trim": filterTrim,
		"join": filterJoin, "list": filterList, "format": filterFormat,
		"length": filterLen, "count": filterLen, "default": filterDefault, "d": filterDefault,
		"upper": filterCase, "lower": filterCase, "replace": filterReplace,
		"min": filterMinMax, "max": filterMinMax, "capitalize": filterCapitalize,
		"first": filterFirstLast, "last": filterFirstLast, "items": filterItems, "map": filterMap,
		"select": filterSelect, "reject": filterSelect, "selectattr": filterSelect, "rejectattr": filterSelect,
		"abs": filterAbs, "round": filterRound, "sort": filterSort, "reverse": filterReverse,
	}
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
	if isMarkup(v) && !markupFilters[n.name] {
		return undef, errMarkup("filter " + n.name)
	}
	f, ok := filterFuncs[n.name]
	if !ok {
		return undef, errNotPython("filter " + n.name)
	}
	return f(r, filterCall{name: n.name, v: v, c: n.call, args: args, kw: kw})
}

// filterSafe is markupsafe.Markup(value): str(value), marked.
func filterSafe(_ *renderer, fc filterCall) (value, error) {
	s, err := pyStrV(fc.v)
	return markupV(s), err
}

func filterToJSON(r *renderer, fc filterCall) (value, error) {
	var b strings.Builder
	if err := r.tojsonArgs(&b, fc.v, fc.c, fc.args, fc.kw); err != nil {
		return undef, err
	}
	return strV(b.String()), nil
}

func filterString(_ *renderer, fc filterCall) (value, error) {
	if isMarkup(fc.v) {
		return fc.v, nil // soft_str keeps a str (Markup) as it is
	}
	s, err := pyStrV(fc.v)
	return strV(s), err
}

// filterTrim is str(value).strip(chars).
func filterTrim(_ *renderer, fc filterCall) (value, error) {
	s, err := pyStrV(fc.v)
	if err != nil {
		return undef, err
	}
	if chars, ok := fc.arg(0, "chars"); ok && chars.k != kNone && chars.k != kUndef {
		if chars.k != kStr {
			return undef, errPyRaises("TypeError: strip arg must be None or str")
		}
		return strV(strings.Trim(s, chars.s)), nil
	}
	return strV(strings.TrimFunc(s, pyIsSpace)), nil
}

// filterJoin is join(value, d=”, attribute=None) with str() of each item.
func filterJoin(_ *renderer, fc filterCall) (value, error) {
	sep := ""
	if d, ok := fc.arg(0, "d"); ok {
		var err error
		if sep, err = pyStrV(d); err != nil {
			return undef, err
		}
	}
	attr, hasAttr := fc.arg(1, "attribute")
	items, err := pyIterValues(fc.v)
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
}

// filterList is Python's list(value): a dict gives its keys.
func filterList(_ *renderer, fc filterCall) (value, error) {
	items, err := pyIterValues(fc.v)
	if err != nil {
		return undef, errUnsupported("list of a non-iterable value")
	}
	return value{k: kSeq, p: &seqVal{items: items}}, nil
}

func filterFormat(_ *renderer, fc filterCall) (value, error) {
	if len(fc.kw) > 0 {
		return undef, errUnsupported("format of a non-string or with keyword arguments")
	}
	return formatFilter(fc.v, fc.args)
}

func filterLen(_ *renderer, fc filterCall) (value, error) { return filterLength(fc.v) }

// filterDefault is default(value, default_value=”, boolean=False).
func filterDefault(_ *renderer, fc filterCall) (value, error) {
	def := emptyS
	if d, ok := fc.arg(0, "default_value"); ok {
		def = d
	}
	boolean, _ := fc.arg(1, "boolean")
	if fc.v.k == kUndef || boolean.truth() && !fc.v.truth() {
		return def, nil
	}
	return fc.v, nil
}

func filterCase(_ *renderer, fc filterCall) (value, error) {
	s, err := pyStrV(fc.v)
	if err != nil {
		return undef, err
	}
	return caseASCII(s, fc.name == "upper")
}

// filterReplace is str(s).replace(str(old), str(new), count), autoescape
// off.
func filterReplace(_ *renderer, fc filterCall) (value, error) {
	s, err := pyStrV(fc.v)
	if err != nil {
		return undef, err
	}
	old, _ := fc.arg(0, "old")
	nw, _ := fc.arg(1, "new")
	os, err := pyStrV(old)
	if err != nil {
		return undef, err
	}
	ns, err := pyStrV(nw)
	if err != nil {
		return undef, err
	}
	n := -1
	if cnt, ok := fc.arg(2, "count"); ok && cnt.k != kNone {
		if cnt.k != kInt {
			return undef, errNotPython("replace with a count that is not an int")
		}
		n = int(max(cnt.n, -1))
	}
	return strV(strings.Replace(s, os, ns, n)), nil
}

// filterMinMax is min and max over numbers only (jinja2 compares strings
// case-insensitively).
func filterMinMax(_ *renderer, fc filterCall) (value, error) {
	items, err := pyIterValues(fc.v)
	if err != nil {
		return undef, err
	}
	if len(items) == 0 {
		return undef, nil // jinja2: an Undefined, "No aggregated item"
	}
	best := items[0]
	for _, it := range items {
		if !it.isNumber() {
			return undef, errNotPython(fc.name + " over values that are not numbers")
		}
		bf, _ := best.num()
		f, _ := it.num()
		if fc.name == "min" && f < bf || fc.name == "max" && f > bf {
			best = it
		}
	}
	return best, nil
}

func filterCapitalize(_ *renderer, fc filterCall) (value, error) {
	s, err := pyStrV(fc.v)
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
}

func filterFirstLast(_ *renderer, fc filterCall) (value, error) {
	v := fc.v
	switch v.k {
	case kStr, kSeq, kMap, kUndef:
	default:
		return undef, errPyRaises("TypeError: object is not iterable")
	}
	if v.k == kSeq && v.p.(*seqVal).lazy && fc.name == "last" {
		return undef, errPyRaises("TypeError: generator is not reversible")
	}
	items, err := pyIterValues(v)
	if err != nil {
		return undef, err
	}
	if len(items) == 0 {
		return undef, nil
	}
	if fc.name == "first" {
		return items[0], nil
	}
	return items[len(items)-1], nil
}

func filterItems(_ *renderer, fc filterCall) (value, error) {
	v := fc.v
	switch v.k {
	case kUndef:
		return value{k: kSeq, p: &seqVal{items: []value{}, lazy: true, noRepr: "an iterator"}}, nil
	case kMap:
		items := make([]value, v.mapLen())
		for i := range items {
			items[i] = value{k: kSeq, p: &seqVal{items: []value{strV(v.mapKey(i)), v.mapVal(i)}, tuple: true}}
		}
		return value{k: kSeq, p: &seqVal{items: items, lazy: true, noRepr: "an iterator"}}, nil
	}
	return undef, errPyRaises("TypeError: items of a non-mapping")
}

// filterMap is map('filter', args...), the filter on every item, or
// map(attribute=...[, default=...]).
func filterMap(r *renderer, fc filterCall) (value, error) {
	items, err := pyIterValues(fc.v)
	if err != nil {
		return undef, err
	}
	out := make([]value, len(items))
	if len(fc.c.args) > 0 {
		for i, it := range items {
			x, err := r.evalFilter(&filterExpr{arg: &litExpr{it}, name: fc.args[0].s, call: &callExpr{args: fc.c.args[1:]}})
			if err != nil {
				return undef, err
			}
			out[i] = x
		}
		return value{k: kSeq, p: &seqVal{items: out, lazy: true, noRepr: "a generator"}}, nil
	}
	attr, _ := fc.arg(-1, "attribute")
	def, hasDef := fc.arg(-1, "default")
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
}

// filterSelect is select, reject, selectattr and rejectattr: a test (or
// truth) on every item, or on its attribute.
func filterSelect(_ *renderer, fc filterCall) (value, error) {
	items, err := pyIterValues(fc.v)
	if err != nil {
		return undef, err
	}
	rest := fc.args
	var attr value
	if fc.name == "selectattr" || fc.name == "rejectattr" {
		attr, rest = fc.args[0], fc.args[1:]
	}
	want := fc.name == "select" || fc.name == "selectattr"
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
	case kSeq:
		if v.p.(*seqVal).lazy {
			return undef, errPyRaises("TypeError: object of type 'generator' has no len()")
		}
		return intV(int64(v.seqLen())), nil
	case kMap:
		return intV(int64(v.mapLen())), nil
	case kUndef:
		return intV(0), nil
	case kLoop:
		return undef, errNotPython("length of loop")
	}
	return undef, errPyRaises("TypeError: object has no len()")
}
