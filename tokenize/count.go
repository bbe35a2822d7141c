package tokenize

import (
	"errors"
	"fmt"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// Count is the prompt-token count of a request.
type Count struct {
	// Tokens is the number of prompt tokens vLLM will see: for a batch of
	// prompts (a /v1/completions list), the sum over them, as vLLM's
	// usage.prompt_tokens. When Truncated it is a lower bound; when !Exact
	// it is 0 or a best effort that must not be used to reject.
	Tokens int
	// Each holds each prompt's count, in order, for a batch of more than
	// one prompt (nil otherwise). vLLM runs each as its own request,
	// checked against the context on its own. When Truncated, counting
	// stopped at the last entry, a lower bound greater than the limit.
	Each []int
	// Exact is false when this package cannot reproduce vLLM's count
	// (multimodal parts, a template feature reproduced only approximately,
	// no chat template, ...); Reason says why. The gateway then forwards
	// and lets vLLM decide.
	Exact  bool
	Reason string
	// Truncated: counting stopped as soon as one prompt's count exceeded
	// the limit.
	Truncated bool
	// Rendered is the prompt text a chat count rendered through the chat
	// template ("" for completions, and when not Exact): a caller that
	// needs the text again (prefix affinity) reads it here rather than
	// render the template a second time.
	Rendered string
	// Keys, from CountCache.CountChatKeys, are the prompt's block keys
	// (nil otherwise, and when the count is not exact or over its limit).
	Keys *PromptKeys
}

// InputError is a request vLLM rejects before rendering: Param is the
// OpenAI-style parameter path (messages[2].content[0].type).
type InputError struct {
	Param string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

// NotExactError is returned by RenderChat and the Tokenize functions when
// the request cannot be reproduced exactly; CountChat and CountCompletion
// report the same condition as Count{Exact: false, Reason}.
type NotExactError struct{ Reason string }

func (e *NotExactError) Error() string { return "cannot count exactly: " + e.Reason }

func inputErr(param, format string, args ...any) error {
	return &InputError{Param: param, Msg: fmt.Sprintf(format, args...)}
}

// CountChat counts the prompt tokens of a /v1/chat/completions (or chat
// /tokenize) request body as vLLM does: vLLM's message normalization, the
// model's chat template rendered as transformers renders it, and the text
// tokenized without special tokens (unless the body sets
// add_special_tokens). limit > 0 lets counting stop once the count exceeds
// limit (Count.Truncated).
//
// The error is a *TemplateError when the template raised (its own
// message), or an *InputError for a request vLLM rejects while preparing
// it. Requests that cannot be counted exactly return Exact=false and a
// Reason with a nil error.
func (m *Model) CountChat(body *ojson.Value, limit int) (c Count, err error) {
	defer countPanicked(&c, &err)
	text, addSpecial, err := m.renderChat(body)
	if err != nil {
		return notExact(err)
	}
	n, exact := m.enc.Count(text, addSpecial, limit)
	return Count{Tokens: n, Exact: true, Truncated: !exact, Rendered: text}, nil
}

// countPanicked, deferred by a chat count (Model.CountChat and the count
// cache's), turns a panic while rendering into an uncounted Count (the
// request is forwarded, not failed).
func countPanicked(c *Count, err *error) {
	if r := recover(); r != nil {
		*c, *err = Count{Reason: fmt.Sprintf("internal error while rendering: %v", r)}, nil
	}
}

// notExact turns a NotExactError into a Count; other errors pass through.
func notExact(err error) (Count, error) {
	var ne *NotExactError
	if errors.As(err, &ne) {
		return Count{Reason: ne.Reason}, nil
	}
	return Count{}, err
}

// RenderChat returns the prompt text vLLM renders for a chat request.
func (m *Model) RenderChat(body *ojson.Value) (s string, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = "", &NotExactError{fmt.Sprintf("internal error while rendering: %v", r)}
		}
	}()
	s, _, err = m.renderChat(body)
	return s, err
}

// TokenizeChat returns the prompt token ids of a chat request.
func (m *Model) TokenizeChat(body *ojson.Value) ([]int, error) {
	text, addSpecial, err := m.renderChat(body)
	if err != nil {
		return nil, err
	}
	return m.enc.Encode(text, addSpecial), nil
}

// TokenizeChatWithin is TokenizeChat for a prompt of at most limit tokens
// (limit > 0), as vLLM's /tokenize holds a prompt to max_model_len: the
// rendered text is counted first, with counting's early stop and byte
// bounds (a 7 MB pre-token over the limit costs milliseconds), and
// tokenized only when it fits. A prompt over the limit returns nil ids and
// its Count, Tokens > limit (a lower bound when Truncated). The template
// is rendered once.
func (m *Model) TokenizeChatWithin(body *ojson.Value, limit int) ([]int, Count, error) {
	text, addSpecial, err := m.renderChat(body)
	if err != nil {
		return nil, Count{}, err
	}
	return m.encodeWithin(text, addSpecial, limit)
}

// TokenizeCompletionWithin is TokenizeCompletion held to limit tokens, as
// TokenizeChatWithin.
func (m *Model) TokenizeCompletionWithin(body *ojson.Value, limit int) ([]int, Count, error) {
	prompts, addSpecial, err := completionPrompts(body)
	if err != nil {
		return nil, Count{}, err
	}
	if len(prompts) != 1 {
		return nil, Count{}, inputErr("prompt", "expected a single prompt, got %d", len(prompts))
	}
	if ids := prompts[0].ids; ids != nil {
		if limit > 0 && len(ids) > limit {
			return nil, Count{Tokens: len(ids), Exact: true}, nil
		}
		return ids, Count{Tokens: len(ids), Exact: true}, nil
	}
	return m.encodeWithin(prompts[0].text, addSpecial, limit)
}

// appendEncoder is an Encoder that appends to a given slice (Tokenizer).
type appendEncoder interface {
	AppendEncode(dst []int, text string, addSpecial bool) []int
}

func (m *Model) encodeWithin(text string, addSpecial bool, limit int) ([]int, Count, error) {
	n, exact := m.enc.Count(text, addSpecial, limit)
	c := Count{Tokens: n, Exact: true, Truncated: !exact}
	if !exact || limit > 0 && n > limit {
		c.Truncated = true
		return nil, c, nil
	}
	if ae, ok := m.enc.(appendEncoder); ok {
		return ae.AppendEncode(make([]int, 0, n), text, addSpecial), c, nil
	}
	return m.enc.Encode(text, addSpecial), c, nil
}

// CountCompletion counts the prompt tokens of a /v1/completions request.
// prompt may be a string, a list of strings, a list of token ids or a list
// of such lists. Text is tokenized with special tokens (BOS) unless the
// body sets add_special_tokens=false, as vLLM does; token ids count as
// given. vLLM runs each prompt of a list as a separate request, each
// checked against the context on its own: Count.Each has each prompt's
// count and Count.Tokens their sum; limit applies to each prompt, and
// counting stops at the first one over it.
func (m *Model) CountCompletion(body *ojson.Value, limit int) (Count, error) {
	prompts, addSpecial, err := completionPrompts(body)
	if err != nil {
		return notExact(err)
	}
	c := Count{Exact: true}
	if len(prompts) > 1 {
		c.Each = make([]int, 0, len(prompts))
	}
	for _, p := range prompts {
		var n int
		exact := true
		if p.ids != nil {
			n = len(p.ids)
			exact = limit <= 0 || n <= limit
		} else {
			n, exact = m.enc.Count(p.text, addSpecial, limit)
		}
		c.Tokens += n
		if c.Each != nil {
			c.Each = append(c.Each, n)
		}
		if !exact {
			c.Truncated = true
			break // this prompt alone is over the limit
		}
	}
	return c, nil
}

// TokenizeCompletion returns the token ids of a completions request with a
// single prompt (a string or a list of ids), as /tokenize does.
func (m *Model) TokenizeCompletion(body *ojson.Value) ([]int, error) {
	prompts, addSpecial, err := completionPrompts(body)
	if err != nil {
		return nil, err
	}
	if len(prompts) != 1 {
		return nil, inputErr("prompt", "expected a single prompt, got %d", len(prompts))
	}
	if prompts[0].ids != nil {
		return prompts[0].ids, nil
	}
	return m.enc.Encode(prompts[0].text, addSpecial), nil
}

type prompt struct {
	text string
	ids  []int
}

func completionPrompts(body *ojson.Value) ([]prompt, bool, error) {
	if body == nil || body.Kind != ojson.Object {
		return nil, false, inputErr("", "the request body must be a JSON object")
	}
	addSpecial := true
	if v := body.Get("add_special_tokens"); !v.IsNull() {
		if v.Kind != ojson.Bool {
			return nil, false, inputErr("add_special_tokens", "must be a boolean")
		}
		addSpecial = v.Bool
	}
	if v := body.Get("prompt_embeds"); !v.IsNull() {
		return nil, false, &NotExactError{"prompt_embeds"}
	}
	p := body.Get("prompt")
	switch {
	case p.IsNull():
		return nil, false, inputErr("prompt", "a prompt is required")
	case p.Kind == ojson.String:
		return []prompt{{text: p.Str}}, addSpecial, nil
	case p.Kind != ojson.Array:
		return nil, false, inputErr("prompt", "must be a string, an array of strings, an array of token ids or an array of token-id arrays")
	case len(p.Items) == 0:
		return nil, false, inputErr("prompt", "must not be empty")
	}
	first := p.Items[0]
	switch first.Kind {
	case ojson.String:
		out := make([]prompt, len(p.Items))
		for i, it := range p.Items {
			if it.Kind != ojson.String {
				return nil, false, inputErr(fmt.Sprintf("prompt[%d]", i), "must be a string like the other elements")
			}
			out[i].text = it.Str
		}
		return out, addSpecial, nil
	case ojson.Number:
		ids, err := tokenIDs(p, "prompt")
		if err != nil {
			return nil, false, err
		}
		return []prompt{{ids: ids}}, addSpecial, nil
	case ojson.Array:
		out := make([]prompt, len(p.Items))
		for i, it := range p.Items {
			param := fmt.Sprintf("prompt[%d]", i)
			if it.Kind != ojson.Array || len(it.Items) == 0 {
				return nil, false, inputErr(param, "must be a non-empty array of token ids")
			}
			ids, err := tokenIDs(it, param)
			if err != nil {
				return nil, false, err
			}
			out[i].ids = ids
		}
		return out, addSpecial, nil
	}
	return nil, false, inputErr("prompt[0]", "must be a string, a token id or an array of token ids")
}

func tokenIDs(a *ojson.Value, param string) ([]int, error) {
	ids := make([]int, len(a.Items))
	for i, it := range a.Items {
		n, ok := it.Int()
		if !ok || n < 0 || n > 1<<31 {
			return nil, inputErr(fmt.Sprintf("%s[%d]", param, i), "must be a non-negative integer token id")
		}
		ids[i] = int(n)
	}
	return ids, nil
}

// renderChat prepares and renders a chat request; it returns the text and
// whether special tokens are added when tokenizing it.
func (m *Model) renderChat(body *ojson.Value) (string, bool, error) {
	m.renders.Add(1)
	req, err := m.prepareChat(body)
	if err != nil {
		return "", false, err
	}
	out, err := req.tmpl.renderChat(&req.vars, m.now)
	cont, final, addSpecial := req.continueFinal, req.final, req.addSpecial
	m.release(req)
	if err != nil {
		var te *TemplateError
		switch {
		case errors.As(err, &te):
			return "", false, te
		case isUnsupported(err):
			return "", false, &NotExactError{err.Error()}
		}
		return "", false, &NotExactError{"the template evaluator failed (Python may render it): " + err.Error()}
	}
	if cont {
		if out, err = continueFinalMessage(out, final); err != nil {
			return "", false, err
		}
	}
	return out, addSpecial, nil
}

// continueFinalMessage cuts the render after the final message, as
// transformers' render_jinja_template does with continue_final_message.
func continueFinalMessage(rendered string, final finalContent) (string, error) {
	msg := final.text
	if !final.ok {
		return "", &TemplateError{"continue_final_message is set but we could not find any text to continue in the final message!"}
	}
	stripped := strings.TrimFunc(msg, pyIsSpace)
	if !strings.Contains(rendered, stripped) {
		return "", &TemplateError{"continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible."}
	}
	loc := strings.LastIndex(rendered, stripped)
	lstripped := strings.TrimLeftFunc(msg, pyIsSpace)
	if end := loc + len(lstripped); end <= len(rendered) && rendered[loc:end] == msg {
		return rendered[:end], nil
	}
	return rendered[:loc+len(stripped)], nil
}
