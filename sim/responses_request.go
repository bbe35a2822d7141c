package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// --- request ---------------------------------------------------------------

// responsesRequest is a parsed ResponsesRequest.
type responsesRequest struct {
	v            *ojson.Value
	body         []byte
	id           string
	instructions *string
	maxOutput    *int
	prevID       *string
	store        bool
	stream       bool
	background   bool
	temperature  float64
	topP         float64
}

// parseResponsesRequest does pydantic's part: JSON, field types and the
// model validators (background needs store).
func parseResponsesRequest(body []byte) (*responsesRequest, *apiError) {
	v, e := parseObject(body)
	if e != nil {
		return nil, e
	}
	req := &responsesRequest{v: v, body: body, store: true, temperature: 1, topP: 1}
	if e := optString(v, "model", nil); e != nil {
		return nil, e
	}
	if e := optString(v, "instructions", &req.instructions); e != nil {
		return nil, e
	}
	if e := optString(v, "previous_response_id", &req.prevID); e != nil {
		return nil, e
	}
	var rid *string
	if e := optString(v, "request_id", &rid); e != nil {
		return nil, e
	}
	if rid != nil {
		req.id = *rid
	}
	var err *apiError
	if req.maxOutput, err = optInt(v, "max_output_tokens"); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		dst  *bool
	}{{"store", &req.store}, {"stream", &req.stream}, {"background", &req.background}} {
		b, e := optBool(v, f.name)
		if e != nil {
			return nil, e
		}
		if b != nil {
			*f.dst = *b
		}
	}
	for _, f := range []struct {
		name string
		dst  *float64
	}{{"temperature", &req.temperature}, {"top_p", &req.topP}} {
		x, e := optFloat(v, f.name)
		if e != nil {
			return nil, e
		}
		if x != nil {
			*f.dst = *x
		}
	}
	in := v.Get("input")
	if in == nil {
		return nil, fieldError("input", "missing", "Field required")
	}
	switch in.Kind {
	case ojson.String:
	case ojson.Array:
		for i, it := range in.Items {
			if e := checkResponseItem(it, i); e != nil {
				return nil, e
			}
		}
	default:
		return nil, fieldError("input", "string_type", "Input should be a valid string")
	}
	if req.background && !req.store {
		return nil, modelValidatorError("background can only be used when `store` is true", "body")
	}
	if p := v.Get("prompt"); !p.IsNull() {
		return nil, validationError("prompt template is not supported", "prompt", "None")
	}
	return req, nil
}

// checkResponseItem accepts the input items the simulator understands:
// messages (role + string or part-list content), function calls and their
// outputs, and reasoning items.
func checkResponseItem(it *ojson.Value, i int) *apiError {
	loc := func(rest ...any) []any { return append([]any{"body", "input", i}, rest...) }
	param := fmt.Sprintf("body.input.%d", i)
	if it.Kind != ojson.Object {
		return requestValidationError("model_type", loc(), "Input should be a valid dictionary or object", strp(param))
	}
	typ := "message"
	if t := it.Get("type"); !t.IsNull() {
		if t.Kind != ojson.String {
			return requestValidationError("string_type", loc("type"), "Input should be a valid string", strp(param+".type"))
		}
		typ = t.Str
	}
	switch typ {
	case "message":
		role := it.Get("role")
		if role == nil {
			return requestValidationError("missing", loc("role"), "Field required", strp(param+".role"))
		}
		switch {
		case role.Kind != ojson.String:
			return requestValidationError("string_type", loc("role"), "Input should be a valid string", strp(param+".role"))
		case role.Str != "user" && role.Str != "assistant" && role.Str != "system" && role.Str != "developer":
			return requestValidationError("literal_error", loc("role"),
				"Input should be 'user', 'assistant', 'system' or 'developer'", strp(param+".role"))
		}
		c := it.Get("content")
		if c == nil {
			return requestValidationError("missing", loc("content"), "Field required", strp(param+".content"))
		}
		if c.Kind != ojson.String && c.Kind != ojson.Array {
			return requestValidationError("string_type", loc("content"), "Input should be a valid string", strp(param+".content"))
		}
	case "function_call", "function_call_output", "reasoning":
	default:
		return requestValidationError("union_tag_invalid", loc(),
			fmt.Sprintf("Input tag '%s' found using 'type' does not match any of the expected tags", typ), strp(param))
	}
	return nil
}

// optString checks that field name is a string or null and stores it in
// dst (when dst is not nil).
func optString(obj *ojson.Value, name string, dst **string) *apiError {
	v := obj.Get(name)
	if v.IsNull() {
		return nil
	}
	if v.Kind != ojson.String {
		return fieldError(name, "string_type", "Input should be a valid string")
	}
	if dst != nil {
		s := v.Str
		*dst = &s
	}
	return nil
}

// rawOr returns the raw JSON of field name, or def when absent or null.
func rawOr(v *ojson.Value, body []byte, name, def string) json.RawMessage {
	f := v.Get(name)
	if f.IsNull() {
		return json.RawMessage(def)
	}
	return json.RawMessage(append([]byte(nil), f.Raw(body)...))
}

// chatMessages turns the request (instructions, the previous response's
// conversation, input) into chat messages, as construct_input_messages
// does, for counting through the chat template.
func (req *responsesRequest) chatMessages(prev *storedResponse, prevObj *responseObject) []any {
	var msgs []any
	if req.instructions != nil {
		msgs = append(msgs, map[string]any{"role": "system", "content": *req.instructions})
	}
	if prev != nil {
		msgs = append(msgs, prev.msgs...)
		for _, o := range prevObj.Output {
			var b strings.Builder
			for _, c := range o.Content {
				b.WriteString(c.Text)
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": b.String()})
		}
	}
	in := req.v.Get("input")
	if in.Kind == ojson.String {
		return append(msgs, map[string]any{"role": "user", "content": in.Str})
	}
	for _, it := range in.Items {
		switch t := it.Get("type"); {
		case t.IsNull() || t.Str == "message":
			c := it.Get("content")
			if c.Kind == ojson.String {
				msgs = append(msgs, map[string]any{"role": str(it.Get("role")), "content": c.Str})
				continue
			}
			var parts []any
			for _, p := range c.Items {
				switch str(p.Get("type")) {
				case "input_text", "output_text", "text":
					parts = append(parts, map[string]any{"type": "text", "text": str(p.Get("text"))})
				case "input_image":
					parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": str(p.Get("image_url"))}})
				}
			}
			msgs = append(msgs, map[string]any{"role": str(it.Get("role")), "content": parts})
		case t.Str == "function_call":
			msgs = append(msgs, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
				"id": str(it.Get("call_id")), "type": "function",
				"function": map[string]any{"name": str(it.Get("name")), "arguments": str(it.Get("arguments"))},
			}}})
		case t.Str == "function_call_output":
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": str(it.Get("call_id")), "content": str(it.Get("output"))})
		}
	}
	return msgs
}

// chatRequestBody is the chat-completions body the tokenizer counts.
func chatRequestBody(model string, msgs []any) []byte {
	if msgs == nil {
		msgs = []any{}
	}
	b, _ := json.Marshal(map[string]any{"model": model, "messages": msgs})
	return b
}

// invalidRequest is an ErrorResponse with vLLM's ErrorType
// INVALID_REQUEST_ERROR, as the Responses handler builds them.
func invalidRequest(status int, msg, param string) *apiError {
	return &apiError{Status: status, Type: "invalid_request_error", Message: msg, Param: strp(param)}
}

func responseNotFound(id string) *apiError {
	return invalidRequest(http.StatusNotFound, fmt.Sprintf("Response with id '%s' not found.", id), "response_id")
}
