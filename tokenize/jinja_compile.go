package tokenize

import (
	"strings"
)

// The owned evaluator's compiled form: after name resolution, every
// statement's expressions are turned into closures (compileBody), so a
// render does not dispatch on the tree's node types, and the shapes chat
// templates are made of run without the generic path's layers: a
// variable, an item or attribute of a variable read in place
// (message['role'], ns.flag, loop.index0), comparison with a string
// literal, and/or/not and tests evaluated as conditions (to a bool, no
// value built), + chains written as they come. Every other expression is
// the generic evaluator (jinja_eval.go) called on its node; each closure
// has exactly the generic path's semantics and errors.

type (
	valFn   func(r *renderer) (value, error)
	condFn  func(r *renderer) (bool, error)
	writeFn func(r *renderer) error
	execFn  func(r *renderer) error
	// peekFn returns where the value of a field of a variable is stored,
	// to be read in place, or nil when it is not stored (the valFn then
	// gives it). Nothing writes through the pointer.
	peekFn func(r *renderer) *value
)

// undefSlot is what a peek at a missing field points to.
var undefSlot = value{}

// compilePeek compiles name['key'] and name.attr (not a dict method's
// name) as a peekFn; nil for any other expression.
func compilePeek(e expr) peekFn {
	var obj expr
	var key string
	switch n := e.(type) {
	case *nameExpr:
		l, s := n.ref.level, n.ref.slot
		return func(r *renderer) *value { return &r.frames[l][s] }
	case *itemExpr:
		if !n.hasSKey || n.fl&flDictMethod != 0 {
			return nil
		}
		obj, key = n.obj, n.skey
	case *attrExpr:
		if n.fl&flDictMethod != 0 {
			return nil
		}
		obj, key = n.obj, n.name
	default:
		return nil
	}
	nm, ok := obj.(*nameExpr)
	if !ok {
		return nil
	}
	l, s := nm.ref.level, nm.ref.slot
	return func(r *renderer) *value {
		o := &r.frames[l][s]
		switch o.k {
		case kMap:
			m := o.p.(*mapVal)
			for i, k := range m.keys {
				if k == key {
					return &m.vals[i]
				}
			}
			return &undefSlot
		case kNS:
			ns := o.p.(*nsVal)
			for i, k := range ns.keys {
				if k == key {
					return &ns.vals[i]
				}
			}
			return &undefSlot
		}
		return nil
	}
}

// compileBody compiles the expressions of body's statements, nested
// bodies and macro bodies included.
func compileBody(body []stmt) {
	for _, st := range body {
		switch n := st.(type) {
		case *outStmt:
			n.w = compileWrite(n.e)
		case *ifStmt:
			n.cc = make([]condFn, len(n.conds))
			for i, c := range n.conds {
				n.cc[i] = compileCond(c)
			}
			n.bodiesF = make([]execFn, len(n.bodies))
			for i, b := range n.bodies {
				compileBody(b)
				n.bodiesF[i] = compileSeq(b)
			}
			compileBody(n.els)
			n.elsF = compileSeq(n.els)
		case *forStmt:
			n.iterF = compileExpr(n.iter)
			n.rev = reversedName(n.iter)
			if n.cond != nil {
				n.condF = compileCond(n.cond)
			}
			compileBody(n.body)
			compileBody(n.els)
			n.bodyF, n.elsF = compileSeq(n.body), compileSeq(n.els)
			n.loopLocal = loopLocal(n)
		case *setStmt:
			n.f = compileExpr(n.e)
		case *setAttrStmt:
			n.f = compileExpr(n.e)
		case *setBlockStmt:
			compileBody(n.body)
		case *macroStmt:
			compileBody(n.m.body)
		}
	}
}

// compileSeq compiles a body whose expressions compileBody compiled:
// text, output, if, for and set run as closures, any other statement
// through exec.
func compileSeq(body []stmt) execFn {
	fns := make([]execFn, len(body))
	for i, st := range body {
		switch n := st.(type) {
		case *textStmt:
			s := n.s
			fns[i] = func(r *renderer) error {
				r.out.WriteString(s)
				return nil
			}
		case *outStmt:
			fns[i] = execFn(n.w)
		case *ifStmt:
			cc, bodies, els := n.cc, n.bodiesF, n.elsF
			fns[i] = func(r *renderer) error {
				for i, c := range cc {
					ok, err := c(r)
					if err != nil {
						return err
					}
					if ok {
						return bodies[i](r)
					}
				}
				return els(r)
			}
		case *forStmt:
			fns[i] = func(r *renderer) error { return r.execFor(n) }
		case *setStmt:
			l, s, f := n.target.ref.level, n.target.ref.slot, n.f
			fns[i] = func(r *renderer) error {
				v, err := f(r)
				if err != nil {
					return err
				}
				r.frames[l][s] = v
				return nil
			}
		default:
			one := body[i : i+1 : i+1]
			fns[i] = func(r *renderer) error { return r.exec(one) }
		}
	}
	switch len(fns) {
	case 0:
		return func(*renderer) error { return nil }
	case 1:
		return fns[0]
	}
	return func(r *renderer) error {
		for _, f := range fns {
			if err := f(r); err != nil {
				return err
			}
		}
		return nil
	}
}

// generic evaluates e with the tree walker.
func generic(e expr) valFn {
	return func(r *renderer) (value, error) { return r.eval(e) }
}

func compileExpr(e expr) valFn {
	switch n := e.(type) {
	case *litExpr:
		v := n.v
		return func(*renderer) (value, error) { return v, nil }
	case *nameExpr:
		l, s := n.ref.level, n.ref.slot
		return func(r *renderer) (value, error) { return r.frames[l][s], nil }
	case *attrExpr:
		return withPeek(e, compileAttr(n))
	case *itemExpr:
		if n.hasSKey {
			return withPeek(e, compileSKey(n))
		}
		key := compileExpr(n.key)
		return withObj(n.obj, func(r *renderer, o *value) (value, error) {
			k, err := key(r)
			if err != nil {
				return undef, err
			}
			return getItem(*o, k)
		})
	case *filterExpr:
		if f := compileFilter(n); f != nil {
			return f
		}
	case *notExpr, *andExpr, *orExpr, *cmpExpr, *testExpr:
		if a, ok := n.(*andExpr); ok {
			return compileAndOr(a.l, a.r, true)
		}
		if o, ok := n.(*orExpr); ok {
			return compileAndOr(o.l, o.r, false)
		}
		c := compileCond(e)
		return func(r *renderer) (value, error) {
			ok, err := c(r)
			return boolV(ok), err
		}
	case *binExpr:
		l, rf, op := compileExpr(n.l), compileExpr(n.r), n.op
		slow := func(r *renderer) (value, error) {
			a, err := l(r)
			if err != nil {
				return undef, err
			}
			b, err := rf(r)
			if err != nil {
				return undef, err
			}
			return arith(op, a, b)
		}
		if fi := compileInt(e); fi != nil {
			return func(r *renderer) (value, error) {
				if v, ok := fi(r); ok {
					return intV(v), nil
				}
				return slow(r)
			}
		}
		return slow
	case *condExpr:
		c, a := compileCond(n.cond), compileExpr(n.a)
		var b valFn
		if n.b != nil {
			b = compileExpr(n.b)
		}
		return func(r *renderer) (value, error) {
			ok, err := c(r)
			if err != nil {
				return undef, err
			}
			if ok {
				return a(r)
			}
			if b == nil {
				return undef, nil
			}
			return b(r)
		}
	case *addExpr:
		return compileAdd(n)
	}
	return generic(e)
}

// compileAndOr is `l and r` (and) or `l or r`: the deciding operand's
// value, as Python gives it.
func compileAndOr(le, re expr, and bool) valFn {
	l, rf := compileExpr(le), compileExpr(re)
	return func(r *renderer) (value, error) {
		v, err := l(r)
		if err != nil || v.truth() != and {
			return v, err
		}
		return rf(r)
	}
}

// withObj compiles the object of an item or attribute access: a variable
// is read in place.
func withObj(obj expr, get func(r *renderer, o *value) (value, error)) valFn {
	if nm, ok := obj.(*nameExpr); ok {
		l, s := nm.ref.level, nm.ref.slot
		return func(r *renderer) (value, error) { return get(r, &r.frames[l][s]) }
	}
	of := compileExpr(obj)
	return func(r *renderer) (value, error) {
		o, err := of(r)
		if err != nil {
			return undef, err
		}
		return get(r, &o)
	}
}

// compileAttr is evalAttr: a request or template dict's field unless the
// name is a dict method; a namespace's or loop's attribute; otherwise
// getAttr.
func compileAttr(n *attrExpr) valFn {
	name, method := n.name, n.fl&flDictMethod != 0
	la := loopAttrFn(name)
	return withObj(n.obj, func(_ *renderer, o *value) (value, error) {
		switch o.k {
		case kMap:
			if !method {
				v, _ := o.p.(*mapVal).get(name)
				return v, nil
			}
		case kNS:
			v, _ := o.p.(*nsVal).get(name)
			return v, nil
		case kLoop:
			return la(o.p.(*loopState))
		}
		return getAttr(*o, name)
	})
}

// compileSKey is evalItem with a string literal key.
func compileSKey(n *itemExpr) valFn {
	key, method := n.skey, n.fl&flDictMethod != 0
	return withObj(n.obj, func(_ *renderer, o *value) (value, error) {
		switch o.k {
		case kMap:
			if v, ok := o.p.(*mapVal).get(key); ok {
				return v, nil
			}
			if method {
				return value{k: kFunc, p: &funcVal{name: key, recv: *o}}, nil
			}
			return undef, nil
		}
		return getItem(*o, strV(key))
	})
}

// loopAttrFn is loopAttr for one attribute name, decided once.
func loopAttrFn(name string) func(l *loopState) (value, error) {
	switch name {
	case "index":
		return func(l *loopState) (value, error) { return intV(int64(l.i + 1)), nil }
	case "index0":
		return func(l *loopState) (value, error) { return intV(int64(l.i)), nil }
	case "first":
		return func(l *loopState) (value, error) { return boolV(l.i == 0), nil }
	case "last":
		return func(l *loopState) (value, error) { return boolV(l.i == l.n-1), nil }
	case "length":
		return func(l *loopState) (value, error) { return intV(int64(l.n)), nil }
	}
	return func(l *loopState) (value, error) { return loopAttr(l, name) }
}

// compileFilter is evalFilter for trim and length without arguments; nil
// for any other filter.
func compileFilter(n *filterExpr) valFn {
	if len(n.call.args) > 0 || len(n.call.kwArgs) > 0 {
		return nil
	}
	x := compileExpr(n.arg)
	switch n.name {
	case "trim":
		arg := newStrPart(n.arg, x)
		return func(r *renderer) (value, error) {
			if v := arg.peekStr(r); v != nil {
				return strV(strings.TrimFunc(v.s, pyIsSpace)), nil
			}
			v, err := x(r)
			if err != nil {
				return undef, err
			}
			if isMarkup(v) {
				return undef, errMarkup("filter trim")
			}
			if v.k != kStr {
				s, err := pyStrV(v)
				if err != nil {
					return undef, err
				}
				v = strV(s)
			}
			return strV(strings.TrimFunc(v.s, pyIsSpace)), nil
		}
	case "length", "count":
		return func(r *renderer) (value, error) {
			v, err := x(r)
			if err != nil {
				return undef, err
			}
			switch v.k {
			case kSeq:
				if !v.p.(*seqVal).lazy {
					return intV(int64(v.seqLen())), nil
				}
			case kMap:
				return intV(int64(v.mapLen())), nil
			}
			return filterLength(v)
		}
	}
	return nil
}

// reversedName returns x when e is x[::-1] for a variable x.
func reversedName(e expr) *nameExpr {
	sl, ok := e.(*sliceExpr)
	if !ok || sl.lo != nil || sl.hi != nil {
		return nil
	}
	nm, ok := sl.obj.(*nameExpr)
	if !ok {
		return nil
	}
	switch st := sl.step.(type) {
	case *litExpr:
		if st.v.k == kInt && st.v.n == -1 {
			return nm
		}
	case *negExpr:
		if l, ok := st.x.(*litExpr); ok && st.neg && l.v.k == kInt && l.v.n == 1 {
			return nm
		}
	}
	return nil
}

// withPeek reads e in place when it can, else with f.
func withPeek(e expr, f valFn) valFn {
	p := compilePeek(e)
	if p == nil {
		return f
	}
	return func(r *renderer) (value, error) {
		if v := p(r); v != nil {
			return *v, nil
		}
		return f(r)
	}
}

// loopLocal reports whether every read of n's loop variable in its body
// is the object of an attribute, item or method access (macros have their
// own frames and cannot see it).
func loopLocal(n *forStmt) bool {
	uses, accesses := 0, 0
	isLoop := func(e expr) bool {
		nm, ok := e.(*nameExpr)
		return ok && nm.ref == n.loop
	}
	ex := func(e expr) {
		if e == nil {
			return
		}
		walkExpr(e, func(x expr) {
			switch x := x.(type) {
			case *nameExpr:
				if x.ref == n.loop {
					uses++
				}
			case *attrExpr:
				if isLoop(x.obj) {
					accesses++
				}
			case *itemExpr:
				if isLoop(x.obj) {
					accesses++
				}
			case *methodExpr:
				if isLoop(x.obj) {
					accesses++
				}
			}
		})
	}
	walkStmts(n.body, ex, func(ns *nameExpr) {
		if ns.ref == n.loop {
			uses++
		}
	}, func(stmt) {
		uses++ // a statement this scan does not know: not local
	})
	return uses == accesses
}
