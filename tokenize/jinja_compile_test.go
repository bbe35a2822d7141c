package tokenize

import (
	"testing"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// TestCompiledFastPaths: the compiled evaluator's fast paths (ints,
// fields read in place, literal compares, reversed loops, shared slices)
// give Python's results, on request values (as prepareChat builds them)
// and on variables given by name (as Template.Render takes them), and fall back to
// the general path where their shape does not hold.
func TestCompiledFastPaths(t *testing.T) {
	for _, c := range []struct {
		src, vars, want string
		notExact        bool
	}{
		{src: `{% for x in l %}{{ loop.index0 % 2 }},{{ (l|length - 1) - loop.index0 }},{{ loop.index0 - 3 }}|{% endfor %}`, vars: `{"l":[1,2,3]}`, want: "0,2,-3|1,1,-2|0,0,-1|"},
		{src: `{{ n % -3 }} {{ -7 % 3 }} {{ n - 10 }} {{ t % 2 }} {{ t + 1 }} {{ f + 1 }}`, vars: `{"n":7,"t":true,"f":1.5}`, want: "-2 2 -3 1 2 2.5"},
		{src: `{{ m|length - 1 }} {{ s|length + 1 }} {{ u|length }}`, vars: `{"m":{"a":1},"s":"héllo"}`, want: "0 6 0"},
		{src: `{{ n + 1 }}`, vars: `{"n":9223372036854775807}`, notExact: true},
		{src: `{{ n - 1 }}`, vars: `{"n":-9223372036854775808}`, notExact: true},
		{src: `{{ n % 0 }}`, vars: `{"n":1}`, notExact: true},
		{src: `{% for x in l %}{{ loop.index0 == 0 }}{{ loop.index > 1 }}{{ loop.length != 2 }}{% endfor %}`, vars: `{"l":["a","b"]}`, want: "TrueFalseFalseFalseTrueFalse"},
		{src: `{% for m in l[::-1] %}{{ loop.index0 }}{{ m.role }}{{ m['content'] }}{{ loop.first }}{% endfor %}`, vars: `{"l":[{"role":"u","content":"1"},{"role":"a","content":"2"}]}`, want: "0a2True1u1False"},
		{src: `{% for m in l[1:] %}{{ m }}{% endfor %}{{ l[1:] }}{{ l[5:] }}`, vars: `{"l":[1,2,3]}`, want: "23[2, 3][]"},
		{src: `{{ d.role == 'x' }}{{ d.role != 'x' }}{{ d.missing == 'x' }}{{ d.items == 'x' }}{{ d['items'] }}`, vars: `{"d":{"role":"x","items":"i"}}`, want: "TrueFalseFalseFalsei"},
		{src: `{{ 'a' + d.role + 'b' }}{{ 'a' + d.n }}`, vars: `{"d":{"role":"x","n":1}}`, notExact: true},
		{src: `{% set c = 'a' + d.role + (d.t | trim) %}{{ c }}{{ d.n + 1 }}`, vars: `{"d":{"role":"x","t":"  y ","n":1}}`, want: "axy2"},
		{src: `{% if d.role is string and d.x is not defined and d.n is not none %}ok{% endif %}`, vars: `{"d":{"role":"x","n":0}}`, want: "ok"},
		{src: `{{ 'a' + d.role + (d.x if d.c else 'z') }}|{{ d.n + 1 }}|{{ d.role + d.role|upper }}`, vars: `{"d":{"role":"x","c":false,"n":1}}`, want: "axz|2|xX"},
		{src: `{{ d.role + (d.n if d.c else 'z') }}`, vars: `{"d":{"role":"x","c":true,"n":1}}`, notExact: true},
		// The loop object kept past its loop is not reused by the next.
		{src: `{% set ns = namespace(l=none) %}{% for x in l %}{% set ns.l = loop %}{% endfor %}{% for x in l %}{% endfor %}{{ ns.l.index }}`, vars: `{"l":[1,2]}`, want: "2"},
	} {
		tmpl, err := CompileTemplate(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		v, err := ojson.Parse([]byte(c.vars), ojson.DefaultMaxDepth)
		if err != nil {
			t.Fatal(err)
		}
		st := &convState{}
		var cv chatVars
		byName := map[string]Value{}
		for _, mb := range v.Members {
			cv.own.set(mb.Key, st.value(mb.Value))
			byName[mb.Key] = st.value(mb.Value)
		}
		owned, oerr := tmpl.renderChat(&cv, goldenNow)
		named, nerr := tmpl.Render(byName, goldenNow)
		for _, r := range []struct {
			path, got string
			err       error
		}{{"request values", owned, oerr}, {"by name", named, nerr}} {
			switch {
			case c.notExact && !isUnsupported(r.err):
				t.Errorf("%s (%s): got %q, %v; want not exact", c.src, r.path, r.got, r.err)
			case !c.notExact && (r.err != nil || r.got != c.want):
				t.Errorf("%s (%s): got %q, %v; want %q", c.src, r.path, r.got, r.err, c.want)
			}
		}
	}
}
