package tokenize

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The owned evaluator's expression scanner: it splits the body of one
// {{ }} or {% %} tag (template_lex.go has already split the template into
// text and tag bodies) into jinja2's tokens. Anything jinja2 would scan
// differently, or that the evaluator does not reproduce (non-ASCII names,
// \N{...} escapes), is refused with errNotOwned: the template does not
// compile, and its requests are forwarded uncounted.

type tokKind uint8

const (
	tEOF tokKind = iota
	tName
	tStr
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	s    string // name, operator, or the string literal's value
	i    int64
	f    float64
}

// errNotOwned is a construct the evaluator does not handle: the template
// does not compile (a *CompileError), and the model loads with its chat
// requests forwarded uncounted.
type errNotOwned struct{ what string }

func (e *errNotOwned) Error() string { return "not owned: " + e.what }

func notOwned(format string, args ...any) error {
	return &errNotOwned{fmt.Sprintf(format, args...)}
}

// jinja2's operators, longest first.
var jinjaOps = []string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// scanExpr tokenizes a tag body.
func scanExpr(src string) ([]token, error) {
	var toks []token
	for p := 0; p < len(src); {
		c := src[p]
		switch {
		case isWS(c):
			p++
		case isIdentStart(c):
			e := identEnd(src, p)
			if e < len(src) && src[e] >= utf8.RuneSelf {
				return nil, notOwned("a non-ASCII name")
			}
			toks = append(toks, token{kind: tName, s: src[p:e]})
			p = e
		case c >= utf8.RuneSelf:
			return nil, notOwned("a non-ASCII character outside a string")
		case c >= '0' && c <= '9':
			t, e, err := scanNumber(src, p, p > 0 && src[p-1] == '.')
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			p = e
		case c == '\'' || c == '"':
			e, ok := stringEnd(src, p)
			if !ok {
				return nil, notOwned("an unterminated string")
			}
			v, err := unescapePy(src[p+1 : e-1])
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tStr, s: v})
			p = e
		default:
			op := ""
			for _, o := range jinjaOps {
				if strings.HasPrefix(src[p:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, notOwned("character %q", c)
			}
			toks = append(toks, token{kind: tOp, s: op})
			p += len(op)
		}
	}
	return append(toks, token{kind: tEOF}), nil
}

// scanNumber reads jinja2's integer and float literals (with _
// separators) at src[p]. Right after a dot (x.0.name) it is an integer,
// and a dot may follow it, as jinja2's float pattern does not match
// after a dot.
func scanNumber(src string, p int, afterDot bool) (token, int, error) {
	e := p
	digits := func() {
		for e < len(src) && (src[e] >= '0' && src[e] <= '9' || src[e] == '_' && e+1 < len(src) && src[e+1] >= '0' && src[e+1] <= '9') {
			e++
		}
	}
	digits()
	if afterDot {
		if e < len(src) && isIdentPart(src[e]) {
			return token{}, 0, notOwned("number literal %q", src[p:e+1])
		}
		return intToken(src[p:e], e)
	}
	isFloat := false
	if e+1 < len(src) && src[e] == '.' && src[e+1] >= '0' && src[e+1] <= '9' {
		isFloat = true
		e++
		digits()
	}
	if e < len(src) && (src[e] == 'e' || src[e] == 'E') {
		q := e + 1
		if q < len(src) && (src[q] == '+' || src[q] == '-') {
			q++
		}
		if q < len(src) && src[q] >= '0' && src[q] <= '9' {
			isFloat = true
			e = q
			digits()
		}
	}
	if e < len(src) && (isIdentPart(src[e]) || src[e] == '.') {
		return token{}, 0, notOwned("number literal %q", src[p:e+1])
	}
	lit := strings.ReplaceAll(src[p:e], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			return token{}, 0, notOwned("float literal %q", lit)
		}
		return token{kind: tFloat, f: f}, e, nil
	}
	return intToken(lit, e)
}

// intToken is the integer literal lit (separators removed), ending at e.
func intToken(lit string, e int) (token, int, error) {
	lit = strings.ReplaceAll(lit, "_", "")
	if len(lit) > 1 && lit[0] == '0' {
		return token{}, 0, notOwned("integer literal with a leading zero")
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return token{}, 0, notOwned("integer literal %q", lit)
	}
	return token{kind: tInt, i: n}, e, nil
}

// unescapePy decodes a string literal's body as jinja2 does
// (encode("ascii", "backslashreplace").decode("unicode-escape")).
func unescapePy(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			if c == '\\' {
				return "", notOwned("a string ending in a backslash")
			}
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", notOwned("a short \\%c escape", e)
			}
			r, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil || r > utf8.MaxRune || (r >= 0xd800 && r < 0xe000) {
				return "", notOwned("a \\%c escape", e)
			}
			b.WriteRune(rune(r))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			r := 0
			k := 0
			for ; k < 3 && i+k < len(s) && s[i+k] >= '0' && s[i+k] <= '7'; k++ {
				r = r*8 + int(s[i+k]-'0')
			}
			b.WriteRune(rune(r))
			i += k - 1
		default:
			if e >= utf8.RuneSelf || e == 'N' {
				return "", notOwned("escape \\%c", e)
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
