package tokenize

import (
	"encoding/binary"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer is the supported subset of HF normalizers, applied in order.
type normalizer []normOp

type normOp struct {
	kind     int // opNFC, opPrepend, opReplace
	from, to string
}

const (
	opNFC = iota
	opPrepend
	opReplace
)

func (n normalizer) apply(s string) string {
	for _, op := range n {
		switch op.kind {
		case opNFC:
			s = nfc(s)
		case opPrepend:
			// HF's Prepend leaves an empty string empty.
			if s != "" {
				s = op.to + s
			}
		case opReplace:
			s = strings.ReplaceAll(s, op.from, op.to)
		}
	}
	return s
}

const cgj = '\u034f'

// nfc returns the NFC form of s as Hugging Face (Rust
// unicode-normalization-alignments) computes it. Two differences from
// x/text/unicode/norm are handled by nfcFull, a plain decompose, reorder,
// compose:
//   - x/text implements the Stream-Safe Text Format and inserts U+034F
//     COMBINING GRAPHEME JOINER after 30 consecutive non-starters; Rust does
//     not. When the output holds more U+034F than the input, the text is
//     normalized again without that limit.
//   - Rust's data are older: combining marks added since (refNFCStarters,
//     generated from the reference by tools/unicodegap) have class 0 there,
//     so they block reordering and composition. Texts holding one take the
//     nfcFull path with those classes set to 0.
func nfc(s string) string {
	if quickNFC(s) {
		return s
	}
	if hasRefStarter(s) {
		return nfcFull(s)
	}
	if norm.NFC.IsNormalString(s) {
		return s
	}
	out := norm.NFC.String(s)
	if strings.Count(out, string(cgj)) != strings.Count(s, string(cgj)) {
		return nfcFull(s)
	}
	return out
}

// isRefStarter reports whether the reference's NFC treats r as a starter
// although Go's data give it a non-zero combining class.
func isRefStarter(r rune) bool {
	if r < refNFCStarters[0] {
		return false
	}
	i := sort.Search(len(refNFCStarters), func(i int) bool { return refNFCStarters[i] >= r })
	return i < len(refNFCStarters) && refNFCStarters[i] == r
}

func hasRefStarter(s string) bool {
	for i := 0; i < len(s); {
		if s[i] < 0xDF { // below U+07C0: no listed mark
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if isRefStarter(r) {
			return true
		}
		i += w
	}
	return false
}

// quickNFC reports true when every rune of s is in the BMP, NFC on its own
// and starts a new composition segment: then s is NFC. It is a table
// lookup per rune (IsNormalString allocates).
func quickNFC(s string) bool {
	for i := 0; i < len(s); {
		// Eight ASCII bytes at a time.
		for i+8 <= len(s) && binary.LittleEndian.Uint64([]byte(s[i:i+8]))&0x8080808080808080 == 0 {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if r >= 1<<16 || bmpClass[r]&cNFC == 0 {
			return false
		}
		i += w
	}
	return true
}

// nfcFull is canonical decomposition, canonical ordering and canonical
// composition (the UAX #15 reference algorithm) without the stream-safe
// limit. Per-rune decomposition and pair composition are delegated to
// x/text, so the Unicode data are the same as nfc's. It is slow (a
// normalizer call per rune) and only used for texts with runs of more than
// 30 combining marks.
func nfcFull(s string) string {
	// 1. Full canonical decomposition, rune by rune (a single rune's
	// decomposition never reaches the stream-safe limit).
	var d []rune
	var buf [utf8.UTFMax]byte
	for _, r := range s {
		n := utf8.EncodeRune(buf[:], r)
		if norm.NFD.IsNormal(buf[:n]) {
			d = append(d, r)
			continue
		}
		d = append(d, []rune(norm.NFD.String(string(r)))...)
	}
	ccc := func(r rune) uint8 {
		if isRefStarter(r) {
			return 0
		}
		n := utf8.EncodeRune(buf[:], r)
		return norm.NFD.Properties(buf[:n]).CCC()
	}
	cls := make([]uint8, len(d))
	for i, r := range d {
		cls[i] = ccc(r)
	}
	// 2. Canonical ordering: a stable sort of each run of non-starters by
	// combining class (O(n log n): a long run must not be quadratic).
	for i := 0; i < len(d); {
		if cls[i] == 0 {
			i++
			continue
		}
		j := i
		for j < len(d) && cls[j] != 0 {
			j++
		}
		if j-i > 1 {
			idx := make([]int, j-i)
			for k := range idx {
				idx[k] = i + k
			}
			sort.SliceStable(idx, func(a, b int) bool { return cls[idx[a]] < cls[idx[b]] })
			rs, cs := make([]rune, j-i), make([]uint8, j-i)
			for k, x := range idx {
				rs[k], cs[k] = d[x], cls[x]
			}
			copy(d[i:j], rs)
			copy(cls[i:j], cs)
		}
		i = j
	}
	// 3. Canonical composition.
	if len(d) == 0 {
		return ""
	}
	out := d[:1]
	starter := 0
	last := int(cls[0])
	if last != 0 {
		last = 256
	}
	for i := 1; i < len(d); i++ {
		r, c := d[i], int(cls[i])
		if last < c || last == 0 {
			if comp, ok := composePair(out[starter], r); ok {
				out[starter] = comp
				continue
			}
		}
		if c == 0 {
			starter = len(out)
		}
		last = c
		out = append(out, r)
	}
	return string(out)
}

// composePair returns the primary composite of a and b, if any.
func composePair(a, b rune) (rune, bool) {
	var buf [2 * utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], a)
	n += utf8.EncodeRune(buf[n:], b)
	c := norm.NFC.Bytes(buf[:n])
	r, size := utf8.DecodeRune(c)
	if size == len(c) && r != utf8.RuneError {
		return r, true
	}
	return 0, false
}
