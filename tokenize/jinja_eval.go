package tokenize

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"
)

// The owned evaluator: renders a parsed template (jinja_parse.go) with
// Python jinja2's semantics in transformers' configuration
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols). Where Python raises and this file does not reproduce
// the error, or where it does not reproduce Python's output, it returns
// an *unsupportedError: the count is not exact and vLLM decides.

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
