package tokenize

import (
	"fmt"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// regexSplitter is HF's Split(pattern, behavior=Isolated, invert=false)
// for a pattern no hand-written splitter knows, through regexp2 (a
// backtracking engine with the lookahead these patterns use, which Go's
// regexp lacks). Matches and the text between them are pieces. It is the
// slow path (a few MB/s) and the oracle for the hand-written splitters.
type regexSplitter struct {
	re *regexp2.Regexp
}

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("tokenize: split pattern %q: %w", pattern, err)
	}
	return &regexSplitter{re: re}, nil
}

func (x *regexSplitter) split(s string, f func(string) bool) bool {
	if s == "" {
		return true
	}
	runes := []rune(s)
	// off[i] is the byte offset of runes[i]; invalid UTF-8 bytes became
	// U+FFFD of width 1, as decode does.
	off := make([]int, len(runes)+1)
	b := 0
	for i := range runes {
		off[i] = b
		_, w := utf8.DecodeRuneInString(s[b:])
		b += w
	}
	off[len(runes)] = len(s)
	gap := 0
	m, err := x.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		start, end := off[m.Index], off[m.Index+m.Length]
		if start > gap && !f(s[gap:start]) {
			return false
		}
		if end > start {
			if !f(s[start:end]) {
				return false
			}
			gap = end
		}
		m, err = x.re.FindNextMatch(m)
	}
	if gap < len(s) {
		return f(s[gap:])
	}
	return true
}
