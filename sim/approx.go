package sim

import (
	"errors"
	"hash/fnv"
	"unicode"
	"unicode/utf8"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// Approx is the built-in approximate tokenizer, used when Config.Tokenizer is
// nil. It is deterministic and cheap, and it is NOT any real model's
// tokenizer. It counts:
//
//   - text: every maximal run of letters and digits costs ceil(runes/4)
//     tokens, every other non-space character costs 1, whitespace is free;
//   - chat: each message costs 4 tokens of template overhead (start, role,
//     newline, end) plus its text (content string or text parts, name,
//     reasoning, tool-call names and arguments); "tools" costs the text of
//     its raw JSON; add_generation_prompt (default true) adds 3; and
//     add_special_tokens (default false for chat) adds a BOS token;
//   - completions: the prompt text plus a BOS token unless
//     add_special_tokens is false (default true, as in vLLM).
//
// Ids are stable hashes of the pieces, so /tokenize returns a list whose
// length equals the count. The gateway can use Approx to predict the
// simulator's counts exactly.
type Approx struct{}

var (
	_ Tokenizer           = Approx{}
	_ ChatTokenIDer       = Approx{}
	_ CompletionTokenIDer = Approx{}
)

const (
	approxBOS   = 1
	approxStart = 2
	approxEnd   = 3
	approxNL    = 4
)

// ChatPromptTokens implements Tokenizer.
func (a Approx) ChatPromptTokens(body []byte) (int, error) {
	ids, err := a.ChatTokenIDs(body)
	return len(ids), err
}

// CompletionPromptTokens implements Tokenizer.
func (a Approx) CompletionPromptTokens(body []byte) (int, error) {
	ids, err := a.CompletionTokenIDs(body)
	return len(ids), err
}

// ChatTokenIDs implements ChatTokenIDer.
func (Approx) ChatTokenIDs(body []byte) ([]int, error) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return nil, err
	}
	msgs := v.Get("messages")
	if msgs == nil || msgs.Kind != ojson.Array {
		return nil, errors.New("messages must be an array")
	}
	var ids []int
	if b := v.Get("add_special_tokens"); b != nil && b.Kind == ojson.Bool && b.Bool {
		ids = append(ids, approxBOS)
	}
	for _, m := range msgs.Items {
		if m.Kind != ojson.Object {
			return nil, errors.New("each message must be an object")
		}
		role := m.Get("role")
		if role == nil || role.Kind != ojson.String {
			return nil, errors.New("each message needs a string role")
		}
		ids = append(ids, approxStart, pieceID(role.Str), approxNL)
		ids = appendContent(ids, m.Get("content"))
		for _, k := range []string{"name", "reasoning", "reasoning_content"} {
			if s := m.Get(k); s != nil && s.Kind == ojson.String {
				ids = textIDs(ids, s.Str)
			}
		}
		if tc := m.Get("tool_calls"); tc != nil && tc.Kind == ojson.Array {
			for _, c := range tc.Items {
				fn := c.Get("function")
				if s := fn.Get("name"); s != nil && s.Kind == ojson.String {
					ids = textIDs(ids, s.Str)
				}
				if s := fn.Get("arguments"); s != nil && s.Kind == ojson.String {
					ids = textIDs(ids, s.Str)
				}
			}
		}
		ids = append(ids, approxEnd)
	}
	if t := v.Get("tools"); t != nil && t.Kind == ojson.Array && len(t.Items) > 0 {
		ids = textIDs(ids, string(t.Raw(body)))
	}
	if g := v.Get("add_generation_prompt"); g == nil || g.Kind != ojson.Bool || g.Bool {
		ids = append(ids, approxStart, pieceID("assistant"), approxNL)
	}
	return ids, nil
}

func appendContent(ids []int, c *ojson.Value) []int {
	if c == nil {
		return ids
	}
	switch c.Kind {
	case ojson.String:
		return textIDs(ids, c.Str)
	case ojson.Array:
		for _, p := range c.Items {
			t := p.Get("type")
			if t == nil || t.Kind != ojson.String {
				continue
			}
			switch t.Str {
			case "text", "input_text", "refusal":
				for _, k := range []string{"text", "refusal"} {
					if s := p.Get(k); s != nil && s.Kind == ojson.String {
						ids = textIDs(ids, s.Str)
					}
				}
			}
		}
	}
	return ids
}

// CompletionTokenIDs implements CompletionTokenIDer for a body whose prompt
// is a string (or a one-element list of strings).
func (Approx) CompletionTokenIDs(body []byte) ([]int, error) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return nil, err
	}
	p := v.Get("prompt")
	if p != nil && p.Kind == ojson.Array && len(p.Items) == 1 {
		p = p.Items[0]
	}
	if p == nil || p.Kind != ojson.String {
		return nil, errors.New("prompt must be a string")
	}
	var ids []int
	if b := v.Get("add_special_tokens"); b == nil || b.Kind != ojson.Bool || b.Bool {
		ids = append(ids, approxBOS)
	}
	return textIDs(ids, p.Str), nil
}

// ApproxTextTokens is the number of tokens Approx gives a piece of text.
func ApproxTextTokens(s string) int { return len(textIDs(nil, s)) }

// textIDs appends the ids of s: runs of letters/digits split every 4 runes,
// one id per other non-space rune.
func textIDs(ids []int, s string) []int {
	start, n := -1, 0
	flush := func(end int) {
		if start >= 0 {
			ids = append(ids, pieceID(s[start:end]))
		}
		start, n = -1, 0
	}
	for i, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if start < 0 {
				start = i
			}
			n++
			if n == 4 {
				flush(i + utf8.RuneLen(r))
			}
		default:
			flush(i)
			if !unicode.IsSpace(r) {
				ids = append(ids, 100+int(r)%900)
			}
		}
	}
	flush(len(s))
	return ids
}

func pieceID(p string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(p))
	return 1000 + int(h.Sum32()%30000)
}
