package tokenize

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The engine's own whitespace handling differs from jinja2's lexer (a
// `{%-` can strip text before a preceding `{{ }}`, `trim_blocks` can reach
// past an expression, a space after a leading `{{ x }}` is lost). Rather
// than patch the engine, templates are lexed here exactly as jinja2 3.1
// lexes them with trim_blocks=True, lstrip_blocks=True and
// keep_trailing_newline=False, and every piece of text is re-emitted as an
// output expression of a precomputed string, {{ __mt_t[i] }}. The engine
// then never sees a text segment, so its trimming has nothing to act on.
//
// The same pass rewrites:
//   - {{ E }} to {{ (E)|__mt_str }}, so output follows Python's str()
//     (None, float repr, repr of lists and dicts);
//   - each operand of ~ to (operand)|__mt_str, as jinja2 str()s them
//     (template_concat.go);
//   - the filters tojson, string, trim, join, list and format to Python-compatible
//     versions (the engine resolves unknown filter names from the render
//     scope);
//   - and records the identifiers the template references.

const (
	textVar = "__mt_t"
	strFilt = "__mt_str"
)

var filterRenames = map[string]string{
	"tojson": "__mt_tojson",
	"string": "__mt_str",
	"trim":   "__mt_trim",
	"join":   "__mt_join",
	"list":   "__mt_list",
	"format": "__mt_format",
}

type lexed struct {
	src    string   // the rewritten template for the engine
	texts  []string // text pieces, indexed by __mt_t
	idents map[string]bool
	bodies []string // the bodies of statement tags, in order (for analysis)
	// segs is the template as jinja2's lexer splits it, whitespace control
	// applied: text, and the untouched bodies of {{ }} and {% %} tags
	// (the owned evaluator's input, jinja_parse.go).
	segs []lexSeg
	// engineErr, when set, is why src must not go to the engine: a body
	// its scanner would split differently. The owned evaluator, which
	// reads segs, is not concerned.
	engineErr error
}

// lexSeg is one piece of a lexed template: text (kind 0) or the body of a
// tag (kind '{' or '%'); line is the template line (1-based, after
// newline normalisation) where it starts, for compile errors.
type lexSeg struct {
	kind byte
	text string
	line int
}

// lexTemplate rewrites src as described above.
func lexTemplate(src string) (*lexed, error) {
	// jinja2 normalises newlines and drops one trailing newline.
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	src = strings.TrimSuffix(src, "\n")

	lx := &lexed{idents: map[string]bool{}}
	var out strings.Builder
	out.Grow(len(src) + len(src)/4)
	// lineOf is the line of src[i], for i never decreasing between calls.
	line, lineAt := 1, 0
	lineOf := func(i int) int {
		line += strings.Count(src[lineAt:i], "\n")
		lineAt = i
		return line
	}
	emitText := func(s string, at int) {
		if s == "" {
			return
		}
		out.WriteString("{{ " + textVar + "[" + strconv.Itoa(len(lx.texts)) + "] }}")
		lx.texts = append(lx.texts, s)
		lx.segs = append(lx.segs, lexSeg{0, s, lineOf(at)})
	}

	pos := 0
	lineStarting := true
	for pos < len(src) {
		j, kind := nextOpener(src, pos)
		if j < 0 {
			emitText(src[pos:], pos)
			break
		}
		data := src[pos:j]
		k := j + 2
		sign := byte(0)
		if k < len(src) && (src[k] == '-' || src[k] == '+') {
			sign = src[k]
			k++
		}
		isRaw := false
		if kind == '%' {
			_, isRaw = rawBegin(src, k)
		}
		data = applyLeftStrip(data, sign, kind != '{', lineStarting)
		emitText(data, pos)

		if isRaw {
			end, _ := rawBegin(src, k)
			// The raw body is data up to {% endraw %}; it gets the same
			// left-strip treatment; the raw begin tag never trims blocks.
			lineStarting = src[end-1] == '\n'
			bodyEnd, tagEnd, esign, ok := findEndRaw(src, end)
			if !ok {
				return nil, fmt.Errorf("line %d: missing end of raw directive", lineOf(j))
			}
			body := applyLeftStrip(src[end:bodyEnd], esign, true, lineStarting)
			emitText(body, end)
			lineStarting = src[tagEnd-1] == '\n'
			pos = tagEnd
			continue
		}

		switch kind {
		case '#':
			end, ok := findCommentEnd(src, k)
			if !ok {
				return nil, fmt.Errorf("line %d: missing end of comment tag", lineOf(j))
			}
			lineStarting = src[end-1] == '\n'
			pos = end
		case '{', '%':
			bodyEnd, end, err := findTagEnd(src, k, kind)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineOf(j), err)
			}
			body := src[k:bodyEnd]
			lx.segs = append(lx.segs, lexSeg{kind, body, lineOf(j)})
			rw, err := rewriteTag(body, lx.idents)
			if err != nil && lx.engineErr == nil {
				lx.engineErr = fmt.Errorf("line %d: %w", lineOf(j), err)
			}
			isStr := kind == '{' && alwaysString(rw)
			rw = rewriteConcat(rw)
			if kind == '{' && !isStr {
				out.WriteString("{{ (" + rw + ")|" + strFilt + " }}")
			} else if kind == '{' {
				out.WriteString("{{ " + rw + " }}")
			} else {
				out.WriteString("{% " + rw + " %}")
				lx.bodies = append(lx.bodies, strings.TrimSpace(body))
			}
			lineStarting = src[end-1] == '\n'
			pos = end
		}
	}
	lx.src = out.String()
	return lx, nil
}

// nextOpener finds the next "{{", "{%" or "{#" at or after pos.
func nextOpener(src string, pos int) (int, byte) {
	for {
		i := strings.IndexByte(src[pos:], '{')
		if i < 0 {
			return -1, 0
		}
		i += pos
		if i+1 < len(src) {
			switch c := src[i+1]; c {
			case '{', '%', '#':
				return i, c
			}
		}
		pos = i + 1
	}
}

// applyLeftStrip applies a "-" sign (strip all trailing whitespace) or
// lstrip_blocks (strip the whitespace between the last newline and a block
// or comment tag when nothing else is on that line) to the text before a tag.
func applyLeftStrip(data string, sign byte, lstripKind, lineStarting bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(data, pyIsSpace)
	}
	if sign == '+' || !lstripKind {
		return data
	}
	lpos := strings.LastIndexByte(data, '\n') + 1
	if lpos > 0 || lineStarting {
		rest := data[lpos:]
		if rest != "" && strings.TrimLeftFunc(rest, pyIsSpace) == "" {
			return data[:lpos]
		}
	}
	return data
}

func isWS(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// skipWS returns the index of the first non-whitespace byte at or after i.
func skipWS(s string, i int) int {
	for i < len(s) && isWS(s[i]) {
		i++
	}
	return i
}

// rawBegin reports whether src[k:] is `\s*raw\s*(-%}\s*|%})` and returns
// the end of that match.
func rawBegin(src string, k int) (int, bool) {
	i := k
	i = skipWS(src, i)
	if !strings.HasPrefix(src[i:], "raw") {
		return 0, false
	}
	i += 3
	i = skipWS(src, i)
	switch {
	case strings.HasPrefix(src[i:], "-%}"):
		return skipSpace(src, i+3), true
	case strings.HasPrefix(src[i:], "%}"):
		return i + 2, true
	}
	return 0, false
}

// skipSpace skips Python \s characters.
func skipSpace(src string, i int) int {
	for i < len(src) {
		r, n := utf8.DecodeRuneInString(src[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i
}

// findEndRaw finds `{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)` after pos.
func findEndRaw(src string, pos int) (bodyEnd, end int, sign byte, ok bool) {
	for p := pos; ; {
		i := strings.Index(src[p:], "{%")
		if i < 0 {
			return 0, 0, 0, false
		}
		i += p
		k := i + 2
		var s byte
		if k < len(src) && (src[k] == '-' || src[k] == '+') {
			s = src[k]
			k++
		}
		k = skipWS(src, k)
		if strings.HasPrefix(src[k:], "endraw") {
			k += 6
			k = skipWS(src, k)
			if e, ok := blockClose(src, k, '%'); ok {
				return i, e, s, true
			}
		}
		p = i + 2
	}
}

// blockClose matches a tag closer at src[k:]: `+%}`, `-%}\s*` or `%}\n?`
// for blocks (`#` likewise for comments), `-}}\s*` or `}}` for expressions.
func blockClose(src string, k int, kind byte) (int, bool) {
	c := byte('}')
	if kind == '%' || kind == '#' {
		c = kind
	}
	if kind != '{' && strings.HasPrefix(src[k:], "+"+string(c)+"}") {
		return k + 3, true
	}
	if strings.HasPrefix(src[k:], "-"+string(c)+"}") {
		return skipSpace(src, k+3), true
	}
	if strings.HasPrefix(src[k:], string(c)+"}") {
		e := k + 2
		if kind != '{' && e < len(src) && src[e] == '\n' {
			e++ // trim_blocks
		}
		return e, true
	}
	return 0, false
}

func findCommentEnd(src string, k int) (int, bool) {
	for p := k; p < len(src); p++ {
		if e, ok := blockClose(src, p, '#'); ok {
			return e, true
		}
	}
	return 0, false
}

// stringEnd returns the index just past the string literal opening at
// s[p] (a backslash escapes the next byte), or len(s) and false when it is
// not closed.
func stringEnd(s string, p int) (int, bool) {
	q := s[p]
	for p++; p < len(s); p++ {
		switch s[p] {
		case '\\':
			p++
		case q:
			return p + 1, true
		}
	}
	return len(s), false
}

// findTagEnd scans a {{ }} or {% %} body, skipping string literals and
// ignoring closers while brackets are open, as jinja2's lexer does.
func findTagEnd(src string, k int, kind byte) (bodyEnd, end int, err error) {
	depth := 0
	for p := k; p < len(src); p++ {
		c := src[p]
		switch c {
		case '\'', '"':
			e, ok := stringEnd(src, p)
			if !ok {
				return 0, 0, fmt.Errorf("unterminated string in template tag")
			}
			p = e - 1 // the loop steps past the closing quote
			continue
		case '(', '[', '{':
			depth++
			continue
		}
		if depth == 0 {
			if e, ok := blockClose(src, p, kind); ok {
				return p, e, nil
			}
		}
		if c == ')' || c == ']' || c == '}' {
			if depth > 0 {
				depth--
			}
		}
	}
	return 0, 0, fmt.Errorf("unclosed template tag")
}

// rewriteTag renames filters and collects identifiers. It returns an error,
// with the rewritten body still complete, for a body the engine's own
// scanner would split differently (a `}}` or `%}` inside brackets, as a
// nested dict literal ends): such a template can only render through the
// owned evaluator.
func rewriteTag(body string, idents map[string]bool) (string, error) {
	var refused error
	var b strings.Builder
	b.Grow(len(body) + 16)
	prevPipe := false
	pad := map[int]string{} // text to write before body[i]
	for p := 0; p < len(body); {
		if s, ok := pad[p]; ok {
			b.WriteString(s)
			delete(pad, p)
		}
		c := body[p]
		switch {
		case c == '\'' || c == '"':
			s := p
			p, _ = stringEnd(body, p)
			b.WriteString(body[s:p])
			prevPipe = false
		case c == '|':
			b.WriteByte(c)
			p++
			prevPipe = true
		case isIdentStart(c):
			s := p
			p = identEnd(body, p)
			w := body[s:p]
			if prevPipe {
				if r, ok := filterRenames[w]; ok {
					w = r
				}
			} else {
				idents[w] = true
			}
			b.WriteString(w)
			if prevPipe {
				padTruthFilter(w, body, p, &b, pad)
			}
			prevPipe = false
		case c >= '0' && c <= '9':
			s := p
			for p < len(body) && (isIdentPart(body[p]) || body[p] == '.') {
				p++
			}
			b.WriteString(body[s:p])
			prevPipe = false
		case isWS(c):
			b.WriteByte(c)
			p++
		case (c == '}' || c == '%') && p+1 < len(body) && body[p+1] == '}':
			if refused == nil {
				refused = errUnsupported("a tag closer inside brackets")
			}
			b.WriteByte(c)
			p++
			prevPipe = false
		default:
			b.WriteByte(c)
			p++
			prevPipe = false
		}
	}
	return b.String(), refused
}

// truthFilters are the filters whose truth-test form (no test given) the
// engine mishandles: it slices its arguments past their end and panics
// (select, reject with no test; selectattr, rejectattr with only the
// attribute). The value is how many arguments after the filtered value the
// engine needs; padTruthFilter adds the ones that select the same
// truthiness test inside the engine: a non-string test name for select and
// reject, the engine's own "truthy" for the attr forms.
var truthFilters = map[string]struct {
	need int
	pad  string
}{
	"select":     {1, "none"},
	"reject":     {1, "none"},
	"selectattr": {2, "'truthy'"},
	"rejectattr": {2, "'truthy'"},
}

// padTruthFilter, for a filter name ending at body[p], arranges for the
// missing arguments to be written: at once when the filter has no
// parentheses, else just before its closing parenthesis (through pad, so
// the arguments themselves are still rewritten as usual).
func padTruthFilter(name, body string, p int, b *strings.Builder, pad map[int]string) {
	tf, ok := truthFilters[name]
	if !ok {
		return
	}
	q := skipWS(body, p)
	if q >= len(body) || body[q] != '(' {
		if tf.need == 1 {
			b.WriteString("(" + tf.pad + ")")
		}
		return // selectattr without its attribute: Python raises; leave it
	}
	args, depth, empty := 1, 0, true
	for r := q + 1; r < len(body); r++ {
		switch c := body[r]; {
		case c == '\'' || c == '"':
			e, _ := stringEnd(body, r)
			r = e - 1
			empty = false
		case c == '(' || c == '[' || c == '{':
			depth++
			empty = false
		case (c == ')' || c == ']' || c == '}') && depth > 0:
			depth--
		case c == ')':
			switch {
			case empty && tf.need == 1:
				pad[r] = tf.pad
			case !empty && args == tf.need-1:
				pad[r] = ", " + tf.pad
			}
			return
		case c == ',' && depth == 0:
			args++
		case !isWS(c):
			empty = false
		}
	}
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// identEnd returns the end of the identifier characters at s[p:].
func identEnd(s string, p int) int {
	for p < len(s) && isIdentPart(s[p]) {
		p++
	}
	return p
}

// alwaysString reports whether an output expression (already rewritten)
// evaluates to a string in both engines, so printing it needs no Python
// str(): a string literal, a string literal followed by + or ~ (Python
// raises for str + non-str; the engine yields a string either way), or an
// expression whose last filter is one of the string-returning
// replacements. Expressions with a top-level if, or, and are excluded.
func alwaysString(body string) bool {
	body = strings.TrimSpace(body)
	if body == "" {
		return false
	}
	depth := 0
	firstLit := body[0] == '\'' || body[0] == '"'
	litEnd := -1
	lastFilter := ""
	nextIsFilter := false
	for p := 0; p < len(body); {
		c := body[p]
		switch {
		case c == '\'' || c == '"':
			p, _ = stringEnd(body, p)
			if litEnd < 0 {
				litEnd = p
			}
			continue
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case depth == 0 && c == '|':
			nextIsFilter = true
		case isIdentStart(c):
			s := p
			p = identEnd(body, p)
			w := body[s:p]
			if depth == 0 {
				switch w {
				case "if", "or", "and", "else":
					return false
				}
				if nextIsFilter {
					lastFilter = w
					nextIsFilter = false
				}
			}
			continue
		}
		p++
	}
	switch lastFilter {
	case "__mt_tojson", "__mt_trim", "__mt_str", "__mt_join", "__mt_format":
		return true
	}
	if firstLit && litEnd > 0 {
		rest := strings.TrimSpace(body[min(litEnd, len(body)):])
		return rest == "" || rest[0] == '+' || rest[0] == '~'
	}
	return false
}
