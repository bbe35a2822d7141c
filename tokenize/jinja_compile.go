package tokenize

import "strings"

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

// compileAdd is evalAdd.
func compileAdd(n *addExpr) valFn {
	parts := make([]valFn, len(n.parts))
	ps := make([]strPart, len(n.parts))
	for i, p := range n.parts {
		parts[i] = compileExpr(p)
		ps[i] = newStrPart(p, parts[i])
	}
	return func(r *renderer) (value, error) {
		var buf [8]string
		strs := buf[:0]
		total := 0
		for i := range ps {
			pt := &ps[i]
			s := pt.lit
			if !pt.isLit {
				if v := pt.peekStr(r); v != nil {
					s = v.s
				} else {
					v, err := pt.f(r)
					if err != nil {
						return undef, err
					}
					if !plainStr(v) {
						if i == 0 {
							return addFromFns(r, v, parts[1:])
						}
						acc := strV(strings.Join(strs, ""))
						if acc, err = add(acc, v); err != nil {
							return undef, err
						}
						return addFromFns(r, acc, parts[i+1:])
					}
					s = v.s
				}
			}
			strs = append(strs, s)
			total += len(s)
		}
		return strV(r.concat(strs, total)), nil
	}
}

// strPart is an operand of a + chain: a string literal, a field read in
// place, or any expression.
type strPart struct {
	lit   string
	isLit bool
	peek  peekFn
	f     valFn
}

func newStrPart(e expr, f valFn) strPart {
	if l, ok := e.(*litExpr); ok && l.v.k == kStr {
		return strPart{lit: l.v.s, isLit: true, f: f}
	}
	return strPart{peek: compilePeek(e), f: f}
}

// peekStr returns the operand in place when it is a stored string.
func (pt *strPart) peekStr(r *renderer) *value {
	if pt.peek == nil {
		return nil
	}
	if v := pt.peek(r); v != nil && plainStr(*v) {
		return v
	}
	return nil
}

// addFromFns is addFrom over compiled operands.
func addFromFns(r *renderer, acc value, rest []valFn) (value, error) {
	for _, p := range rest {
		v, err := p(r)
		if err != nil {
			return undef, err
		}
		if acc, err = add(acc, v); err != nil {
			return undef, err
		}
	}
	return acc, nil
}

// compileWrite is write: str() of e written out, + chains, ~ chains and
// conditionals without their intermediate strings.
func compileWrite(e expr) writeFn {
	switch n := e.(type) {
	case *litExpr:
		if n.v.k == kStr {
			s := n.v.s
			return func(r *renderer) error {
				r.out.WriteString(s)
				return nil
			}
		}
	case *concatExpr:
		ws := make([]writeFn, len(n.parts))
		for i, p := range n.parts {
			ws[i] = compileWrite(p)
		}
		return func(r *renderer) error {
			for _, w := range ws {
				if err := w(r); err != nil {
					return err
				}
			}
			return nil
		}
	case *condExpr:
		c, a := compileCond(n.cond), compileWrite(n.a)
		var b writeFn
		if n.b != nil {
			b = compileWrite(n.b)
		}
		return func(r *renderer) error {
			ok, err := c(r)
			if err != nil {
				return err
			}
			if ok {
				return a(r)
			}
			if b == nil {
				return nil
			}
			return b(r)
		}
	case *addExpr:
		return compileWriteAdd(n)
	case *filterExpr:
		if n.name == "tojson" {
			return func(r *renderer) error { return r.write(e) }
		}
	}
	f := compileExpr(e)
	if p := compilePeek(e); p != nil {
		return func(r *renderer) error {
			if v := p(r); v != nil {
				if v.k == kStr {
					r.out.WriteString(v.s)
					return nil
				}
				return writeStr(r.out, *v)
			}
			v, err := f(r)
			if err != nil {
				return err
			}
			return writeStr(r.out, v)
		}
	}
	return func(r *renderer) error {
		v, err := f(r)
		if err != nil {
			return err
		}
		return writeStr(r.out, v)
	}
}

// compileWriteAdd is writeAdd.
func compileWriteAdd(n *addExpr) writeFn {
	parts := make([]valFn, len(n.parts))
	for i, p := range n.parts {
		parts[i] = compileExpr(p)
	}
	// Each operand written as it comes: string literals and fields in
	// place. The first must be a literal or a field, so that when it is
	// not a string the general path can evaluate it again.
	ps := make([]strPart, len(n.parts))
	for i, p := range n.parts {
		ps[i] = newStrPart(p, parts[i])
	}
	if ps[0].isLit || ps[0].peek != nil {
		slow := compileWriteAddSlow(parts)
		return func(r *renderer) error {
			start := r.out.Len()
			for i := range ps {
				pt := &ps[i]
				if pt.isLit {
					r.out.WriteString(pt.lit)
					continue
				}
				if v := pt.peekStr(r); v != nil {
					r.out.WriteString(v.s)
					continue
				}
				if i == 0 {
					return slow(r) // nothing written yet
				}
				w, err := pt.f(r)
				if err != nil {
					return err
				}
				if isMarkup(w) {
					return rewriteMarkupAdd(r, start, w, func(acc value) (value, error) { return addFromFns(r, acc, parts[i+1:]) })
				}
				if err := writeOperand(r.out, w); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return compileWriteAddSlow(parts)
}

// compileWriteAddSlow is writeAdd over compiled operands.
func compileWriteAddSlow(parts []valFn) writeFn {
	return func(r *renderer) error {
		first, err := parts[0](r)
		if err != nil {
			return err
		}
		if !plainStr(first) {
			v, err := addFromFns(r, first, parts[1:])
			if err != nil {
				return err
			}
			return writeStr(r.out, v)
		}
		start := r.out.Len()
		r.out.WriteString(first.s)
		for i, p := range parts[1:] {
			v, err := p(r)
			if err != nil {
				return err
			}
			if isMarkup(v) {
				return rewriteMarkupAdd(r, start, v, func(acc value) (value, error) { return addFromFns(r, acc, parts[i+2:]) })
			}
			if err := writeOperand(r.out, v); err != nil {
				return err
			}
		}
		return nil
	}
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

// intFn evaluates an expression that is usually an int (loop.index0,
// list|length, a stored int, + - % of those) without building a value;
// ok false means it is not an int this time (or the arithmetic would not
// give one), and the caller evaluates it the general way. Only
// expressions without side effects are compiled as intFns.
type intFn func(r *renderer) (n int64, ok bool)

func compileInt(e expr) intFn {
	switch n := e.(type) {
	case *litExpr:
		if n.v.k == kInt {
			v := n.v.n
			return func(*renderer) (int64, bool) { return v, true }
		}
	case *attrExpr:
		if nm, ok := n.obj.(*nameExpr); ok {
			if f := loopIntFn(nm.ref, n.name); f != nil {
				return f
			}
		}
	case *filterExpr:
		if n.name != "length" && n.name != "count" || len(n.call.args) > 0 || len(n.call.kwArgs) > 0 {
			return nil
		}
		nm, ok := n.arg.(*nameExpr)
		if !ok {
			return nil
		}
		l, s := nm.ref.level, nm.ref.slot
		return func(r *renderer) (int64, bool) {
			o := &r.frames[l][s]
			switch o.k {
			case kSeq:
				if sv := o.p.(*seqVal); !sv.lazy {
					return int64(len(sv.items)), true
				}
			case kMap:
				return int64(len(o.p.(*mapVal).keys)), true
			}
			return 0, false
		}
	case *binExpr:
		a, b := compileInt(n.l), compileInt(n.r)
		if a == nil || b == nil {
			return nil
		}
		switch n.op {
		case "+":
			return func(r *renderer) (int64, bool) {
				x, ok := a(r)
				if !ok {
					return 0, false
				}
				y, ok := b(r)
				s := x + y
				return s, ok && (s > x) == (y > 0)
			}
		case "-":
			return func(r *renderer) (int64, bool) {
				x, ok := a(r)
				if !ok {
					return 0, false
				}
				y, ok := b(r)
				d := x - y
				return d, ok && (d < x) == (y > 0)
			}
		case "%":
			return func(r *renderer) (int64, bool) {
				x, ok := a(r)
				if !ok {
					return 0, false
				}
				y, ok := b(r)
				if !ok || y == 0 || y == -1 {
					return 0, false
				}
				m := x % y
				if m != 0 && (m < 0) != (y < 0) {
					m += y
				}
				return m, true
			}
		}
		return nil
	}
	if p := compilePeek(e); p != nil {
		return func(r *renderer) (int64, bool) {
			if v := p(r); v != nil && v.k == kInt {
				return v.n, true
			}
			return 0, false
		}
	}
	return nil
}

// loopIntFn is loop.index0, loop.index or loop.length of the loop in
// slot x; nil for other names.
func loopIntFn(x ref, name string) intFn {
	l, s := x.level, x.slot
	var f func(ls *loopState) int64
	switch name {
	case "index0":
		f = func(ls *loopState) int64 { return int64(ls.i) }
	case "index":
		f = func(ls *loopState) int64 { return int64(ls.i + 1) }
	case "length":
		f = func(ls *loopState) int64 { return int64(ls.n) }
	default:
		return nil
	}
	return func(r *renderer) (int64, bool) {
		o := &r.frames[l][s]
		if o.k != kLoop {
			return 0, false
		}
		return f(o.p.(*loopState)), true
	}
}

// compileIntCmp compiles a single comparison of two int expressions;
// when either is not an int this time, the general comparison runs.
func compileIntCmp(n *cmpExpr) condFn {
	if len(n.ops) != 1 {
		return nil
	}
	a, b := compileInt(n.first), compileInt(n.rest[0])
	if a == nil || b == nil {
		return nil
	}
	var test func(x, y int64) bool
	switch n.ops[0] {
	case "==":
		test = func(x, y int64) bool { return x == y }
	case "!=":
		test = func(x, y int64) bool { return x != y }
	case "<":
		test = func(x, y int64) bool { return x < y }
	case "<=":
		test = func(x, y int64) bool { return x <= y }
	case ">":
		test = func(x, y int64) bool { return x > y }
	case ">=":
		test = func(x, y int64) bool { return x >= y }
	default:
		return nil
	}
	first, second, op := compileExpr(n.first), compileExpr(n.rest[0]), n.ops[0]
	return func(r *renderer) (bool, error) {
		if x, ok := a(r); ok {
			if y, ok := b(r); ok {
				return test(x, y), nil
			}
		}
		l, err := first(r)
		if err != nil {
			return false, err
		}
		rv, err := second(r)
		if err != nil {
			return false, err
		}
		return compare(op, l, rv)
	}
}
