package tokenize

import "strings"

// The engine's ~ operator prints its operands with its own formatting: None
// as "", floats with %g (1.0 as "1", 1234567.0 as "1.23457e+06"), which can
// make a render longer or shorter than Python's. jinja2 applies str() to
// each operand. rewriteConcat gives every operand of ~ the __mt_str filter
// (Python's str()), so the engine only ever concatenates strings.
//
// An operand of ~ is what jinja2's parse_concat reads on either side: a
// parse_math2 expression (*, /, //, % and tighter). It ends at the next ~,
// at anything that binds less tightly (binary + and -, comparisons, and,
// or, not, in, if, else, and the punctuation of the enclosing construct:
// , : = and the closing bracket), or at the end of the tag. A test
// (`x is [not] name`) binds more tightly and stays inside. Brackets are rewritten recursively, as their own level.

// concatBoundaryWords end an operand of ~: the operators of lower
// precedence and the statement keywords that can precede an expression.
var concatBoundaryWords = map[string]bool{
	"and": true, "or": true, "not": true, "in": true, "if": true, "else": true,
	"elif": true, "for": true, "set": true, "with": true, "macro": true, "call": true,
	"filter": true, "recursive": true, "import": true, "from": true, "as": true,
	"include": true, "do": true, "return": true,
}

// hasConcat reports whether body uses ~ outside string literals.
func hasConcat(body string) bool {
	for p := 0; p < len(body); p++ {
		switch body[p] {
		case '\'', '"':
			e, _ := stringEnd(body, p)
			p = e - 1
		case '~':
			return true
		}
	}
	return false
}

// rewriteConcat wraps each operand of ~ in body as (operand)|__mt_str.
// Bodies without ~ come back unchanged.
func rewriteConcat(body string) string {
	if !hasConcat(body) {
		return body
	}
	out, _ := concatLevel(body, 0, 0)
	return out
}

// concatLevel rewrites body[i:] up to the closer byte that ends this
// bracket level (0: the end of body) and returns the rewrite and the index
// of the closer.
func concatLevel(body string, i int, closer byte) (string, int) {
	var out strings.Builder
	var pieces []string     // the operands of the current ~ chain, so far
	var cur strings.Builder // the operand being read
	flush := func() {
		if len(pieces) == 0 {
			out.WriteString(cur.String())
		} else {
			pieces = append(pieces, cur.String())
			// The chain is parenthesised as a whole: the engine's ~ binds
			// looser than + and -, jinja2's tighter.
			// Whitespace stays where it was, the chain's outer whitespace
			// outside the parentheses.
			var outerTrail string
			for k, piece := range pieces {
				lead, core, trail := splitSpace(piece)
				if k == 0 {
					out.WriteString(lead + "(")
					lead = ""
				} else {
					out.WriteByte('~')
				}
				if k == len(pieces)-1 {
					outerTrail, trail = trail, ""
				}
				out.WriteString(lead + wrapOperand(core) + trail)
			}
			out.WriteString(")" + outerTrail)
		}
		pieces = pieces[:0]
		cur.Reset()
	}
	p := i
	for p < len(body) {
		c := body[p]
		switch {
		case closer != 0 && c == closer:
			flush()
			return out.String(), p
		case c == '\'' || c == '"':
			e, _ := stringEnd(body, p)
			cur.WriteString(body[p:e])
			p = e
		case c == '(' || c == '[' || c == '{':
			inner, e := concatLevel(body, p+1, closerOf(c))
			cur.WriteByte(c)
			cur.WriteString(inner)
			if e < len(body) {
				cur.WriteByte(body[e])
			}
			p = e + 1
		case c == '~':
			pieces = append(pieces, cur.String())
			cur.Reset()
			p++
		case c == ',' || c == ':' || c == ')' || c == ']' || c == '}':
			flush()
			out.WriteByte(c)
			p++
		case (c == '+' || c == '-') && strings.TrimSpace(cur.String()) != "":
			// Binary + and - bind looser than ~ in jinja2 (parse_math1
			// over parse_concat); a sign at an operand's start is unary.
			flush()
			out.WriteByte(c)
			p++
		case c == '=' || c == '!' || c == '<' || c == '>':
			// = (assignment or keyword argument) and every comparison.
			flush()
			e := p + 1
			if e < len(body) && body[e] == '=' {
				e++
			}
			out.WriteString(body[p:e])
			p = e
		case isIdentStart(c):
			e := identEnd(body, p)
			w := body[p:e]
			switch {
			case concatBoundaryWords[w] && !afterDot(body, p):
				flush()
				out.WriteString(w)
			case w == "is" && !afterDot(body, p):
				// A test binds to its operand: take "is [not] name".
				e = testEnd(body, e)
				cur.WriteString(body[p:e])
			default:
				cur.WriteString(w)
			}
			p = e
		default:
			cur.WriteByte(c)
			p++
		}
	}
	flush()
	return out.String(), p
}

// wrapOperand gives one operand (without its surrounding whitespace) the
// str() filter.
func wrapOperand(core string) string {
	if core == "" {
		return core // a syntax error: leave it for the engine to report
	}
	return "(" + core + ")|" + strFilt
}

// splitSpace splits s into its leading whitespace, the rest up to its
// trailing whitespace, and that trailing whitespace.
func splitSpace(s string) (lead, core, trail string) {
	core = strings.TrimLeft(s, " \t\n")
	lead = s[:len(s)-len(core)]
	trimmed := strings.TrimRight(core, " \t\n")
	return lead, trimmed, core[len(trimmed):]
}

// closerOf is the bracket that closes open.
func closerOf(open byte) byte {
	switch open {
	case '(':
		return ')'
	case '[':
		return ']'
	}
	return '}'
}

// afterDot reports whether the identifier at body[p] is an attribute name
// (x.if is not a keyword).
func afterDot(body string, p int) bool {
	for p > 0 && isWS(body[p-1]) {
		p--
	}
	return p > 0 && body[p-1] == '.'
}

// testEnd returns the end of "[not] name" after an "is" ending at e.
func testEnd(body string, e int) int {
	word := func(at int) (int, string) {
		s := skipWS(body, at)
		t := identEnd(body, s)
		return t, body[s:t]
	}
	if t, w := word(e); w == "not" {
		e = t
	}
	if t, w := word(e); w != "" {
		e = t
	}
	return e
}
