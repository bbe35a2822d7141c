package sim

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/internal/ojson"
	"go.uber.org/zap"
)

// The Anthropic Messages API as vLLM serves it (vllm/entrypoints/anthropic):
// the request is converted into a chat completion and generated like one,
// and the answer is converted back. Errors follow vLLM, which answers in two
// envelopes (vLLM issue #57997): request validation (pydantic, the JSON
// content-type check) in the OpenAI envelope with type "Bad Request"; errors
// from the handler (unknown model, context length, sampling checks, engine
// errors) in Anthropic's {"type":"error","error":{"type","message"}} with
// vLLM's error class name as error.type ("NotFoundError",
// "BadRequestError", ...), not Anthropic's snake_case vocabulary.

const (
	messagesPath    = "/v1/messages"
	countTokensPath = "/v1/messages/count_tokens"
)

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type anthropicErrorEnvelope struct {
	Type  string         `json:"type"`
	Error anthropicError `json:"error"`
}

// writeAnthropicError is vLLM's translate_error_response: the status and
// the type and message of the OpenAI error, in Anthropic's envelope.
func writeAnthropicError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, anthropicErrorEnvelope{Type: "error", Error: anthropicError{Type: e.Type, Message: e.Message}})
}

// anthropicRequest is a parsed AnthropicMessagesRequest or
// AnthropicCountTokensRequest.
type anthropicRequest struct {
	v         *ojson.Value
	maxTokens int
	stream    bool
	msgs      []any // the converted chat messages
}

var anthropicBlockTypes = map[string]bool{
	"text": true, "image": true, "tool_use": true, "tool_result": true,
	"tool_reference": true, "thinking": true, "redacted_thinking": true,
}

// parseAnthropic does pydantic's validation of a Messages request
// (countOnly: of a count_tokens request, which has no max_tokens) and
// converts it to chat messages the way vLLM does.
func parseAnthropic(body []byte, countOnly bool) (*anthropicRequest, *apiError) {
	v, e := parseObject(body)
	if e != nil {
		return nil, e
	}
	req := &anthropicRequest{v: v}
	m := v.Get("model")
	switch {
	case m == nil:
		return nil, fieldError("model", "missing", "Field required")
	case m.Kind != ojson.String:
		return nil, fieldError("model", "string_type", "Input should be a valid string")
	case m.Str == "":
		return nil, requestValidationError("value_error", []any{"body", "model"}, "Value error, Model is required", strp("body.model"))
	}
	msgs := v.Get("messages")
	switch {
	case msgs == nil:
		return nil, fieldError("messages", "missing", "Field required")
	case msgs.Kind != ojson.Array:
		return nil, fieldError("messages", "list_type", "Input should be a valid list")
	}
	for i, msg := range msgs.Items {
		if e := checkAnthropicMessage(msg, i); e != nil {
			return nil, e
		}
	}
	if !countOnly {
		mt := v.Get("max_tokens")
		if mt == nil {
			return nil, fieldError("max_tokens", "missing", "Field required")
		}
		n, e := optInt(v, "max_tokens")
		if e != nil {
			return nil, e
		}
		if n == nil {
			return nil, fieldError("max_tokens", "int_type", "Input should be a valid integer")
		}
		if *n <= 0 {
			return nil, requestValidationError("value_error", []any{"body", "max_tokens"},
				"Value error, max_tokens must be positive", strp("body.max_tokens"))
		}
		req.maxTokens = *n
		b, e := optBool(v, "stream")
		if e != nil {
			return nil, e
		}
		req.stream = b != nil && *b
		if _, e := optFloat(v, "temperature"); e != nil {
			return nil, e
		}
	}
	if sys := v.Get("system"); !sys.IsNull() {
		switch sys.Kind {
		case ojson.String:
		case ojson.Array:
			for i, b := range sys.Items {
				if e := checkAnthropicBlock(b, []any{"body", "system", i}); e != nil {
					return nil, e
				}
			}
		default:
			return nil, fieldError("system", "string_type", "Input should be a valid string")
		}
	}
	req.msgs = anthropicToChat(v, body)
	return req, nil
}

func checkAnthropicMessage(msg *ojson.Value, i int) *apiError {
	loc := func(rest ...any) []any { return append([]any{"body", "messages", i}, rest...) }
	param := fmt.Sprintf("body.messages.%d", i)
	if msg.Kind != ojson.Object {
		return requestValidationError("model_type", loc(), "Input should be a valid dictionary or instance of AnthropicMessage", strp(param))
	}
	role := msg.Get("role")
	if role == nil {
		return requestValidationError("missing", loc("role"), "Field required", strp(param+".role"))
	}
	r := role.Str
	if r == "ctx" || r == "msg" { // vLLM maps Claude Code's roles to user
		r = "user"
	}
	if role.Kind != ojson.String || (r != "user" && r != "assistant" && r != "system") {
		return requestValidationError("literal_error", loc("role"), "Input should be 'user', 'assistant' or 'system'", strp(param+".role"))
	}
	c := msg.Get("content")
	switch {
	case c == nil:
		return requestValidationError("missing", loc("content"), "Field required", strp(param+".content"))
	case c.Kind == ojson.String:
	case c.Kind == ojson.Array:
		for j, b := range c.Items {
			if e := checkAnthropicBlock(b, loc("content", j)); e != nil {
				return e
			}
		}
	default:
		return requestValidationError("string_type", loc("content"), "Input should be a valid string", strp(param+".content"))
	}
	return nil
}

func checkAnthropicBlock(b *ojson.Value, loc []any) *apiError {
	param := locParam(loc)
	if b.Kind != ojson.Object {
		return requestValidationError("model_type", loc, "Input should be a valid dictionary or instance of AnthropicContentBlock", strp(param))
	}
	t := b.Get("type")
	if t == nil {
		return requestValidationError("missing", append(loc, "type"), "Field required", strp(param+".type"))
	}
	if t.Kind != ojson.String || !anthropicBlockTypes[t.Str] {
		return requestValidationError("literal_error", append(loc, "type"),
			"Input should be 'text', 'image', 'tool_use', 'tool_result', 'tool_reference', 'thinking' or 'redacted_thinking'",
			strp(param+".type"))
	}
	if tx := b.Get("text"); !tx.IsNull() && tx.Kind != ojson.String {
		return requestValidationError("string_type", append(loc, "text"), "Input should be a valid string", strp(param+".text"))
	}
	return nil
}

func locParam(loc []any) string {
	parts := make([]string, len(loc))
	for i, l := range loc {
		parts[i] = fmt.Sprint(l)
	}
	return strings.Join(parts, ".")
}

// anthropicToChat converts a validated request the way vLLM's
// _convert_anthropic_to_openai_request does: the top-level system (string
// or text blocks, joined) plus system-role messages become one system
// message; text blocks become text parts (a lone text part becomes a
// string); images become image_url parts; thinking becomes reasoning;
// tool_use becomes tool_calls; a user's tool_result becomes a tool message.
func anthropicToChat(v *ojson.Value, body []byte) []any {
	var sys strings.Builder
	if s := v.Get("system"); !s.IsNull() {
		if s.Kind == ojson.String {
			sys.WriteString(s.Str)
		} else {
			for _, b := range s.Items {
				if str(b.Get("type")) == "text" && !strings.HasPrefix(str(b.Get("text")), "x-anthropic-billing-header") {
					sys.WriteString(str(b.Get("text")))
				}
			}
		}
	}
	msgs := v.Get("messages").Items
	for _, m := range msgs {
		if str(m.Get("role")) != "system" {
			continue
		}
		if c := m.Get("content"); c.Kind == ojson.String {
			sys.WriteString(c.Str)
		} else {
			for _, b := range c.Items {
				if str(b.Get("type")) == "text" && !strings.HasPrefix(str(b.Get("text")), "x-anthropic-billing-header") {
					sys.WriteString(str(b.Get("text")))
				}
			}
		}
	}
	var out []any
	if sys.Len() > 0 {
		out = append(out, map[string]any{"role": "system", "content": sys.String()})
	}
	for _, m := range msgs {
		role := str(m.Get("role"))
		if role == "system" {
			continue
		}
		if role == "ctx" || role == "msg" {
			role = "user"
		}
		msg := map[string]any{"role": role}
		c := m.Get("content")
		if c.Kind == ojson.String {
			msg["content"] = c.Str
			out = append(out, msg)
			continue
		}
		var parts, calls []any
		var reasoning strings.Builder
		for _, b := range c.Items {
			switch str(b.Get("type")) {
			case "text":
				if t := str(b.Get("text")); t != "" {
					parts = append(parts, map[string]any{"type": "text", "text": t})
				}
			case "image":
				if src := b.Get("source"); src != nil && src.Kind == ojson.Object {
					url := str(src.Get("url"))
					if str(src.Get("type")) != "url" {
						url = "data:" + str(src.Get("media_type")) + ";base64," + str(src.Get("data"))
					}
					parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}})
				}
			case "thinking":
				reasoning.WriteString(str(b.Get("thinking")))
			case "tool_use":
				calls = append(calls, map[string]any{"id": str(b.Get("id")), "type": "function",
					"function": map[string]any{"name": str(b.Get("name")), "arguments": rawText(b.Get("input"), body)}})
			case "tool_result":
				text := toolResultText(b.Get("content"))
				if role == "user" {
					out = append(out, map[string]any{"role": "tool", "tool_call_id": str(b.Get("tool_use_id")), "content": text})
				} else {
					parts = append(parts, map[string]any{"type": "text", "text": "Tool result: " + text})
				}
			}
		}
		if reasoning.Len() > 0 {
			msg["reasoning"] = reasoning.String()
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		switch {
		case len(parts) == 1 && parts[0].(map[string]any)["type"] == "text":
			msg["content"] = parts[0].(map[string]any)["text"]
		case len(parts) > 0:
			msg["content"] = parts
		}
		if role == "user" && msg["content"] == nil {
			continue // vLLM drops a user message left without content
		}
		out = append(out, msg)
	}
	return out
}

// str is the text of a string value, "" for anything else.
func str(v *ojson.Value) string {
	if v == nil || v.Kind != ojson.String {
		return ""
	}
	return v.Str
}

func toolResultText(c *ojson.Value) string {
	if c.IsNull() {
		return ""
	}
	if c.Kind == ojson.String {
		return c.Str
	}
	var texts []string
	for _, it := range c.Items {
		if str(it.Get("type")) == "text" {
			texts = append(texts, str(it.Get("text")))
		}
	}
	return strings.Join(texts, "\n")
}

// rawText is json.dumps(block.input or {}) as Python writes it: ", " and
// ": " separators, non-ASCII escaped; numbers as the client wrote them.
func rawText(v *ojson.Value, body []byte) string {
	if v.IsNull() {
		return "{}"
	}
	var b strings.Builder
	pyDumps(&b, v, body)
	return b.String()
}

func pyDumps(b *strings.Builder, v *ojson.Value, body []byte) {
	switch v.Kind {
	case ojson.Object:
		b.WriteByte('{')
		for i, m := range v.Members {
			if i > 0 {
				b.WriteString(", ")
			}
			pyString(b, m.Key)
			b.WriteString(": ")
			pyDumps(b, m.Value, body)
		}
		b.WriteByte('}')
	case ojson.Array:
		b.WriteByte('[')
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			pyDumps(b, it, body)
		}
		b.WriteByte(']')
	case ojson.String:
		pyString(b, v.Str)
	default:
		b.Write(v.Raw(body))
	}
}

// pyString writes s as Python's json.dumps does (ensure_ascii).
func pyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || (r > 0x7e && r <= 0xffff):
			fmt.Fprintf(b, `\u%04x`, r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// --- wire types ------------------------------------------------------------

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type anthropicBlock struct {
	Type string  `json:"type"`
	Text *string `json:"text,omitempty"`
}

// anthropicMessage is AnthropicMessagesResponse serialised with
// exclude_none (the full answer).
type anthropicMessage struct {
	ID         string           `json:"id"`
	Type       string           `json:"type"`
	Role       string           `json:"role"`
	Content    []anthropicBlock `json:"content"`
	Model      string           `json:"model"`
	StopReason string           `json:"stop_reason"`
	Usage      anthropicUsage   `json:"usage"`
}

// anthropicStartMessage is the message of message_start, serialised with
// exclude_unset as vLLM does: no type or role, explicit nulls.
type anthropicStartMessage struct {
	ID           string           `json:"id"`
	Content      []anthropicBlock `json:"content"`
	Model        string           `json:"model"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

type anthropicDelta struct {
	Type       string `json:"type,omitempty"`
	Text       string `json:"text,omitempty"`
	StopReason string `json:"stop_reason,omitempty"`
}

// anthropicEvent is AnthropicStreamEvent serialised with exclude_unset.
type anthropicEvent struct {
	Type         string                 `json:"type"`
	Message      *anthropicStartMessage `json:"message,omitempty"`
	Delta        *anthropicDelta        `json:"delta,omitempty"`
	ContentBlock *anthropicBlock        `json:"content_block,omitempty"`
	Index        *int                   `json:"index,omitempty"`
	Error        *anthropicError        `json:"error,omitempty"`
	Usage        *anthropicUsage        `json:"usage,omitempty"`
}

var anthropicStopReason = map[string]string{"stop": "end_turn", "length": "max_tokens"}

// --- POST /v1/messages -------------------------------------------------------

func (s *Server) messagesCreate(w http.ResponseWriter, r *http.Request, body []byte) {
	arrival := time.Now()
	ctx := r.Context()
	cfg := s.Config()
	log := s.log.With(zap.String("route", r.URL.Path))
	if s.admissionFaults(ctx, w, cfg, log, writeAnthropicError) {
		return
	}
	// Request validation answers in the OpenAI envelope (vLLM #57997).
	if e := checkContentType(r); e != nil {
		s.rejectWith(w, e, writeAPIError)
		return
	}
	req, e := parseAnthropic(body, false)
	if e != nil {
		s.rejectWith(w, e, writeAPIError)
		return
	}
	reject := func(e *apiError) { s.rejectWith(w, e, writeAnthropicError) }
	if e := checkModel(req.v, cfg); e != nil {
		reject(e)
		return
	}
	if cfg.FailStatus > 0 {
		reject(failError(cfg.FailStatus, cfg.FailMessage))
		return
	}
	P, err := cfg.Tokenizer.ChatPromptTokens(chatRequestBody(cfg.Model, req.msgs))
	if err != nil {
		reject(&apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()})
		return
	}
	// The chat request carries max_tokens = max_completion_tokens =
	// the Anthropic max_tokens, so the chat checks (and their wording) apply.
	mt := req.maxTokens
	plans, e := validateBudget(&genRequest{kind: kindChat, n: 1, maxTokens: &mt, maxCompletion: &mt,
		prompts: []prompt{{text: true}}, promptTokens: []int{P}}, cfg)
	if e != nil {
		reject(e)
		return
	}
	reqID := r.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = randomID()
	}
	id := "chatcmpl-" + reqID
	j := s.newJob(cfg, log.With(zap.String("request_id", id)), arrival, P, plans[0].budget)
	j.log.Debug("sim request accepted", zap.Int("prompt_tokens", P), zap.Int("max_tokens", plans[0].budget), zap.Bool("stream", req.stream))
	if !req.stream {
		if !j.runWhole(ctx, w, writeAnthropicError) {
			return
		}
		text := j.text.String()
		writeJSON(w, http.StatusOK, anthropicMessage{
			ID: id, Type: "message", Role: "assistant", Model: servedName(req.v, cfg),
			Content:    []anthropicBlock{{Type: "text", Text: &text}},
			StopReason: anthropicStopReason[j.finish],
			Usage:      anthropicUsage{InputTokens: P, OutputTokens: j.generated},
		})
		j.done()
		return
	}
	s.messagesStream(ctx, w, j, id, servedName(req.v, cfg), P)
}

// messagesStream sends a Messages stream as vLLM's converter of a chat
// stream does: message_start and content_block_start with the first token,
// a content_block_delta per token, then content_block_stop, message_delta
// and message_stop.
func (s *Server) messagesStream(ctx context.Context, w http.ResponseWriter, j *job, id, model string, P int) {
	sw := j.startStream(w)
	if sw == nil {
		return
	}
	send := func(ev anthropicEvent) error { return sw.frame(ev.Type, marshal(ev)) }
	zero := 0
	err := j.run(ctx, func(step int, tok string) error {
		if step == 0 {
			if err := send(anthropicEvent{Type: "message_start", Message: &anthropicStartMessage{
				ID: id, Content: []anthropicBlock{}, Model: model, Usage: anthropicUsage{InputTokens: P},
			}}); err != nil {
				return err
			}
			empty := ""
			if err := send(anthropicEvent{Type: "content_block_start", Index: &zero,
				ContentBlock: &anthropicBlock{Type: "text", Text: &empty}}); err != nil {
				return err
			}
		}
		return send(anthropicEvent{Type: "content_block_delta", Index: &zero, Delta: &anthropicDelta{Type: "text_delta", Text: tok}})
	})
	if err != nil {
		if err == errStopped {
			// The chat stream's in-band error frame does not parse as a
			// chunk; vLLM's converter then sends an error event and stops.
			_ = send(anthropicEvent{Type: "error", Error: &anthropicError{Type: "internal_error", Message: "Internal server error"}})
		}
		return
	}
	for _, ev := range []anthropicEvent{
		{Type: "content_block_stop", Index: &zero},
		{Type: "message_delta", Delta: &anthropicDelta{StopReason: anthropicStopReason[j.finish]},
			Usage: &anthropicUsage{InputTokens: P, OutputTokens: j.generated}},
		{Type: "message_stop"},
	} {
		if err := send(ev); err != nil {
			_ = j.fail(ctx, errClientGone, "write")
			return
		}
	}
	j.done()
}

// --- POST /v1/messages/count_tokens -------------------------------------------

type countTokensResponse struct {
	InputTokens       int `json:"input_tokens"`
	ContextManagement struct {
		OriginalInputTokens int `json:"original_input_tokens"`
	} `json:"context_management"`
}

// messagesCountTokens renders the converted conversation through the chat
// template and counts it, as vLLM's count_tokens does. Like the renderer,
// it refuses a prompt longer than max_model_len.
func (s *Server) messagesCountTokens(w http.ResponseWriter, r *http.Request, body []byte) {
	cfg := s.Config()
	if e := checkContentType(r); e != nil {
		writeAPIError(w, e)
		return
	}
	req, e := parseAnthropic(body, true)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	if e := checkModel(req.v, cfg); e != nil {
		writeAnthropicError(w, e)
		return
	}
	n, err := cfg.Tokenizer.ChatPromptTokens(chatRequestBody(cfg.Model, req.msgs))
	if err != nil {
		writeAnthropicError(w, &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()})
		return
	}
	if n > cfg.MaxModelLen {
		writeAnthropicError(w, contextError(cfg.MaxModelLen, 0, n, true))
		return
	}
	var out countTokensResponse
	out.InputTokens = n
	out.ContextManagement.OriginalInputTokens = n
	writeJSON(w, http.StatusOK, out)
}
