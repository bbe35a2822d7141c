package tokenize

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Templates are lexed here exactly as jinja2 3.1 lexes them with
// trim_blocks=True, lstrip_blocks=True and keep_trailing_newline=False:
// text with whitespace control applied, and the bodies of {{ }} and {% %}
// tags, which the evaluator parses (jinja_parse.go). The same pass records
// the identifiers the template references.

type lexed struct {
	idents map[string]bool
	bodies []string // the bodies of statement tags, in order (for analysis)
	// segs is the template as jinja2's lexer splits it, whitespace control
	// applied: text, and the untouched bodies of {{ }} and {% %} tags
	// (the owned evaluator's input, jinja_parse.go).
	segs []lexSeg
}

// lexSeg is one piece of a lexed template: text (kind 0) or the body of a
// tag (kind '{' or '%'); line is the template line (1-based, after
// newline normalisation) where it starts, for compile errors.
type lexSeg struct {
	kind byte
	text string
	line int
}

// lexTemplate lexes src as described above.
func lexTemplate(src string) (*lexed, error) {
	// jinja2 normalises newlines and drops one trailing newline.
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	src = strings.TrimSuffix(src, "\n")

	lx := &lexed{idents: map[string]bool{}}
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
			collectIdents(body, lx.idents)
			if kind == '%' {
				lx.bodies = append(lx.bodies, strings.TrimSpace(body))
			}
			lineStarting = src[end-1] == '\n'
			pos = end
		}
	}
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

// collectIdents adds the identifiers a tag body references to idents:
// names outside strings, except filter names (after a |).
func collectIdents(body string, idents map[string]bool) {
	prevPipe := false
	for p := 0; p < len(body); {
		c := body[p]
		switch {
		case c == '\'' || c == '"':
			p, _ = stringEnd(body, p)
			prevPipe = false
		case c == '|':
			p++
			prevPipe = true
		case isIdentStart(c):
			s := p
			p = identEnd(body, p)
			if !prevPipe {
				idents[body[s:p]] = true
			}
			prevPipe = false
		case c >= '0' && c <= '9':
			for p < len(body) && (isIdentPart(body[p]) || body[p] == '.') {
				p++
			}
			prevPipe = false
		case isWS(c):
			p++
		default:
			p++
			prevPipe = false
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
