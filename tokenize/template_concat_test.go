package tokenize

import (
	"strings"
	"testing"
)

// TestRewriteConcat pins the operand boundaries of ~ to jinja2's grammar;
// TestTemplateFeatures checks the renders against Python.
func TestRewriteConcat(t *testing.T) {
	tests := []struct{ in, want string }{
		{`'a' ~ b`, `(('a')|__mt_str ~ (b)|__mt_str)`},
		{`no concat + here`, `no concat + here`},
		{`'~' + x`, `'~' + x`},
		{`a ~ b ~ c`, `((a)|__mt_str ~ (b)|__mt_str ~ (c)|__mt_str)`},
		{`i + 1 ~ f * 2 ~ -i`, `i + ((1)|__mt_str ~ (f * 2)|__mt_str ~ (-i)|__mt_str)`},
		{`x ~ y == 'z'`, `((x)|__mt_str ~ (y)|__mt_str) == 'z'`},
		{`'x' ~ f if t else 'y'`, `(('x')|__mt_str ~ (f)|__mt_str) if t else 'y'`},
		{`not s ~ n`, `not ((s)|__mt_str ~ (n)|__mt_str)`},
		{`set x = a ~ b`, `set x = ((a)|__mt_str ~ (b)|__mt_str)`},
		{`for c in [a ~ 'x', b]`, `for c in [((a)|__mt_str ~ ('x')|__mt_str), b]`},
		{`l|length ~ (n is not none) ~ m is defined`, `((l|length)|__mt_str ~ ((n is not none))|__mt_str ~ (m is defined)|__mt_str)`},
		{`f(a ~ b, k=c ~ d)`, `f(((a)|__mt_str ~ (b)|__mt_str), k=((c)|__mt_str ~ (d)|__mt_str))`},
		{`{'k': a ~ b}['k']`, `{'k': ((a)|__mt_str ~ (b)|__mt_str)}['k']`},
		{`x.if ~ y`, `((x.if)|__mt_str ~ (y)|__mt_str)`},
	}
	for _, tt := range tests {
		if got := rewriteConcat(tt.in); got != tt.want {
			t.Errorf("rewriteConcat(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// FuzzRewriteConcat: the rewrite only adds parentheses and the str()
// filter; it never drops, reorders or duplicates what the template wrote,
// and never panics on malformed tags.
func FuzzRewriteConcat(f *testing.F) {
	for _, s := range []string{`'a' ~ b`, `i + 1 ~ f * 2 ~ -i`, `f(a ~ b, k=c ~ d)`, `x ~ 'unterminated`, `(a ~ b`, `a ~ ) ~ b ]`, `~`, `x is not ~ y`, `{'k': a ~ b}['k'] ~ l[1:] ~ m is`} {
		f.Add(s)
	}
	skeleton := func(s string) string {
		s = strings.ReplaceAll(s, "|"+strFilt, "")
		return strings.Map(func(r rune) rune {
			if r == '(' || r == ')' || r == ' ' || r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		out := rewriteConcat(body)
		if !hasConcat(body) && out != body {
			t.Fatalf("no ~, yet rewritten: %q -> %q", body, out)
		}
		if skeleton(out) != skeleton(body) {
			t.Fatalf("rewriteConcat(%q) = %q changes the template's own text", body, out)
		}
	})
}

// TestTruthFilterPadding pins the arguments added to the truth-test forms
// of select, reject, selectattr and rejectattr (the engine panics on
// them); TestTemplateFeatures checks the renders against Python.
func TestTruthFilterPadding(t *testing.T) {
	tests := []struct{ in, want string }{
		{`l|select`, `l|select(none)`},
		{`l|reject|list`, `l|reject(none)|__mt_list`},
		{`l|select()`, `l|select(none)`},
		{`l|select('string')`, `l|select('string')`},
		{`m|selectattr('role')`, `m|selectattr('role', 'truthy')`},
		{`m|rejectattr( 'a' ) | list`, `m|rejectattr( 'a' , 'truthy') | __mt_list`},
		{`m|selectattr('role', 'equalto', 'x')`, `m|selectattr('role', 'equalto', 'x')`},
		{`m|selectattr(f(a, b))`, `m|selectattr(f(a, b), 'truthy')`},
		{`m|selectattr('a,)')`, `m|selectattr('a,)', 'truthy')`},
		{`select`, `select`},
	}
	for _, tt := range tests {
		got, err := rewriteTag(tt.in, map[string]bool{})
		if err != nil || got != tt.want {
			t.Errorf("rewriteTag(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
