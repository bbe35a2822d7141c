package tokenize

// Integer expressions compiled without building values: loop.index0,
// list|length, a stored int, and + - % and comparisons of those.

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
