package tokenize

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Calls: their arguments (with *args and **kwargs unpacking), the
// globals vLLM and jinja2 provide, macros and methods.
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
