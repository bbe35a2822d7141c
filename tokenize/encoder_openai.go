package tokenize

import (
	"fmt"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// openAIEncodings are the tiktoken encodings NewOpenAI knows: the pattern
// (both have a hand-written splitter) and the special tokens.
var openAIEncodings = map[string]struct {
	pattern  string
	specials map[string]int
}{
	"cl100k_base": {patCL100K, map[string]int{
		"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
		"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
	}},
	"o200k_base": {patO200K, map[string]int{
		"<|endoftext|>": 199999, "<|endofprompt|>": 200018,
	}},
}

// NewOpenAI returns the OpenAI encoding cl100k_base or o200k_base, with the
// ranks embedded in github.com/pkoukk/tiktoken-go-loader (no network). Its
// special tokens are matched in text like added tokens, and addSpecial adds
// nothing (tiktoken has no post-processor).
func NewOpenAI(name string) (*Tokenizer, error) {
	enc, ok := openAIEncodings[name]
	if !ok {
		return nil, fmt.Errorf("tokenize: unknown OpenAI encoding %q", name)
	}
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(name + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", name, err)
	}
	b := &rankBPE{ranks: make(map[string]int32, len(ranks))}
	for i := range b.byteID {
		b.byteID[i] = -1
	}
	for s, r := range ranks {
		b.ranks[s] = int32(r)
		if len(s) == 1 {
			b.byteID[s[0]] = int32(r)
		}
		b.maxLen = max(b.maxLen, len(s))
	}
	for i, id := range b.byteID {
		if id < 0 {
			return nil, fmt.Errorf("tokenize: %s: byte 0x%02x has no rank", name, i)
		}
	}
	if err := b.finish(); err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", name, err)
	}
	b.release()
	sp, err := splitterFor(enc.pattern)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{name: name, bl: b, split: sp, added: map[string]int{}, special: map[string]int{}}
	for s, id := range enc.specials {
		t.added[s], t.special[s] = id, id
	}
	t.raw = newAddedMatcher(t.added)
	return t, nil
}
