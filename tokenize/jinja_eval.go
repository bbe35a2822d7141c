package tokenize

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"
)

// The owned evaluator: renders a parsed template (jinja_parse.go) with
// Python jinja2's semantics in transformers' configuration
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols). Where Python raises and this file does not reproduce
// the error, or where it does not reproduce Python's output, it returns
// an *unsupportedError: the count is not exact and vLLM decides.

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

// Rendering.

type renderer struct {
	t      *ownedTemplate
	frames [2][]value
	out    *strings.Builder
	now    func() time.Time
	args   []value      // scratch for call arguments
	loops  []*loopState // free loop states (forStmt.loopLocal)
	// arena holds the strings the render builds by concatenation (+
	// chains). They live only as long as the render: nothing a render
	// returns or raises points into them (the output has its own buffer;
	// a raised message is cloned), so the pooled renderer writes its
	// last chunk again from the start at the next render.
	arena []byte
}

// arenaChunk is the size of an arena chunk; a string over a quarter of it
// gets an allocation of its own.
const arenaChunk = 8 << 10

// concat is strs joined (total bytes), in the render's arena.
func (r *renderer) concat(strs []string, total int) string {
	var b []byte
	switch {
	case total == 0:
		return ""
	case total > arenaChunk/4:
		b = make([]byte, 0, total)
	case len(r.arena)+total > cap(r.arena):
		r.arena = make([]byte, 0, arenaChunk)
		fallthrough
	default:
		b = r.arena[len(r.arena):len(r.arena)]
		r.arena = r.arena[:len(r.arena)+total]
	}
	for _, s := range strs {
		b = append(b, s...)
	}
	return unsafe.String(unsafe.SliceData(b), total)
}

var (
	errBreakLoop    = errors.New("break")
	errContinueLoop = errors.New("continue")
)

// varSource gives the render variables by name.
type varSource interface {
	lookup(name string) (value, bool)
}

// outputHinter is a varSource that knows about how long the output will
// be (a chat request: its body's length).
type outputHinter interface {
	outputHint() int
}

// mapVars are render variables given by name ([Template.Render]).
type mapVars map[string]value

func (vars mapVars) lookup(name string) (value, bool) {
	v, ok := vars[name]
	return v, ok
}

// render renders the template with vars (read, never written).
func (t *ownedTemplate) render(vars varSource, now func() time.Time) (string, error) {
	r, _ := t.pool.Get().(*renderer)
	if r == nil {
		r = &renderer{t: t, frames: [2][]value{make([]value, len(t.top))}}
	}
	defer func() {
		clear(r.frames[0])
		r.frames[1] = nil
		r.out, r.now = nil, nil
		r.args = r.args[:0]
		r.arena = r.arena[:0]
		t.pool.Put(r)
	}()
	r.now = now
	for i, name := range t.top {
		ts := &t.topInit[i]
		if ts.helper {
			r.frames[0][i] = ts.v
			continue
		}
		if v, ok := vars.lookup(name); ok {
			r.frames[0][i] = v
			continue
		}
		r.frames[0][i] = ts.v
	}
	var b strings.Builder
	t.hintM.Lock()
	hint := t.hint
	t.hintM.Unlock()
	if h, ok := vars.(outputHinter); ok {
		// A conversation's render is about as long as its request
		// (the template's markup in place of the JSON's): one
		// allocation instead of doubling up to it. The slack covers a
		// template that adds more per message than JSON spends, and
		// its own text (a date header); the first render's hint is
		// not used, as it would size every smaller request's buffer
		// at one and a half times that first request's render.
		n := h.outputHint()
		b.Grow(n + n/4 + 256)
	} else {
		b.Grow(hint)
	}
	r.out = &b
	if err := t.run(r); err != nil {
		return "", err
	}
	if hint == 0 {
		t.hintM.Lock()
		t.hint = b.Len() + b.Len()/2 + 64
		t.hintM.Unlock()
	}
	return b.String(), nil
}

func (r *renderer) get(x ref) value    { return r.frames[x.level][x.slot] }
func (r *renderer) set(x ref, v value) { r.frames[x.level][x.slot] = v }

func (r *renderer) exec(body []stmt) error {
	for _, st := range body {
		switch n := st.(type) {
		case *textStmt:
			r.out.WriteString(n.s)
		case *outStmt:
			if err := n.w(r); err != nil {
				return err
			}
		case *ifStmt:
			done := false
			for i, c := range n.cc {
				ok, err := c(r)
				if err != nil {
					return err
				}
				if ok {
					if err := r.exec(n.bodies[i]); err != nil {
						return err
					}
					done = true
					break
				}
			}
			if !done && n.els != nil {
				if err := r.exec(n.els); err != nil {
					return err
				}
			}
		case *forStmt:
			if err := r.execFor(n); err != nil {
				return err
			}
		case *setStmt:
			v, err := n.f(r)
			if err != nil {
				return err
			}
			r.set(n.target.ref, v)
		case *setAttrStmt:
			ns := r.get(n.ns.ref)
			if ns.k != kNS {
				return errPyRaises("TemplateRuntimeError: cannot assign attribute on non-namespace object")
			}
			v, err := n.f(r)
			if err != nil {
				return err
			}
			ns.p.(*nsVal).set(n.attr, v)
		case *setBlockStmt:
			saved := r.out
			var b strings.Builder
			r.out = &b
			err := r.exec(n.body)
			r.out = saved
			if err != nil {
				return err
			}
			r.set(n.target.ref, strV(b.String()))
		case *macroStmt:
			r.set(n.target.ref, value{k: kMacro, p: n.m})
		case *breakStmt:
			return errBreakLoop
		case *continueStmt:
			return errContinueLoop
		}
	}
	return nil
}

// loopState is jinja2's LoopContext for one run of a for loop.
type loopState struct {
	src   value   // a sequence, or a mapping whose keys are iterated
	vals  []value // the items, when src does not hold them
	n, i  int
	cycle []value
	rev   bool // src's items are read backwards
}

func (l *loopState) at(i int) value {
	switch {
	case l.vals != nil:
		return l.vals[i]
	case l.src.isSeq():
		if l.rev {
			i = l.n - 1 - i
		}
		return l.src.seqAt(i)
	}
	return strV(l.src.mapKey(i))
}

// iterate returns what Python iterates over in v, as a loopState's
// source.
func iterate(v value) (loopState, error) {
	switch v.k {
	case kSeq:
		sv := v.p.(*seqVal)
		if sv.lazy {
			if sv.used {
				return loopState{}, errUnsupported("a generator iterated twice")
			}
			sv.used = true
		}
		return loopState{src: v, n: len(sv.items)}, nil
	case kMap:
		return loopState{src: v, n: v.mapLen()}, nil
	case kStr:
		vals := make([]value, 0, len(v.s))
		for _, c := range v.s {
			vals = append(vals, strV(string(c)))
		}
		return loopState{vals: vals, n: len(vals)}, nil
	case kUndef:
		return loopState{vals: []value{}}, nil
	case kLoop:
		return loopState{}, errNotPython("iterating a loop object")
	}
	return loopState{}, errPyRaises("TypeError: object is not iterable")
}

func (r *renderer) execFor(n *forStmt) error {
	var ls loopState
	if src := r.reversible(n.rev); src.k != kUndef {
		// x[::-1] of a list: the same items, read backwards.
		ls = loopState{src: src, n: src.seqLen(), rev: true}
	} else {
		it, err := n.iterF(r)
		if err != nil {
			return err
		}
		if ls, err = iterate(it); err != nil {
			return err
		}
	}
	if n.cond != nil {
		var kept []value
		for i := 0; i < ls.n; i++ {
			item := ls.at(i)
			if err := r.bindTargets(n, item); err != nil {
				return err
			}
			c, err := n.condF(r)
			if err != nil {
				return err
			}
			if c {
				kept = append(kept, item)
			}
		}
		ls = loopState{vals: kept, n: len(kept)}
		if kept == nil {
			ls.vals = []value{}
		}
	}
	if ls.n == 0 {
		return n.elsF(r)
	}
	if !n.loopLocal {
		lp := new(loopState)
		*lp = ls
		return r.runLoop(n, lp)
	}
	// The loop object never leaves the loop: its state is reused.
	var lp *loopState
	if k := len(r.loops); k > 0 {
		lp, r.loops = r.loops[k-1], r.loops[:k-1]
	} else {
		lp = new(loopState)
	}
	*lp = ls
	err := r.runLoop(n, lp)
	*lp = loopState{}
	r.loops = append(r.loops, lp)
	return err
}

// runLoop runs a for loop's body over lp's items.
func (r *renderer) runLoop(n *forStmt, lp *loopState) error {
	r.set(n.loop, value{k: kLoop, p: lp})
	for i := 0; i < lp.n; i++ {
		lp.i = i
		if err := r.bindTargets(n, lp.at(i)); err != nil {
			return err
		}
		for _, c := range n.inits {
			r.set(c.inner, r.get(c.outer))
		}
		if err := n.bodyF(r); err != nil {
			if err == errBreakLoop {
				break
			}
			if err == errContinueLoop {
				continue
			}
			return err
		}
	}
	return nil
}

// reversible returns the list x is, for a loop over x[::-1] (undef: not
// such a loop, or not a list).
func (r *renderer) reversible(x *nameExpr) value {
	if x == nil {
		return undef
	}
	v := r.get(x.ref)
	if v.k == kSeq && !v.p.(*seqVal).lazy {
		return v
	}
	return undef
}

func (r *renderer) bindTargets(n *forStmt, item value) error {
	if len(n.targets) == 1 {
		r.set(n.targets[0].ref, item)
		return nil
	}
	ls, err := iterate(item)
	if err != nil {
		return err
	}
	if ls.n != len(n.targets) {
		return errPyRaises("ValueError: wrong number of values to unpack")
	}
	for i, t := range n.targets {
		r.set(t.ref, ls.at(i))
	}
	return nil
}

// write evaluates e and writes str() of it, without building the
// intermediate strings of + chains, ~ chains, conditionals and tojson.
func (r *renderer) write(e expr) error {
	switch n := e.(type) {
	case *litExpr:
		if n.v.k == kStr {
			r.out.WriteString(n.v.s)
			return nil
		}
	case *concatExpr:
		for _, p := range n.parts {
			if err := r.write(p); err != nil {
				return err
			}
		}
		return nil
	case *condExpr:
		c, err := r.eval(n.cond)
		if err != nil {
			return err
		}
		if c.truth() {
			return r.write(n.a)
		}
		if n.b == nil {
			return nil
		}
		return r.write(n.b)
	case *addExpr:
		return r.writeAdd(n)
	case *filterExpr:
		if n.name == "tojson" {
			v, err := r.eval(n.arg)
			if err != nil {
				return err
			}
			return r.tojson(r.out, v, n.call)
		}
	}
	v, err := r.eval(e)
	if err != nil {
		return err
	}
	return writeStr(r.out, v)
}

// writeAdd writes a + chain: as long as its operands are strings, each
// is written as it comes (Python's str + str); otherwise it is evaluated
// as Python would.
func (r *renderer) writeAdd(n *addExpr) error {
	first, err := r.eval(n.parts[0])
	if err != nil {
		return err
	}
	if !plainStr(first) {
		v, err := r.addFrom(first, n.parts[1:])
		if err != nil {
			return err
		}
		return writeStr(r.out, v)
	}
	start := r.out.Len()
	r.out.WriteString(first.s)
	for i, p := range n.parts[1:] {
		v, err := r.eval(p)
		if err != nil {
			return err
		}
		if isMarkup(v) {
			return rewriteMarkupAdd(r, start, v, func(acc value) (value, error) { return r.addFrom(acc, n.parts[i+2:]) })
		}
		if err := writeOperand(r.out, v); err != nil {
			return err
		}
	}
	return nil
}

// rewriteMarkupAdd continues a + chain whose plain str operands were
// written from start when operand m is Markup: str + Markup escapes the
// str (Markup.__radd__), so the written text is taken back, added to m,
// the rest of the chain (rest) added, and the result written.
func rewriteMarkupAdd(r *renderer, start int, m value, rest func(acc value) (value, error)) error {
	s := r.out.String()
	r.out.Reset()
	r.out.WriteString(s[:start])
	acc, err := add(strV(s[start:]), m)
	if err != nil {
		return err
	}
	if acc, err = rest(acc); err != nil {
		return err
	}
	return writeStr(r.out, acc)
}

// writeOperand writes v, a later operand of a + chain whose first was a
// string (already written): Python's str + v, an error unless v is a
// string too.
func writeOperand(out *strings.Builder, v value) error {
	if isMarkup(v) {
		// str + Markup escapes the str, which is written already.
		return errMarkup("+ after a written str")
	}
	if v.k != kStr {
		_, err := add(emptyS, v)
		return err // always an error: str + non-str
	}
	out.WriteString(v.s)
	return nil
}

// addFrom folds + over the remaining operands, from acc.
func (r *renderer) addFrom(acc value, rest []expr) (value, error) {
	for _, p := range rest {
		v, err := r.eval(p)
		if err != nil {
			return undef, err
		}
		if acc, err = add(acc, v); err != nil {
			return undef, err
		}
	}
	return acc, nil
}

// evalAdd evaluates a + chain; a chain of strings is joined with one
// allocation.
func (r *renderer) evalAdd(n *addExpr) (value, error) {
	first, err := r.eval(n.parts[0])
	if err != nil || !plainStr(first) {
		if err != nil {
			return undef, err
		}
		return r.addFrom(first, n.parts[1:])
	}
	var buf [8]string
	strs := append(buf[:0], first.s)
	total := len(first.s)
	for i, p := range n.parts[1:] {
		v, err := r.eval(p)
		if err != nil {
			return undef, err
		}
		if !plainStr(v) {
			acc := strV(strings.Join(strs, ""))
			if acc, err = add(acc, v); err != nil {
				return undef, err
			}
			return r.addFrom(acc, n.parts[i+2:])
		}
		strs = append(strs, v.s)
		total += len(v.s)
	}
	return strV(r.concat(strs, total)), nil
}

// ev is eval with the commonest leaf, a variable, read in place.
func (r *renderer) ev(e expr) (value, error) {
	if n, ok := e.(*nameExpr); ok {
		return r.frames[n.ref.level][n.ref.slot], nil
	}
	return r.eval(e)
}

func (r *renderer) eval(e expr) (value, error) {
	switch n := e.(type) {
	case *litExpr:
		return n.v, nil
	case *nameExpr:
		return r.frames[n.ref.level][n.ref.slot], nil
	case *attrExpr:
		return r.evalAttr(n)
	case *itemExpr:
		return r.evalItem(n)
	case *sliceExpr:
		return r.evalSlice(n)
	case *callExpr:
		return r.evalCall(n)
	case *methodExpr:
		return r.evalMethod(n)
	case *filterExpr:
		return r.evalFilter(n)
	case *testExpr:
		return r.evalTest(n)
	case *notExpr:
		return r.evalNot(n)
	case *negExpr:
		return r.evalNeg(n)
	case *andExpr:
		return r.evalAnd(n)
	case *orExpr:
		return r.evalOr(n)
	case *binExpr:
		return r.evalBin(n)
	case *cmpExpr:
		return r.evalCmp(n)
	case *concatExpr:
		return r.evalConcat(n)
	case *addExpr:
		return r.evalAdd(n)
	case *condExpr:
		return r.evalCond(n)
	case *listExpr:
		return r.evalList(n)
	case *dictExpr:
		return r.evalDict(n)
	}
	return undef, fmt.Errorf("owned evaluator: unknown expression %T", e)
}

func (r *renderer) evalAttr(n *attrExpr) (value, error) {
	o, err := r.ev(n.obj)
	if err != nil {
		return undef, err
	}
	return getAttr(o, n.name)
}

func (r *renderer) evalItem(n *itemExpr) (value, error) {
	o, err := r.ev(n.obj)
	if err != nil {
		return undef, err
	}
	if isMarkup(o) {
		return undef, errMarkup("an item")
	}
	if n.hasSKey {
		return getItem(o, strV(n.skey))
	}
	k, err := r.ev(n.key)
	if err != nil {
		return undef, err
	}
	return getItem(o, k)
}

func (r *renderer) evalMethod(n *methodExpr) (value, error) {
	o, err := r.ev(n.obj)
	if err != nil {
		return undef, err
	}
	mark := len(r.args)
	defer func() { r.args = r.args[:mark] }()
	args, kwNames, kw, err := r.evalArgs(n.call)
	if err != nil {
		return undef, err
	}
	return r.callMethod(o, n.name, args, kwNames, kw)
}

func (r *renderer) evalTest(n *testExpr) (value, error) {
	v, err := r.ev(n.arg)
	if err != nil {
		return undef, err
	}
	var args [1]value
	for i, a := range n.args {
		if args[i], err = r.ev(a); err != nil {
			return undef, err
		}
	}
	ok, err := applyTest(n.name, v, args[:len(n.args)])
	return boolV(ok), err
}

func (r *renderer) evalNot(n *notExpr) (value, error) {
	v, err := r.ev(n.x)
	return boolV(!v.truth()), err
}

func (r *renderer) evalNeg(n *negExpr) (value, error) {
	v, err := r.eval(n.x)
	if err != nil {
		return undef, err
	}
	switch v.k {
	case kBool, kInt:
		if !n.neg {
			return intV(v.n), nil
		}
		if v.n == math.MinInt64 {
			return undef, errUnsupported("integer overflow")
		}
		return intV(-v.n), nil
	case kFloat:
		if n.neg {
			return floatV(-v.f()), nil
		}
		return v, nil
	}
	return undef, errPyRaises("TypeError: bad operand type for unary -")
}

func (r *renderer) evalAnd(n *andExpr) (value, error) {
	l, err := r.ev(n.l)
	if err != nil || !l.truth() {
		return l, err
	}
	return r.ev(n.r)
}

func (r *renderer) evalOr(n *orExpr) (value, error) {
	l, err := r.ev(n.l)
	if err != nil || l.truth() {
		return l, err
	}
	return r.ev(n.r)
}

func (r *renderer) evalBin(n *binExpr) (value, error) {
	l, err := r.eval(n.l)
	if err != nil {
		return undef, err
	}
	rv, err := r.eval(n.r)
	if err != nil {
		return undef, err
	}
	return arith(n.op, l, rv)
}

func (r *renderer) evalCmp(n *cmpExpr) (value, error) {
	l, err := r.ev(n.first)
	if err != nil {
		return undef, err
	}
	for i, op := range n.ops {
		rv, err := r.ev(n.rest[i])
		if err != nil {
			return undef, err
		}
		ok, err := compare(op, l, rv)
		if err != nil || !ok {
			return falseV, err
		}
		l = rv
	}
	return trueV, nil
}

func (r *renderer) evalConcat(n *concatExpr) (value, error) {
	var b strings.Builder
	for _, p := range n.parts {
		v, err := r.eval(p)
		if err != nil {
			return undef, err
		}
		if err := writeStr(&b, v); err != nil {
			return undef, err
		}
	}
	return strV(b.String()), nil
}

func (r *renderer) evalCond(n *condExpr) (value, error) {
	c, err := r.eval(n.cond)
	if err != nil {
		return undef, err
	}
	if c.truth() {
		return r.eval(n.a)
	}
	if n.b == nil {
		return undef, nil
	}
	return r.eval(n.b)
}

func (r *renderer) evalList(n *listExpr) (value, error) {
	items := make([]value, len(n.items))
	for i, it := range n.items {
		v, err := r.eval(it)
		if err != nil {
			return undef, err
		}
		items[i] = v
	}
	return value{k: kSeq, p: &seqVal{items: items, tuple: n.tuple}}, nil
}

func (r *renderer) evalDict(n *dictExpr) (value, error) {
	m := &mapVal{fields{keys: n.keys, vals: make([]value, len(n.vals))}}
	for i, x := range n.vals {
		v, err := r.eval(x)
		if err != nil {
			return undef, err
		}
		m.vals[i] = v
	}
	return value{k: kMap, p: m}, nil
}

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
		// Repetition: str or list times an int.
		s, n := a, b
		if a.k == kInt || a.k == kBool {
			s, n = b, a
		}
		if (s.k == kStr || s.isSeq()) && (n.k == kInt || n.k == kBool) {
			cnt := max(n.n, 0)
			if s.k == kStr {
				if int64(len(s.s))*cnt > 1<<24 {
					return undef, errUnsupported("a very long repetition")
				}
				return strV(strings.Repeat(s.s, int(cnt))), nil
			}
			if int64(s.seqLen())*cnt > 1<<20 || (s.k == kSeq && s.p.(*seqVal).noRepr != "") {
				return undef, errUnsupported("list repetition")
			}
			var items []value
			for range cnt {
				for i := range s.seqLen() {
					items = append(items, s.seqAt(i))
				}
			}
			return value{k: kSeq, p: &seqVal{items: items, tuple: s.k == kSeq && s.p.(*seqVal).tuple}}, nil
		}
	}
	if !a.isNumber() || !b.isNumber() {
		if op == "%" && a.k == kStr {
			return undef, errNotPython("string % formatting")
		}
		return undef, errPyRaises("TypeError: unsupported operand types for " + op)
	}
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

// Attribute and item access, as jinja2's sandboxed getattr and getitem.

var (
	strMethods  = setOf("capitalize casefold center count encode endswith expandtabs find format format_map index isalnum isalpha isascii isdecimal isdigit isidentifier islower isnumeric isprintable isspace istitle isupper join ljust lower lstrip maketrans partition removeprefix removesuffix replace rfind rindex rjust rpartition rsplit rstrip split splitlines startswith strip swapcase title translate upper zfill")
	listMethods = setOf("append clear copy count extend index insert pop remove reverse sort")
	dictMethods = setOf("clear copy fromkeys get items keys pop popitem setdefault update values")
	numAttrs    = setOf("real imag numerator denominator conjugate bit_length bit_count as_integer_ratio to_bytes from_bytes is_integer hex fromhex")
)

func setOf(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

func method(recv value, name string) value {
	return value{k: kFunc, p: &funcVal{name: name, recv: recv}}
}

// attrFlags records which types have a method or attribute of a name.
type attrFlags uint8

const (
	flDictMethod attrFlags = 1 << iota
	flStrMethod
	flListMethod
	flNumAttr
)

func flagsOf(name string) attrFlags {
	var f attrFlags
	if dictMethods[name] {
		f |= flDictMethod
	}
	if strMethods[name] {
		f |= flStrMethod
	}
	if listMethods[name] {
		f |= flListMethod
	}
	if numAttrs[name] {
		f |= flNumAttr
	}
	return f
}

func getAttr(o value, name string) (value, error) {
	switch o.k {
	case kMap:
		if dictMethods[name] {
			return method(o, name), nil
		}
		v, _ := o.mapGet(name)
		return v, nil
	case kStr:
		if strMethods[name] {
			return method(o, name), nil
		}
	case kSeq:
		if listMethods[name] {
			return method(o, name), nil
		}
	case kNS:
		v, _ := o.p.(*nsVal).get(name)
		return v, nil
	case kLoop:
		return loopAttr(o.p.(*loopState), name)
	case kUndef:
		return undef, errPyRaises("UndefinedError: attribute of an undefined value")
	case kNone, kBool, kInt, kFloat:
		if numAttrs[name] {
			return undef, errNotPython("a number's attribute")
		}
	case kFunc, kMacro:
		return undef, errNotPython("an attribute of a function")
	}
	return undef, nil
}

func loopAttr(l *loopState, name string) (value, error) {
	switch name {
	case "index":
		return intV(int64(l.i + 1)), nil
	case "index0":
		return intV(int64(l.i)), nil
	case "revindex":
		return intV(int64(l.n - l.i)), nil
	case "revindex0":
		return intV(int64(l.n - l.i - 1)), nil
	case "first":
		return boolV(l.i == 0), nil
	case "last":
		return boolV(l.i == l.n-1), nil
	case "length":
		return intV(int64(l.n)), nil
	case "depth":
		return intV(1), nil
	case "depth0":
		return intV(0), nil
	case "previtem":
		if l.i == 0 {
			return undef, nil
		}
		return l.at(l.i - 1), nil
	case "nextitem":
		if l.i+1 >= l.n {
			return undef, nil
		}
		return l.at(l.i + 1), nil
	}
	return undef, errNotPython("loop." + name)
}

func getItem(o, k value) (value, error) {
	switch o.k {
	case kMap:
		if k.k == kStr {
			if v, ok := o.mapGet(k.s); ok {
				return v, nil
			}
			if dictMethods[k.s] {
				return method(o, k.s), nil
			}
		}
		return undef, nil
	case kSeq:
		if k.k == kInt || k.k == kBool {
			if o.k == kSeq && o.p.(*seqVal).lazy {
				return undef, nil // a generator is not subscriptable
			}
			n := int64(o.seqLen())
			i := k.n
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return undef, nil
			}
			return o.seqAt(int(i)), nil
		}
		if k.k == kStr {
			return getAttr(o, k.s)
		}
		return undef, nil
	case kStr:
		if k.k == kInt || k.k == kBool {
			i := k.n
			if i < 0 {
				i += int64(utf8.RuneCountInString(o.s))
			}
			if i < 0 {
				return undef, nil
			}
			for _, c := range o.s {
				if i == 0 {
					return strV(string(c)), nil
				}
				i--
			}
			return undef, nil
		}
		if k.k == kStr {
			return getAttr(o, k.s)
		}
		return undef, nil
	case kUndef:
		return undef, errPyRaises("UndefinedError: item of an undefined value")
	case kNS, kLoop:
		if k.k == kStr {
			return getAttr(o, k.s)
		}
		return undef, nil
	case kFunc, kMacro:
		return undef, errNotPython("an item of a function")
	}
	return undef, nil
}

func (r *renderer) evalSlice(n *sliceExpr) (value, error) {
	o, err := r.eval(n.obj)
	if err != nil {
		return undef, err
	}
	if isMarkup(o) {
		return undef, errMarkup("a slice")
	}
	var b [3]value
	for i, x := range []expr{n.lo, n.hi, n.step} {
		b[i] = noneV
		if x != nil {
			if b[i], err = r.eval(x); err != nil {
				return undef, err
			}
		}
	}
	for _, x := range b {
		if x.k != kNone && x.k != kInt && x.k != kBool {
			if o.k == kUndef {
				return undef, errPyRaises("UndefinedError: slice of an undefined value")
			}
			return undef, nil // TypeError, which jinja2's getitem turns into Undefined
		}
	}
	step := int64(1)
	if b[2].k != kNone {
		step = b[2].n
	}
	if step == 0 {
		return undef, errPyRaises("ValueError: slice step cannot be zero")
	}
	var n0 int
	var chars []value
	switch o.k {
	case kSeq:
		if o.k == kSeq && o.p.(*seqVal).lazy {
			return undef, nil
		}
		n0 = o.seqLen()
	case kStr:
		if isASCIIStr(o.s) {
			n0 = len(o.s)
		} else {
			for _, c := range o.s {
				chars = append(chars, strV(string(c)))
			}
			n0 = len(chars)
		}
	case kUndef:
		return undef, errPyRaises("UndefinedError: slice of an undefined value")
	default:
		return undef, nil
	}
	start, stop := sliceIndices(b[0], b[1], step, int64(n0))
	if o.k == kStr {
		if chars == nil && step == 1 {
			if start >= stop {
				return emptyS, nil
			}
			return strV(o.s[start:stop]), nil
		}
		var sb strings.Builder
		for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
			if chars == nil {
				sb.WriteByte(o.s[i])
			} else {
				sb.WriteString(chars[i].s)
			}
		}
		return strV(sb.String()), nil
	}
	var items []value
	if o.k == kSeq && step == 1 && start < stop {
		// A list is never modified in place: the slice shares its items.
		sv := o.p.(*seqVal)
		return value{k: kSeq, p: &seqVal{items: sv.items[start:stop:stop], tuple: sv.tuple}}, nil
	}
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		items = append(items, o.seqAt(int(i)))
	}
	if items == nil {
		items = []value{}
	}
	return value{k: kSeq, p: &seqVal{items: items, tuple: o.k == kSeq && o.p.(*seqVal).tuple}}, nil
}

// sliceIndices is Python's slice.indices(n) (for step != 0).
func sliceIndices(lo, hi value, step, n int64) (int64, int64) {
	clamp := func(v value, def int64) int64 {
		if v.k == kNone {
			return def
		}
		i := v.n
		if i < 0 {
			i += n
			if i < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		} else if i >= n {
			if step < 0 {
				return n - 1
			}
			return n
		}
		return i
	}
	if step > 0 {
		return clamp(lo, 0), clamp(hi, n)
	}
	return clamp(lo, n-1), clamp(hi, -1)
}

func isASCIIStr(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Calls.

// evalArgs evaluates a call's arguments onto the renderer's argument
// stack; the caller pops them with r.args = r.args[:mark]. It returns the
// positional arguments and the keyword arguments with their names.
func (r *renderer) evalArgs(c *callExpr) (args []value, kwNames []string, kw []value, err error) {
	if c.star != nil || c.dstar != nil {
		return r.evalUnpacked(c)
	}
	na := len(c.args) + len(c.kwArgs)
	if na == 0 {
		return nil, nil, nil, nil
	}
	for _, a := range c.args {
		v, err := r.eval(a)
		if err != nil {
			return nil, nil, nil, err
		}
		r.args = append(r.args, v)
	}
	for _, a := range c.kwArgs {
		v, err := r.eval(a)
		if err != nil {
			return nil, nil, nil, err
		}
		r.args = append(r.args, v)
	}
	all := r.args[len(r.args)-na:]
	return all[:len(c.args):len(c.args)], c.kwNames, all[len(c.args):], nil
}

// evalUnpacked is evalArgs for a call with *star or **dstar, as Python
// calls f(a, k=v, *star, **dstar): the positional arguments, then star's
// items (what a for loop over it iterates: a list's items, a string's
// characters, a dict's keys; Undefined, which jinja2 iterates as empty,
// none), then the keyword arguments and dstar's items (a mapping; a key
// given twice is Python's TypeError).
func (r *renderer) evalUnpacked(c *callExpr) (args []value, kwNames []string, kw []value, err error) {
	var pos []value
	for _, a := range c.args {
		v, err := r.eval(a)
		if err != nil {
			return nil, nil, nil, err
		}
		pos = append(pos, v)
	}
	if c.star != nil {
		v, err := r.eval(c.star)
		if err != nil {
			return nil, nil, nil, err
		}
		switch v.k {
		case kNone, kBool, kInt, kFloat:
			return nil, nil, nil, errPyRaises("TypeError: argument after * must be an iterable")
		}
		ls, err := iterate(v)
		if err != nil {
			return nil, nil, nil, err
		}
		for i := range ls.n {
			pos = append(pos, ls.at(i))
		}
	}
	kwNames = append([]string(nil), c.kwNames...)
	for _, a := range c.kwArgs {
		v, err := r.eval(a)
		if err != nil {
			return nil, nil, nil, err
		}
		kw = append(kw, v)
	}
	if c.dstar != nil {
		v, err := r.eval(c.dstar)
		if err != nil {
			return nil, nil, nil, err
		}
		if !v.isMap() {
			return nil, nil, nil, errPyRaises("TypeError: argument after ** must be a mapping")
		}
		for i := range v.mapLen() {
			k := v.mapKey(i)
			if slices.Contains(kwNames, k) {
				return nil, nil, nil, errPyRaises("TypeError: got multiple values for keyword argument " + strconv.Quote(k))
			}
			kwNames = append(kwNames, k)
			kw = append(kw, v.mapVal(i))
		}
	}
	return pos, kwNames, kw, nil
}

func (r *renderer) evalCall(c *callExpr) (value, error) {
	fn, err := r.eval(c.fn)
	if err != nil {
		return undef, err
	}
	mark := len(r.args)
	defer func() { r.args = r.args[:mark] }()
	args, kwNames, kw, err := r.evalArgs(c)
	if err != nil {
		return undef, err
	}
	switch fn.k {
	case kMacro:
		return r.callMacro(fn.p.(*macroDef), args, kwNames, kw)
	case kFunc:
		f := fn.p.(*funcVal)
		if f.recv.k != kUndef {
			return r.callMethod(f.recv, f.name, args, kwNames, kw)
		}
		return r.callGlobal(f.name, args, kwNames, kw)
	case kUndef:
		return undef, errPyRaises("UndefinedError: calling an undefined value")
	case kLoop:
		return undef, errNotPython("calling loop")
	}
	return undef, errPyRaises("TypeError: object is not callable")
}

func (r *renderer) callGlobal(name string, args []value, kwNames []string, kw []value) (value, error) {
	switch name {
	case "raise_exception":
		if len(kw) > 0 {
			return undef, errNotPython("raise_exception with keyword arguments")
		}
		msg := ""
		if len(args) > 0 {
			var err error
			if msg, err = pyStrV(args[0]); err != nil {
				return undef, err
			}
		}
		return undef, &raisedError{strings.Clone(msg)} // msg may be in the arena
	case "strftime_now":
		if len(kw) > 0 || len(args) > 1 {
			return undef, errNotPython("strftime_now with more arguments")
		}
		if len(args) == 0 {
			return undef, &TemplateError{"strftime_now() missing 1 required positional argument: 'format'"}
		}
		f, err := pyStrV(args[0])
		if err != nil {
			return undef, err
		}
		now := r.now
		if now == nil {
			now = time.Now
		}
		return strV(pyStrftime(now(), f)), nil
	case "namespace":
		if len(args) > 0 {
			return undef, errNotPython("namespace with positional arguments")
		}
		ns := &nsVal{fields{keys: append([]string(nil), kwNames...), vals: append([]value(nil), kw...)}}
		return value{k: kNS, p: ns}, nil
	case "range":
		if len(kw) > 0 || len(args) == 0 || len(args) > 3 {
			return undef, errPyRaises("TypeError: range arguments")
		}
		var a [3]int64
		for i, v := range args {
			if v.k != kInt && v.k != kBool {
				return undef, errPyRaises("TypeError: range of a non-integer")
			}
			a[i] = v.n
		}
		start, stop, step := int64(0), a[0], int64(1)
		if len(args) > 1 {
			start, stop = a[0], a[1]
		}
		if len(args) > 2 {
			step = a[2]
		}
		if step == 0 {
			return undef, errPyRaises("ValueError: range() arg 3 must not be zero")
		}
		var items []value
		for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
			if len(items) >= 100000 {
				return undef, errPyRaises("OverflowError: range too big")
			}
			items = append(items, intV(i))
		}
		if items == nil {
			items = []value{}
		}
		return value{k: kSeq, p: &seqVal{items: items, noRepr: "a range"}}, nil
	}
	return undef, errNotPython("calling " + name)
}

func (r *renderer) callMacro(m *macroDef, args []value, kwNames []string, kw []value) (value, error) {
	if len(args) > len(m.params) {
		return undef, errPyRaises("TypeError: macro takes fewer arguments")
	}
	for _, k := range kwNames {
		found := false
		for _, p := range m.params {
			found = found || p.name == k
		}
		if !found {
			return undef, errPyRaises("TypeError: macro has no argument " + k)
		}
	}
	saved := r.frames[1]
	r.frames[1] = make([]value, m.nslots)
	defer func() { r.frames[1] = saved }()
	for i, p := range m.params {
		if i < len(args) {
			r.set(p.ref, args[i])
			continue
		}
		got := false
		for j, k := range kwNames {
			if k == p.name {
				r.set(p.ref, kw[j])
				got = true
			}
		}
		if got {
			continue
		}
		if i < len(args) {
			return undef, errPyRaises("TypeError: macro got multiple values")
		}
		if d := m.defaults[i]; d != nil {
			v, err := r.eval(d)
			if err != nil {
				return undef, err
			}
			r.set(p.ref, v)
		}
	}
	for i, p := range m.params {
		for _, k := range kwNames {
			if k == p.name && i < len(args) {
				return undef, errPyRaises("TypeError: macro got multiple values")
			}
		}
	}
	savedOut := r.out
	var b strings.Builder
	r.out = &b
	err := r.exec(m.body)
	r.out = savedOut
	if err != nil {
		return undef, err
	}
	return strV(b.String()), nil
}

func (r *renderer) callMethod(o value, name string, args []value, kwNames []string, kw []value) (value, error) {
	if isMarkup(o) && name != "startswith" && name != "endswith" {
		return undef, errMarkup("str." + name)
	}
	switch o.k {
	case kStr:
		if strMethods[name] {
			return strMethod(o.s, name, args, kwNames, kw)
		}
	case kMap:
		if dictMethods[name] {
			return dictMethod(o, name, args, kw)
		}
	case kLoop:
		if name == "cycle" {
			if len(kw) > 0 || len(args) == 0 {
				return undef, errPyRaises("TypeError: no items for cycling given")
			}
			l := o.p.(*loopState)
			return args[l.i%len(args)], nil
		}
	case kSeq:
		if listMethods[name] {
			return undef, errNotPython("list." + name)
		}
	}
	// Not a method of that type: the attribute (or item) is looked up
	// and called.
	f, err := getAttr(o, name)
	if err != nil {
		return undef, err
	}
	switch f.k {
	case kUndef:
		return undef, errPyRaises("UndefinedError: calling an undefined value")
	case kMacro:
		return r.callMacro(f.p.(*macroDef), args, kwNames, kw)
	}
	return undef, errNotPython("calling an attribute")
}

// strArg returns a method argument that must be a str (or None when
// noneOK).
func strArg(v value, noneOK bool) (string, bool, error) {
	switch {
	case v.k == kStr:
		return v.s, true, nil
	case v.k == kNone && noneOK:
		return "", false, nil
	}
	return "", false, errPyRaises("TypeError: a str method argument must be str")
}

func strMethod(s, name string, args []value, kwNames []string, kw []value) (value, error) {
	switch name {
	case "strip", "lstrip", "rstrip":
		if len(kw) > 0 || len(args) > 1 {
			return undef, errPyRaises("TypeError: strip arguments")
		}
		chars, has := "", false
		if len(args) == 1 {
			var err error
			if chars, has, err = strArg(args[0], true); err != nil {
				return undef, err
			}
		}
		switch {
		case has && name == "strip":
			return strV(strings.Trim(s, chars)), nil
		case has && name == "lstrip":
			return strV(strings.TrimLeft(s, chars)), nil
		case has:
			return strV(strings.TrimRight(s, chars)), nil
		case name == "strip":
			return strV(strings.TrimFunc(s, pyIsSpace)), nil
		case name == "lstrip":
			return strV(strings.TrimLeftFunc(s, pyIsSpace)), nil
		}
		return strV(strings.TrimRightFunc(s, pyIsSpace)), nil
	case "split":
		sep, maxsplit := noneV, intV(-1)
		if len(args) > 2 {
			return undef, errPyRaises("TypeError: split arguments")
		}
		if len(args) > 0 {
			sep = args[0]
		}
		if len(args) > 1 {
			maxsplit = args[1]
		}
		for i, k := range kwNames {
			switch k {
			case "sep":
				sep = kw[i]
			case "maxsplit":
				maxsplit = kw[i]
			default:
				return undef, errPyRaises("TypeError: split keyword")
			}
		}
		if maxsplit.k != kInt && maxsplit.k != kBool {
			return undef, errPyRaises("TypeError: maxsplit")
		}
		var parts []string
		switch sep.k {
		case kNone:
			if maxsplit.n >= 0 {
				return undef, errUnsupported("split() on whitespace with maxsplit")
			}
			parts = strings.FieldsFunc(s, pyIsSpace)
		case kStr:
			if sep.s == "" {
				return undef, errPyRaises("ValueError: empty separator")
			}
			n := -1
			if maxsplit.n >= 0 {
				n = int(min(maxsplit.n, int64(len(s)))) + 1
			}
			parts = strings.SplitN(s, sep.s, n)
		default:
			return undef, errPyRaises("TypeError: split separator")
		}
		items := make([]value, len(parts))
		for i, p := range parts {
			items[i] = strV(p)
		}
		return value{k: kSeq, p: &seqVal{items: items}}, nil
	case "startswith", "endswith":
		if len(kw) > 0 || len(args) != 1 {
			return undef, errUnsupported("str." + name + " with start or end")
		}
		var prefixes []string
		switch a := args[0]; {
		case a.k == kStr:
			prefixes = []string{a.s}
		case a.k == kSeq && a.p.(*seqVal).tuple:
			for _, it := range a.p.(*seqVal).items {
				if it.k != kStr {
					return undef, errPyRaises("TypeError: " + name + " tuple of non-str")
				}
				prefixes = append(prefixes, it.s)
			}
		default:
			return undef, errPyRaises("TypeError: " + name + " argument")
		}
		for _, p := range prefixes {
			if name == "startswith" && strings.HasPrefix(s, p) || name == "endswith" && strings.HasSuffix(s, p) {
				return trueV, nil
			}
		}
		return falseV, nil
	case "replace":
		if len(args) < 2 || len(args) > 3 || len(kw) > 0 {
			return undef, errPyRaises("TypeError: replace arguments")
		}
		if args[0].k != kStr || args[1].k != kStr {
			return undef, errPyRaises("TypeError: replace arguments must be str")
		}
		n := -1
		if len(args) == 3 {
			if args[2].k != kInt && args[2].k != kBool {
				return undef, errPyRaises("TypeError: replace count")
			}
			n = int(max(min(args[2].n, int64(len(s))+1), -1))
		}
		return strV(strings.Replace(s, args[0].s, args[1].s, n)), nil
	case "upper", "lower":
		if len(args)+len(kw) > 0 {
			return undef, errPyRaises("TypeError: " + name + " takes no arguments")
		}
		return caseASCII(s, name == "upper")
	case "title":
		if len(args)+len(kw) > 0 {
			return undef, errPyRaises("TypeError: title takes no arguments")
		}
		return titleASCII(s)
	case "format":
		return strFormat(s, args, kwNames, kw)
	}
	return undef, errNotPython("str." + name)
}

// strFormat is str.format for replacement fields {}, {0} and {name}, with
// no conversion and a format spec of "", "d" (an int) or "s" (a str);
// anything else is declined.
func strFormat(s string, args []value, kwNames []string, kw []value) (value, error) {
	var b strings.Builder
	auto, manual := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return undef, errPyRaises("ValueError: Single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i+1:], '}')
		if end < 0 {
			return undef, errPyRaises("ValueError: expected '}' before end of string")
		}
		field := s[i+1 : i+1+end]
		i += 1 + end
		name, spec, _ := strings.Cut(field, ":")
		if strings.ContainsAny(field, "{!.[") {
			return undef, errNotPython("str.format field " + strconv.Quote(field))
		}
		var v value
		switch {
		case name == "" || isDigits(name):
			n := auto
			if name == "" {
				if manual {
					return undef, errPyRaises("ValueError: cannot switch from manual field specification to automatic field numbering")
				}
				auto++
			} else {
				if auto > 0 {
					return undef, errPyRaises("ValueError: cannot switch from automatic field numbering to manual field specification")
				}
				manual = true
				var err error
				if n, err = strconv.Atoi(name); err != nil {
					return undef, errUnsupported("str.format index")
				}
			}
			if n >= len(args) {
				return undef, errPyRaises("IndexError: Replacement index out of range")
			}
			v = args[n]
		default:
			j := slices.Index(kwNames, name)
			if j < 0 {
				return undef, errPyRaises("KeyError: " + name)
			}
			v = kw[j]
		}
		switch {
		case spec == "":
			if err := writeStr(&b, v); err != nil {
				return undef, err
			}
		case spec == "d" && (v.k == kInt || v.k == kBool):
			b.WriteString(strconv.FormatInt(v.n, 10))
		case spec == "s" && v.k == kStr:
			b.WriteString(v.s)
		default:
			return undef, errNotPython("str.format spec " + strconv.Quote(spec))
		}
	}
	return strV(b.String()), nil
}

// titleASCII is Python's str.title on ASCII text: a letter after a
// letter is lowered, any other letter raised (digits, apostrophes and
// underscores end a word: "3rd" is "3Rd", "it's" is "It'S").
func titleASCII(s string) (value, error) {
	if !isASCIIStr(s) {
		return undef, errUnsupported("title of non-ASCII text")
	}
	b := []byte(s)
	prevLetter := false
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			if !prevLetter {
				b[i] = c - 'a' + 'A'
			}
			prevLetter = true
		case 'A' <= c && c <= 'Z':
			if prevLetter {
				b[i] = c - 'A' + 'a'
			}
			prevLetter = true
		default:
			prevLetter = false
		}
	}
	return strV(string(b)), nil
}

func caseASCII(s string, upper bool) (value, error) {
	if !isASCIIStr(s) {
		return undef, errUnsupported("upper or lower of non-ASCII text")
	}
	if upper {
		return strV(strings.ToUpper(s)), nil
	}
	return strV(strings.ToLower(s)), nil
}

func dictMethod(o value, name string, args, kw []value) (value, error) {
	switch name {
	case "update", "pop", "popitem", "setdefault", "clear":
		return undef, errPyRaises("SecurityError: access to attribute '" + name + "' of 'dict' object is unsafe.")
	}
	if len(kw) > 0 {
		return undef, errPyRaises("TypeError: dict." + name + " takes no keyword arguments")
	}
	switch name {
	case "get":
		if len(args) == 0 || len(args) > 2 {
			return undef, errPyRaises("TypeError: get arguments")
		}
		if args[0].k == kStr {
			if v, ok := o.mapGet(args[0].s); ok {
				return v, nil
			}
		} else if k := args[0].k; k == kSeq || k == kMap {
			return undef, errPyRaises("TypeError: unhashable type")
		}
		if len(args) == 2 {
			return args[1], nil
		}
		return noneV, nil
	case "items", "keys", "values":
		if len(args) > 0 {
			return undef, errPyRaises("TypeError: " + name + " takes no arguments")
		}
		items := make([]value, o.mapLen())
		for i := range items {
			switch name {
			case "items":
				items[i] = value{k: kSeq, p: &seqVal{items: []value{strV(o.mapKey(i)), o.mapVal(i)}, tuple: true}}
			case "keys":
				items[i] = strV(o.mapKey(i))
			default:
				items[i] = o.mapVal(i)
			}
		}
		return value{k: kSeq, p: &seqVal{items: items, noRepr: "dict." + name + "()"}}, nil
	}
	return undef, errNotPython("dict." + name)
}
