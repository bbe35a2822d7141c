package tokenize

import (
	"fmt"
	"math"
	"strings"
)

// Python's operators on values, as jinja2 applies them: comparisons,
// in, + (str, list and number) and arithmetic.

func compare(op string, l, r value) (bool, error) {
	switch op {
	case "==":
		return pyEq(l, r), nil
	case "!=":
		return !pyEq(l, r), nil
	case "in":
		return pyIn(l, r)
	case "not in":
		ok, err := pyIn(l, r)
		return !ok, err
	}
	c, err := pyCompare(l, r)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// pyIn is Python's `item in container`.
func pyIn(item, c value) (bool, error) {
	switch c.k {
	case kStr:
		if item.k != kStr {
			return false, errPyRaises("TypeError: 'in <string>' requires string as left operand")
		}
		return strings.Contains(c.s, item.s), nil
	case kSeq:
		if c.k == kSeq && c.p.(*seqVal).lazy {
			return false, errUnsupported("in over a generator")
		}
		for i := range c.seqLen() {
			if pyEq(c.seqAt(i), item) {
				return true, nil
			}
		}
		return false, nil
	case kMap:
		switch item.k {
		case kStr:
			_, ok := c.mapGet(item.s)
			return ok, nil
		case kSeq, kMap, kNS, kLoop:
			return false, errPyRaises("TypeError: unhashable type")
		}
		return false, nil
	case kUndef:
		return false, nil
	}
	return false, errPyRaises("TypeError: argument of type is not iterable")
}

func add(a, b value) (value, error) {
	switch {
	case (isMarkup(a) || isMarkup(b)) && a.k == kStr && b.k == kStr:
		// Markup.__add__ and __radd__: the plain str operand is escaped.
		as, bs := a.s, b.s
		if !isMarkup(a) {
			as = htmlEscape(as)
		}
		if !isMarkup(b) {
			bs = htmlEscape(bs)
		}
		return markupV(as + bs), nil
	case a.k == kStr && b.k == kStr:
		return strV(a.s + b.s), nil
	case a.isNumber() && b.isNumber():
		if a.k != kFloat && b.k != kFloat {
			s := a.n + b.n
			if (s > a.n) != (b.n > 0) {
				return undef, errUnsupported("integer overflow")
			}
			return intV(s), nil
		}
		af, _ := a.num()
		bf, _ := b.num()
		return floatV(af + bf), nil
	case a.isSeq() && b.isSeq():
		at := a.k == kSeq && a.p.(*seqVal).tuple
		bt := b.k == kSeq && b.p.(*seqVal).tuple
		if at != bt || (a.k == kSeq && a.p.(*seqVal).noRepr != "") || (b.k == kSeq && b.p.(*seqVal).noRepr != "") {
			return undef, errPyRaises("TypeError: can only concatenate list to list")
		}
		items := make([]value, 0, a.seqLen()+b.seqLen())
		for i := range a.seqLen() {
			items = append(items, a.seqAt(i))
		}
		for i := range b.seqLen() {
			items = append(items, b.seqAt(i))
		}
		return value{k: kSeq, p: &seqVal{items: items, tuple: at}}, nil
	}
	return undef, errPyRaises("TypeError: unsupported operand types for +")
}

func arith(op string, a, b value) (value, error) {
	if op == "+" {
		return add(a, b)
	}
	if a.k == kUndef || b.k == kUndef {
		return undef, errPyRaises("UndefinedError in arithmetic")
	}
	if isMarkup(a) || isMarkup(b) {
		return undef, errMarkup(op)
	}
	if op == "*" {
		if v, ok, err := repeat(a, b); ok {
			return v, err
		}
	}
	if !a.isNumber() || !b.isNumber() {
		if op == "%" && a.k == kStr {
			return undef, errNotPython("string % formatting")
		}
		return undef, errPyRaises("TypeError: unsupported operand types for " + op)
	}
	return numArith(op, a, b)
}

// repeat is Python's repetition, a str or a list times an int (in either
// order); ok is false for other operands.
func repeat(a, b value) (v value, ok bool, err error) {
	s, n := a, b
	if a.k == kInt || a.k == kBool {
		s, n = b, a
	}
	if (s.k != kStr && !s.isSeq()) || (n.k != kInt && n.k != kBool) {
		return undef, false, nil
	}
	cnt := max(n.n, 0)
	if s.k == kStr {
		if int64(len(s.s))*cnt > 1<<24 {
			return undef, true, errUnsupported("a very long repetition")
		}
		return strV(strings.Repeat(s.s, int(cnt))), true, nil
	}
	if int64(s.seqLen())*cnt > 1<<20 || (s.k == kSeq && s.p.(*seqVal).noRepr != "") {
		return undef, true, errUnsupported("list repetition")
	}
	var items []value
	for range cnt {
		for i := range s.seqLen() {
			items = append(items, s.seqAt(i))
		}
	}
	return value{k: kSeq, p: &seqVal{items: items, tuple: s.k == kSeq && s.p.(*seqVal).tuple}}, true, nil
}

// numArith is op on two numbers (bool, int, float), as Python computes
// it; what int64 or float64 would not give exactly is declined.
func numArith(op string, a, b value) (value, error) {
	ints := a.k != kFloat && b.k != kFloat
	af, _ := a.num()
	bf, _ := b.num()
	switch op {
	case "-":
		if ints {
			d := a.n - b.n
			if (d < a.n) != (b.n > 0) {
				return undef, errUnsupported("integer overflow")
			}
			return intV(d), nil
		}
		return floatV(af - bf), nil
	case "*":
		if ints {
			if a.n != 0 && b.n != 0 {
				p := a.n * b.n
				if p/b.n != a.n || (a.n == -1 && b.n == math.MinInt64) || (b.n == -1 && a.n == math.MinInt64) {
					return undef, errUnsupported("integer overflow")
				}
				return intV(p), nil
			}
			return intV(0), nil
		}
		return floatV(af * bf), nil
	case "/":
		if bf == 0 {
			return undef, errPyRaises("ZeroDivisionError")
		}
		if ints && (abs64(a.n) > 1<<53 || abs64(b.n) > 1<<53) {
			return undef, errUnsupported("division of large integers")
		}
		return floatV(af / bf), nil
	case "//", "%":
		if !ints {
			return undef, errUnsupported("float " + op)
		}
		if b.n == 0 {
			return undef, errPyRaises("ZeroDivisionError")
		}
		if a.n == math.MinInt64 && b.n == -1 {
			return undef, errUnsupported("integer overflow")
		}
		q, m := a.n/b.n, a.n%b.n
		if m != 0 && (m < 0) != (b.n < 0) {
			q--
			m += b.n
		}
		if op == "//" {
			return intV(q), nil
		}
		return intV(m), nil
	case "**":
		if ints && b.n >= 0 {
			res := int64(1)
			for range b.n {
				next := res * a.n
				if a.n != 0 && next/a.n != res {
					return undef, errUnsupported("integer overflow")
				}
				res = next
				if res == 0 || res == 1 && a.n == 1 {
					break
				}
			}
			return intV(res), nil
		}
		return undef, errUnsupported("float power")
	}
	return undef, fmt.Errorf("owned evaluator: operator %s", op)
}

func abs64(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
