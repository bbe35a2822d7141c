package gateway

import (
	"hash/fnv"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// prefixHash hashes the first k tokens of the rendered prompt, for prefix
// affinity; 0 when it cannot be computed. A chat request's prompt is the
// door's own render (Decision.Rendered): the chat template is rendered
// once per request. A request converted to a chat conversation (Anthropic
// Messages) is hashed as that conversation, which the door rendered the
// same way. When the door rendered nothing (no tokenizer, a count that is
// not exact) a second render would fail alike, so the hash is 0.
func prefixHash(rt *modelRuntime, ep admission.Endpoint, dec admission.Decision) uint64 {
	req := dec.Request
	if dec.Chat != nil {
		ep, req = admission.Chat, dec.Chat
	}
	tok, k := rt.tok, rt.affinity
	if tok == nil || k <= 0 || req == nil {
		return 0
	}
	var text string
	if ep.Chat() {
		if dec.Uncounted == admission.NoTokenizer || dec.Uncounted == admission.NotExact {
			return 0 // the door could not render it: nor could a second try
		}
		text = dec.Rendered
	} else if p := req.Get("prompt"); p != nil && p.Kind == ojson.String {
		text = p.Str
	} else {
		return 0
	}
	return hashPrefix(tok, text, k)
}

// hashPrefix hashes the ids of the first k tokens of text.
func hashPrefix(tok *tokenize.Model, text string, k int) uint64 {
	// k tokens are rarely more than 8k bytes: encode only that prefix.
	if len(text) > 8*k {
		text = text[:8*k]
	}
	ids := tok.Encoder().Encode(text, false)
	if len(ids) > k {
		ids = ids[:k]
	}
	h := fnv.New64a()
	var b [4]byte
	for _, id := range ids {
		b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
		h.Write(b[:])
	}
	return h.Sum64() | 1
}
