package tokenize

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The filters on numbers (abs, round) and on order (sort, reverse), as
// jinja2's filters.py.

// filterAbs is Python's abs(): an int for an int or a bool, a float for a
// float.
func filterAbs(_ *renderer, fc filterCall) (value, error) {
	switch v := fc.v; v.k {
	case kInt, kBool:
		if v.n == math.MinInt64 {
			return undef, errUnsupported("abs of an integer beyond 64 bits")
		}
		return intV(max(v.n, -v.n)), nil
	case kFloat:
		return floatV(math.Abs(v.f())), nil
	}
	return undef, errPyRaises("TypeError: bad operand type for abs()")
}

// filterRound is round(value, precision=0, method='common'): 'common' is
// Python's round(value, precision) (an int stays an int; a float is
// rounded half to even on its exact value, as repr's digits are), 'ceil'
// and 'floor' are math's on value * 10**precision, divided back.
func filterRound(_ *renderer, fc filterCall) (value, error) {
	v := fc.v
	prec := int64(0)
	if p, ok := fc.arg(0, "precision"); ok {
		if p.k != kInt && p.k != kBool {
			return undef, errNotPython("round with a precision that is not an int")
		}
		prec = p.n
	}
	method := "common"
	if m, ok := fc.arg(1, "method"); ok {
		if m.k != kStr {
			return undef, errPyRaises("FilterArgumentError: method must be common, ceil or floor")
		}
		method = m.s
	}
	if v.k != kInt && v.k != kBool && v.k != kFloat {
		return undef, errPyRaises("TypeError: round of a value that is not a number")
	}
	if prec < 0 || prec > 300 {
		return undef, errUnsupported("round with a negative or very large precision")
	}
	x, integral := v.num()
	switch method {
	case "common":
		if integral {
			return intV(v.n), nil
		}
		r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', int(prec), 64), 64)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return undef, errUnsupported("round of an infinite or NaN float")
		}
		return floatV(r), nil
	case "ceil", "floor":
		if prec > 22 {
			return undef, errUnsupported("round with a very large precision")
		}
		p10 := math.Pow10(int(prec))
		y := x * p10
		if math.Abs(y) > 1<<53 || math.IsNaN(y) {
			return undef, errUnsupported("round of a value beyond exact float range")
		}
		if method == "ceil" {
			return floatV(math.Ceil(y) / p10), nil
		}
		return floatV(math.Floor(y) / p10), nil
	}
	return undef, errPyRaises("FilterArgumentError: method must be common, ceil or floor")
}

// filterSort is sorted(value, key=..., reverse=reverse): numbers with
// numbers, strings with strings (lowercased unless case_sensitive, ASCII
// only then); Python raises comparing other mixes, and sorting by an
// attribute is not reproduced. The sort is stable, as Python's, reverse
// included.
func filterSort(_ *renderer, fc filterCall) (value, error) {
	if a, ok := fc.arg(2, "attribute"); ok && a.k != kNone {
		return undef, errUnsupported("sort by attribute")
	}
	rev, _ := fc.arg(0, "reverse")
	cs, _ := fc.arg(1, "case_sensitive")
	items, err := pyIterValues(fc.v)
	if err != nil {
		return undef, errPyRaises("TypeError: object is not iterable")
	}
	items = slices.Clone(items)
	nums, strs := 0, 0
	for _, it := range items {
		switch {
		case it.isNumber():
			nums++
		case it.k == kStr && !isMarkup(it):
			if !cs.truth() && !isASCIIStr(it.s) {
				return undef, errUnsupported("case-insensitive sort of non-ASCII text")
			}
			strs++
		default:
			return undef, errNotPython("sort of values that are not numbers or strings")
		}
	}
	if nums > 0 && strs > 0 {
		return undef, errPyRaises("TypeError: '<' not supported between str and a number")
	}
	order := func(a, b value) int {
		if a.k == kStr {
			if cs.truth() {
				return strings.Compare(a.s, b.s)
			}
			return strings.Compare(strings.ToLower(a.s), strings.ToLower(b.s))
		}
		af, _ := a.num()
		bf, _ := b.num()
		if a.k != kFloat && b.k != kFloat {
			return cmp.Compare(a.n, b.n)
		}
		return cmp.Compare(af, bf)
	}
	if rev.truth() {
		slices.SortStableFunc(items, func(a, b value) int { return order(b, a) })
	} else {
		slices.SortStableFunc(items, order)
	}
	return listV(items), nil
}

// filterReverse is jinja2's reverse: a str reversed; a list, tuple or dict
// through reversed() (an iterator); anything else iterable as a reversed
// list (a generator). An Undefined reverses as an empty iterator.
func filterReverse(_ *renderer, fc filterCall) (value, error) {
	v := fc.v
	if v.k == kStr {
		rs := []rune(v.s)
		slices.Reverse(rs)
		return strV(string(rs)), nil
	}
	switch v.k {
	case kSeq, kMap, kUndef:
	default:
		return undef, errPyRaises("TypeError: argument to reversed() must be a sequence")
	}
	items, err := pyIterValues(v)
	if err != nil {
		return undef, err
	}
	items = slices.Clone(items)
	slices.Reverse(items)
	if v.k == kSeq && v.p.(*seqVal).lazy {
		return listV(items), nil
	}
	return value{k: kSeq, p: &seqVal{items: items, lazy: true, noRepr: "an iterator"}}, nil
}
