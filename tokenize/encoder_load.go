package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"unicode/utf8"
)

// LoadTokenizerJSON loads a Hugging Face tokenizer.json file.
func LoadTokenizerJSON(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	t, err := ParseTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.name = path
	return t, nil
}

// ErrUnsupported marks a tokenizer.json feature this package cannot
// reproduce exactly. Callers count such models with exact=false.
var ErrUnsupported = errors.New("unsupported tokenizer feature")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("tokenize: %w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

type tjAdded struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type tjPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type tjTemplateItem struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

// tjComp is any normalizer, pre-tokenizer or post-processor.
type tjComp struct {
	Type           string           `json:"type"`
	Normalizers    []tjComp         `json:"normalizers"`
	Pretokenizers  []tjComp         `json:"pretokenizers"`
	Processors     []tjComp         `json:"processors"`
	Pattern        *tjPattern       `json:"pattern"`
	Behavior       string           `json:"behavior"`
	Invert         bool             `json:"invert"`
	AddPrefixSpace bool             `json:"add_prefix_space"`
	UseRegex       bool             `json:"use_regex"`
	Prepend        string           `json:"prepend"`
	Content        string           `json:"content"`
	Replacement    string           `json:"replacement"`
	PrependScheme  string           `json:"prepend_scheme"`
	Split          *bool            `json:"split"`
	Single         []tjTemplateItem `json:"single"`
	SpecialTokens  map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
}

type tjMerge [2]string

// decodeMerges reads model.merges, either ["a b", ...] (older files) or
// [["a", "b"], ...]. Decoding the whole array at once is several times
// faster than a per-element UnmarshalJSON.
func decodeMerges(raw json.RawMessage) ([]tjMerge, error) {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	if len(b) > 0 && b[0] == '[' {
		b = bytes.TrimLeft(b[1:], " \t\r\n")
	}
	if len(b) > 0 && b[0] == '"' {
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return nil, err
		}
		out := make([]tjMerge, len(ss))
		for i, m := range ss {
			a, c, ok := strings.Cut(m, " ")
			if !ok {
				return nil, fmt.Errorf("merge %q has no space", m)
			}
			out[i] = tjMerge{a, c}
		}
		return out, nil
	}
	var out []tjMerge
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

type tjFile struct {
	AddedTokens   []tjAdded       `json:"added_tokens"`
	Normalizer    *tjComp         `json:"normalizer"`
	PreTokenizer  *tjComp         `json:"pre_tokenizer"`
	PostProcessor *tjComp         `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Truncation    any             `json:"truncation"`
	Padding       any             `json:"padding"`
	Model         struct {
		Type                    string           `json:"type"`
		Dropout                 *float64         `json:"dropout"`
		UnkToken                *string          `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
		FuseUnk                 bool             `json:"fuse_unk"`
		ByteFallback            bool             `json:"byte_fallback"`
		IgnoreMerges            bool             `json:"ignore_merges"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  json.RawMessage  `json:"merges"`
	} `json:"model"`
}

// ParseTokenizerJSON builds a Tokenizer from the bytes of a tokenizer.json.
// It returns an error wrapping ErrUnsupported for any component it cannot
// reproduce exactly.
func ParseTokenizerJSON(data []byte) (*Tokenizer, error) {
	var f tjFile
	// Unmarshal, not a Decoder: a Decoder copies the whole file into its
	// own growing buffer first (40 MB of garbage for an 11 MB file).
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenize: tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" {
		return nil, unsupported("model type %q", f.Model.Type)
	}
	merges, err := decodeMerges(f.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("tokenize: tokenizer.json merges: %w", err)
	}
	if f.Model.Dropout != nil && *f.Model.Dropout != 0 {
		return nil, unsupported("BPE dropout")
	}
	if s := f.Model.ContinuingSubwordPrefix; s != nil && *s != "" {
		return nil, unsupported("continuing_subword_prefix")
	}
	if s := f.Model.EndOfWordSuffix; s != nil && *s != "" {
		return nil, unsupported("end_of_word_suffix")
	}
	t := &Tokenizer{added: map[string]int{}, special: map[string]int{}}
	raw, normd := map[string]int{}, map[string]int{}
	for _, a := range f.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, unsupported("added token %q with single_word/lstrip/rstrip", a.Content)
		}
		t.added[a.Content] = a.ID
		if a.Special {
			t.special[a.Content] = a.ID
		}
		if a.Normalized {
			normd[a.Content] = a.ID
		} else {
			raw[a.Content] = a.ID
		}
	}
	t.raw = newAddedMatcher(raw)
	t.norm = newAddedMatcher(normd)

	if t.normalize, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	byteLevel, split, err := buildPreTokenizer(f.PreTokenizer, t.normalize)
	if err != nil {
		return nil, err
	}
	t.split = split
	if byteLevel {
		if f.Model.ByteFallback {
			return nil, unsupported("byte_fallback with ByteLevel")
		}
		if t.bl, err = buildRankBPE(f.Model.Vocab, merges, t.added, f.Model.IgnoreMerges); err != nil {
			return nil, err
		}
	} else {
		if t.spm, err = buildMergeBPE(f.Model.Vocab, merges, f.Model.UnkToken, f.Model.ByteFallback, f.Model.FuseUnk, f.Model.IgnoreMerges); err != nil {
			return nil, err
		}
	}
	if err := t.buildPost(f.PostProcessor); err != nil {
		return nil, err
	}
	for _, id := range f.Model.Vocab {
		t.size = max(t.size, int(id)+1)
	}
	for _, a := range f.AddedTokens {
		t.size = max(t.size, a.ID+1)
	}
	t.setDecoder(f.Model.Vocab, f.AddedTokens, f.Decoder)
	return t, nil
}

func buildNormalizer(c *tjComp) (normalizer, error) {
	if c == nil {
		return nil, nil
	}
	switch c.Type {
	case "Sequence":
		var out normalizer
		for i := range c.Normalizers {
			n, err := buildNormalizer(&c.Normalizers[i])
			if err != nil {
				return nil, err
			}
			out = append(out, n...)
		}
		return out, nil
	case "NFC":
		return normalizer{{kind: opNFC}}, nil
	case "Prepend":
		return normalizer{{kind: opPrepend, to: c.Prepend}}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return nil, unsupported("Replace normalizer with a regex pattern")
		}
		return normalizer{{kind: opReplace, from: *c.Pattern.String, to: c.Content}}, nil
	}
	return nil, unsupported("normalizer %q", c.Type)
}

// buildPreTokenizer returns whether the model is byte-level (a ByteLevel
// pre-tokenizer is present) and the splitter (nil: no splitting).
func buildPreTokenizer(c *tjComp, norm normalizer) (bool, splitter, error) {
	if c == nil {
		return false, nil, nil
	}
	var stages []tjComp
	if c.Type == "Sequence" {
		stages = c.Pretokenizers
	} else {
		stages = []tjComp{*c}
	}
	byteLevel := false
	var seq seqSplitter
	for i := range stages {
		s := &stages[i]
		switch s.Type {
		case "ByteLevel":
			if byteLevel {
				return false, nil, unsupported("two ByteLevel pre-tokenizers")
			}
			byteLevel = true
			if s.AddPrefixSpace {
				return false, nil, unsupported("ByteLevel add_prefix_space")
			}
			if s.UseRegex {
				sp, err := splitterFor(gpt2Pattern)
				if err != nil {
					return false, nil, err
				}
				seq = append(seq, sp)
			}
		case "Split":
			if byteLevel {
				return false, nil, unsupported("Split after ByteLevel")
			}
			if s.Invert {
				return false, nil, unsupported("Split invert")
			}
			if s.Pattern == nil {
				return false, nil, unsupported("Split without pattern")
			}
			if s.Pattern.String != nil {
				// A literal pattern the normalizer has already replaced
				// everywhere can never match (Gemma: Split(" ") after
				// Replace(" ", "▁")).
				if replacedAway(norm, *s.Pattern.String) {
					continue
				}
				return false, nil, unsupported("Split with string pattern %q", *s.Pattern.String)
			}
			if s.Behavior != "Isolated" {
				return false, nil, unsupported("Split behavior %q", s.Behavior)
			}
			sp, err := splitterFor(*s.Pattern.Regex)
			if err != nil {
				return false, nil, err
			}
			seq = append(seq, sp)
		default:
			return false, nil, unsupported("pre-tokenizer %q", s.Type)
		}
	}
	switch len(seq) {
	case 0:
		return byteLevel, nil, nil
	case 1:
		return byteLevel, seq[0], nil
	}
	return byteLevel, seq, nil
}

func replacedAway(norm normalizer, s string) bool {
	for i, op := range norm {
		if op.kind == opReplace && op.from == s && !strings.Contains(op.to, s) {
			// Later ops must not reintroduce it.
			for _, later := range norm[i+1:] {
				if strings.Contains(later.to, s) {
					return false
				}
			}
			return true
		}
	}
	return false
}

func (t *Tokenizer) buildPost(c *tjComp) error {
	if c == nil {
		return nil
	}
	switch c.Type {
	case "ByteLevel":
		return nil // offsets only
	case "Sequence":
		for i := range c.Processors {
			if err := t.buildPost(&c.Processors[i]); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		seen := false
		for _, it := range c.Single {
			switch {
			case it.Sequence != nil:
				if seen || it.Sequence.ID != "A" {
					return unsupported("TemplateProcessing single %+v", c.Single)
				}
				seen = true
			case it.SpecialToken != nil:
				st, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return unsupported("TemplateProcessing token %q", it.SpecialToken.ID)
				}
				if seen {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
					if len(t.prefix) == 1 && len(st.IDs) == 1 {
						t.bosTok, t.bosID, t.hasBOS = it.SpecialToken.ID, st.IDs[0], true
					}
				}
			}
		}
		if !seen {
			return unsupported("TemplateProcessing without $A")
		}
		return nil
	}
	return unsupported("post-processor %q", c.Type)
}

const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// Patterns with a hand-written splitter.
const (
	patCL100K = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patO200K  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek V3's three stages.
	patDigits3 = `\p{N}{1,3}`
	patCJK     = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDSMain  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

func splitterFor(pattern string) (splitter, error) {
	switch pattern {
	case patCL100K:
		return clSplitter{k: 3}, nil
	case patQwen:
		return clSplitter{k: 1}, nil
	case patO200K:
		return o200kSplitter{}, nil
	case patDigits3:
		return runSplitter{in: isNumber, max: 3}, nil
	case patCJK:
		return runSplitter{in: isDeepSeekCJK}, nil
	case patDSMain:
		return dsSplitter{}, nil
	}
	return newRegexSplitter(pattern)
}

func isNumber(r rune) bool { return runeClass(r)&cN != 0 }

func isDeepSeekCJK(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff
}

// byteDecoder inverts the GPT-2 byte-to-unicode alphabet.
var byteDecoder = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}()

// decodeByteLevel maps a vocabulary string back to the raw bytes it stands
// for, or reports false if it is not in the byte alphabet.
func decodeByteLevel(s string, buf []byte) ([]byte, bool) {
	buf = buf[:0]
	for _, r := range s {
		b, ok := byteDecoder[r]
		if !ok {
			return nil, false
		}
		buf = append(buf, b)
	}
	return buf, true
}

func buildRankBPE(vocab map[string]int32, merges []tjMerge, added map[string]int, ignoreMerges bool) (*rankBPE, error) {
	b := &rankBPE{ranks: make(map[string]int32, len(vocab))}
	for i := range b.byteID {
		b.byteID[i] = -1
	}
	var buf []byte
	for s, id := range vocab {
		raw, ok := decodeByteLevel(s, buf)
		if !ok {
			if aid, isAdded := added[s]; isAdded && aid == int(id) {
				continue
			}
			return nil, unsupported("vocab entry %q is not in the byte-level alphabet", s)
		}
		buf = raw
		k := string(raw)
		if prev, dup := b.ranks[k]; dup {
			return nil, unsupported("vocab entries %d and %d decode to the same bytes", prev, id)
		}
		b.ranks[k] = id
		if len(raw) == 1 {
			b.byteID[raw[0]] = id
		}
		if len(raw) > b.maxLen {
			b.maxLen = len(raw)
		}
	}
	for i, id := range b.byteID {
		if id < 0 {
			return nil, unsupported("byte 0x%02x has no token", i)
		}
	}
	// Rank BPE equals merges BPE only when merge order is id order.
	last := int32(-1)
	for i, m := range merges {
		_, ok1 := vocab[m[0]]
		_, ok2 := vocab[m[1]]
		rc, ok3 := vocab[m[0]+m[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, unsupported("merge %d (%q %q) is not in the vocabulary", i, m[0], m[1])
		}
		if rc < last {
			return nil, unsupported("merge %d (%q %q -> %d) breaks id order (previous %d): rank BPE would differ", i, m[0], m[1], rc, last)
		}
		last = rc
	}
	if err := b.finish(); err != nil {
		return nil, unsupported("%v", err)
	}
	if !ignoreMerges {
		// encode looks a whole piece up before merging (tiktoken does the
		// same; HF only with ignore_merges). That shortcut is exact only if
		// BPE rebuilds every token from its bytes; check it.
		var sc bpeScratch
		var out []int
		for s, id := range b.ranks {
			if len(s) < 2 {
				continue
			}
			if len(s) <= scanLimit {
				out = b.scan(out[:0], s, &sc)
			} else {
				out = b.heapMerge(out[:0], s, &sc)
			}
			if len(out) != 1 || out[0] != int(id) {
				return nil, unsupported("token %d (%q) is not rebuilt by its merges (got %v)", id, s, out)
			}
		}
	}
	b.release()
	return b, nil
}

func buildMergeBPE(vocab map[string]int32, merges []tjMerge, unk *string, byteFallback, fuseUnk, ignoreMerges bool) (*mergeBPE, error) {
	m := &mergeBPE{vocab: vocab, merges: newPairTable(len(merges)), unk: -1, fuseUnk: fuseUnk, ignoreMerges: ignoreMerges}
	m.bmp = make([]int32, 1<<16)
	for i := range m.bmp {
		m.bmp[i] = -1
	}
	for s, id := range vocab {
		if r, w := utf8.DecodeRuneInString(s); w == len(s) && r < 1<<16 && (r != utf8.RuneError || w == 3) {
			m.bmp[r] = id
		}
	}
	if unk != nil {
		id, ok := vocab[*unk]
		if !ok {
			return nil, unsupported("unk_token %q not in vocab", *unk)
		}
		m.unk = id
	}
	if byteFallback {
		m.hasBytes = true
		for i := range m.byteID {
			id, ok := vocab[fmt.Sprintf("<0x%02X>", i)]
			if !ok {
				return nil, unsupported("byte_fallback without token <0x%02X>", i)
			}
			m.byteID[i] = id
		}
	}
	for i, mg := range merges {
		a, ok1 := vocab[mg[0]]
		b, ok2 := vocab[mg[1]]
		c, ok3 := vocab[mg[0]+mg[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, unsupported("merge %d (%q %q) is not in the vocabulary", i, mg[0], mg[1])
		}
		m.merges.put(uint64(uint32(a))<<32|uint64(uint32(b)), uint64(i)<<32|uint64(uint32(c)))
	}
	m.reach = spmReach(m, merges)
	return m, nil
}

// spmReach builds the byte bound's table for a merges model, or nil where
// a token's text is not the bytes it covers: a dropped unknown character
// (no unk, no byte fallback) covers bytes with no token, a fused <unk>
// covers any number of them, and a merge of a <0xXX> or <unk> token would
// cover other bytes than its text.
func spmReach(m *mergeBPE, merges []tjMerge) *reachTable {
	floor := 1
	switch {
	case m.hasBytes:
	case m.unk >= 0 && !m.fuseUnk:
		floor = utf8.UTFMax
	default:
		return nil
	}
	special := map[int32]bool{}
	if m.unk >= 0 {
		special[m.unk] = true
	}
	if m.hasBytes {
		for _, id := range m.byteID {
			special[id] = true
		}
	}
	for _, mg := range merges {
		if special[m.vocab[mg[0]]] || special[m.vocab[mg[1]]] {
			return nil
		}
	}
	return newReachTable(maps.Keys(m.vocab), floor)
}
