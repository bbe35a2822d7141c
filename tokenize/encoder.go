package tokenize

import (
	"sort"
	"sync"
)

// Tokenizer is a loaded Hugging Face (or tiktoken) tokenizer. It implements
// Encoder. A Tokenizer is immutable after loading and safe for concurrent
// use; per-call scratch space comes from a pool.
type Tokenizer struct {
	name string

	// Added tokens, split off before normalization (raw) and after it
	// (norm, the ones with normalized=true), leftmost-longest, as HF's
	// AddedVocabulary does.
	raw, norm *addedMatcher
	added     map[string]int // every added token, content -> id
	special   map[string]int // added tokens with special=true

	normalize normalizer
	split     splitter // nil: the whole normalized segment is one word

	bl  *rankBPE // byte-level BPE (ranks == ids)
	spm *mergeBPE

	prefix, suffix []int // post-processor ids for addSpecial

	bosTok string
	bosID  int
	hasBOS bool

	// Decoding (decoder.go): idText[idOff[id]:idOff[id+1]] is the token
	// string of id when idKnown[id]; decoder is nil when decoding is not
	// supported.
	idText  string
	idOff   []uint32
	idKnown []bool
	decoder []decodeStep

	// size is one more than the largest id of the vocabulary and the
	// added tokens (Size).
	size int

	pool sync.Pool // *encScratch
}

// encScratch is per-call working memory and state. Its callbacks are bound
// once when it is created, so a pooled encScratch makes encoding and counting
// allocation-free apart from the output slice.
type encScratch struct {
	t     *Tokenizer
	ids   []int
	bpe   bpeScratch
	out   *[]int
	n     int
	limit int
	// deferred holds, while counting against a limit, the long pieces
	// counted so far by their byte bound only (encoder_bound.go).
	deferred []deferredPiece

	rawFn, normFn func(seg string, id int) bool
	wordFn        func(w string) bool
}

var _ Encoder = (*Tokenizer)(nil)

// Name describes the tokenizer (model folder or encoding name).
func (t *Tokenizer) Name() string { return t.name }

// Encode returns the token ids for text. See Encoder.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	out := make([]int, 0, len(text)/3+4)
	t.run(text, addSpecial, 0, &out)
	return out
}

// AppendEncode appends the ids for text to dst and returns it.
func (t *Tokenizer) AppendEncode(dst []int, text string, addSpecial bool) []int {
	t.run(text, addSpecial, 0, &dst)
	return dst
}

// deferredPiece is a long piece counted by its bound so far.
type deferredPiece struct {
	piece string
	bound int
}

// Count returns len(Encode(text, addSpecial)) without building the id
// slice. With limit > 0 it stops once the count exceeds limit and then
// returns a lower bound n > limit with exact=false.
//
// Against a limit, the work is bounded by bytes as well as tokens: a piece
// longer than boundMin bytes first counts as its byte bound
// (encoder_bound.go), and is merged exactly only if, once everything else
// is counted, the limit is still in reach. A 7 MB pre-token over a 32k or
// 128k context is refused on its bound in milliseconds; a prompt whose
// count is near the limit is still counted exactly.
func (t *Tokenizer) Count(text string, addSpecial bool, limit int) (int, bool) {
	n := t.run(text, addSpecial, limit, nil)
	if limit > 0 && n > limit {
		return n, false
	}
	return n, true
}

// Size is the tokenizer's length as transformers' len(tokenizer) reads
// it: one more than the largest id of its vocabulary and added tokens
// (tokenizer.max_token_id + 1 in vLLM's terms).
func (t *Tokenizer) Size() int { return t.size }

// TokenID returns the id of a single token given by its text: an added
// token's content, or a vocabulary entry (for byte-level models the raw
// bytes it stands for; for SentencePiece models the piece with "▁").
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.added[s]; ok {
		return id, true
	}
	if t.bl != nil && s != "" {
		if r := t.bl.rank(s); r != noRank {
			return int(r), true
		}
	}
	if t.spm != nil {
		if id, ok := t.spm.vocab[s]; ok {
			return int(id), true
		}
	}
	return 0, false
}

// SpecialTokens returns the added tokens marked special, content -> id.
// The map is a copy.
func (t *Tokenizer) SpecialTokens() map[string]int {
	m := make(map[string]int, len(t.special))
	for k, v := range t.special {
		m[k] = v
	}
	return m
}

// AddedTokens returns every added token (special or not), sorted by id.
func (t *Tokenizer) AddedTokens() []string {
	out := make([]string, 0, len(t.added))
	for k := range t.added {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return t.added[out[i]] < t.added[out[j]] })
	return out
}

// BOS reports the token the post-processor puts first when addSpecial is
// true, if any.
func (t *Tokenizer) BOS() (string, int, bool) { return t.bosTok, t.bosID, t.hasBOS }

// WithSpecials returns a copy whose addSpecial behaviour is "BOS first"
// (addBOS) and "EOS last" (eos >= 0), replacing the tokenizer.json
// post-processor. transformers does this for LlamaTokenizerFast and
// GemmaTokenizerFast from tokenizer_config.json's add_bos_token and
// add_eos_token; the model loader decides, the tokenizer only obeys.
// bos and eos are added-token contents; "" means none.
func (t *Tokenizer) WithSpecials(bos, eos string) (*Tokenizer, bool) {
	c := &Tokenizer{
		name: t.name, raw: t.raw, norm: t.norm, added: t.added, special: t.special,
		normalize: t.normalize, split: t.split, bl: t.bl, spm: t.spm,
		idText: t.idText, idOff: t.idOff, idKnown: t.idKnown, decoder: t.decoder, size: t.size,
	}
	if bos != "" {
		id, ok := t.TokenID(bos)
		if !ok {
			return nil, false
		}
		c.prefix = []int{id}
		c.bosTok, c.bosID, c.hasBOS = bos, id, true
	}
	if eos != "" {
		id, ok := t.TokenID(eos)
		if !ok {
			return nil, false
		}
		c.suffix = []int{id}
	}
	return c, true
}

func (t *Tokenizer) getScratch() *encScratch {
	if s, ok := t.pool.Get().(*encScratch); ok {
		return s
	}
	s := &encScratch{t: t}
	s.rawFn, s.normFn, s.wordFn = s.rawSeg, s.normSeg, s.word
	return s
}

// run encodes text. With out == nil it only counts, reusing pooled encScratch
// for the ids of one piece at a time. With limit > 0 it may stop as soon as
// the count exceeds limit.
func (t *Tokenizer) run(text string, addSpecial bool, limit int, out *[]int) int {
	sc := t.getScratch()
	sc.out, sc.n, sc.limit = out, 0, limit
	if addSpecial {
		sc.emit(t.prefix)
	}
	// Pass 1: added tokens that match the raw text.
	t.raw.split(text, sc.rawFn)
	if addSpecial && !sc.over() {
		sc.emit(t.suffix)
	}
	// Long pieces counted by their bound: merge them exactly while the
	// limit is in reach. Each exact count is at least its bound, so if
	// counting stops here, n is still a lower bound.
	for _, d := range sc.deferred {
		if sc.over() {
			break
		}
		sc.n -= d.bound
		sc.count(d.piece)
	}
	clear(sc.deferred) // the pieces belong to the caller's text
	sc.deferred = sc.deferred[:0]
	n := sc.n
	sc.out = nil
	t.pool.Put(sc)
	return n
}

func (sc *encScratch) over() bool { return sc.limit > 0 && sc.n > sc.limit }

func (sc *encScratch) emit(ids []int) {
	if sc.out != nil {
		*sc.out = append(*sc.out, ids...)
	}
	sc.n += len(ids)
}

func (sc *encScratch) emitID(id int) bool {
	if sc.out != nil {
		*sc.out = append(*sc.out, id)
	}
	sc.n++
	return !sc.over()
}

func (sc *encScratch) rawSeg(seg string, id int) bool {
	if id >= 0 {
		return sc.emitID(id)
	}
	// Pass 2: added tokens with normalized=true match the normalized
	// segment.
	return sc.t.norm.split(sc.t.normalize.apply(seg), sc.normFn)
}

func (sc *encScratch) normSeg(seg string, id int) bool {
	if id >= 0 {
		return sc.emitID(id)
	}
	if seg == "" {
		return true
	}
	switch sp := sc.t.split.(type) {
	case nil:
		return sc.word(seg)
	case clSplitter:
		if sc.out == nil && sc.t.bl != nil {
			return sc.countSplit(seg, sp)
		}
		// The common pre-tokenizer without the callback's indirect call.
		for i := 0; i < len(seg); {
			e := sp.next(seg, i)
			if !sc.word(seg[i:e]) {
				return false
			}
			i = e
		}
		return true
	}
	return sc.t.split.split(seg, sc.wordFn)
}

// countSplit is normSeg's loop when counting, the door's hottest: a
// piece that word would only pass on to count (every piece but a long one
// against a limit) goes to count directly.
func (sc *encScratch) countSplit(seg string, sp clSplitter) bool {
	for i := 0; i < len(seg); {
		e := sp.next(seg, i)
		w := seg[i:e]
		i = e
		if sc.limit > 0 && len(w) > boundMin {
			if !sc.word(w) {
				return false
			}
		} else if !sc.count(w) {
			return false
		}
	}
	return true
}

// word runs the model over one pre-token piece.
func (sc *encScratch) word(w string) bool {
	if sc.out == nil && sc.limit > 0 && len(w) > boundMin {
		// Past limit-n+1 tokens the count is over the limit whatever
		// the rest: the bound need not look further.
		if b := sc.t.pieceBound(w, sc.limit-sc.n+1); b >= 0 {
			sc.n += b
			sc.deferred = append(sc.deferred, deferredPiece{w, b})
			return !sc.over()
		}
	}
	if sc.out != nil {
		before := len(*sc.out)
		if sc.t.bl != nil {
			*sc.out = sc.t.bl.encode(*sc.out, w, &sc.bpe)
		} else {
			*sc.out = sc.t.spm.encode(*sc.out, w, &sc.bpe)
		}
		sc.n += len(*sc.out) - before
		return !sc.over()
	}
	return sc.count(w)
}

// count adds the exact number of tokens of one piece.
func (sc *encScratch) count(w string) bool {
	if sc.t.bl != nil {
		sc.n += sc.t.bl.count(w, &sc.bpe)
	} else {
		sc.ids = sc.t.spm.encode(sc.ids[:0], w, &sc.bpe)
		sc.n += len(sc.ids)
	}
	return !sc.over()
}
