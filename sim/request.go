package sim

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

type kind int

const (
	kindChat kind = iota
	kindCompletion
)

// prompt is one prompt of a request (chat has one; completions may batch).
type prompt struct {
	raw    []byte // the prompt JSON value (completions)
	ids    bool   // given as token ids: counted exactly, never truncated
	idsLen int
	text   bool // a string prompt
}

// genRequest is a parsed and validated generation request.
type genRequest struct {
	kind            kind
	stream          bool
	includeUsage    bool
	continuousUsage bool
	n               int
	temperature     *float64
	maxTokens       *int // max_tokens (completions: default 16)
	maxCompletion   *int // max_completion_tokens (chat only)
	minTokens       int
	ignoreEOS       bool
	prompts         []prompt
	promptTokens    []int // per prompt, after counting
	// wantIDs makes countPrompts keep each prompt's token ids in promptIDs
	// (nil for a prompt the Tokenizer gives no ids for): the prefix cache
	// looks them up.
	wantIDs   bool
	promptIDs [][]int
}

func isInt(v *ojson.Value) bool {
	if v.IsInt() {
		return true
	}
	// pydantic's lax int accepts floats with no fractional part.
	f := v.Float()
	return v.Kind == ojson.Number && f == math.Trunc(f) && !math.IsInf(f, 0) && math.Abs(f) < 1<<53
}

func optInt(obj *ojson.Value, name string) (*int, *apiError) {
	v := obj.Get(name)
	if v.IsNull() {
		return nil, nil
	}
	if v.Kind != ojson.Number {
		return nil, fieldError(name, "int_type", "Input should be a valid integer")
	}
	if !isInt(v) {
		return nil, fieldError(name, "int_from_float", "Input should be a valid integer, got a number with a fractional part")
	}
	n := int(v.Float())
	if i, ok := v.Int(); ok {
		n = int(i)
	}
	return &n, nil
}

func optBool(obj *ojson.Value, name string) (*bool, *apiError) {
	v := obj.Get(name)
	if v.IsNull() {
		return nil, nil
	}
	if v.Kind != ojson.Bool {
		return nil, fieldError(name, "bool_type", "Input should be a valid boolean")
	}
	b := v.Bool
	return &b, nil
}

func optFloat(obj *ojson.Value, name string) (*float64, *apiError) {
	v := obj.Get(name)
	if v.IsNull() {
		return nil, nil
	}
	if v.Kind != ojson.Number {
		return nil, fieldError(name, "float_type", "Input should be a valid number")
	}
	f := v.Float()
	return &f, nil
}

// checkContentType is vLLM's validate_json_request dependency: the header,
// lowercased and cut at its first ';', must be exactly application/json
// ("application/json ; charset=utf-8" is refused too).
func checkContentType(r *http.Request) *apiError {
	mt, _, _ := strings.Cut(strings.ToLower(r.Header.Get("Content-Type")), ";")
	if mt != "application/json" {
		return &apiError{Status: http.StatusBadRequest, Type: "Bad Request",
			Message: "Unsupported Media Type: Only 'application/json' is allowed"}
	}
	return nil
}

// parseRequest does what pydantic and vLLM's model validators do: JSON and
// field types, required fields, stream_options. It returns the parsed body
// too, for the model check.
func parseRequest(k kind, body []byte) (*genRequest, *ojson.Value, *apiError) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		off := 0
		if se, ok := err.(*ojson.SyntaxError); ok {
			off = se.Offset
		}
		return nil, nil, requestValidationError("json_invalid", []any{"body", off}, "JSON decode error", nil)
	}
	if v.Kind != ojson.Object {
		return nil, nil, requestValidationError("model_attributes_type", []any{"body"},
			"Input should be a valid dictionary or object to extract fields from", strp("body"))
	}
	req := &genRequest{kind: k, n: 1}
	if m := v.Get("model"); !m.IsNull() && m.Kind != ojson.String {
		return nil, nil, fieldError("model", "string_type", "Input should be a valid string")
	}
	var e *apiError
	var b *bool
	if b, e = optBool(v, "stream"); e != nil {
		return nil, nil, e
	}
	req.stream = b != nil && *b
	if req.maxTokens, e = optInt(v, "max_tokens"); e != nil {
		return nil, nil, e
	}
	if n, e := optInt(v, "n"); e != nil {
		return nil, nil, e
	} else if n != nil {
		req.n = *n
	}
	if req.temperature, e = optFloat(v, "temperature"); e != nil {
		return nil, nil, e
	}
	if mt, e := optInt(v, "min_tokens"); e != nil {
		return nil, nil, e
	} else if mt != nil {
		req.minTokens = *mt
	}
	if b, e = optBool(v, "ignore_eos"); e != nil {
		return nil, nil, e
	}
	req.ignoreEOS = b != nil && *b

	switch k {
	case kindChat:
		if req.maxCompletion, e = optInt(v, "max_completion_tokens"); e != nil {
			return nil, nil, e
		}
		if e := checkChatMessages(v.Get("messages")); e != nil {
			return nil, nil, e
		}
		req.prompts = []prompt{{text: true}}
	case kindCompletion:
		if !v.Has("max_tokens") {
			d := 16 // CompletionRequest.max_tokens default
			req.maxTokens = &d
		}
		ps, e := parsePrompts(v.Get("prompt"), body)
		if e != nil {
			return nil, nil, e
		}
		req.prompts = ps
	}

	if e := parseStreamOptions(req, v.Get("stream_options")); e != nil {
		return nil, nil, e
	}
	return req, v, nil
}

// checkChatMessages is ChatCompletionRequest's messages field: a list of
// objects with a string role (the chat template judges the rest).
func checkChatMessages(msgs *ojson.Value) *apiError {
	if msgs == nil {
		return fieldError("messages", "missing", "Field required")
	}
	if msgs.Kind != ojson.Array {
		return fieldError("messages", "list_type", "Input should be a valid list")
	}
	for i, m := range msgs.Items {
		if m.Kind != ojson.Object {
			return requestValidationError("dict_type", []any{"body", "messages", i},
				"Input should be a valid dictionary", strp(fmt.Sprintf("body.messages.%d", i)))
		}
		role := m.Get("role")
		if role == nil {
			return requestValidationError("missing", []any{"body", "messages", i, "role"},
				"Field required", strp(fmt.Sprintf("body.messages.%d.role", i)))
		}
		if role.Kind != ojson.String {
			return requestValidationError("string_type", []any{"body", "messages", i, "role"},
				"Input should be a valid string", strp(fmt.Sprintf("body.messages.%d.role", i)))
		}
	}
	return nil
}

// parseStreamOptions reads stream_options. The model validator reads the
// raw dict, so an empty object is falsy and allowed without stream.
func parseStreamOptions(req *genRequest, so *ojson.Value) *apiError {
	if so.IsNull() {
		return nil
	}
	if so.Kind != ojson.Object {
		return fieldError("stream_options", "model_type", "Input should be a valid dictionary or instance of StreamOptions")
	}
	if len(so.Members) > 0 && !req.stream {
		return modelValidatorError("Stream options can only be defined when `stream=True`.", "stream_options")
	}
	inc, e := optBool(so, "include_usage")
	if e != nil {
		return e
	}
	cont, e := optBool(so, "continuous_usage_stats")
	if e != nil {
		return e
	}
	req.includeUsage = inc == nil || *inc // default true once present
	req.continuousUsage = req.includeUsage && cont != nil && *cont
	return nil
}

func parsePrompts(p *ojson.Value, body []byte) ([]prompt, *apiError) {
	bad := fieldError("prompt", "union_type", "Input should be a valid string, a list of strings, a list of integers or a list of lists of integers")
	if p == nil {
		return nil, fieldError("prompt", "missing", "Field required")
	}
	ints := func(a *ojson.Value) bool {
		for _, it := range a.Items {
			if !it.IsInt() {
				return false
			}
		}
		return true
	}
	switch p.Kind {
	case ojson.String:
		return []prompt{{raw: p.Raw(body), text: true}}, nil
	case ojson.Array:
		if len(p.Items) == 0 {
			return nil, validationError("Prompt cannot be empty.", "prompt", "[]")
		}
		if ints(p) {
			return []prompt{{raw: p.Raw(body), ids: true, idsLen: len(p.Items)}}, nil
		}
		var out []prompt
		for _, it := range p.Items {
			switch {
			case it.Kind == ojson.String:
				out = append(out, prompt{raw: it.Raw(body), text: true})
			case it.Kind == ojson.Array && len(it.Items) > 0 && ints(it):
				out = append(out, prompt{raw: it.Raw(body), ids: true, idsLen: len(it.Items)})
			default:
				return nil, bad
			}
		}
		return out, nil
	}
	return nil, bad
}

// countPrompts fills req.promptTokens with the tokenizer.
func countPrompts(req *genRequest, v *ojson.Value, body []byte, tok Tokenizer) *apiError {
	req.promptTokens = make([]int, len(req.prompts))
	if req.wantIDs {
		req.promptIDs = make([][]int, len(req.prompts))
	}
	for i, p := range req.prompts {
		var n int
		var err error
		pbody := body
		if req.kind == kindCompletion && !p.ids && (len(req.prompts) != 1 || v.Get("prompt").Kind != ojson.String) {
			pbody = singlePromptBody(v, body, p.raw)
		}
		var ids []int
		var have bool
		if req.wantIDs {
			ids, have, err = promptIDs(req, p, pbody, tok)
		}
		switch {
		case have:
			n = len(ids)
			req.promptIDs[i] = ids
		case req.kind == kindChat:
			n, err = tok.ChatPromptTokens(body)
		case p.ids:
			n = p.idsLen
		default:
			n, err = tok.CompletionPromptTokens(pbody)
		}
		if err != nil {
			// vLLM turns tokenizer / template failures into 400s.
			return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()}
		}
		req.promptTokens[i] = n
	}
	return nil
}

// singlePromptBody builds {"model":…,"prompt":<raw>,"add_special_tokens":…}
// for one prompt of a batch.
func singlePromptBody(v *ojson.Value, body, raw []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{`)
	if m := v.Get("model"); m != nil {
		b.WriteString(`"model":`)
		b.Write(m.Raw(body))
		b.WriteString(`,`)
	}
	if a := v.Get("add_special_tokens"); a != nil {
		b.WriteString(`"add_special_tokens":`)
		b.Write(a.Raw(body))
		b.WriteString(`,`)
	}
	b.WriteString(`"prompt":`)
	b.Write(raw)
	b.WriteString(`}`)
	return b.Bytes()
}

// contextError is TokenizeParams._token_len_check's message (vLLM after PR
// #36197). Text prompts are tokenized with truncation at max_input+1, so
// vLLM reports the capped count and says "at least".
func contextError(maxModelLen, maxOutput, promptTokens int, truncated bool) *apiError {
	p, atLeast := promptTokens, ""
	if truncated {
		if limit := maxModelLen - maxOutput + 1; p > limit {
			p = limit
		}
		atLeast = "at least "
	}
	msg := fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d output tokens "+
		"and your prompt contains %s%d input tokens, for a total of %s%d tokens. "+
		"Please reduce the length of the input prompt or the number of requested output tokens.",
		maxModelLen, maxOutput, atLeast, p, atLeast, p+maxOutput)
	return validationError(msg, "input_tokens", p)
}

// plan is a validated request's generation plan, one entry per choice.
type plan struct {
	budget int // max tokens for each choice of the prompt
	target int
	finish string
}

// validateBudget runs vLLM's renderer and sampling-parameter checks in
// vLLM's order and returns the per-prompt plans.
func validateBudget(req *genRequest, cfg Config) ([]plan, *apiError) {
	L := cfg.MaxModelLen
	// build_tok_params: max_completion_tokens or max_tokens or 0 (Python
	// truthiness: 0 falls through).
	checkM, param := 0, "max_tokens"
	switch {
	case req.maxCompletion != nil && *req.maxCompletion != 0:
		checkM, param = *req.maxCompletion, "max_completion_tokens"
	case req.maxTokens != nil && *req.maxTokens != 0:
		checkM = *req.maxTokens
	}
	if checkM > L {
		return nil, validationError(fmt.Sprintf("%s=%d cannot be greater than max_model_len=max_total_tokens=%d. "+
			"Please request fewer output tokens.", param, checkM, L), param, checkM)
	}
	for i, p := range req.prompts {
		if P := req.promptTokens[i]; P > L-checkM {
			return nil, contextError(L, checkM, P, !p.ids)
		}
	}
	// SamplingParams._verify_args.
	if req.n < 1 {
		return nil, validationError(fmt.Sprintf("n must be at least 1, got %d.", req.n), "n", req.n)
	}
	if req.temperature != nil {
		t := *req.temperature
		if t < 0 {
			return nil, validationError(fmt.Sprintf("temperature must be non-negative, got %s.", pyFloat(t)), "temperature", pyFloat(t))
		}
		if t == 0 && req.n > 1 {
			return nil, validationError(fmt.Sprintf("n must be 1 when using greedy sampling, got %d.", req.n), "n", req.n)
		}
	}
	// Chat: max_completion_tokens if not None, else max_tokens.
	requested := req.maxTokens
	if req.maxCompletion != nil {
		requested = req.maxCompletion
	}
	plans := make([]plan, len(req.prompts))
	for i := range req.prompts {
		budget := L - req.promptTokens[i] // get_max_tokens
		if requested != nil {
			budget = min(budget, *requested)
		}
		if budget < 1 {
			return nil, validationError(fmt.Sprintf("max_tokens must be at least 1, got %d.", budget), "max_tokens", budget)
		}
		if req.minTokens < 0 {
			return nil, validationError(fmt.Sprintf("min_tokens must be greater than or equal to 0, got %d.", req.minTokens), "min_tokens", req.minTokens)
		}
		if req.minTokens > budget {
			return nil, validationError(fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", budget, req.minTokens), "min_tokens", req.minTokens)
		}
		natural := max(cfg.OutputTokens, req.minTokens)
		pl := plan{budget: budget, target: natural, finish: "stop"}
		if req.ignoreEOS || natural > budget {
			pl.target, pl.finish = budget, "length"
		}
		plans[i] = pl
	}
	return plans, nil
}

// pyFloat formats like Python's repr of a float: the shortest digits that
// read back the same, positional with ".0" for integral values, scientific
// ("1e-05", "1e+16") when the decimal exponent is below -4 or at least 16.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX, shortest digits
	exp, _ := strconv.Atoi(sci[strings.LastIndexByte(sci, 'e')+1:])
	if f != 0 && (exp < -4 || exp >= 16) {
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// checkModel is vLLM's _check_model: an absent or empty name means the
// served model; a loaded LoRA adapter's name is served too.
func checkModel(v *ojson.Value, cfg Config) *apiError {
	m := v.Get("model")
	if m.IsNull() || m.Str == "" || m.Str == cfg.Model {
		return nil
	}
	if _, ok := cfg.loraNamed(m.Str); ok {
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Type: "NotFoundError",
		Message: fmt.Sprintf("The model `%s` does not exist.", m.Str), Param: strp("model")}
}
