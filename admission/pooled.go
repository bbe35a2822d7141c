package admission

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// The pooling endpoints (embeddings, /pooling, /classify, score, rerank)
// generate nothing: their requested output is 0 and vLLM checks each input
// on its own against the context, refusing one longer than max_model_len
// (P > L; a pooled input needs no room to generate). The door checks the
// fields that decide routing and counting, counts what it can count
// exactly, and forwards the rest uncounted.

// pooledKeys are the keys whose spelling decides what the door does with a
// pooling request (see requestKeys).
var pooledKeys = []string{"input", "messages", "truncate_prompt_tokens", "encoding_format", "dimensions",
	"add_special_tokens", "add_generation_prompt", "continue_final_message", "chat_template", "task",
	"query", "documents", "queries", "items", "text_1", "text_2", "data_1", "data_2", "top_n"}

// checkPooled runs steps 3 to 6 for a pooling endpoint.
func checkPooled(ep Endpoint, m Model, req *ojson.Value, body []byte) (Decision, *Rejection) {
	for _, mem := range req.Members {
		for _, k := range pooledKeys {
			if mem.Key != k && strings.EqualFold(mem.Key, k) {
				return Decision{}, &Rejection{Reason: InvalidJSON, Status: 400, Code: codeInvalidJSON, Param: mem.Key,
					Message: fmt.Sprintf("Unknown key %q: keys are case-sensitive (did you mean %q?).", mem.Key, k)}
			}
		}
	}
	if rej := pooledFields(ep, req); rej != nil {
		return Decision{}, rej
	}
	dec := Decision{Model: m.Name, Ref: m.Ref, Only: m.Only, Body: body, N: 1, Prompts: 1, Request: req}
	if ep.pairs != nil {
		// A pair is tokenized by the model's own cross-encoder rules
		// (separators, token types): not reproduced here.
		n, rej := checkPairs(ep.pairs, req)
		if rej != nil {
			return Decision{}, rej
		}
		dec.Prompts, dec.Uncounted = n, NotCounted
		return dec, nil
	}
	in, rej := pooledInputs(req, m.Vocab)
	if rej != nil {
		return Decision{}, rej
	}
	dec.Prompts = len(in.items)
	if in.chat {
		dec.Prompts = len(in.convs)
	}
	switch v := req.Get("truncate_prompt_tokens"); {
	case !v.IsNull():
		dec.Uncounted = Truncating // vLLM cuts the input: its length is not the client's
		return dec, nil
	case m.Counter == nil:
		dec.Uncounted = NoTokenizer
		return dec, nil
	}
	counts, c, rej := countPooled(m, req, in)
	if rej != nil {
		return Decision{}, rej
	}
	if !c.Exact {
		dec.Uncounted, dec.Detail = NotExact, c.Reason
		return dec, nil
	}
	for _, n := range counts {
		dec.PromptTokens += n
	}
	if m.MaxModelLen <= 0 {
		dec.Uncounted = NoContextLimit
		return dec, nil
	}
	l := m.MaxModelLen
	for i, p := range counts {
		last := i == len(counts)-1
		if p <= l && !(last && c.Truncated) {
			continue
		}
		param := in.field
		info := &ContextInfo{PromptTokens: p, PromptExact: !(last && c.Truncated), MaxModelLen: l}
		if len(counts) > 1 {
			info.Batch, info.Index = len(counts), i
			param += "[" + strconv.Itoa(i) + "]"
		}
		return Decision{}, &Rejection{Reason: ContextLength, Status: 400, Code: codeContextLength, Param: param,
			Message: poolingContextMessage(info, operation(ep, req)), Context: info}
	}
	return dec, nil
}

// operation names the endpoint's work in vLLM's pooling context message.
func operation(ep Endpoint, req *ojson.Value) string {
	if t := req.Get("task"); ep.taskOperation && t != nil && t.Kind == ojson.String && (t.Str == "classify" || t.Str == "token_classify") {
		return classification
	}
	return ep.operation
}

// poolingContextMessage is vLLM's wording for a pooled input over the
// context; a lower-bound count says so.
func poolingContextMessage(c *ContextInfo, op string) string {
	p := strconv.Itoa(c.PromptTokens)
	if !c.PromptExact {
		p = "at least " + p
	}
	in := "the input"
	if c.Batch > 0 {
		in = fmt.Sprintf("input[%d] of the batch of %d", c.Index, c.Batch)
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %s tokens in %s for %s. Please reduce the length of the input.",
		c.MaxModelLen, p, in, op)
}

// pooledFields checks the typed fields every pooling request may carry.
func pooledFields(ep Endpoint, req *ojson.Value) *Rejection {
	if v := req.Get("truncate_prompt_tokens"); !v.IsNull() {
		n, ok := v.LaxInt()
		if !ok {
			return invalidParam("truncate_prompt_tokens", codeInvalidType, "truncate_prompt_tokens must be an integer, got %s.", describe(v))
		}
		if n < -1 {
			return invalidParam("truncate_prompt_tokens", codeInvalidValue, "truncate_prompt_tokens must be -1 (the context length) or at least 0, got %s.", v.Str)
		}
	}
	if ep.encoding {
		// Its values are vLLM's to judge: float and base64, and in newer
		// versions binary ones ("bytes") this door need not know.
		if v := req.Get("encoding_format"); !v.IsNull() && v.Kind != ojson.String {
			return invalidParam("encoding_format", codeInvalidType, "encoding_format must be a string (\"float\" or \"base64\"), got %s.", v.Kind)
		}
		if v := req.Get("dimensions"); !v.IsNull() && !v.Integral() {
			return invalidParam("dimensions", codeInvalidType, "dimensions must be an integer, got %s.", describe(v))
		}
	}
	for _, k := range []string{"add_special_tokens", "add_generation_prompt", "continue_final_message"} {
		if v := req.Get(k); !v.IsNull() && v.Kind != ojson.Bool {
			return invalidParam(k, codeInvalidType, "%s must be a boolean, got %s.", k, v.Kind)
		}
	}
	if ep.topN {
		if v := req.Get("top_n"); !v.IsNull() && !v.Integral() {
			return invalidParam("top_n", codeInvalidType, "top_n must be an integer, got %s.", describe(v))
		}
	}
	return nil
}

func badInput(param, code, format string, args ...any) *Rejection {
	return &Rejection{Reason: InvalidInput, Status: 400, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

// pooledInput is the input of an embeddings, /pooling or /classify
// request: prompts in the completion form, or conversations in the chat
// form.
type pooledInput struct {
	field string // "input" or "messages"
	chat  bool
	items []*ojson.Value // the completion form: each a string or a list of token ids
	convs []*ojson.Value // the chat form: each a list of messages
}

const inputShapes = "a string, an array of strings, an array of token ids, an array of token-id arrays, or chat messages"

// pooledInputs reads the input forms vLLM accepts: input as a string,
// strings, token ids or lists of ids; or the chat form, messages (one
// conversation or a list of them) or input holding messages.
func pooledInputs(req *ojson.Value, vocab int) (pooledInput, *Rejection) {
	if msgs := req.Get("messages"); msgs != nil {
		if msgs.Kind != ojson.Array {
			return pooledInput{}, badInput("messages", codeInvalidType, "messages must be an array of message objects, got %s.", msgs.Kind)
		}
		return conversations(msgs, "messages")
	}
	in := req.Get("input")
	if in.IsNull() {
		return pooledInput{}, badInput("input", codeMissingParam, "You must provide an input parameter.")
	}
	if isConversation(in) || (in.Kind == ojson.Array && len(in.Items) > 0 && isConversation(in.Items[0])) {
		return conversations(in, "input")
	}
	switch in.Kind {
	case ojson.String:
		return pooledInput{field: "input", items: []*ojson.Value{in}}, nil
	case ojson.Array:
	default:
		return pooledInput{}, badInput("input", codeInvalidType, "input must be %s, got %s.", inputShapes, in.Kind)
	}
	if len(in.Items) == 0 {
		return pooledInput{}, badInput("input", codeInvalidValue, "input must not be an empty array.")
	}
	if in.Items[0].Kind == ojson.Number {
		if rej := CheckTokenIDs(in, "input", vocab); rej != nil {
			return pooledInput{}, rej
		}
		return pooledInput{field: "input", items: []*ojson.Value{in}}, nil
	}
	for i, it := range in.Items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Kind {
		case ojson.String:
			continue
		case ojson.Array:
			if len(it.Items) == 0 {
				return pooledInput{}, badInput(param, codeInvalidValue, "%s must not be an empty array.", param)
			}
			if rej := CheckTokenIDs(it, param, vocab); rej != nil {
				return pooledInput{}, rej
			}
		default:
			return pooledInput{}, badInput(param, codeInvalidType, "%s must be a string or an array of token ids, got %s.", param, it.Kind)
		}
	}
	return pooledInput{field: "input", items: in.Items}, nil
}

// isConversation: a non-empty list of objects with a string role, vLLM's
// test for chat messages given as input.
func isConversation(a *ojson.Value) bool {
	if a == nil || a.Kind != ojson.Array || len(a.Items) == 0 {
		return false
	}
	for _, m := range a.Items {
		if r := m.Get("role"); r == nil || r.Kind != ojson.String {
			return false
		}
	}
	return true
}

// conversations reads the chat form: one conversation or a list of them.
// Each message needs what vLLM's pooling schema needs (an object with a
// string role); the template decides the rest.
func conversations(msgs *ojson.Value, field string) (pooledInput, *Rejection) {
	convs := []*ojson.Value{msgs}
	batch := len(msgs.Items) > 0 && msgs.Items[0].Kind == ojson.Array
	if batch {
		convs = msgs.Items
	}
	for ci, conv := range convs {
		path := field
		if batch {
			path = fmt.Sprintf("%s[%d]", field, ci)
		}
		if conv.Kind != ojson.Array {
			return pooledInput{}, badInput(path, codeInvalidType, "%s must be an array of message objects, got %s.", path, conv.Kind)
		}
		if len(conv.Items) == 0 {
			return pooledInput{}, badInput(path, codeInvalidValue, "%s must contain at least one message.", path)
		}
		for i, m := range conv.Items {
			mp := fmt.Sprintf("%s[%d]", path, i)
			if m.Kind != ojson.Object {
				return pooledInput{}, badInput(mp, codeInvalidType, "%s must be an object, got %s.", mp, m.Kind)
			}
			if r := m.Get("role"); r == nil || r.Kind != ojson.String {
				return pooledInput{}, badInput(mp+".role", codeMissingParam, "%s.role must be a string.", mp)
			}
		}
	}
	return pooledInput{field: field, chat: true, convs: convs}, nil
}

// countPooled counts each input as vLLM does: text with special tokens
// unless add_special_tokens is false, token ids as given, a conversation
// rendered with add_generation_prompt and add_special_tokens false (the
// pooling defaults). Counting stops at max_model_len: c.Truncated says the
// last count is a lower bound over it. c.Exact false: forward uncounted.
func countPooled(m Model, req *ojson.Value, in pooledInput) ([]int, tokenize.Count, *Rejection) {
	limit := m.MaxModelLen
	var counts []int
	if in.chat {
		for _, conv := range in.convs {
			c, err := m.Counter.CountChat(chatBody(req, conv), limit)
			if err != nil {
				if rej := CountRejection(Chat, err); rej != nil {
					if rej.Reason == InvalidMessages {
						rej.Reason = InvalidInput
					}
					return nil, c, rej
				}
				return nil, tokenize.Count{Reason: "counting failed: " + err.Error()}, nil
			}
			if !c.Exact || c.Truncated {
				return append(counts, c.Tokens), c, nil
			}
			counts = append(counts, c.Tokens)
		}
		return counts, tokenize.Count{Exact: true}, nil
	}
	special := req.Get("add_special_tokens")
	for _, it := range in.items {
		if it.Kind == ojson.Array {
			counts = append(counts, len(it.Items))
			if limit > 0 && len(it.Items) > limit {
				return counts, tokenize.Count{Exact: true}, nil
			}
			continue
		}
		body := &ojson.Value{Kind: ojson.Object, Members: []ojson.Member{{Key: "prompt", Value: it}}}
		if !special.IsNull() {
			body.Members = append(body.Members, ojson.Member{Key: "add_special_tokens", Value: special})
		}
		c, err := m.Counter.CountCompletion(body, limit)
		if err != nil {
			return nil, tokenize.Count{Reason: "counting failed: " + err.Error()}, nil
		}
		if !c.Exact || c.Truncated {
			return append(counts, c.Tokens), c, nil
		}
		counts = append(counts, c.Tokens)
	}
	return counts, tokenize.Count{Exact: true}, nil
}

// chatBody is the chat request the tokenizer renders for one pooled
// conversation: the conversation and the template fields of the request,
// add_generation_prompt and add_special_tokens false unless set.
func chatBody(req, conv *ojson.Value) *ojson.Value {
	no := &ojson.Value{Kind: ojson.Bool}
	body := &ojson.Value{Kind: ojson.Object, Members: []ojson.Member{{Key: "messages", Value: conv}}}
	for _, k := range []string{"add_generation_prompt", "add_special_tokens"} {
		v := req.Get(k)
		if v.IsNull() {
			v = no
		}
		body.Members = append(body.Members, ojson.Member{Key: k, Value: v})
	}
	for _, k := range []string{"continue_final_message", "chat_template", "chat_template_kwargs", "tools"} {
		if v := req.Get(k); v != nil {
			body.Members = append(body.Members, ojson.Member{Key: k, Value: v})
		}
	}
	return body
}

// scorePairs are the field pairs of a score request, in vLLM's order of
// preference.
var scorePairs = [][2]string{{"queries", "documents"}, {"queries", "items"}, {"data_1", "data_2"}, {"text_1", "text_2"}}

// checkPairs checks the shape of a score or rerank request and returns the
// number of pairs vLLM scores (each its own engine request).
func checkPairs(rule *pairRule, req *ojson.Value) (int, *Rejection) {
	names := rule.names[len(rule.names)-1]
	for _, p := range rule.names {
		if req.Has(p[0]) && req.Has(p[1]) {
			names = p
			break
		}
	}
	if first := rule.names[0]; rule.firstWins && req.Has(first[0]) && names != first {
		names = first
	}
	var sizes [2]int
	for i, name := range names {
		v := req.Get(name)
		if v.IsNull() {
			return 0, badInput(name, codeMissingParam, "You must provide a %s parameter.", name)
		}
		multimodal := v.Kind == ojson.Object // vLLM's ScoreMultiModalParam: the backend reads it
		switch {
		case v.Kind == ojson.String || multimodal:
			sizes[i] = 1
		case v.Kind == ojson.Array && !(rule.singleFirst && i == 0):
			for j, it := range v.Items {
				if it.Kind != ojson.String && it.Kind != ojson.Object {
					return 0, badInput(fmt.Sprintf("%s[%d]", name, j), codeInvalidType, "%s[%d] must be a string, got %s.", name, j, it.Kind)
				}
			}
			sizes[i] = len(v.Items)
		default:
			want := "a string or an array of strings"
			if rule.singleFirst && i == 0 {
				want = "a string"
			}
			return 0, badInput(name, codeInvalidType, "%s must be %s, got %s.", name, want, v.Kind)
		}
	}
	return max(sizes[1], 1), nil
}
