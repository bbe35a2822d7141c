package tokenize

import (
	"sync"
)

// Compiling a parsed template (jinja_parse.go) for the evaluator:
// compileOwned resolves every name to a frame slot (the resolver below
// walks the tree once), sets up the top-level variables and helpers, and
// compiles the tree into closures (jinja_compile.go).

// ownedTemplate is a template the owned evaluator renders.
type ownedTemplate struct {
	body []stmt
	run  execFn // body compiled (jinja_compile.go)
	// top are the template frame's variables, by slot: each starts as the
	// render variable of that name, else the global of that name.
	top     []string
	topInit []topSlot
	pool    sync.Pool // *renderer
	hint    int       // output size of the first render, as a capacity hint
	hintM   sync.Mutex
}

// compileOwned parses and resolves a lexed template, or says why the
// owned evaluator does not take it.
func compileOwned(lx *lexed) (*ownedTemplate, error) {
	body, err := parseOwned(lx.segs)
	if err != nil {
		return nil, err
	}
	rs := &resolver{}
	top := rs.newScope(nil, 0, &rs.topN)
	rs.top = top
	if err := rs.stmts(body, top); err != nil {
		return nil, err
	}
	compileBody(body)
	run := compileSeq(body)
	names := make([]string, rs.topN)
	for n, r := range top.names {
		names[r.slot] = n
	}
	inits := make([]topSlot, len(names))
	for i, name := range names {
		switch name {
		// The package's helpers win over render variables, as
		// vLLM's globals do.
		case "raise_exception":
			inits[i] = topSlot{helper: true, v: fnRaise}
		case "strftime_now":
			inits[i] = topSlot{helper: true, v: fnStrf}
		// Globals, unless a render variable has the name.
		case "namespace":
			inits[i].v = fnNS
		case "range":
			inits[i].v = fnRange
		}
	}
	return &ownedTemplate{body: body, run: run, top: names, topInit: inits}, nil
}

// topSlot is how a template-frame slot starts: a package helper, or the
// render variable of its name, else v (a global, or Undefined).
type topSlot struct {
	helper bool
	v      value
}

// Name resolution: every name becomes a frame slot, following jinja2's
// scoping. A for loop's body is its own scope (its targets, loop, and the
// names it assigns, which start each iteration at the enclosing value and
// do not leak out); if blocks are not scopes; a macro has its own frame,
// and reads the template's variables at call time.

type resolver struct {
	top  *rscope
	topN int32
}

type rscope struct {
	parent *rscope
	names  map[string]ref
	level  uint8
	n      *int32 // the frame's slot counter
}

func (rs *resolver) newScope(parent *rscope, level uint8, n *int32) *rscope {
	return &rscope{parent: parent, names: map[string]ref{}, level: level, n: n}
}

func (s *rscope) bindNew(name string) ref {
	r := ref{level: s.level, slot: *s.n}
	*s.n++
	s.names[name] = r
	return r
}

// lookup finds a name from scope s outwards; names bound nowhere are the
// template's (render variables or globals).
func (rs *resolver) lookup(s *rscope, name string) ref {
	for sc := s; sc != nil; sc = sc.parent {
		if r, ok := sc.names[name]; ok {
			return r
		}
	}
	return rs.top.bindNew(name)
}

// assignedNames lists the names body assigns in its own scope.
func assignedNames(body []stmt, out *[]string) {
	for _, s := range body {
		switch n := s.(type) {
		case *setStmt:
			*out = append(*out, n.target.name)
		case *setBlockStmt:
			*out = append(*out, n.target.name)
			assignedNames(n.body, out)
		case *macroStmt:
			*out = append(*out, n.target.name)
		case *ifStmt:
			for _, b := range n.bodies {
				assignedNames(b, out)
			}
			assignedNames(n.els, out)
		}
	}
}

func (rs *resolver) stmts(body []stmt, s *rscope) error {
	for _, st := range body {
		if err := rs.stmt(st, s); err != nil {
			return err
		}
	}
	return nil
}

func (rs *resolver) bind(s *rscope, n *nameExpr) {
	if r, ok := s.names[n.name]; ok {
		n.ref = r
		return
	}
	n.ref = s.bindNew(n.name)
}

func (rs *resolver) stmt(st stmt, s *rscope) error {
	switch n := st.(type) {
	case *textStmt, *breakStmt, *continueStmt:
	case *outStmt:
		return rs.expr(n.e, s)
	case *ifStmt:
		for i, c := range n.conds {
			if err := rs.expr(c, s); err != nil {
				return err
			}
			if err := rs.stmts(n.bodies[i], s); err != nil {
				return err
			}
		}
		return rs.stmts(n.els, s)
	case *forStmt:
		if err := rs.expr(n.iter, s); err != nil {
			return err
		}
		inner := rs.newScope(s, s.level, s.n)
		for _, t := range n.targets {
			rs.bind(inner, t)
		}
		n.loop = inner.bindNew("loop")
		var names []string
		assignedNames(n.body, &names)
		for _, name := range names {
			if _, ok := inner.names[name]; ok {
				continue
			}
			outer := rs.lookup(s, name)
			n.inits = append(n.inits, slotCopy{inner: inner.bindNew(name), outer: outer})
		}
		if n.cond != nil {
			if err := rs.expr(n.cond, inner); err != nil {
				return err
			}
		}
		if err := rs.stmts(n.body, inner); err != nil {
			return err
		}
		return rs.stmts(n.els, s)
	case *setStmt:
		if err := rs.expr(n.e, s); err != nil {
			return err
		}
		rs.bind(s, n.target)
	case *setAttrStmt:
		n.ns.ref = rs.lookup(s, n.ns.name)
		return rs.expr(n.e, s)
	case *setBlockStmt:
		if err := rs.stmts(n.body, s); err != nil {
			return err
		}
		rs.bind(s, n.target)
	case *macroStmt:
		if s != rs.top {
			return notOwned("a macro outside the template's top level")
		}
		rs.bind(s, n.target)
		var cnt int32
		ms := rs.newScope(s, 1, &cnt)
		for _, p := range n.m.params {
			if _, dup := ms.names[p.name]; dup {
				return notOwned("a repeated macro parameter")
			}
			rs.bind(ms, p)
		}
		var names []string
		assignedNames(n.m.body, &names)
		for _, name := range names {
			if _, ok := ms.names[name]; !ok {
				ms.bindNew(name)
			}
		}
		for _, special := range []string{"varargs", "kwargs", "caller"} {
			if mentions(n.m.body, special) {
				return notOwned("a macro using %s", special)
			}
		}
		for _, d := range n.m.defaults {
			if d != nil {
				if err := rs.expr(d, ms); err != nil {
					return err
				}
			}
		}
		if err := rs.stmts(n.m.body, ms); err != nil {
			return err
		}
		n.m.nslots = int(cnt)
	default:
		return notOwned("statement %T", st)
	}
	return nil
}

// mentions reports whether a name is read anywhere in body (a
// conservative scan over the statements' expressions).
func mentions(body []stmt, name string) bool {
	found := false
	walkStmts(body, func(e expr) {
		if e == nil || found {
			return
		}
		walkExpr(e, func(x expr) {
			if n, ok := x.(*nameExpr); ok && n.name == name {
				found = true
			}
		})
	}, func(ns *nameExpr) {
		if ns.name == name {
			found = true
		}
	}, nil)
	return found
}

// walkStmts calls ex on every expression of body's statements (nil ones
// included), nested bodies too but not macros' (they have their own
// frames), nsTarget on each namespace an attribute assignment writes, and
// other, when not nil, on each statement of a kind it does not look into.
func walkStmts(body []stmt, ex func(expr), nsTarget func(*nameExpr), other func(stmt)) {
	for _, s := range body {
		switch n := s.(type) {
		case *outStmt:
			ex(n.e)
		case *ifStmt:
			for i, c := range n.conds {
				ex(c)
				walkStmts(n.bodies[i], ex, nsTarget, other)
			}
			walkStmts(n.els, ex, nsTarget, other)
		case *forStmt:
			ex(n.iter)
			ex(n.cond)
			walkStmts(n.body, ex, nsTarget, other)
			walkStmts(n.els, ex, nsTarget, other)
		case *setStmt:
			ex(n.e)
		case *setAttrStmt:
			ex(n.e)
			nsTarget(n.ns)
		case *setBlockStmt:
			walkStmts(n.body, ex, nsTarget, other)
		case *textStmt, *macroStmt, *breakStmt, *continueStmt:
		default:
			if other != nil {
				other(s)
			}
		}
	}
}

func walkExpr(e expr, f func(expr)) {
	if e == nil {
		return
	}
	f(e)
	switch n := e.(type) {
	case *attrExpr:
		walkExpr(n.obj, f)
	case *itemExpr:
		walkExpr(n.obj, f)
		walkExpr(n.key, f)
	case *sliceExpr:
		walkExpr(n.obj, f)
		walkExpr(n.lo, f)
		walkExpr(n.hi, f)
		walkExpr(n.step, f)
	case *callExpr:
		walkExpr(n.fn, f)
		for _, a := range n.args {
			walkExpr(a, f)
		}
		for _, a := range n.kwArgs {
			walkExpr(a, f)
		}
		walkExpr(n.star, f)
		walkExpr(n.dstar, f)
	case *methodExpr:
		walkExpr(n.obj, f)
		walkExpr(n.call, f)
	case *filterExpr:
		walkExpr(n.arg, f)
		walkExpr(n.call, f)
	case *testExpr:
		walkExpr(n.arg, f)
		for _, a := range n.args {
			walkExpr(a, f)
		}
	case *notExpr:
		walkExpr(n.x, f)
	case *negExpr:
		walkExpr(n.x, f)
	case *andExpr:
		walkExpr(n.l, f)
		walkExpr(n.r, f)
	case *orExpr:
		walkExpr(n.l, f)
		walkExpr(n.r, f)
	case *binExpr:
		walkExpr(n.l, f)
		walkExpr(n.r, f)
	case *cmpExpr:
		walkExpr(n.first, f)
		for _, a := range n.rest {
			walkExpr(a, f)
		}
	case *concatExpr:
		for _, a := range n.parts {
			walkExpr(a, f)
		}
	case *addExpr:
		for _, a := range n.parts {
			walkExpr(a, f)
		}
	case *condExpr:
		walkExpr(n.cond, f)
		walkExpr(n.a, f)
		walkExpr(n.b, f)
	case *listExpr:
		for _, a := range n.items {
			walkExpr(a, f)
		}
	case *dictExpr:
		for _, a := range n.vals {
			walkExpr(a, f)
		}
	}
}

func (rs *resolver) expr(e expr, s *rscope) error {
	var err error
	walkExpr(e, func(x expr) {
		if n, ok := x.(*nameExpr); ok {
			n.ref = rs.lookup(s, n.name)
		}
	})
	return err
}
