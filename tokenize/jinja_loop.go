package tokenize

// For loops, as jinja2 runs them: what Python iterates over, jinja2's
// loop object, loop targets and the loop's else.

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
