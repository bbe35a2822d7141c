package tokenize

// The evaluator's tests, as jinja2's tests.py.

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
		case kStr, kSeq, kMap, kUndef, kLoop:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.k {
		case kStr, kMap, kUndef:
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
