package tokenize

import (
	"encoding/binary"
	"math/bits"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// splitter is a pre-tokenizer: it cuts a normalized segment into pieces
// (the "words" the model encodes independently) and calls f for each, in
// order, stopping when f returns false.
type splitter interface {
	split(s string, f func(piece string) bool) bool
}

// Character classes used by the hand-written splitters. Letters, numbers
// and marks follow Go's unicode tables; whitespace is Unicode White_Space
// (the \s of Oniguruma, Rust regex and regexp2 alike).
const (
	cL   uint16 = 1 << iota // \p{L}
	cN                      // \p{N}
	cSp                     // \s
	cNL                     // \r or \n
	cU                      // o200k "upper": Lu Lt Lm Lo M
	cLo                     // o200k "lower": Ll Lm Lo M
	cM                      // \p{M}
	cPS                     // \p{P} or \p{S}
	cNFC                    // NFC on its own and a composition boundary before it
)

// bmpClass caches the classes of the Basic Multilingual Plane.
var bmpClass = func() *[1 << 16]uint16 {
	var t [1 << 16]uint16
	for r := rune(0); r < 1<<16; r++ {
		t[r] = computeClass(r)
	}
	return &t
}()

// gapRange is a run of code points with one general category, for code
// points Go's unicode tables do not know yet (encoder_unicode_gen.go).
type gapRange struct {
	lo, hi rune
	cat    string
}

// gapClass returns the class of r from unicodeGap, if listed.
func gapClass(r rune) (uint16, bool) {
	i := sort.Search(len(unicodeGap), func(i int) bool { return unicodeGap[i].hi >= r })
	if i == len(unicodeGap) || unicodeGap[i].lo > r {
		return 0, false
	}
	var c uint16
	switch cat := unicodeGap[i].cat; {
	case cat == "Lu" || cat == "Lt":
		c = cL | cU
	case cat == "Ll":
		c = cL | cLo
	case cat == "Lm" || cat == "Lo":
		c = cL | cU | cLo
	case cat[0] == 'M':
		c = cM | cU | cLo
	case cat[0] == 'N':
		c = cN
	case cat[0] == 'P' || cat[0] == 'S':
		c = cPS
	}
	return c | cNFC, true
}

func computeClass(r rune) uint16 {
	if c, ok := gapClass(r); ok {
		return c
	}
	var c uint16
	if unicode.IsLetter(r) {
		c |= cL
	}
	if unicode.IsNumber(r) {
		c |= cN
	}
	if unicode.IsSpace(r) {
		c |= cSp
	}
	if r == '\r' || r == '\n' {
		c |= cNL
	}
	isM := unicode.IsMark(r)
	if isM {
		c |= cM
	}
	lmo := unicode.In(r, unicode.Lm, unicode.Lo)
	if lmo || isM || unicode.In(r, unicode.Lu, unicode.Lt) {
		c |= cU
	}
	if lmo || isM || unicode.Is(unicode.Ll, r) {
		c |= cLo
	}
	if unicode.IsPunct(r) || unicode.IsSymbol(r) {
		c |= cPS
	}
	if r < 0xD800 || r > 0xDFFF {
		if s := string(r); norm.NFC.IsNormalString(s) && norm.NFC.PropertiesString(s).BoundaryBefore() {
			c |= cNFC
		}
	}
	return c
}

func runeClass(r rune) uint16 {
	if r < 1<<16 && r >= 0 {
		return bmpClass[r]
	}
	return computeClass(r)
}

// decodeAt returns the rune at s[i:] and its width; invalid bytes decode as
// U+FFFD of width 1.
// Hot loops test for ASCII themselves and call decodeMulti only for other
// bytes: decodeAt is over the inlining budget.
func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return decodeMulti(s[i:])
}

//go:noinline
func decodeMulti(s string) (rune, int) { return utf8.DecodeRuneInString(s) }

// asciiClass is bmpClass for the bytes below utf8.RuneSelf, indexed by any
// byte (the entries from utf8.RuneSelf on are unused) so that a lookup
// needs no bounds check.
var asciiClass = func() *[256]uint16 {
	var t [256]uint16
	copy(t[:utf8.RuneSelf], bmpClass[:utf8.RuneSelf])
	return &t
}()

// classRun returns the end of the longest run of runes from i whose class has
// any bit of mask.
func classRun(s string, i int, mask uint16) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c]&mask == 0 {
				break
			}
			i++
			continue
		}
		r, w := decodeMulti(s[i:])
		if runeClass(r)&mask == 0 {
			break
		}
		i += w
	}
	return i
}

// letterRun is classRun(s, i, cL), eight ASCII letters at a time: in ASCII
// \p{L} is exactly A-Z and a-z.
func letterRun(s string, i int) int {
	const (
		ones = 0x0101010101010101
		hi   = 0x80 * ones
	)
	for i+8 <= len(s) {
		w := binary.LittleEndian.Uint64([]byte(s[i : i+8]))
		// Per byte, with x the low 7 bits of the byte folded to lower
		// case: no subtraction borrows across bytes, and each result's
		// high bit says x >= 'a' and x <= 'z' respectively.
		x := (w | 0x20*ones) &^ hi
		ge := (x | hi) - 'a'*ones
		le := ('z'*ones | hi) - x
		letters := ge & le &^ w & hi // &^ w: not for non-ASCII bytes
		n := bits.TrailingZeros64(^letters&hi) >> 3
		i += n
		if n < 8 {
			if s[i] < utf8.RuneSelf {
				return i // an ASCII byte that is no letter
			}
			break
		}
	}
	return classRun(s, i, cL)
}

// classRunNot returns the end of the longest run of runes from i whose class
// has no bit of mask.
func classRunNot(s string, i int, mask uint16) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c]&mask != 0 {
				break
			}
			i++
			continue
		}
		r, w := decodeMulti(s[i:])
		if runeClass(r)&mask != 0 {
			break
		}
		i += w
	}
	return i
}

// contraction returns the length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i:],
// or 0. Oniguruma (HF's regex engine) folds case by Unicode case folding, so
// U+017F LONG S matches 's'; regexp2 does not. No fixture vocabulary gives
// different ids either way (checked on "'ſ" + letters), but this follows
// the reference.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return 0
	}
	j := i + 1
	if j >= len(s) {
		return 0
	}
	lower := func(k int) (byte, int) {
		c := s[k]
		if c < utf8.RuneSelf {
			return c | 0x20, 1
		}
		if c == 0xC5 && k+1 < len(s) && s[k+1] == 0xBF { // U+017F ſ
			return 's', 2
		}
		return 0, 0
	}
	c, w := lower(j)
	switch c {
	case 's', 't', 'm', 'd':
		return 1 + w
	case 'r', 'v', 'l':
		if j+w < len(s) {
			c2, w2 := lower(j + w)
			if (c == 'r' || c == 'v') && c2 == 'e' || c == 'l' && c2 == 'l' {
				return 1 + w + w2
			}
		}
	}
	return 0
}

// wsTail handles the three whitespace alternatives shared by the cl100k and
// o200k patterns, \s*[\r\n]+|\s+(?!\S)|\s+, at s[i:], which starts with
// whitespace.
func wsTail(s string, i int) int {
	j, lastNL, prev := i, -1, i
	for j < len(s) {
		var c uint16
		w := 1
		if b := s[j]; b < utf8.RuneSelf {
			c = asciiClass[b]
		} else {
			var r rune
			r, w = decodeMulti(s[j:])
			c = runeClass(r)
		}
		if c&cSp == 0 {
			break
		}
		if c&cNL != 0 {
			lastNL = j + w
		}
		prev = j
		j += w
	}
	if lastNL > 0 {
		return lastNL
	}
	if j == len(s) || prev == i {
		return j
	}
	return prev
}

// clSplitter is the cl100k family, one pass, no backtracking:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// K is 3 for cl100k and Llama 3, 1 for Qwen 2/2.5/3.
type clSplitter struct{ k int }

func (c clSplitter) split(s string, f func(string) bool) bool {
	for i := 0; i < len(s); {
		e := c.next(s, i)
		if !f(s[i:e]) {
			return false
		}
		i = e
	}
	return true
}

func (c clSplitter) next(s string, i int) int {
	b := s[i]
	if b >= utf8.RuneSelf {
		return c.nextRune(s, i)
	}
	// The same alternatives as nextRune, for an ASCII first rune.
	cl := asciiClass[b]
	if cl&cL != 0 {
		return letterRun(s, i+1)
	}
	if b == '\'' {
		if n := contraction(s, i); n > 0 {
			return i + n
		}
	}
	if cl&(cNL|cN) == 0 && i+1 < len(s) {
		if b2 := s[i+1]; b2 < utf8.RuneSelf {
			if asciiClass[b2]&cL != 0 {
				return letterRun(s, i+2)
			}
		} else if r2, w2 := decodeMulti(s[i+1:]); runeClass(r2)&cL != 0 {
			return letterRun(s, i+1+w2)
		}
	}
	if cl&cN != 0 {
		return digitRun(s, i+1, c.k-1)
	}
	if e := punctRun(s, i, rune(b), cSp|cL|cN, "\r\n"); e > 0 {
		return e
	}
	return wsTail(s, i)
}

// nextRune is next for a first rune outside ASCII.
func (c clSplitter) nextRune(s string, i int) int {
	r, w := decodeAt(s, i)
	if r == '\'' {
		if n := contraction(s, i); n > 0 {
			return i + n
		}
	}
	cl := runeClass(r)
	if cl&cL != 0 {
		return letterRun(s, i+w)
	}
	if cl&(cNL|cN) == 0 && i+w < len(s) {
		if r2, w2 := decodeAt(s, i+w); runeClass(r2)&cL != 0 {
			return letterRun(s, i+w+w2)
		}
	}
	if cl&cN != 0 {
		return digitRun(s, i+w, c.k-1)
	}
	if e := punctRun(s, i, r, cSp|cL|cN, "\r\n"); e > 0 {
		return e
	}
	return wsTail(s, i)
}

// digitRun extends a \p{N} match at s[:i] by at most more further digits:
// the tail of \p{N}{1,k}.
func digitRun(s string, i, more int) int {
	for ; more > 0 && i < len(s); more-- {
		if c := s[i]; c < utf8.RuneSelf {
			if c-'0' > 9 { // the only ASCII \p{N}
				break
			}
			i++
			continue
		}
		r, w := decodeMulti(s[i:])
		if runeClass(r)&cN == 0 {
			break
		}
		i += w
	}
	return i
}

// punctRun matches " ?X+[tail]*" at s[i:], where r is the rune at i and X
// is every rune outside the classes in not; -1 when X+ does not match.
func punctRun(s string, i int, r rune, not uint16, tail string) int {
	j := i
	if r == ' ' {
		j++
	}
	e := classRunNot(s, j, not)
	if e == j {
		return -1
	}
	for e < len(s) && strings.IndexByte(tail, s[e]) >= 0 {
		e++
	}
	return e
}

// o200kSplitter is the o200k_base (gpt-oss) pattern:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
type o200kSplitter struct{}

func (o o200kSplitter) split(s string, f func(string) bool) bool {
	for i := 0; i < len(s); {
		e := o.next(s, i)
		if !f(s[i:e]) {
			return false
		}
		i = e
	}
	return true
}

// upperLower matches U*L+ at s[p:] (the first o200k alternative without its
// prefix and suffix) and returns its end, or -1. U* is greedy and gives back
// runes until L+ can start.
func upperLower(s string, p int) int {
	if p >= len(s) {
		return -1
	}
	uEnd := classRun(s, p, cU)
	q := uEnd
	for {
		if q < len(s) {
			if r, _ := decodeAt(s, q); runeClass(r)&cLo != 0 {
				return classRun(s, q, cLo)
			}
		}
		if q == p {
			return -1
		}
		_, w := utf8.DecodeLastRuneInString(s[p:q])
		q -= w
	}
}

func (o o200kSplitter) next(s string, i int) int {
	r, w := decodeAt(s, i)
	cl := runeClass(r)
	prefix := cl&(cNL|cL|cN) == 0
	if prefix {
		if e := upperLower(s, i+w); e > 0 {
			return e + contraction(s, e)
		}
	}
	if e := upperLower(s, i); e > 0 {
		return e + contraction(s, e)
	}
	if prefix && i+w < len(s) {
		if r2, _ := decodeAt(s, i+w); runeClass(r2)&cU != 0 {
			e := classRun(s, classRun(s, i+w, cU), cLo)
			return e + contraction(s, e)
		}
	}
	if cl&cU != 0 {
		e := classRun(s, classRun(s, i, cU), cLo)
		return e + contraction(s, e)
	}
	if cl&cN != 0 {
		return digitRun(s, i+w, 2)
	}
	if e := punctRun(s, i, r, cSp|cL|cN, "\r\n/"); e > 0 {
		return e
	}
	return wsTail(s, i)
}

// runSplitter isolates maximal runs of runes accepted by in, cut into
// chunks of at most max runes (0: unlimited); the text between runs forms
// pieces of its own. It implements Split(Isolated) for patterns such as
// \p{N}{1,3} and [\u4e00-\u9fa5...]+.
type runSplitter struct {
	in  func(r rune) bool
	max int
}

func (rs runSplitter) split(s string, f func(string) bool) bool {
	gap := 0
	for i := 0; i < len(s); {
		r, w := decodeAt(s, i)
		if !rs.in(r) {
			i += w
			continue
		}
		if i > gap && !f(s[gap:i]) {
			return false
		}
		j, n := i, 0
		for j < len(s) && (rs.max == 0 || n < rs.max) {
			r2, w2 := decodeAt(s, j)
			if !rs.in(r2) {
				break
			}
			j += w2
			n++
		}
		if !f(s[i:j]) {
			return false
		}
		i, gap = j, j
	}
	if gap < len(s) {
		return f(s[gap:])
	}
	return true
}

// seqSplitter applies splitters in turn: each piece of one stage is split
// again by the next, as HF's pre_tokenizers.Sequence does.
type seqSplitter []splitter

func (q seqSplitter) split(s string, f func(string) bool) bool {
	switch len(q) {
	case 0:
		return f(s)
	case 1:
		return q[0].split(s, f)
	}
	// One callback per stage, built once per call rather than per piece.
	fs := make([]func(string) bool, len(q)+1)
	fs[len(q)] = f
	for k := len(q) - 1; k >= 1; k-- {
		stage, next := q[k], &fs[k+1]
		fs[k] = func(p string) bool { return stage.split(p, *next) }
	}
	return q[0].split(s, fs[1])
}

// dsSplitter is the last stage of DeepSeek V3's pre-tokenizer:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Unlike the cl100k family it has no alternative for some characters (for
// example digits and controls); those form the gaps between matches, which
// Split(Isolated) emits as pieces of their own.
type dsSplitter struct{}

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// match returns the end of the match starting at i, or -1.
func (dsSplitter) match(s string, i int) int {
	c := s[i]
	if isASCIIPunct(c) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 1
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	r, w := decodeAt(s, i)
	cl := runeClass(r)
	if cl&(cNL|cL|cPS) == 0 && i+w < len(s) {
		if r2, _ := decodeAt(s, i+w); runeClass(r2)&(cL|cM) != 0 {
			return classRun(s, i+w, cL|cM)
		}
	}
	if cl&(cL|cM) != 0 {
		return classRun(s, i, cL|cM)
	}
	j := i
	if r == ' ' {
		j++
	}
	if e := classRun(s, j, cPS); e > j {
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	if cl&cSp != 0 {
		return wsTail(s, i)
	}
	return -1
}

func (d dsSplitter) split(s string, f func(string) bool) bool {
	gap := 0
	for i := 0; i < len(s); {
		e := d.match(s, i)
		if e < 0 {
			_, w := decodeAt(s, i)
			i += w
			continue
		}
		if i > gap && !f(s[gap:i]) {
			return false
		}
		if !f(s[i:e]) {
			return false
		}
		i, gap = e, e
	}
	if gap < len(s) {
		return f(s[gap:])
	}
	return true
}
