package admission

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// Counter counts prompt tokens the way vLLM will. *tokenize.Model
// implements it.
type Counter interface {
	CountChat(body *ojson.Value, limit int) (tokenize.Count, error)
	CountCompletion(body *ojson.Value, limit int) (tokenize.Count, error)
}

// Model is what the door needs to know about a served model.
type Model struct {
	Name string
	// Counter is nil when the model has no tokenizer: requests are then
	// forwarded uncounted.
	Counter Counter
	// MaxModelLen is the context length; 0 when not known yet.
	MaxModelLen int
	// Vocab is the number of token ids the model takes
	// (tokenize.Model.VocabSize); 0 when not known: ids are then held to
	// non-negative 32-bit integers only.
	Vocab int
	// Clamp lowers an over-long max_tokens to what fits instead of
	// rejecting (on_overflow: clamp).
	Clamp bool
	// Ref is the catalog's own handle for the model (its runtime, say).
	// The door passes it back unchanged in the Decision and the
	// Rejection, so that the caller holds its state for the model
	// without looking the name up a second time, nor in a table.
	Ref Runtime
	// Only, when non-nil, names the model's backends (pool slots) that
	// may serve the name looked up: a LoRA adapter is a name of its base
	// model served by the backends that have it loaded. Name is then the
	// adapter's, and everything else (counter, limits) the base model's.
	// The door passes it back in the Decision; nil: every backend.
	Only []string
}

// Catalog is the door's view of the configured models.
type Catalog interface {
	Lookup(name string) (Model, bool)
	Names() []string
}

// Door checks requests before any GPU work. It is stateless apart from its
// catalog and safe for concurrent use.
type Door struct {
	models Catalog
}

// NewDoor returns a door over the catalog.
func NewDoor(models Catalog) *Door { return &Door{models: models} }

// Check runs the door's pipeline on one request body, top to bottom: the
// body, the model, the messages or prompt, the fields the gateway relies
// on, the chat template, the context. Which steps run after the first is
// the endpoint's spec (EndpointSpec.check). It returns either a Decision
// (naming the endpoint it was checked as) or the first Rejection.
func (d *Door) Check(ep Endpoint, body []byte) (Decision, *Rejection) {
	// 1. A strict JSON object.
	req, rej := parseBody(body)
	if rej != nil {
		return Decision{}, rej
	}
	if rej := checkKeyCase(req, ""); rej != nil {
		return Decision{}, rej
	}
	dec, rej := ep.check(d, ep, req, body)
	if rej == nil && dec.Endpoint == nil {
		dec.Endpoint = ep
	}
	return dec, rej
}

// modelStep is a check's steps after the model (3 to 6).
type modelStep func(ep Endpoint, m Model, req *ojson.Value, body []byte) (Decision, *Rejection)

// modelled is an endpoint's check that finds the model first (step 2),
// then runs steps; their rejection names the model.
func modelled(steps modelStep) func(d *Door, ep Endpoint, req *ojson.Value, body []byte) (Decision, *Rejection) {
	return func(d *Door, ep Endpoint, req *ojson.Value, body []byte) (Decision, *Rejection) {
		m, rej := d.model(req)
		if rej != nil {
			return Decision{}, rej
		}
		dec, rej := steps(ep, m, req, body)
		if rej != nil {
			rej.Model, rej.Ref = m.Name, m.Ref
		}
		return dec, rej
	}
}

// checkGenerated runs steps 3 to 6 for chat and completions.
func checkGenerated(ep Endpoint, m Model, req *ojson.Value, body []byte) (Decision, *Rejection) {
	// 3. The shape of the input.
	var rej *Rejection
	if ep.prompt {
		rej = checkPrompt(req, m.Vocab)
	} else {
		rej = checkMessages(req)
	}
	if rej != nil {
		return Decision{}, rej
	}
	// 4. The fields the gateway relies on.
	f, rej := readFields(req, ep)
	if rej != nil {
		return Decision{}, rej
	}
	dec := Decision{Model: m.Name, Ref: m.Ref, Only: m.Only, Stream: f.stream, Body: body, MaxTokens: f.maxTokens, N: f.n, Request: req,
		Prompts: promptCount(ep, req)}
	// 5. Render and count; a template that raises is the client's error.
	if m.Counter == nil {
		dec.Uncounted = NoTokenizer
		return uncountedFit(dec, m, ep)
	}
	// Count only as far as the decision needs: a 10 MB prompt against a
	// 4k context stops just past 4k tokens. Counting up to the whole
	// context (not just L - max_tokens) costs little more and makes the
	// reported prompt_tokens exact whenever the prompt alone fits.
	c, rej := count(ep, m, req, m.MaxModelLen)
	if rej != nil {
		return Decision{}, rej
	}
	if !c.Exact {
		dec.Uncounted, dec.Detail = NotExact, c.Reason
		return uncountedFit(dec, m, ep)
	}
	dec.PromptTokens, dec.Rendered, dec.PromptKeys = c.Tokens, c.Rendered, c.Keys
	// 6. The context.
	if m.MaxModelLen <= 0 {
		dec.Uncounted = NoContextLimit
		return dec, nil
	}
	return fit(dec, m, f, c, req, ep)
}

func parseBody(body []byte) (*ojson.Value, *Rejection) {
	req, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		var se *ojson.SyntaxError
		param := ""
		if errors.As(err, &se) {
			param = se.Path
			if len(param) > 128 {
				param = param[:128] + "..."
			}
		}
		return nil, &Rejection{Reason: InvalidJSON, Status: 400, Code: codeInvalidJSON, Param: param,
			Message: "The request body is not valid JSON: " + err.Error()}
	}
	if req.Kind != ojson.Object {
		return nil, &Rejection{Reason: InvalidJSON, Status: 400, Code: codeInvalidJSON,
			Message: fmt.Sprintf("The request body must be a JSON object, got %s.", req.Kind)}
	}
	return req, nil
}

// Keys whose spelling decides what vLLM does. Go's encoding/json would read
// "MODEL" as "model" where vLLM's parser does not; a body carrying a case
// variant could pass one model's checks and run as another, so it is
// refused outright.
var (
	requestKeys = []string{"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n", "stream",
		"stream_options", "tools", "tool_choice", "chat_template", "chat_template_kwargs", "add_generation_prompt",
		"continue_final_message", "add_special_tokens", "documents", "echo", "suffix", "reasoning_effort"}
	messageKeys = []string{"role", "content", "name", "tool_calls", "tool_call_id", "function_call",
		"reasoning_content", "reasoning"}
)

func checkKeyCase(obj *ojson.Value, path string) *Rejection {
	known := requestKeys
	if path != "" {
		known = messageKeys
	}
	for _, mem := range obj.Members {
		for _, k := range known {
			if mem.Key != k && strings.EqualFold(mem.Key, k) {
				return &Rejection{Reason: InvalidJSON, Status: 400, Code: codeInvalidJSON, Param: join(path, mem.Key),
					Message: fmt.Sprintf("Unknown key %q: keys are case-sensitive (did you mean %q?).", mem.Key, k)}
			}
		}
	}
	return nil
}

func (d *Door) model(req *ojson.Value) (Model, *Rejection) {
	mv := req.Get("model")
	if mv == nil || mv.IsNull() {
		return Model{}, &Rejection{Reason: MissingModel, Status: 400, Code: codeMissingParam, Param: "model",
			Message: "You must provide a model parameter."}
	}
	if mv.Kind != ojson.String {
		return Model{}, &Rejection{Reason: MissingModel, Status: 400, Code: codeInvalidType, Param: "model",
			Message: fmt.Sprintf("model must be a string, got %s.", mv.Kind)}
	}
	m, ok := d.models.Lookup(mv.Str)
	if !ok {
		return Model{}, UnknownModelRejection(mv.Str, d.models.Names())
	}
	return m, nil
}

// UnknownModelRejection is the 404 of a model name the catalog does not
// know, listing the names it does (names). Every lookup of a model by
// name answers a miss with it, so that a model hidden from a client (an
// API key's allow-list) and one that does not exist read the same.
func UnknownModelRejection(name string, names []string) *Rejection {
	return &Rejection{Reason: UnknownModel, Status: 404, Code: codeModelNotFound, Param: "model",
		Message: fmt.Sprintf("The model %q does not exist. Available models: %s.", name, strings.Join(names, ", "))}
}

type fields struct {
	maxTokens int // 0: absent
	n         int
	stream    bool
}

func readFields(req *ojson.Value, ep Endpoint) (fields, *Rejection) {
	f := fields{n: 1}
	if ep.defaultMaxTokens > 0 && !req.Has("max_tokens") {
		f.maxTokens = ep.defaultMaxTokens
	}
	for _, key := range []string{"max_tokens", "max_completion_tokens"} {
		v, rej := positiveInt(req, key)
		if rej != nil {
			return f, rej
		}
		if v > 0 {
			f.maxTokens = v // max_completion_tokens comes second and wins
		}
	}
	n, rej := positiveInt(req, "n")
	if rej != nil {
		return f, rej
	}
	if n > 0 {
		f.n = n
	}
	if v := req.Get("stream"); v != nil && !v.IsNull() {
		if v.Kind != ojson.Bool {
			return f, invalidParam("stream", codeInvalidType, "stream must be a boolean, got %s.", v.Kind)
		}
		f.stream = v.Bool
	}
	return f, nil
}

// maxCount bounds max_tokens, max_completion_tokens and n: more than any
// context holds or any backend runs, so vLLM refuses a larger value
// whatever the prompt, and the door's arithmetic stays far from overflow.
const maxCount = 1 << 31

// positiveInt reads an optional integer field that must be at least 1 and
// at most maxCount. A value out of range is named as the client sent it.
func positiveInt(req *ojson.Value, key string) (int, *Rejection) {
	v := req.Get(key)
	if v == nil || v.IsNull() {
		return 0, nil
	}
	if !v.Integral() { // pydantic's lax int: 16.0 is 16
		return 0, invalidParam(key, codeInvalidType, "%s must be an integer, got %s.", key, describe(v))
	}
	n, ok := v.LaxInt()
	if strings.HasPrefix(v.Str, "-") || (ok && n < 1) {
		return 0, invalidParam(key, codeInvalidValue, "%s must be at least 1, got %s.", key, v.Str)
	}
	if !ok || n > maxCount { // beyond int64, or beyond any context
		return 0, invalidParam(key, codeInvalidValue, "%s is out of range: it must be at most %d, got %s.", key, maxCount, v.Str)
	}
	return int(n), nil
}

func invalidParam(param, code, format string, args ...any) *Rejection {
	return &Rejection{Reason: InvalidParam, Status: 400, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

func describe(v *ojson.Value) string {
	if v.Kind == ojson.Number {
		return v.Str
	}
	return v.Kind.String()
}

func count(ep Endpoint, m Model, req *ojson.Value, limit int) (tokenize.Count, *Rejection) {
	var c tokenize.Count
	var err error
	if ep.prompt {
		c, err = m.Counter.CountCompletion(req, limit)
	} else {
		c, err = m.Counter.CountChat(req, limit)
	}
	if err == nil {
		return c, nil
	}
	if rej := CountRejection(ep, err); rej != nil {
		return c, rej
	}
	// Anything else is this package failing, not the client: let vLLM decide.
	return tokenize.Count{Reason: "counting failed: " + err.Error()}, nil
}

// CountRejection maps a tokenizer's error to the door's rejection: a chat
// template that raised (in the template's own words) or an input vLLM
// refuses before rendering is the client's error; any other error is not,
// and CountRejection returns nil. The door and the gateway's POST
// /tokenize share it, so that the same input is refused alike by both.
func CountRejection(ep Endpoint, err error) *Rejection {
	var te *tokenize.TemplateError
	var ie *tokenize.InputError
	switch {
	case errors.As(err, &te):
		return &Rejection{Reason: TemplateError, Status: 400, Code: codeTemplateInput, Param: "messages",
			Message: te.Message}
	case errors.As(err, &ie):
		return &Rejection{Reason: ep.inputReason(), Status: 400, Code: codeInvalidValue, Param: ie.Param, Message: ie.Msg}
	}
	return nil
}

// OverContext is the refusal of a prompt of c.Tokens tokens (a lower
// bound when c.Truncated) over maxModelLen with no output requested: what
// vLLM's /tokenize answers a prompt longer than the context (it holds the
// prompt to max_model_len with no output budget), in the door's words.
func OverContext(ep Endpoint, c tokenize.Count, maxModelLen int) *Rejection {
	param := ep.inputParam()
	info := &ContextInfo{PromptTokens: c.Tokens, PromptExact: !c.Truncated, MaxModelLen: maxModelLen}
	return &Rejection{Reason: ContextLength, Status: 400, Code: codeContextLength, Param: param,
		Message: contextMessage(info, ep), Context: info}
}

// uncountedFit is the context rule for a prompt the door cannot count: a
// prompt vLLM accepts is at least one token (it refuses an empty one), so
// max_tokens >= max_model_len can never fit, whatever the prompt. The
// refusal reports that lower bound, 1, as not exact. Anything else is
// forwarded for vLLM to decide; no clamp without a count.
func uncountedFit(dec Decision, m Model, ep Endpoint) (Decision, *Rejection) {
	l, mt := m.MaxModelLen, dec.MaxTokens
	if l <= 0 || mt < l {
		return dec, nil
	}
	param := ep.inputParam()
	info := &ContextInfo{PromptTokens: 1, PromptExact: false, MaxTokens: mt, MaxModelLen: l}
	if dec.Prompts > 1 {
		info.Batch = dec.Prompts
	}
	return Decision{}, &Rejection{Reason: ContextLength, Status: 400, Code: codeContextLength, Param: param,
		Message: contextMessage(info, ep), Context: info}
}

// promptCount is the number of prompts vLLM runs for the request: a
// completions prompt that is a list of strings or of token-id lists is a
// batch (checkPrompt has checked the shape).
func promptCount(ep Endpoint, req *ojson.Value) int {
	if ep.prompt {
		if p := req.Get("prompt"); p != nil && p.Kind == ojson.Array && len(p.Items) > 0 && p.Items[0].Kind != ojson.Number {
			return len(p.Items)
		}
	}
	return 1
}

// fit applies the context rule to each prompt (a batch's prompts are
// checked on their own, as vLLM runs them): P + M > L, or P >= L without
// M, is rejected, or clamped when the model says so and every prompt
// alone fits.
func fit(dec Decision, m Model, f fields, c tokenize.Count, req *ojson.Value, ep Endpoint) (Decision, *Rejection) {
	l, mt := m.MaxModelLen, f.maxTokens
	prompts := c.Each
	if prompts == nil {
		prompts = []int{c.Tokens}
	}
	bad, largest := -1, 0
	for i, p := range prompts {
		largest = max(largest, p)
		if bad < 0 && ((mt > 0 && p+mt > l) || (mt == 0 && p >= l)) {
			bad = i
		}
	}
	if c.Truncated && bad < 0 {
		bad = len(prompts) - 1 // over the limit itself
	}
	if bad < 0 {
		return dec, nil
	}
	if m.Clamp && !c.Truncated && mt > 0 && largest < l {
		body, err := clampMaxTokens(dec.Body, req, l-largest)
		if err == nil {
			dec.Body, dec.ClampedFrom, dec.MaxTokens = body, mt, l-largest
			return dec, nil
		}
	}
	param := ep.inputParam()
	exact := !c.Truncated || bad < len(prompts)-1
	info := &ContextInfo{PromptTokens: prompts[bad], PromptExact: exact, MaxTokens: mt, MaxModelLen: l}
	if c.Each != nil {
		info.Batch, info.Index = dec.Prompts, bad
	}
	return Decision{}, &Rejection{Reason: ContextLength, Status: 400, Code: codeContextLength, Param: param,
		Message: contextMessage(info, ep), Context: info}
}

// contextMessage is OpenAI's wording, which clients and routers match on
// "maximum context length". A lower-bound count says so.
func contextMessage(c *ContextInfo, ep Endpoint) string {
	what := ep.inputParam()
	in := "the " + what
	if c.Batch > 0 {
		in = fmt.Sprintf("prompt[%d] of the batch of %d", c.Index, c.Batch)
	}
	p := strconv.Itoa(c.PromptTokens)
	if !c.PromptExact {
		p = "at least " + p
	}
	if c.MaxTokens == 0 {
		your := "your " + what
		if c.Batch > 0 {
			your = in
		}
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, %s resulted in %s tokens. Please reduce the length of the %s.",
			c.MaxModelLen, your, p, what)
	}
	total := strconv.Itoa(c.PromptTokens + c.MaxTokens)
	if !c.PromptExact {
		total = "at least " + total
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %s tokens (%s in %s, %d in the completion). Please reduce the length of the %s or completion.",
		c.MaxModelLen, total, p, in, c.MaxTokens, what)
}

// clampMaxTokens rewrites the max_tokens and max_completion_tokens values
// in place in a copy of the body; every other byte stays as sent.
func clampMaxTokens(body []byte, req *ojson.Value, n int) ([]byte, error) {
	type span struct{ start, end int }
	var spans []span
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v := req.Get(k); v != nil && !v.IsNull() {
			spans = append(spans, span{v.Start, v.End})
		}
	}
	if len(spans) == 0 {
		return nil, errors.New("no max_tokens to clamp")
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	out := make([]byte, 0, len(body))
	prev := 0
	for _, s := range spans {
		out = append(out, body[prev:s.start]...)
		out = strconv.AppendInt(out, int64(n), 10)
		prev = s.end
	}
	return append(out, body[prev:]...), nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
