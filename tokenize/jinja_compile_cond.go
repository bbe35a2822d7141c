package tokenize

// Conditions compiled to a bool without building a value: the truth of
// an if's or a for's condition, and/or/not, comparisons with a string
// literal read in place, and tests.

// compileCond compiles e for its truth value (an if's or a for's
// condition, and's, or's and not's operands).
func compileCond(e expr) condFn {
	switch n := e.(type) {
	case *notExpr:
		x := compileCond(n.x)
		return func(r *renderer) (bool, error) {
			ok, err := x(r)
			return !ok, err
		}
	case *andExpr:
		l, rc := compileCond(n.l), compileCond(n.r)
		return func(r *renderer) (bool, error) {
			ok, err := l(r)
			if err != nil || !ok {
				return false, err
			}
			return rc(r)
		}
	case *orExpr:
		l, rc := compileCond(n.l), compileCond(n.r)
		return func(r *renderer) (bool, error) {
			ok, err := l(r)
			if err != nil || ok {
				return ok, err
			}
			return rc(r)
		}
	case *cmpExpr:
		return compileCmp(n)
	case *testExpr:
		return compileTest(n)
	case *attrExpr:
		if nm, ok := n.obj.(*nameExpr); ok && (n.name == "first" || n.name == "last") {
			// loop.first, loop.last: no value built.
			l, s, last, name := nm.ref.level, nm.ref.slot, n.name == "last", n.name
			return func(r *renderer) (bool, error) {
				o := &r.frames[l][s]
				if o.k == kLoop {
					ls := o.p.(*loopState)
					if last {
						return ls.i == ls.n-1, nil
					}
					return ls.i == 0, nil
				}
				v, err := getAttrOf(o, name)
				return v.truth(), err
			}
		}
	}
	f := compileExpr(e)
	if p := compilePeek(e); p != nil {
		return func(r *renderer) (bool, error) {
			if v := p(r); v != nil {
				return v.truth(), nil
			}
			v, err := f(r)
			return v.truth(), err
		}
	}
	return func(r *renderer) (bool, error) {
		v, err := f(r)
		return v.truth(), err
	}
}

// getAttrOf is compileAttr's lookup for a name that is not a dict method.
func getAttrOf(o *value, name string) (value, error) {
	switch o.k {
	case kMap:
		v, _ := o.p.(*mapVal).get(name)
		return v, nil
	}
	return getAttr(*o, name)
}

// compileCmp is evalCmp; x == 'literal' and x != 'literal' compare in
// place.
func compileCmp(n *cmpExpr) condFn {
	if len(n.ops) == 1 && (n.ops[0] == "==" || n.ops[0] == "!=") {
		if lit, ok := n.rest[0].(*litExpr); ok && lit.v.k == kStr {
			s, ne := lit.v.s, n.ops[0] == "!="
			l := compileExpr(n.first)
			if p := compilePeek(n.first); p != nil {
				return func(r *renderer) (bool, error) {
					if v := p(r); v != nil {
						return (v.k == kStr && v.s == s) != ne, nil
					}
					v, err := l(r)
					if err != nil {
						return false, err
					}
					return (v.k == kStr && v.s == s) != ne, nil
				}
			}
			return func(r *renderer) (bool, error) {
				v, err := l(r)
				if err != nil {
					return false, err
				}
				return (v.k == kStr && v.s == s) != ne, nil
			}
		}
	}
	if c := compileIntCmp(n); c != nil {
		return c
	}
	if len(n.ops) == 1 && (n.ops[0] == "==" || n.ops[0] == "!=") {
		if lit, ok := n.rest[0].(*litExpr); ok {
			lv, ne := lit.v, n.ops[0] == "!="
			l := compileExpr(n.first)
			return func(r *renderer) (bool, error) {
				v, err := l(r)
				if err != nil {
					return false, err
				}
				return pyEq(v, lv) != ne, nil
			}
		}
	}
	first := compileExpr(n.first)
	rest := make([]valFn, len(n.rest))
	for i, x := range n.rest {
		rest[i] = compileExpr(x)
	}
	ops := n.ops
	return func(r *renderer) (bool, error) {
		l, err := first(r)
		if err != nil {
			return false, err
		}
		for i, op := range ops {
			rv, err := rest[i](r)
			if err != nil {
				return false, err
			}
			ok, err := compare(op, l, rv)
			if err != nil || !ok {
				return false, err
			}
			l = rv
		}
		return true, nil
	}
}

// compileTest is evalTest; the argument-less type tests are decided in
// place.
func compileTest(n *testExpr) condFn {
	x := compileExpr(n.arg)
	if len(n.args) == 0 {
		var is func(k vkind) bool
		switch n.name {
		case "defined":
			is = func(k vkind) bool { return k != kUndef }
		case "undefined":
			is = func(k vkind) bool { return k == kUndef }
		case "none":
			is = func(k vkind) bool { return k == kNone }
		case "string":
			is = func(k vkind) bool { return k == kStr }
		case "mapping":
			is = func(k vkind) bool { return k == kMap }
		case "iterable":
			is = func(k vkind) bool {
				switch k {
				case kStr, kSeq, kMap, kUndef, kLoop:
					return true
				}
				return false
			}
		}
		if p := compilePeek(n.arg); is != nil && p != nil {
			return func(r *renderer) (bool, error) {
				if v := p(r); v != nil {
					return is(v.k), nil
				}
				v, err := x(r)
				if err != nil {
					return false, err
				}
				return is(v.k), nil
			}
		}
		if is != nil {
			return func(r *renderer) (bool, error) {
				v, err := x(r)
				if err != nil {
					return false, err
				}
				return is(v.k), nil
			}
		}
	}
	args := make([]valFn, len(n.args))
	for i, a := range n.args {
		args[i] = compileExpr(a)
	}
	name := n.name
	return func(r *renderer) (bool, error) {
		v, err := x(r)
		if err != nil {
			return false, err
		}
		var av [1]value
		for i, a := range args {
			if av[i], err = a(r); err != nil {
				return false, err
			}
		}
		return applyTest(name, v, av[:len(args)])
	}
}
