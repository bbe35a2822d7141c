package tokenize

import (
	"fmt"
	"slices"
)

// The owned evaluator's parser: jinja2's grammar (jinja2/parser.py) for
// the statements and expressions chat templates use, built into a tree
// whose names are resolved to frame slots (resolve, below) so a render
// never looks a variable up by name. Any other construct is refused with
// errNotOwned: the template does not compile.

// ref addresses a variable: level 0 is the template's frame, level 1 the
// frame of the macro being called.
type ref struct {
	level uint8
	slot  int32
}

// Expressions.

type expr interface{ isExpr() }

type (
	litExpr  struct{ v value }
	nameExpr struct {
		name string
		ref  ref
	}
	attrExpr struct {
		obj  expr
		name string
		fl   attrFlags
	}
	itemExpr struct {
		obj, key expr
		// skey: the key is this string literal (fl its flags).
		skey    string
		hasSKey bool
		fl      attrFlags
	}
	sliceExpr struct {
		obj, lo, hi, step expr // nil: omitted
	}
	callExpr struct {
		fn      expr
		args    []expr
		kwNames []string
		kwArgs  []expr
		// star and dstar are *star and **dstar (nil: absent), unpacked
		// after args and kwArgs as Python's f(a, k=v, *star, **dstar).
		star, dstar expr
	}
	// methodExpr is obj.name(args): a method call, resolved without
	// building a bound method.
	methodExpr struct {
		obj  expr
		name string
		call *callExpr // fn unused
	}
	filterExpr struct {
		arg  expr
		name string
		call *callExpr // fn unused
	}
	testExpr struct {
		arg  expr
		name string
		args []expr
	}
	notExpr struct{ x expr }
	negExpr struct {
		x   expr
		neg bool
	}
	andExpr struct{ l, r expr }
	orExpr  struct{ l, r expr }
	binExpr struct {
		op   string
		l, r expr
	}
	cmpExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
	concatExpr struct{ parts []expr }
	// addExpr is a left-associative + chain, ((a + b) + c) ...
	addExpr  struct{ parts []expr }
	condExpr struct{ cond, a, b expr } // b nil: Undefined
	listExpr struct {
		items []expr
		tuple bool
	}
	dictExpr struct {
		keys []string
		vals []expr
	}
)

func (*litExpr) isExpr()    {}
func (*nameExpr) isExpr()   {}
func (*attrExpr) isExpr()   {}
func (*itemExpr) isExpr()   {}
func (*sliceExpr) isExpr()  {}
func (*callExpr) isExpr()   {}
func (*methodExpr) isExpr() {}
func (*filterExpr) isExpr() {}
func (*testExpr) isExpr()   {}
func (*notExpr) isExpr()    {}
func (*negExpr) isExpr()    {}
func (*andExpr) isExpr()    {}
func (*orExpr) isExpr()     {}
func (*binExpr) isExpr()    {}
func (*cmpExpr) isExpr()    {}
func (*concatExpr) isExpr() {}
func (*addExpr) isExpr()    {}
func (*condExpr) isExpr()   {}
func (*listExpr) isExpr()   {}
func (*dictExpr) isExpr()   {}

// Statements.

type stmt interface{ isStmt() }

type (
	textStmt struct{ s string }
	outStmt  struct {
		e expr
		w writeFn // compiled (jinja_compile.go)
	}
	ifStmt struct {
		conds  []expr
		bodies [][]stmt
		els    []stmt
		cc     []condFn // conds compiled
		// bodies and els compiled
		bodiesF []execFn
		elsF    execFn
	}
	forStmt struct {
		targets   []*nameExpr
		iter      expr
		cond      expr
		body, els []stmt
		loop      ref // the loop variable's slot
		usesLoop  bool
		// inits are the names the body assigns: each iteration starts
		// them at the enclosing scope's value, as jinja2 does.
		inits []slotCopy
		// iter and cond compiled
		iterF valFn
		condF condFn
		// rev: iter is name[::-1], iterated in reverse without the copy.
		rev *nameExpr
		// body and els compiled
		bodyF, elsF execFn
		// loopLocal: the body reads loop only as loop.attr, loop[key]
		// or loop.method(...), so the loop object cannot outlive the loop.
		loopLocal bool
	}
	setStmt struct {
		target *nameExpr
		e      expr
		f      valFn // e compiled
	}
	setAttrStmt struct {
		ns   *nameExpr
		attr string
		e    expr
		f    valFn // e compiled
	}
	setBlockStmt struct {
		target *nameExpr
		body   []stmt
	}
	macroStmt struct {
		target *nameExpr
		m      *macroDef
	}
	breakStmt    struct{}
	continueStmt struct{}
)

type slotCopy struct{ inner, outer ref }

type macroDef struct {
	name     string
	params   []*nameExpr
	defaults []expr // nil: no default
	body     []stmt
	nslots   int
}

func (*textStmt) isStmt()     {}
func (*outStmt) isStmt()      {}
func (*ifStmt) isStmt()       {}
func (*forStmt) isStmt()      {}
func (*setStmt) isStmt()      {}
func (*setAttrStmt) isStmt()  {}
func (*setBlockStmt) isStmt() {}
func (*macroStmt) isStmt()    {}
func (*breakStmt) isStmt()    {}
func (*continueStmt) isStmt() {}

type parser struct {
	segs  []lexSeg
	si    int
	toks  []token
	tp    int
	loops int // enclosing for loops (break, continue, macro placement)
}

// parseOwned parses the lexed template. An error names the template line
// of the tag it stopped at.
func parseOwned(segs []lexSeg) ([]stmt, error) {
	p := &parser{segs: segs}
	body, end, err := p.parseBody()
	if err == nil && end != "" {
		err = notOwned("unexpected {%% %s %%}", end)
	}
	if err != nil {
		if len(segs) > 0 {
			return nil, &lineError{segs[min(max(p.si-1, 0), len(segs)-1)].line, err}
		}
		return nil, err
	}
	return body, nil
}

// lineError is a compile error at a template line.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// parseBody parses statements up to a block tag it does not open itself
// (returned as end, with that tag's tokens current) or the template's end.
func (p *parser) parseBody() ([]stmt, string, error) {
	var out []stmt
	for p.si < len(p.segs) {
		sg := p.segs[p.si]
		p.si++
		switch sg.kind {
		case 0:
			out = append(out, &textStmt{sg.text})
			continue
		case '{':
			if err := p.startTag(sg.text); err != nil {
				return nil, "", err
			}
			e, err := p.parseTupleExpr(true)
			if err != nil {
				return nil, "", err
			}
			if err := p.expectEnd(); err != nil {
				return nil, "", err
			}
			out = append(out, &outStmt{e: e})
			continue
		}
		if err := p.startTag(sg.text); err != nil {
			return nil, "", err
		}
		kw := p.cur()
		if kw.kind != tName {
			return nil, "", notOwned("a statement without a keyword")
		}
		p.tp++
		var s stmt
		var err error
		switch kw.s {
		case "if":
			s, err = p.parseIf()
		case "for":
			s, err = p.parseFor()
		case "set":
			s, err = p.parseSet()
		case "macro":
			s, err = p.parseMacro()
		case "break", "continue":
			if p.loops == 0 {
				return nil, "", notOwned("%s outside a loop", kw.s)
			}
			if kw.s == "break" {
				s = &breakStmt{}
			} else {
				s = &continueStmt{}
			}
			err = p.expectEnd()
		case "elif", "else", "endif", "endfor", "endset", "endmacro":
			return out, kw.s, nil
		default:
			return nil, "", notOwned("statement %q", kw.s)
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, s)
	}
	return out, "", nil
}

func (p *parser) startTag(body string) error {
	toks, err := scanExpr(body)
	if err != nil {
		return err
	}
	p.toks, p.tp = toks, 0
	return nil
}

func (p *parser) cur() token { return p.toks[p.tp] }

func (p *parser) isOp(s string) bool {
	t := p.toks[p.tp]
	return t.kind == tOp && t.s == s
}

func (p *parser) isName(s string) bool {
	t := p.toks[p.tp]
	return t.kind == tName && t.s == s
}

func (p *parser) skipOp(s string) bool {
	if p.isOp(s) {
		p.tp++
		return true
	}
	return false
}

func (p *parser) skipName(s string) bool {
	if p.isName(s) {
		p.tp++
		return true
	}
	return false
}

func (p *parser) expectOp(s string) error {
	if !p.skipOp(s) {
		return notOwned("expected %q", s)
	}
	return nil
}

func (p *parser) expectEnd() error {
	if p.cur().kind != tEOF {
		return notOwned("unexpected tokens at the end of a tag")
	}
	return nil
}

// endTag checks that the current tag is exactly the end keyword.
func (p *parser) endTag() error { return p.expectEnd() }

func (p *parser) parseIf() (stmt, error) {
	n := &ifStmt{}
	for {
		cond, err := p.parseTupleExpr(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody()
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endTag(); err != nil {
				return nil, err
			}
			els, end, err := p.parseBody()
			if err != nil {
				return nil, err
			}
			if end != "endif" {
				return nil, notOwned("if without endif")
			}
			n.els = els
			return n, p.endTag()
		case "endif":
			return n, p.endTag()
		}
		return nil, notOwned("if without endif")
	}
}

func (p *parser) parseFor() (stmt, error) {
	n := &forStmt{}
	paren := p.skipOp("(")
	for {
		t := p.cur()
		if t.kind != tName || isKeyword(t.s) {
			return nil, notOwned("a for target that is not a name")
		}
		p.tp++
		n.targets = append(n.targets, &nameExpr{name: t.s})
		if !p.skipOp(",") {
			break
		}
		if paren && p.isOp(")") || p.isName("in") {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	if !p.skipName("in") {
		return nil, notOwned("for without in")
	}
	iter, err := p.parseTupleExpr(false)
	if err != nil {
		return nil, err
	}
	n.iter = iter
	if p.skipName("if") {
		if n.cond, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if err := p.expectEnd(); err != nil {
		return nil, err // recursive loops among others
	}
	p.loops++
	body, end, err := p.parseBody()
	p.loops--
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if n.els, end, err = p.parseBody(); err != nil {
			return nil, err
		}
		if assigns(n.els) {
			return nil, notOwned("an assignment in a for loop's else")
		}
	}
	if end != "endfor" {
		return nil, notOwned("for without endfor")
	}
	return n, p.endTag()
}

func (p *parser) parseSet() (stmt, error) {
	t := p.cur()
	if t.kind != tName || isKeyword(t.s) {
		return nil, notOwned("a set target that is not a name")
	}
	p.tp++
	var attr string
	if p.skipOp(".") {
		a := p.cur()
		if a.kind != tName {
			return nil, notOwned("set target")
		}
		attr = a.s
		p.tp++
	}
	if p.isOp(",") {
		return nil, notOwned("a tuple assignment")
	}
	if p.skipOp("=") {
		e, err := p.parseTupleExpr(true)
		if err != nil {
			return nil, err
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		if attr != "" {
			return &setAttrStmt{ns: &nameExpr{name: t.s}, attr: attr, e: e}, nil
		}
		return &setStmt{target: &nameExpr{name: t.s}, e: e}, nil
	}
	if attr != "" || p.cur().kind != tEOF {
		return nil, notOwned("a set block with a filter or namespace target")
	}
	body, end, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	if end != "endset" {
		return nil, notOwned("set without endset")
	}
	return &setBlockStmt{target: &nameExpr{name: t.s}, body: body}, p.endTag()
}

func (p *parser) parseMacro() (stmt, error) {
	if p.loops > 0 {
		return nil, notOwned("a macro inside a loop")
	}
	t := p.cur()
	if t.kind != tName || isKeyword(t.s) {
		return nil, notOwned("macro name")
	}
	p.tp++
	m := &macroDef{name: t.s}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		a := p.cur()
		if a.kind != tName || isKeyword(a.s) {
			return nil, notOwned("macro parameter")
		}
		p.tp++
		m.params = append(m.params, &nameExpr{name: a.s})
		var def expr
		if p.skipOp("=") {
			var err error
			if def, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
		m.defaults = append(m.defaults, def)
	}
	p.tp++
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	if end != "endmacro" {
		return nil, notOwned("macro without endmacro")
	}
	m.body = body
	return &macroStmt{target: &nameExpr{name: t.s}, m: m}, p.endTag()
}

func isKeyword(s string) bool {
	switch s {
	case "and", "or", "not", "in", "is", "if", "else", "true", "false", "none", "True", "False", "None":
		return true
	}
	return false
}

// assigns reports whether the statements assign a variable outside nested
// loops.
func assigns(body []stmt) bool {
	for _, s := range body {
		switch n := s.(type) {
		case *setStmt, *setBlockStmt, *macroStmt:
			return true
		case *ifStmt:
			for _, b := range n.bodies {
				if assigns(b) {
					return true
				}
			}
			if assigns(n.els) {
				return true
			}
		}
	}
	return false
}

// Expressions, after jinja2's Parser.parse_* methods.

// parseTupleExpr is parse_tuple without a bare tuple (a, b): refused.
func (p *parser) parseTupleExpr(condexpr bool) (expr, error) {
	e, err := p.parseExpr(condexpr)
	if err != nil {
		return nil, err
	}
	if p.isOp(",") {
		return nil, notOwned("a bare tuple")
	}
	return e, nil
}

func (p *parser) parseExpr(condexpr bool) (expr, error) {
	if !condexpr {
		return p.parseOr()
	}
	return p.parseCondExpr()
}

func (p *parser) parseCondExpr() (expr, error) {
	e1, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		e2, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var e3 expr
		if p.skipName("else") {
			if e3, err = p.parseCondExpr(); err != nil {
				return nil, err
			}
		}
		e1 = &condExpr{cond: e2, a: e1, b: e3}
	}
	return e1, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.skipName("or") {
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &orExpr{l, r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.skipName("and") {
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &andExpr{l, r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &cmpExpr{first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == "<=" || t.s == ">" || t.s == ">="):
			op = t.s
			p.tp++
		case t.kind == tName && t.s == "in":
			op = "in"
			p.tp++
		case t.kind == tName && t.s == "not" && p.toks[p.tp+1].kind == tName && p.toks[p.tp+1].s == "in":
			op = "not in"
			p.tp += 2
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.cur().s
		p.tp++
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		if op == "-" {
			l = &binExpr{op, l, r}
		} else if a, ok := l.(*addExpr); ok {
			a.parts = append(a.parts, r)
		} else {
			l = &addExpr{parts: []expr{l, r}}
		}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	parts := []expr{first}
	for p.skipOp("~") {
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, r)
	}
	if len(parts) == 1 {
		return first, nil
	}
	return &concatExpr{parts}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		op := p.cur().s
		p.tp++
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op, l, r}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.skipOp("**") {
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{"**", l, r}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var e expr
	var err error
	switch {
	case p.isOp("-") || p.isOp("+"):
		neg := p.cur().s == "-"
		p.tp++
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &negExpr{x: x, neg: neg}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

// parsePrimary parses a name, a literal, a parenthesised expression or
// tuple, a list or a dict.
func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.tp++
		switch t.s {
		case "true", "True":
			return &litExpr{trueV}, nil
		case "false", "False":
			return &litExpr{falseV}, nil
		case "none", "None":
			return &litExpr{noneV}, nil
		}
		if isKeyword(t.s) {
			return nil, notOwned("keyword %q as a value", t.s)
		}
		return &nameExpr{name: t.s}, nil
	case tStr:
		s := t.s
		p.tp++
		for p.cur().kind == tStr {
			s += p.cur().s
			p.tp++
		}
		return &litExpr{strV(s)}, nil
	case tInt:
		p.tp++
		return &litExpr{intV(t.i)}, nil
	case tFloat:
		p.tp++
		return &litExpr{floatV(t.f)}, nil
	case tOp:
		switch t.s {
		case "(":
			p.tp++
			return p.parseParen()
		case "[":
			p.tp++
			return p.parseList()
		case "{":
			p.tp++
			return p.parseDict()
		}
	}
	return nil, notOwned("unexpected token")
}

// parseParen parses what follows "(": (), (e), or a tuple (a, b[,]).
func (p *parser) parseParen() (expr, error) {
	if p.skipOp(")") {
		return &listExpr{tuple: true}, nil
	}
	e, err := p.parseExpr(true)
	if err != nil {
		return nil, err
	}
	if p.isOp(",") {
		l := &listExpr{items: []expr{e}, tuple: true}
		for p.skipOp(",") {
			if p.isOp(")") {
				break
			}
			x, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			l.items = append(l.items, x)
		}
		e = l
	}
	return e, p.expectOp(")")
}

// parseList parses what follows "[": a list literal.
func (p *parser) parseList() (expr, error) {
	l := &listExpr{}
	for !p.isOp("]") {
		if len(l.items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("]") {
				break
			}
		}
		x, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		l.items = append(l.items, x)
	}
	p.tp++
	return l, nil
}

// parseDict parses what follows "{": a dict literal with string literal
// keys, each once.
func (p *parser) parseDict() (expr, error) {
	d := &dictExpr{}
	for !p.isOp("}") {
		if len(d.keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("}") {
				break
			}
		}
		k := p.cur()
		if k.kind != tStr || p.toks[p.tp+1].kind == tStr {
			return nil, notOwned("a dict key that is not a string literal")
		}
		p.tp++
		if err := p.expectOp(":"); err != nil {
			return nil, err
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		if slices.Contains(d.keys, k.s) {
			return nil, notOwned("a repeated dict key")
		}
		d.keys = append(d.keys, k.s)
		d.vals = append(d.vals, v)
	}
	p.tp++
	return d, nil
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.tp++
			t := p.cur()
			switch t.kind {
			case tName:
				if t.s[0] == '_' {
					return nil, notOwned("an attribute starting with _")
				}
				p.tp++
				if p.isOp("(") {
					c, err := p.parseCall()
					if err != nil {
						return nil, err
					}
					if !methodNames[t.s] {
						return nil, notOwned("method %q", t.s)
					}
					e = &methodExpr{obj: e, name: t.s, call: c}
					continue
				}
				e = &attrExpr{obj: e, name: t.s, fl: flagsOf(t.s)}
			case tInt:
				p.tp++
				e = &itemExpr{obj: e, key: &litExpr{intV(t.i)}}
			default:
				return nil, notOwned("attribute")
			}
		case p.isOp("["):
			p.tp++
			x, err := p.parseSubscript(e)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp("]"); err != nil {
				return nil, err
			}
			e = x
		case p.isOp("("):
			c, err := p.parseCall()
			if err != nil {
				return nil, err
			}
			c.fn = e
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr) (expr, error) {
	var parts [3]expr
	colon := false
	if !p.isOp(":") {
		x, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			if p.isOp(",") {
				return nil, notOwned("a tuple subscript")
			}
			it := &itemExpr{obj: obj, key: x}
			if lit, ok := x.(*litExpr); ok && lit.v.k == kStr {
				it.skey, it.hasSKey, it.fl = lit.v.s, true, flagsOf(lit.v.s)
			}
			return it, nil
		}
		parts[0] = x
	}
	for i := 1; i < 3 && p.skipOp(":"); i++ {
		colon = true
		if p.isOp("]") || p.isOp(":") {
			continue
		}
		x, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		parts[i] = x
	}
	if !colon || p.isOp(":") {
		return nil, notOwned("subscript")
	}
	return &sliceExpr{obj: obj, lo: parts[0], hi: parts[1], step: parts[2]}, nil
}

// parseCall parses a call's arguments as jinja2's parse_call_args does:
// positional arguments, then keyword arguments, with *star after the
// positional ones (keywords may follow it) and **dstar last.
func (p *parser) parseCall() (*callExpr, error) {
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	c := &callExpr{}
	for !p.isOp(")") {
		if len(c.args)+len(c.kwArgs) > 0 || c.star != nil || c.dstar != nil {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			double := p.isOp("**")
			if c.dstar != nil || !double && c.star != nil {
				return nil, notOwned("invalid syntax for function call expression")
			}
			p.tp++
			x, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			if double {
				c.dstar = x
			} else {
				c.star = x
			}
			continue
		}
		t := p.cur()
		if t.kind == tName && p.toks[p.tp+1].kind == tOp && p.toks[p.tp+1].s == "=" {
			if c.dstar != nil {
				return nil, notOwned("invalid syntax for function call expression")
			}
			p.tp += 2
			x, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			if slices.Contains(c.kwNames, t.s) {
				return nil, notOwned("a repeated keyword argument")
			}
			c.kwNames = append(c.kwNames, t.s)
			c.kwArgs = append(c.kwArgs, x)
			continue
		}
		if len(c.kwArgs) > 0 || c.star != nil || c.dstar != nil {
			return nil, notOwned("a positional argument after a keyword argument or an unpacking")
		}
		x, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		c.args = append(c.args, x)
	}
	p.tp++
	return c, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.tp++
			t := p.cur()
			if t.kind != tName {
				return nil, notOwned("filter name")
			}
			p.tp++
			if p.isOp(".") {
				return nil, notOwned("a dotted filter name")
			}
			c := &callExpr{}
			if p.isOp("(") {
				var err error
				if c, err = p.parseCall(); err != nil {
					return nil, err
				}
			}
			if c.star != nil || c.dstar != nil {
				return nil, notOwned("unpacking in a filter's arguments")
			}
			if err := checkFilter(t.s, c); err != nil {
				return nil, err
			}
			e = &filterExpr{arg: e, name: t.s, call: c}
		case p.isName("is"):
			p.tp++
			neg := p.skipName("not")
			t := p.cur()
			if t.kind != tName {
				return nil, notOwned("test name")
			}
			p.tp++
			if p.isOp(".") {
				return nil, notOwned("a dotted test name")
			}
			tx := &testExpr{arg: e, name: t.s}
			switch n := p.cur(); {
			case p.isOp("("):
				c, err := p.parseCall()
				if err != nil {
					return nil, err
				}
				if len(c.kwArgs) > 0 || c.star != nil || c.dstar != nil {
					return nil, notOwned("keyword arguments or unpacking to a test")
				}
				tx.args = c.args
			case n.kind == tName && (n.s == "else" || n.s == "or" || n.s == "and"):
			case n.kind == tName || n.kind == tStr || n.kind == tInt || n.kind == tFloat || p.isOp("[") || p.isOp("{"):
				if n.kind == tName && n.s == "is" {
					return nil, notOwned("a test argument")
				}
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				tx.args = []expr{a}
			}
			if want, ok := testArity[tx.name]; !ok {
				return nil, notOwned("test %q", tx.name)
			} else if len(tx.args) != want {
				return nil, notOwned("test %q with %d arguments", tx.name, len(tx.args))
			}
			e = tx
			if neg {
				e = &notExpr{e}
			}
		case p.isOp("("):
			c, err := p.parseCall()
			if err != nil {
				return nil, err
			}
			c.fn = e
			e = c
		default:
			return e, nil
		}
	}
}

// testArity lists the tests the evaluator implements, with their number
// of arguments.
var testArity = map[string]int{
	"defined": 0, "undefined": 0, "none": 0, "string": 0, "number": 0, "integer": 0,
	"float": 0, "boolean": 0, "mapping": 0, "iterable": 0, "sequence": 0, "callable": 0,
	"true": 0, "false": 0, "odd": 0, "even": 0, "divisibleby": 1,
	"eq": 1, "equalto": 1, "==": 1, "ne": 1, "!=": 1, "lt": 1, "lessthan": 1, "<": 1,
	"le": 1, "<=": 1, "gt": 1, "greaterthan": 1, ">": 1, "ge": 1, ">=": 1, "in": 1,
}

// methodNames are the methods the evaluator calls: str's and dict's
// read-only ones, and loop.cycle; and the mutating methods of dict and
// list, which the immutable sandbox refuses (SecurityError) when a render
// reaches them: the template compiles, and a render that calls one is not
// counted.
var methodNames = map[string]bool{
	"strip": true, "lstrip": true, "rstrip": true, "split": true, "startswith": true,
	"endswith": true, "replace": true, "upper": true, "lower": true, "title": true,
	"get": true, "items": true, "keys": true, "values": true, "cycle": true,
	"format": true,
	"update": true, "append": true, "extend": true, "insert": true, "pop": true,
	"popitem": true, "setdefault": true, "remove": true, "clear": true,
}

// filterArgs lists the filters the evaluator implements: their positional
// parameters after the value, in order, and whether more are accepted.
var filterArgs = map[string]struct {
	params []string
	more   bool
}{
	"tojson":     {[]string{"ensure_ascii", "indent", "separators", "sort_keys"}, false},
	"string":     {nil, false},
	"trim":       {[]string{"chars"}, false},
	"join":       {[]string{"d", "attribute"}, false},
	"list":       {nil, false},
	"format":     {nil, true},
	"abs":        {nil, false},
	"reverse":    {nil, false},
	"round":      {[]string{"precision", "method"}, false},
	"sort":       {[]string{"reverse", "case_sensitive", "attribute"}, false},
	"length":     {nil, false},
	"count":      {nil, false},
	"default":    {[]string{"default_value", "boolean"}, false},
	"d":          {[]string{"default_value", "boolean"}, false},
	"upper":      {nil, false},
	"lower":      {nil, false},
	"capitalize": {nil, false},
	"safe":       {nil, false},
	"replace":    {[]string{"old", "new", "count"}, false},
	"min":        {[]string{"case_sensitive", "attribute"}, false},
	"max":        {[]string{"case_sensitive", "attribute"}, false},
	"first":      {nil, false},
	"last":       {nil, false},
	"items":      {nil, false},
	"map":        {nil, true},
	"select":     {nil, true},
	"reject":     {nil, true},
	"selectattr": {nil, true},
	"rejectattr": {nil, true},
}

func checkFilter(name string, c *callExpr) error {
	fa, ok := filterArgs[name]
	if !ok {
		return notOwned("filter %q", name)
	}
	if !fa.more && len(c.args)+len(c.kwArgs) > len(fa.params) {
		return notOwned("filter %q with too many arguments", name)
	}
	for _, k := range c.kwNames {
		if !slices.Contains(fa.params, k) {
			if name == "map" && (k == "attribute" || k == "default") || name == "format" {
				continue // format with keywords declines at render
			}
			return notOwned("filter %q keyword %q", name, k)
		}
	}
	for i, k := range c.kwNames {
		if j := slices.Index(fa.params, k); j >= 0 && j < len(c.args) {
			_ = i
			return notOwned("filter %q argument %q given twice", name, k)
		}
	}
	switch name {
	case "min", "max":
		if len(c.args)+len(c.kwArgs) > 0 {
			return notOwned("%s with arguments", name)
		}
	case "replace":
		if len(c.args)+len(c.kwArgs) < 2 {
			return notOwned("replace without old and new")
		}
	case "map":
		// map(attribute=...[, default=...]), or map('filter', args...)
		// with a filter the evaluator implements.
		if len(c.args) == 0 {
			if !slices.Contains(c.kwNames, "attribute") {
				return notOwned("map without attribute=")
			}
			return nil
		}
		lit, ok := c.args[0].(*litExpr)
		if !ok || lit.v.k != kStr || lit.v.s == "map" || len(c.kwArgs) > 0 || c.star != nil || c.dstar != nil {
			return notOwned("map with a filter that is not a string literal")
		}
		return checkFilter(lit.v.s, &callExpr{args: c.args[1:]})
	case "select", "reject", "selectattr", "rejectattr":
		if len(c.kwArgs) > 0 {
			return notOwned("%s with keyword arguments", name)
		}
		min := 0
		if name == "selectattr" || name == "rejectattr" {
			min = 1
		}
		if len(c.args) < min {
			return notOwned("%s without its attribute", name)
		}
		if len(c.args) > min {
			lit, ok := c.args[min].(*litExpr)
			if !ok || lit.v.k != kStr {
				return notOwned("%s with a test that is not a string literal", name)
			}
			if want, ok := testArity[lit.v.s]; !ok || want != len(c.args)-min-1 {
				return notOwned("%s with test %q", name, lit.v.s)
			}
		}
		if name == "selectattr" || name == "rejectattr" {
			lit, ok := c.args[0].(*litExpr)
			if !ok || lit.v.k != kStr || lit.v.s == "" || lit.v.s[0] == '_' {
				return notOwned("%s with an attribute that is not a string literal", name)
			}
		}
	}
	return nil
}
