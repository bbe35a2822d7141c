package tokenize

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// The evaluator's values. A value is a small struct, not an interface:
// strings and numbers never allocate. Containers are seqVal (lists,
// tuples) and mapVal (dicts, ordered): the request's data, built by
// count_chat.go, and what the template builds itself.

// Value is a template variable's value for [Template.Render]: the
// evaluator's own (no field is exported). Build one with [ParseValue].
type Value = value

// ParseValue converts JSON text to a Value: objects are dicts in their
// key order, numbers ints where integral. An integer beyond 64 bits is an
// error (Python keeps it exact; this package does not).
func ParseValue(js []byte) (Value, error) {
	v, err := ojson.Parse(js, ojson.DefaultMaxDepth)
	if err != nil {
		return undef, fmt.Errorf("tokenize: template value: %w", err)
	}
	var st convState
	out := st.value(v)
	if st.reason != "" {
		return undef, fmt.Errorf("tokenize: template value: %s", st.reason)
	}
	return out, nil
}

type vkind uint8

const (
	kUndef vkind = iota
	kNone
	kBool
	kInt
	kFloat
	kStr
	kSeq   // p: *seqVal (a list or tuple)
	kMap   // p: *mapVal (a dict)
	kNS    // p: *nsVal
	kLoop  // p: *loopState
	kFunc  // p: *funcVal
	kMacro // p: *macroDef
)

type value struct {
	k vkind
	n int64 // bool (0/1), int, float bits
	s string
	p any
}

type seqVal struct {
	items []value
	tuple bool
	// noRepr names what Python has here instead of a list (a range, a
	// dict view, a generator): printing it is not reproduced.
	noRepr string
	// lazy: a generator or iterator, which Python iterates once; used
	// records that it was.
	lazy, used bool
}

// fields are ordered key/value pairs found by a linear scan (a handful
// of keys): a dict's items, a namespace's attributes, a request's
// variables.
type fields struct {
	keys []string
	vals []value
}

func (f *fields) get(k string) (value, bool) {
	for i, key := range f.keys {
		if key == k {
			return f.vals[i], true
		}
	}
	return undef, false
}

func (f *fields) set(k string, v value) {
	for i, key := range f.keys {
		if key == k {
			f.vals[i] = v
			return
		}
	}
	f.keys = append(f.keys, k)
	f.vals = append(f.vals, v)
}

type mapVal struct{ fields }

// nsVal is jinja2's namespace(): attributes in assignment order.
type nsVal struct{ fields }

// funcVal is a callable that is not a macro: a global function or a
// method bound to its receiver.
type funcVal struct {
	name string
	recv value // bound methods
}

var (
	undef   = value{}
	noneV   = value{k: kNone}
	trueV   = value{k: kBool, n: 1}
	falseV  = value{k: kBool}
	emptyS  = value{k: kStr}
	fnRaise = value{k: kFunc, p: &funcVal{name: "raise_exception"}}
	fnStrf  = value{k: kFunc, p: &funcVal{name: "strftime_now"}}
	fnNS    = value{k: kFunc, p: &funcVal{name: "namespace"}}
	fnRange = value{k: kFunc, p: &funcVal{name: "range"}}
)

func strV(s string) value { return value{k: kStr, s: s} }

// markupTag marks a str value as markupsafe's Markup (the safe filter's
// result; p of a kStr value). Output, ~, tojson, join, length, tests and
// comparisons treat it as the str it is; + escapes the other operand, as
// Markup.__add__ does; other operations on it are declined (markupStr).
type markupTag struct{}

func markupV(s string) value { return value{k: kStr, s: s, p: markupTag{}} }

// plainStr is a str value that is not Markup.
func plainStr(v value) bool { return v.k == kStr && !isMarkup(v) }

func isMarkup(v value) bool {
	_, ok := v.p.(markupTag)
	return v.k == kStr && ok
}

// errMarkup declines an operation whose Markup result (or escaping of
// its arguments) the evaluator does not reproduce.
func errMarkup(what string) error {
	return errNotPython(what + " on a Markup string (the safe filter's result)")
}

// htmlEscape is markupsafe's escape of a str.
func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&#39;", `"`, "&#34;").Replace(s)
}
func intV(n int64) value     { return value{k: kInt, n: n} }
func floatV(f float64) value { return value{k: kFloat, n: int64(math.Float64bits(f))} }
func boolV(b bool) value {
	if b {
		return trueV
	}
	return falseV
}
func (v value) f() float64 { return math.Float64frombits(uint64(v.n)) }

func listV(items []value) value { return value{k: kSeq, p: &seqVal{items: items}} }

// Sequences.

func (v value) isSeq() bool { return v.k == kSeq }

func (v value) seqLen() int { return len(v.p.(*seqVal).items) }

func (v value) seqAt(i int) value { return v.p.(*seqVal).items[i] }

// Mappings.

func (v value) isMap() bool { return v.k == kMap }

func (v value) mapLen() int { return len(v.p.(*mapVal).keys) }

func (v value) mapKey(i int) string { return v.p.(*mapVal).keys[i] }

func (v value) mapGet(k string) (value, bool) { return v.p.(*mapVal).get(k) }

func (v value) mapVal(i int) value { return v.p.(*mapVal).vals[i] }

// truth is Python's bool(v).
func (v value) truth() bool {
	switch v.k {
	case kUndef, kNone:
		return false
	case kBool, kInt:
		return v.n != 0
	case kFloat:
		return v.f() != 0
	case kStr:
		return v.s != ""
	case kSeq:
		return v.seqLen() > 0
	case kMap:
		return v.mapLen() > 0
	}
	return true
}

func (v value) isNumber() bool { return v.k == kBool || v.k == kInt || v.k == kFloat }

// num returns a number as a float and whether it is integral (bool, int).
func (v value) num() (float64, bool) {
	if v.k == kFloat {
		return v.f(), false
	}
	return float64(v.n), true
}

// pyEq is Python's ==, with jinja2's Undefined equal only to Undefined.
func pyEq(a, b value) bool {
	switch {
	case a.isNumber() && b.isNumber():
		if a.k != kFloat && b.k != kFloat {
			return a.n == b.n
		}
		af, _ := a.num()
		bf, _ := b.num()
		return af == bf
	case a.k == kStr && b.k == kStr:
		return a.s == b.s
	case a.isSeq() && b.isSeq():
		if (a.k == kSeq && a.p.(*seqVal).tuple) != (b.k == kSeq && b.p.(*seqVal).tuple) {
			return false
		}
		n := a.seqLen()
		if n != b.seqLen() {
			return false
		}
		for i := range n {
			if !pyEq(a.seqAt(i), b.seqAt(i)) {
				return false
			}
		}
		return true
	case a.isMap() && b.isMap():
		n := a.mapLen()
		if n != b.mapLen() {
			return false
		}
		for i := range n {
			bv, ok := b.mapGet(a.mapKey(i))
			if !ok || !pyEq(a.mapVal(i), bv) {
				return false
			}
		}
		return true
	case a.k == kNone && b.k == kNone, a.k == kUndef && b.k == kUndef:
		return true
	case a.k == kNS && b.k == kNS, a.k == kLoop && b.k == kLoop, a.k == kMacro && b.k == kMacro:
		return a.p == b.p
	}
	return false
}

// pyCompare is Python's ordering for < <= > >=: numbers, strings, and
// sequences of the same kind; anything else raises TypeError in Python.
func pyCompare(a, b value) (int, error) {
	switch {
	case a.isNumber() && b.isNumber():
		if a.k != kFloat && b.k != kFloat {
			return cmpInt(a.n, b.n), nil
		}
		af, _ := a.num()
		bf, _ := b.num()
		if math.IsNaN(af) || math.IsNaN(bf) {
			return 0, errUnsupported("ordering with nan")
		}
		switch {
		case af < bf:
			return -1, nil
		case af > bf:
			return 1, nil
		}
		return 0, nil
	case a.k == kStr && b.k == kStr:
		return strings.Compare(a.s, b.s), nil
	}
	return 0, errPyRaises("TypeError: '<' between unorderable values")
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// errPyRaises marks a case where Python raises (TypeError, UndefinedError,
// ...) with an error this package does not reproduce: the request is
// counted as not exact and vLLM decides.
func errPyRaises(what string) error {
	return errUnsupported(notPythonPrefix + "Python raises " + what)
}

// errNotPython marks a case whose Python output the evaluator does not
// reproduce: it declines rather than guess.
func errNotPython(what string) error {
	return errUnsupported(notPythonPrefix + what)
}

// notPythonPrefix starts the reason of an evaluator refusal where Python
// raises or prints something the evaluator does not reproduce.
const notPythonPrefix = "not reproduced (Python raises or prints otherwise): "

// writeStr writes Python's str(v) (Jinja's {{ }} output).
func writeStr(b *strings.Builder, v value) error {
	switch v.k {
	case kStr:
		b.WriteString(v.s)
		return nil
	case kUndef:
		return nil
	}
	return writeRepr(b, v)
}

func pyStrV(v value) (string, error) {
	switch v.k {
	case kStr:
		return v.s, nil
	case kUndef:
		return "", nil
	case kNone:
		return "None", nil
	case kBool:
		if v.n != 0 {
			return "True", nil
		}
		return "False", nil
	case kInt:
		return strconv.FormatInt(v.n, 10), nil
	}
	var b strings.Builder
	if err := writeRepr(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeRepr writes Python's repr(v).
func writeRepr(b *strings.Builder, v value) error {
	switch v.k {
	case kUndef:
		// Python prints "Undefined" inside a container: not reproduced.
		return errNotPython("an undefined value inside a printed container")
	case kNone:
		b.WriteString("None")
	case kBool:
		if v.n != 0 {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case kInt:
		b.WriteString(strconv.FormatInt(v.n, 10))
	case kFloat:
		b.WriteString(pyFloatRepr(v.f()))
	case kStr:
		pyReprString(b, v.s)
	case kSeq:
		tuple := v.k == kSeq && v.p.(*seqVal).tuple
		if v.k == kSeq && v.p.(*seqVal).noRepr != "" {
			return errNotPython("printing " + v.p.(*seqVal).noRepr)
		}
		open, close := byte('['), byte(']')
		if tuple {
			open, close = '(', ')'
		}
		b.WriteByte(open)
		n := v.seqLen()
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writeRepr(b, v.seqAt(i)); err != nil {
				return err
			}
		}
		if tuple && n == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(close)
	case kMap:
		b.WriteByte('{')
		for i := range v.mapLen() {
			if i > 0 {
				b.WriteString(", ")
			}
			pyReprString(b, v.mapKey(i))
			b.WriteString(": ")
			if err := writeRepr(b, v.mapVal(i)); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return errNotPython("printing a namespace, loop or function")
	}
	return nil
}

// jsonDumps is json.dumps(v, **o), as pyJSONDumps for the owned values.
func jsonDumps(b *strings.Builder, v value, o *jsonOpts, level int) error {
	switch v.k {
	case kUndef:
		return &pyTypeError{"Object of type Undefined is not JSON serializable"}
	case kNone:
		b.WriteString("null")
	case kBool:
		if v.n != 0 {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case kInt:
		b.WriteString(strconv.FormatInt(v.n, 10))
	case kFloat:
		f := v.f()
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
	case kStr:
		pyJSONString(b, v.s, o.ensureASCII)
	case kSeq:
		n := v.seqLen()
		if n == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newlineIndent(b, o, level+1)
			if err := jsonDumps(b, v.seqAt(i), o, level+1); err != nil {
				return err
			}
		}
		newlineIndent(b, o, level)
		b.WriteByte(']')
	case kMap:
		n := v.mapLen()
		if n == 0 {
			b.WriteString("{}")
			return nil
		}
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		if o.sortKeys {
			sort.SliceStable(order, func(x, y int) bool { return v.mapKey(order[x]) < v.mapKey(order[y]) })
		}
		b.WriteByte('{')
		for j, i := range order {
			if j > 0 {
				b.WriteString(o.itemSep)
			}
			newlineIndent(b, o, level+1)
			pyJSONString(b, v.mapKey(i), o.ensureASCII)
			b.WriteString(o.keySep)
			if err := jsonDumps(b, v.mapVal(i), o, level+1); err != nil {
				return err
			}
		}
		newlineIndent(b, o, level)
		b.WriteByte('}')
	case kFunc, kMacro:
		return &pyTypeError{"Object of type function is not JSON serializable"}
	default:
		return errNotPython("tojson of a namespace or loop")
	}
	return nil
}
