package admission

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens) as
// vLLM serves it: the request is converted into a chat conversation (one
// system message from the top-level system and the system-role messages,
// text blocks as text parts, a lone text part as a string) and rendered
// through the model's chat template like a chat request. The door checks
// the fields that decide routing and counting in Anthropic's shape
// (max_tokens is required, as Anthropic requires), converts what it can
// reproduce exactly (text), and counts it with the chat counter; any
// other block (images, tool use and results, thinking) or a field that
// changes the rendering (tools, thinking, ...) forwards the request
// uncounted.

// anthropicRoles are the roles vLLM's AnthropicMessage accepts; ctx and
// msg (Claude Code's) are read as user.
var anthropicRoles = []string{"user", "assistant", "system", "ctx", "msg"}

// anthropicBlockTypes are the content block types vLLM's schema accepts.
var anthropicBlockTypes = []string{"text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking"}

// anthropicPlainKeys are the request keys that leave the rendered prompt
// as the messages and system make it; any other key may change it (tools,
// thinking, ...), and the request is then counted by vLLM alone.
var anthropicPlainKeys = []string{"model", "messages", "system", "max_tokens", "stream", "temperature", "top_p", "top_k",
	"stop_sequences", "metadata", "service_tier"}

// anthropicBillingHeader prefixes system text that vLLM drops (Claude
// Code's billing marker).
const anthropicBillingHeader = "x-anthropic-billing-header"

// checkAnthropic runs steps 3 to 6 for a Messages request; countOnly
// checks a count_tokens request (no max_tokens, no stream).
func checkAnthropic(m Model, req *ojson.Value, body []byte, countOnly bool) (Decision, tokenize.Count, *Rejection) {
	var c tokenize.Count
	if rej := checkAnthropicShape(req); rej != nil {
		return Decision{}, c, rej
	}
	f := fields{n: 1}
	if !countOnly {
		if mv := req.Get("max_tokens"); mv == nil || mv.IsNull() {
			return Decision{}, c, invalidParam("max_tokens", codeMissingParam, "max_tokens is required.")
		}
		mt, rej := positiveInt(req, "max_tokens")
		if rej != nil {
			return Decision{}, c, rej
		}
		f.maxTokens = mt
		if v := req.Get("stream"); v != nil && !v.IsNull() {
			if v.Kind != ojson.Bool {
				return Decision{}, c, invalidParam("stream", codeInvalidType, "stream must be a boolean, got %s.", v.Kind)
			}
			f.stream = v.Bool
		}
	}
	dec := Decision{Model: m.Name, Ref: m.Ref, Only: m.Only, Stream: f.stream, Body: body, MaxTokens: f.maxTokens, N: 1, Prompts: 1, Request: req}
	if m.Counter == nil {
		dec.Uncounted = NoTokenizer
		return dec, c, nil
	}
	chat, why := anthropicToChat(req)
	if why != "" {
		// Not exact: no conversation to hash either.
		dec.Uncounted, dec.Detail = NotExact, why
		return dec, c, nil
	}
	dec.Chat = chat
	c, err := m.Counter.CountChat(chat, m.MaxModelLen)
	if err != nil {
		if rej := CountRejection(Chat, err); rej != nil {
			return Decision{}, c, rej
		}
		c = tokenize.Count{Reason: "counting failed: " + err.Error()}
	}
	if !c.Exact {
		dec.Uncounted, dec.Detail = NotExact, c.Reason
		return dec, c, nil
	}
	dec.PromptTokens, dec.Rendered, dec.PromptKeys = c.Tokens, c.Rendered, c.Keys
	return dec, c, nil
}

// checkAnthropicShape checks messages and system as vLLM's schema does.
func checkAnthropicShape(req *ojson.Value) *Rejection {
	msgs := req.Get("messages")
	if msgs == nil || msgs.IsNull() {
		return badMessages("messages", codeMissingParam, "You must provide a messages parameter.")
	}
	if msgs.Kind != ojson.Array {
		return badMessages("messages", codeInvalidType, "messages must be an array of message objects, got %s.", msgs.Kind)
	}
	for i, msg := range msgs.Items {
		path := fmt.Sprintf("messages[%d]", i)
		if msg.Kind != ojson.Object {
			return badMessages(path, codeInvalidType, "%s must be an object, got %s.", path, msg.Kind)
		}
		if rej := checkKeyCase(msg, path); rej != nil {
			return rej
		}
		rv := msg.Get("role")
		if rv == nil || rv.IsNull() {
			return badMessages(path+".role", codeMissingParam, "%s.role is required.", path)
		}
		if rv.Kind != ojson.String || !slices.Contains(anthropicRoles, rv.Str) {
			return badMessages(path+".role", codeInvalidValue, "%s.role must be 'user', 'assistant' or 'system', got %s.", path, describeValue(rv))
		}
		cv := msg.Get("content")
		switch {
		case cv == nil || cv.IsNull():
			return badMessages(path+".content", codeMissingParam, "%s.content is required.", path)
		case cv.Kind == ojson.String:
		case cv.Kind == ojson.Array:
			for j, b := range cv.Items {
				if rej := checkAnthropicBlock(b, fmt.Sprintf("%s.content[%d]", path, j)); rej != nil {
					return rej
				}
			}
		default:
			return badMessages(path+".content", codeInvalidType, "%s.content must be a string or an array of content blocks, got %s.", path, cv.Kind)
		}
	}
	sys := req.Get("system")
	switch {
	case sys == nil || sys.IsNull(), sys.Kind == ojson.String:
	case sys.Kind == ojson.Array:
		for i, b := range sys.Items {
			if rej := checkAnthropicBlock(b, fmt.Sprintf("system[%d]", i)); rej != nil {
				return rej
			}
		}
	default:
		return badMessages("system", codeInvalidType, "system must be a string or an array of text blocks, got %s.", sys.Kind)
	}
	return nil
}

func checkAnthropicBlock(b *ojson.Value, path string) *Rejection {
	if b.Kind != ojson.Object {
		return badMessages(path, codeInvalidType, "%s must be a content block object, got %s.", path, b.Kind)
	}
	t := b.Get("type")
	if t == nil || t.IsNull() {
		return badMessages(path+".type", codeMissingParam, "%s.type is required.", path)
	}
	if t.Kind != ojson.String || !slices.Contains(anthropicBlockTypes, t.Str) {
		return badMessages(path+".type", codeInvalidValue, "%s.type must be one of %s, got %s.", path,
			strings.Join(anthropicBlockTypes, ", "), describeValue(t))
	}
	tx := b.Get("text")
	if tx != nil && !tx.IsNull() && tx.Kind != ojson.String {
		return badMessages(path+".text", codeInvalidType, "%s.text must be a string, got %s.", path, tx.Kind)
	}
	if t.Str == "text" && tx.IsNull() {
		// Anthropic's API requires it; vLLM's schema would let the block
		// through empty.
		return badMessages(path+".text", codeMissingParam, "%s.text is required: a text block carries its text.", path)
	}
	return nil
}

func describeValue(v *ojson.Value) string {
	if v.Kind == ojson.String {
		return fmt.Sprintf("%q", v.Str)
	}
	return describe(v)
}

// chatMessage is one message of the converted conversation.
type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

type chatPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anthropicToChat converts a checked request into the chat request vLLM
// renders ({"messages": [...]}), or says why it cannot be reproduced
// exactly.
func anthropicToChat(req *ojson.Value) (*ojson.Value, string) {
	for _, mem := range req.Members {
		if !slices.Contains(anthropicPlainKeys, mem.Key) {
			return nil, "anthropic field " + mem.Key + " changes the rendering"
		}
	}
	var sys strings.Builder
	addSystem := func(v *ojson.Value) string {
		if v.Kind == ojson.String {
			sys.WriteString(v.Str)
			return ""
		}
		for _, b := range v.Items {
			if t := b.Get("type").Str; t != "text" {
				return "anthropic " + t + " block in system"
			}
			if tx := b.Get("text"); tx != nil && tx.Kind == ojson.String && !strings.HasPrefix(tx.Str, anthropicBillingHeader) {
				sys.WriteString(tx.Str)
			}
		}
		return ""
	}
	if s := req.Get("system"); s != nil && !s.IsNull() {
		if why := addSystem(s); why != "" {
			return nil, why
		}
	}
	msgs := req.Get("messages").Items
	for _, m := range msgs {
		if m.Get("role").Str == "system" {
			if why := addSystem(m.Get("content")); why != "" {
				return nil, why
			}
		}
	}
	out := make([]chatMessage, 0, len(msgs)+1)
	if sys.Len() > 0 {
		out = append(out, chatMessage{Role: "system", Content: sys.String()})
	}
	for i, m := range msgs {
		role := m.Get("role").Str
		switch role {
		case "system":
			continue
		case "ctx", "msg":
			role = "user"
		}
		c := m.Get("content")
		if c.Kind == ojson.String {
			out = append(out, chatMessage{Role: role, Content: c.Str})
			continue
		}
		var parts []chatPart
		for _, b := range c.Items {
			if t := b.Get("type").Str; t != "text" {
				return nil, fmt.Sprintf("anthropic %s block in messages[%d]", t, i)
			}
			if tx := b.Get("text"); tx != nil && tx.Kind == ojson.String && tx.Str != "" {
				parts = append(parts, chatPart{Type: "text", Text: tx.Str})
			}
		}
		switch len(parts) {
		case 0:
			// vLLM drops a user message left without content and keeps an
			// assistant's without one: not reproduced here.
			return nil, fmt.Sprintf("messages[%d] has no text", i)
		case 1:
			out = append(out, chatMessage{Role: role, Content: parts[0].Text})
		default:
			out = append(out, chatMessage{Role: role, Content: parts})
		}
	}
	b, err := json.Marshal(map[string]any{"messages": out})
	if err != nil {
		return nil, "converting the conversation: " + err.Error()
	}
	v, err := ojson.Parse(b, ojson.DefaultMaxDepth)
	if err != nil {
		return nil, "converting the conversation: " + err.Error()
	}
	return v, ""
}

// CountMessages checks a POST /v1/messages/count_tokens body as the door
// checks a Messages request (steps 1 to 5; no max_tokens) and counts its
// prompt. Like vLLM's count_tokens, a prompt longer than max_model_len is
// refused (with the count at which counting stopped, a lower bound).
// Decision.Uncounted says when the count is not exact: the request then
// belongs to a backend.
func (d *Door) CountMessages(body []byte) (Decision, *Rejection) {
	req, rej := parseBody(body)
	if rej != nil {
		return Decision{}, rej
	}
	if rej := checkKeyCase(req, ""); rej != nil {
		return Decision{}, rej
	}
	m, rej := d.model(req)
	if rej != nil {
		return Decision{}, rej
	}
	dec, c, rej := checkAnthropic(m, req, body, true)
	if rej == nil && dec.Uncounted == Counted {
		switch {
		case m.MaxModelLen <= 0:
			dec.Uncounted = NoContextLimit
		case c.Truncated:
			info := &ContextInfo{PromptTokens: c.Tokens, MaxModelLen: m.MaxModelLen}
			rej = &Rejection{Reason: ContextLength, Status: 400, Code: codeContextLength, Param: "messages",
				Message: contextMessage(info, Messages), Context: info}
		}
	}
	if rej != nil {
		rej.Model, rej.Ref = m.Name, m.Ref
	}
	return dec, rej
}

// checkMessagesAPI runs steps 3 to 6 for POST /v1/messages.
func checkMessagesAPI(ep Endpoint, m Model, req *ojson.Value, body []byte) (Decision, *Rejection) {
	dec, c, rej := checkAnthropic(m, req, body, false)
	if rej != nil || dec.Uncounted != Counted {
		if rej == nil {
			return uncountedFit(dec, m, ep)
		}
		return dec, rej
	}
	if m.MaxModelLen <= 0 {
		dec.Uncounted = NoContextLimit
		return dec, nil
	}
	return fit(dec, m, fields{maxTokens: dec.MaxTokens, n: 1, stream: dec.Stream}, c, req, ep)
}
