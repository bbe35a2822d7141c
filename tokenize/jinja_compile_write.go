package tokenize

import (
	"strings"
)

// + chains compiled: evaluated, or written to the output as they come
// without building the intermediate strings.

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
