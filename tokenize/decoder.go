package tokenize

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decoding: token ids back to text, as Hugging Face's Rust tokenizers
// decode them (Tokenizer::decode with skip_special_tokens=false, which is
// what vLLM's POST /detokenize calls through transformers):
//
//  1. each id becomes its token string, an added token's content first,
//     then the model's vocabulary; an id in neither is dropped;
//  2. the tokenizer.json "decoder" runs over the token strings.
//
// Supported decoders are the ones the fixture models declare: ByteLevel
// (GPT-2's byte alphabet back to bytes, a token with a character outside
// the alphabet kept as its own UTF-8, then lossy UTF-8 over the whole
// text), and a Sequence of Replace (string pattern), ByteFallback, Fuse and
// Strip (Llama 2, Gemma). Any other decoder leaves the tokenizer without
// one: Decode reports false and the caller does not answer.

// decodeStep is one Hugging Face decoder over the token strings.
type decodeStep func(toks []string) []string

// tjDecoder is a tokenizer.json "decoder" object.
type tjDecoder struct {
	Type     string      `json:"type"`
	Decoders []tjDecoder `json:"decoders"`
	Pattern  *tjPattern  `json:"pattern"`
	Content  string      `json:"content"`
	Start    int         `json:"start"`
	Stop     int         `json:"stop"`
}

// buildDecoder turns a decoder config into steps. ok is false for a config
// this package does not reproduce (or none: HF then joins tokens with
// spaces, which no supported model relies on).
func buildDecoder(raw json.RawMessage) ([]decodeStep, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false
	}
	var c tjDecoder
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false
	}
	return decoderSteps(&c)
}

func decoderSteps(c *tjDecoder) ([]decodeStep, bool) {
	switch c.Type {
	case "ByteLevel":
		return []decodeStep{byteLevelDecode}, true
	case "Sequence":
		var out []decodeStep
		for i := range c.Decoders {
			st, ok := decoderSteps(&c.Decoders[i])
			if !ok {
				return nil, false
			}
			out = append(out, st...)
		}
		return out, true
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil || c.Pattern.Regex != nil {
			return nil, false
		}
		from, to := *c.Pattern.String, c.Content
		return []decodeStep{func(toks []string) []string {
			for i, t := range toks {
				toks[i] = strings.ReplaceAll(t, from, to)
			}
			return toks
		}}, true
	case "ByteFallback":
		return []decodeStep{byteFallbackDecode}, true
	case "Fuse":
		return []decodeStep{func(toks []string) []string { return []string{strings.Join(toks, "")} }}, true
	case "Strip":
		r, n := utf8.DecodeRuneInString(c.Content)
		if n == 0 || n != len(c.Content) || c.Start < 0 || c.Stop < 0 {
			return nil, false
		}
		return []decodeStep{stripDecode(r, c.Start, c.Stop)}, true
	}
	return nil, false
}

// byteLevelDecode maps each token's characters back to the bytes of GPT-2's
// alphabet; a token holding any other character (an added token, say)
// stands for its own UTF-8 bytes. The bytes become text with one U+FFFD per
// maximal invalid subsequence, as Rust's String::from_utf8_lossy.
func byteLevelDecode(toks []string) []string {
	var b []byte
	for _, t := range toks {
		if raw, ok := decodeByteLevel(t, nil); ok {
			b = append(b, raw...)
		} else {
			b = append(b, t...)
		}
	}
	return []string{lossyUTF8(b)}
}

// byteFallbackDecode turns runs of <0xNN> tokens into the text their bytes
// encode, or one U+FFFD per byte when the run is not valid UTF-8.
func byteFallbackDecode(toks []string) []string {
	out := make([]string, 0, len(toks))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			out = append(out, strings.Repeat("\uFFFD", len(run)))
		}
		run = run[:0]
	}
	for _, t := range toks {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if n, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				run = append(run, byte(n))
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// stripDecode removes up to start leading and stop trailing c from every
// token.
func stripDecode(c rune, start, stop int) decodeStep {
	s := string(c)
	return func(toks []string) []string {
		for i, t := range toks {
			for n := 0; n < start && strings.HasPrefix(t, s); n++ {
				t = t[len(s):]
			}
			for n := 0; n < stop && strings.HasSuffix(t, s); n++ {
				t = t[:len(t)-len(s)]
			}
			toks[i] = t
		}
		return toks
	}
}

// lossyUTF8 is Rust's String::from_utf8_lossy: each maximal subpart of an
// ill-formed sequence (Unicode 3.9, "U+FFFD substitution of maximal
// subparts") becomes one U+FFFD. Go's own conversions substitute per byte
// or per run instead.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += maximalSubpart(b[i:])
	}
	return sb.String()
}

// maximalSubpart is the length of the longest prefix of b that starts a
// well-formed UTF-8 sequence (at least 1); b itself is ill-formed there.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 1; k <= need && k < len(b); k++ {
		x := b[k]
		if k == 1 && (x < lo || x > hi) || k > 1 && (x < 0x80 || x > 0xBF) {
			break
		}
		n++
	}
	return n
}

// Decode returns the text of ids as Hugging Face's tokenizer decodes them
// with skip_special_tokens=false: ids the tokenizer does not know are
// dropped (as HF drops them) and reported in unknown. ok is false when the
// tokenizer's decoder is not one this package reproduces.
func (t *Tokenizer) Decode(ids []int) (text string, unknown int, ok bool) {
	if t.decoder == nil {
		return "", 0, false
	}
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || id >= len(t.idKnown) || !t.idKnown[id] {
			unknown++
			continue
		}
		toks = append(toks, t.tokenText(id))
	}
	for _, st := range t.decoder {
		toks = st(toks)
	}
	return strings.Join(toks, ""), unknown, true
}

// setDecoder records the id -> token table (added tokens over the
// vocabulary) and the decoder; a decoder this package does not reproduce
// leaves the tokenizer without one.
func (t *Tokenizer) setDecoder(vocab map[string]int32, added []tjAdded, raw json.RawMessage) {
	steps, ok := buildDecoder(raw)
	if !ok {
		return
	}
	n := 0
	for _, id := range vocab {
		n = max(n, int(id)+1)
	}
	for _, a := range added {
		n = max(n, a.ID+1)
	}
	if n > 1<<24 {
		return // not a real vocabulary
	}
	idToken := make([]string, n)
	t.idKnown = make([]bool, n)
	for s, id := range vocab {
		if id >= 0 {
			idToken[id], t.idKnown[id] = s, true
		}
	}
	for _, a := range added {
		if a.ID >= 0 {
			idToken[a.ID], t.idKnown[a.ID] = a.Content, true
		}
	}
	t.idText, t.idOff = packStrings(idToken)
	t.decoder = steps
}

// tokenText is the vocabulary's string of id, which idKnown[id] says it
// has.
func (t *Tokenizer) tokenText(id int) string { return t.idText[t.idOff[id]:t.idOff[id+1]] }

// packStrings concatenates ss into one string, with ss[i] at
// off[i]:off[i+1]: unlike a []string, a table the garbage collector need
// not scan (see longTable).
func packStrings(ss []string) (string, []uint32) {
	var b strings.Builder
	off := make([]uint32, len(ss)+1)
	for i, s := range ss {
		b.WriteString(s)
		off[i+1] = uint32(b.Len())
	}
	return b.String(), off
}

// cleanUpTokenization is transformers' clean_up_tokenization, applied by
// tokenizer.decode when the tokenizer's clean_up_tokenization_spaces is
// set: the replacements run one after the other, in this order.
func cleanUpTokenization(s string) string {
	for _, r := range [...][2]string{
		{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
		{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
	} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

// Detokenize returns the text of ids as vLLM's POST /detokenize does
// (transformers' tokenizer.decode(ids): special tokens kept, then
// clean_up_tokenization when tokenizer_config.json's
// clean_up_tokenization_spaces is true). It is a *NotExactError when this
// package cannot reproduce that exactly: a decoder it does not support, an
// id outside the vocabulary (vLLM's handling of those differs by version),
// or a text that the clean-up would change while the config does not say
// whether it applies (transformers' default changed over versions).
func (m *Model) Detokenize(ids []int) (string, error) {
	t, ok := m.enc.(*Tokenizer)
	if !ok {
		return "", &NotExactError{"the tokenizer has no decoder"}
	}
	s, unknown, ok := t.Decode(ids)
	switch {
	case !ok:
		return "", &NotExactError{"the tokenizer's decoder is not supported"}
	case unknown > 0:
		return "", &NotExactError{"token ids outside the vocabulary"}
	}
	switch {
	case m.cleanUp == nil:
		if cleanUpTokenization(s) != s {
			return "", &NotExactError{"clean_up_tokenization_spaces is not set"}
		}
	case *m.cleanUp:
		s = cleanUpTokenization(s)
	}
	return s, nil
}
