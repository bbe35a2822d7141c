package admission

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// The OpenAI Responses API (POST /v1/responses) as vLLM serves it: the
// conversation is instructions (a system message), then the input (a
// string: one user message; or items: messages, function calls, their
// outputs, ...), rendered through the model's chat template with a
// generation prompt, as vLLM's construct_input_messages and chat
// preprocessing build it; max_output_tokens is the requested output.
//
// The door checks the fields that decide routing and counting and counts
// what it can count exactly: a string input and message items whose
// content is a string or text parts. Anything the gateway cannot
// reproduce goes to vLLM uncounted (NotExact, with the reason): a
// previous_response_id (the earlier conversation lives on the backend
// that made it), items other than messages, non-text parts, tools and
// reasoning settings (they change the rendered prompt).

// responsesKeys are the keys whose spelling decides what the door does with
// a Responses request (see requestKeys).
var responsesKeys = []string{"model", "input", "instructions", "max_output_tokens", "previous_response_id", "stream",
	"background", "store", "tools", "tool_choice", "reasoning", "prompt", "text"}

// responsesRoles are the roles of a message item vLLM accepts.
var responsesRoles = []string{"user", "assistant", "system", "developer"}

// checkResponses runs the door's steps for a Responses request: the model
// (which vLLM lets a request leave out when it serves one model), the typed
// fields, the input's shape, the count through the chat template, and the
// context rule with max_output_tokens.
func (d *Door) checkResponses(_ Endpoint, req *ojson.Value, body []byte) (Decision, *Rejection) {
	for _, mem := range req.Members {
		for _, k := range responsesKeys {
			if mem.Key != k && strings.EqualFold(mem.Key, k) {
				return Decision{}, &Rejection{Reason: InvalidJSON, Status: 400, Code: codeInvalidJSON, Param: mem.Key,
					Message: fmt.Sprintf("Unknown key %q: keys are case-sensitive (did you mean %q?).", mem.Key, k)}
			}
		}
	}
	var m Model
	var rej *Rejection
	if mv := req.Get("model"); mv.IsNull() && len(d.models.Names()) == 1 {
		// vLLM's ResponsesRequest.model is optional: its one served model.
		var ok bool
		if m, ok = d.models.Lookup(d.models.Names()[0]); !ok {
			m, rej = d.model(req)
		}
	} else {
		m, rej = d.model(req)
	}
	if rej != nil {
		return Decision{}, rej
	}
	dec, rej := responsesModel(m, req, body)
	if rej != nil {
		rej.Model, rej.Ref = m.Name, m.Ref
	}
	return dec, rej
}

func responsesModel(m Model, req *ojson.Value, body []byte) (Decision, *Rejection) {
	for _, k := range []string{"instructions", "previous_response_id"} {
		if v := req.Get(k); !v.IsNull() && v.Kind != ojson.String {
			return Decision{}, invalidParam(k, codeInvalidType, "%s must be a string, got %s.", k, v.Kind)
		}
	}
	for _, k := range []string{"stream", "background", "store"} {
		if v := req.Get(k); !v.IsNull() && v.Kind != ojson.Bool {
			return Decision{}, invalidParam(k, codeInvalidType, "%s must be a boolean, got %s.", k, v.Kind)
		}
	}
	mt, rej := positiveInt(req, "max_output_tokens")
	if rej != nil {
		return Decision{}, rej
	}
	if rej := checkResponsesInput(req.Get("input")); rej != nil {
		return Decision{}, rej
	}
	dec := Decision{Model: m.Name, Ref: m.Ref, Only: m.Only, Body: body, MaxTokens: mt, N: 1, Prompts: 1, Request: req}
	if v := req.Get("stream"); v != nil && v.Kind == ojson.Bool {
		dec.Stream = v.Bool
	}
	if m.Counter == nil {
		dec.Uncounted = NoTokenizer
		return responsesUncountedFit(dec, m)
	}
	if harmony(m.Counter) {
		// vLLM renders a gpt-oss model's Responses with its own harmony
		// messages (system, developer), not the chat template.
		dec.Uncounted, dec.Detail = NotExact, "harmony (gpt-oss): vLLM builds the Responses prompt itself"
		return responsesUncountedFit(dec, m)
	}
	conv, why := responsesConversation(req)
	if why != "" {
		dec.Uncounted, dec.Detail = NotExact, why
		return responsesUncountedFit(dec, m)
	}
	c, err := m.Counter.CountChat(conv, m.MaxModelLen)
	if err != nil {
		if rej := CountRejection(Chat, err); rej != nil {
			if rej.Reason == InvalidMessages {
				rej.Reason, rej.Param = InvalidInput, "input"
			}
			return Decision{}, rej
		}
		c = tokenize.Count{Reason: "counting failed: " + err.Error()}
	}
	if !c.Exact {
		dec.Uncounted, dec.Detail = NotExact, c.Reason
		return responsesUncountedFit(dec, m)
	}
	dec.PromptTokens = c.Tokens
	l := m.MaxModelLen
	if l <= 0 {
		dec.Uncounted = NoContextLimit
		return dec, nil
	}
	// vLLM's renderer: P + M > L, or P >= L without M, is refused.
	p := c.Tokens
	if !c.Truncated && ((mt > 0 && p+mt <= l) || (mt == 0 && p < l)) {
		return dec, nil
	}
	if m.Clamp && !c.Truncated && mt > 0 && p < l {
		v := req.Get("max_output_tokens")
		out := make([]byte, 0, len(body))
		out = append(out, body[:v.Start]...)
		out = strconv.AppendInt(out, int64(l-p), 10)
		dec.Body, dec.ClampedFrom, dec.MaxTokens = append(out, body[v.End:]...), mt, l-p
		return dec, nil
	}
	info := &ContextInfo{PromptTokens: p, PromptExact: !c.Truncated, MaxTokens: mt, MaxModelLen: l}
	return Decision{}, responsesContext(info)
}

// responsesUncountedFit refuses, uncounted, only what can never fit:
// max_output_tokens >= max_model_len (an input is at least one token).
func responsesUncountedFit(dec Decision, m Model) (Decision, *Rejection) {
	if l := m.MaxModelLen; l > 0 && dec.MaxTokens >= l {
		return Decision{}, responsesContext(&ContextInfo{PromptTokens: 1, MaxTokens: dec.MaxTokens, MaxModelLen: l})
	}
	return dec, nil
}

// responsesContext is OpenAI's context-length wording for the input.
func responsesContext(c *ContextInfo) *Rejection {
	p := strconv.Itoa(c.PromptTokens)
	if !c.PromptExact {
		p = "at least " + p
	}
	var msg string
	if c.MaxTokens == 0 {
		msg = fmt.Sprintf("This model's maximum context length is %d tokens. However, your input resulted in %s tokens. Please reduce the length of the input.",
			c.MaxModelLen, p)
	} else {
		total := strconv.Itoa(c.PromptTokens + c.MaxTokens)
		if !c.PromptExact {
			total = "at least " + total
		}
		msg = fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %s tokens (%s in the input, %d in max_output_tokens). Please reduce the length of the input or max_output_tokens.",
			c.MaxModelLen, total, p, c.MaxTokens)
	}
	return &Rejection{Reason: ContextLength, Status: 400, Code: codeContextLength, Param: "input", Message: msg, Context: c}
}

// checkResponsesInput checks the input's shape as vLLM's schema does where
// the door relies on it: a string or a list of item objects; a message item
// (type "message" or none) has a role vLLM accepts and string or list
// content. Other item types are vLLM's to judge.
func checkResponsesInput(in *ojson.Value) *Rejection {
	if in.IsNull() {
		return badInput("input", codeMissingParam, "You must provide an input parameter.")
	}
	switch in.Kind {
	case ojson.String:
		return nil
	case ojson.Array:
	default:
		return badInput("input", codeInvalidType, "input must be a string or an array of input items, got %s.", in.Kind)
	}
	for i, it := range in.Items {
		param := fmt.Sprintf("input[%d]", i)
		if it.Kind != ojson.Object {
			return badInput(param, codeInvalidType, "%s must be an object, got %s.", param, it.Kind)
		}
		t := it.Get("type")
		if !t.IsNull() && t.Kind != ojson.String {
			return badInput(param+".type", codeInvalidType, "%s.type must be a string, got %s.", param, t.Kind)
		}
		if !t.IsNull() && t.Str != "message" {
			continue
		}
		role := it.Get("role")
		if role.IsNull() {
			return badInput(param+".role", codeMissingParam, "%s.role is required.", param)
		}
		if role.Kind != ojson.String {
			return badInput(param+".role", codeInvalidType, "%s.role must be a string, got %s.", param, role.Kind)
		}
		known := false
		for _, r := range responsesRoles {
			known = known || role.Str == r
		}
		if !known {
			return badInput(param+".role", codeInvalidValue, "%s.role must be one of %s, got %q.", param, strings.Join(responsesRoles, ", "), role.Str)
		}
		c := it.Get("content")
		if c.IsNull() {
			return badInput(param+".content", codeMissingParam, "%s.content is required.", param)
		}
		if c.Kind != ojson.String && c.Kind != ojson.Array {
			return badInput(param+".content", codeInvalidType, "%s.content must be a string or an array of content parts, got %s.", param, c.Kind)
		}
	}
	return nil
}

// responsesConversation builds the chat request vLLM renders for a
// Responses request, or says why it cannot be reproduced exactly.
func responsesConversation(req *ojson.Value) (*ojson.Value, string) {
	switch {
	case !req.Get("previous_response_id").IsNull():
		return nil, "previous_response_id: the earlier conversation is on the backend"
	case !req.Get("prompt").IsNull():
		return nil, "prompt templates are the backend's"
	case !req.Get("reasoning").IsNull():
		return nil, "reasoning settings change the rendered prompt"
	}
	if t := req.Get("tools"); !t.IsNull() && !(t.Kind == ojson.Array && len(t.Items) == 0) {
		return nil, "tools change the rendered prompt"
	}
	str := func(s string) *ojson.Value { return &ojson.Value{Kind: ojson.String, Str: s} }
	msg := func(role string, content *ojson.Value) *ojson.Value {
		return &ojson.Value{Kind: ojson.Object, Members: []ojson.Member{{Key: "role", Value: str(role)}, {Key: "content", Value: content}}}
	}
	msgs := &ojson.Value{Kind: ojson.Array}
	if in := req.Get("instructions"); !in.IsNull() {
		msgs.Items = append(msgs.Items, msg("system", in))
	}
	in := req.Get("input")
	if in.Kind == ojson.String {
		msgs.Items = append(msgs.Items, msg("user", in))
	} else {
		for i, it := range in.Items {
			if t := it.Get("type"); !t.IsNull() && t.Str != "message" {
				return nil, fmt.Sprintf("input[%d] is a %s item", i, t.Str)
			}
			c := it.Get("content")
			if c.Kind == ojson.Array {
				parts := &ojson.Value{Kind: ojson.Array}
				for j, p := range c.Items {
					pt, text := p.Get("type"), p.Get("text")
					if pt == nil || pt.Kind != ojson.String || (pt.Str != "input_text" && pt.Str != "output_text") || text == nil || text.Kind != ojson.String {
						return nil, fmt.Sprintf("input[%d].content[%d] is not a text part", i, j)
					}
					parts.Items = append(parts.Items, &ojson.Value{Kind: ojson.Object, Members: []ojson.Member{
						{Key: "type", Value: str("text")}, {Key: "text", Value: text}}})
				}
				c = parts
			}
			msgs.Items = append(msgs.Items, msg(it.Get("role").Str, c))
		}
	}
	return &ojson.Value{Kind: ojson.Object, Members: []ojson.Member{{Key: "messages", Value: msgs}}}, ""
}

// harmony reports whether the counter's chat template is OpenAI's harmony
// format (gpt-oss), for which vLLM does not use the template here.
func harmony(c Counter) bool {
	t, ok := c.(interface{ ChatTemplate() *tokenize.Template })
	return ok && t.ChatTemplate() != nil && strings.Contains(t.ChatTemplate().Source(), "<|channel|>")
}
