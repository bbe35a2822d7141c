package tokenize

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/maitred-dev/maitred/internal/ojson"
)

// This file turns a chat request into the variables vLLM's renderer hands
// to apply_chat_template (vllm/entrypoints/chat_utils.py and the request's
// build_chat_params), in the same order and with the same types.

type chatRequest struct {
	tmpl          *Template
	vars          map[string]jinja.Value
	addSpecial    bool
	continueFinal bool
	final         finalContent
}

// finalContent is the text transformers looks for with
// continue_final_message.
type finalContent struct {
	text string
	ok   bool
}

// convState converts ojson values to template values and remembers the
// first reason the result would not be exact.
type convState struct{ reason string }

func (s *convState) value(v *ojson.Value) jinja.Value {
	switch v.Kind {
	case ojson.Null:
		return jinja.None()
	case ojson.Bool:
		return jinja.NewBool(v.Bool)
	case ojson.String:
		return jinja.NewString(v.Str)
	case ojson.Number:
		if v.IsInt() {
			if n, ok := v.Int(); ok {
				return jinja.NewInt(n)
			}
			if s.reason == "" {
				s.reason = "an integer beyond 64 bits (Python keeps it exact)"
			}
			return jinja.NewFloat(v.Float())
		}
		return jinja.NewFloat(v.Float())
	case ojson.Array:
		items := make([]jinja.Value, len(v.Items))
		for i, it := range v.Items {
			items[i] = s.value(it)
		}
		return jinja.NewList(items)
	case ojson.Object:
		d := newDict(len(v.Members))
		for _, mb := range v.Members {
			d.AsDict().Set(mb.Key, s.value(mb.Value))
		}
		return d
	}
	return jinja.Undefined()
}

func newDict(n int) jinja.Value {
	d := jinja.NewDict()
	dd := d.AsDict()
	dd.Keys = make([]string, 0, n)
	if n > 8 { // up to 8 entries, NewDict's map never grows
		dd.Data = make(map[string]jinja.Value, n)
	}
	return d
}

func (s *convState) fail(reason string) {
	if s.reason == "" {
		s.reason = reason
	}
}

// apply_chat_template's own parameters: vLLM accepts them in
// chat_template_kwargs even when the template does not reference them.
var chatFnKwargs = map[string]bool{
	"conversation": true, "tools": true, "documents": true, "chat_template": true,
	"add_generation_prompt": true, "continue_final_message": true, "tokenize": true,
	"padding": true, "truncation": true, "max_length": true, "return_tensors": true,
	"return_dict": true, "return_assistant_tokens_mask": true, "tokenizer_kwargs": true,
}

func (m *Model) prepareChat(body *ojson.Value) (*chatRequest, error) {
	if body == nil || body.Kind != ojson.Object {
		return nil, inputErr("", "the request body must be a JSON object")
	}
	st := &convState{}
	req := &chatRequest{}

	boolField := func(name string, def bool) (bool, error) {
		v := body.Get(name)
		if v.IsNull() {
			return def, nil
		}
		if v.Kind != ojson.Bool {
			return false, inputErr(name, "must be a boolean")
		}
		return v.Bool, nil
	}
	addGen, err := boolField("add_generation_prompt", true)
	if err != nil {
		return nil, err
	}
	req.continueFinal, err = boolField("continue_final_message", false)
	if err != nil {
		return nil, err
	}
	if req.continueFinal && addGen {
		return nil, inputErr("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	if req.addSpecial, err = boolField("add_special_tokens", false); err != nil {
		return nil, err
	}
	if v := body.Get("chat_template"); !v.IsNull() {
		return nil, &NotExactError{"the request carries its own chat_template"}
	}

	// Tools, as [tool.model_dump() for tool in request.tools].
	tools := jinja.None()
	if tv := body.Get("tools"); !tv.IsNull() {
		tools, err = dumpTools(tv, st)
		if err != nil {
			return nil, err
		}
	}

	// Template selection (transformers' get_chat_template).
	switch {
	case !tools.IsNone() && m.templates["tool_use"] != nil:
		req.tmpl = m.templates["tool_use"]
	case m.templates["default"] != nil:
		req.tmpl = m.templates["default"]
	case len(m.templates) > 0:
		return nil, &TemplateError{"This model has multiple chat templates with no default specified! Please either pass a chat template or the name of the template you wish to use to the `chat_template` argument. Available template names are " + templateNames(m.templates) + "."}
	default:
		return nil, &NotExactError{"the model has no chat template (vLLM refuses chat requests without one)"}
	}
	format := m.contentFormat
	if format == "" {
		format = req.tmpl.ContentFormat()
	}

	msgs, err := m.conversation(body.Get("messages"), format, st, req)
	if err != nil {
		return nil, err
	}

	// Keyword arguments: defaults, then the request's chat_template_kwargs
	// (filtered as resolve_chat_template_kwargs does), then the top-level
	// fields, which win.
	vars := make(map[string]jinja.Value, len(m.special)+24) // room for Render's own
	for k, v := range m.special {
		vars[k] = v
	}
	kw := map[string]jinja.Value{}
	addKwargs := func(obj *ojson.Value, fromRequest bool) error {
		for _, mb := range obj.Members {
			k := mb.Key
			if fromRequest && (k == "chat_template" || k == "tokenize") {
				return inputErr("chat_template_kwargs", "Found unexpected chat template kwargs from request: {'%s'}", k)
			}
			if k == "chat_template" || k == "tokenize" || !(chatFnKwargs[k] || req.tmpl.References(k)) {
				continue
			}
			switch k {
			case "add_generation_prompt", "continue_final_message":
				continue // the top-level field always overrides it
			case "tools", "documents":
			default:
				if chatFnKwargs[k] || k == "messages" {
					st.fail("chat_template_kwargs key " + strconv.Quote(k))
					continue
				}
			}
			kw[k] = st.value(mb.Value)
		}
		return nil
	}
	if m.defaultKwargs != nil {
		if err := addKwargs(m.defaultKwargs, false); err != nil {
			return nil, err
		}
	}
	if v := body.Get("chat_template_kwargs"); !v.IsNull() {
		if v.Kind != ojson.Object {
			return nil, inputErr("chat_template_kwargs", "must be an object")
		}
		if err := addKwargs(v, true); err != nil {
			return nil, err
		}
	}
	if v := body.Get("documents"); !v.IsNull() {
		if v.Kind != ojson.Array {
			return nil, inputErr("documents", "must be an array of objects")
		}
		kw["documents"] = st.value(v)
	}
	if v := body.Get("reasoning_effort"); !v.IsNull() {
		kw["reasoning_effort"] = st.value(v)
	}
	if !tools.IsNone() {
		kw["tools"] = tools
	}
	if _, ok := kw["tools"]; !ok {
		kw["tools"] = jinja.None()
	}
	if _, ok := kw["documents"]; !ok {
		kw["documents"] = jinja.None()
	}
	for k, v := range kw {
		vars[k] = v
	}
	vars["messages"] = msgs
	vars["add_generation_prompt"] = jinja.NewBool(addGen)
	if st.reason != "" {
		return nil, &NotExactError{st.reason}
	}
	req.vars = vars
	return req, nil
}

func templateNames(ts map[string]*Template) string {
	names := make([]string, 0, len(ts))
	for k := range ts {
		names = append(names, "'"+k+"'")
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// dumpTools is pydantic's model_dump of ChatCompletionToolsParam: type,
// function{name, description, parameters, extra fields...}, extra fields;
// unset optional fields are None.
func dumpTools(tv *ojson.Value, st *convState) (jinja.Value, error) {
	if tv.Kind != ojson.Array {
		return jinja.None(), inputErr("tools", "must be an array")
	}
	items := make([]jinja.Value, 0, len(tv.Items))
	for i, t := range tv.Items {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Kind != ojson.Object {
			return jinja.None(), inputErr(p, "must be an object")
		}
		if ty := t.Get("type"); ty != nil && !(ty.Kind == ojson.String && ty.Str == "function") {
			return jinja.None(), inputErr(p+".type", "must be 'function'")
		}
		fn := t.Get("function")
		if fn == nil || fn.Kind != ojson.Object {
			return jinja.None(), inputErr(p+".function", "is required and must be an object")
		}
		name := fn.Get("name")
		if name == nil || name.Kind != ojson.String {
			return jinja.None(), inputErr(p+".function.name", "is required and must be a string")
		}
		f := newDict(len(fn.Members) + 3)
		fd := f.AsDict()
		fd.Set("name", jinja.NewString(name.Str))
		desc := fn.Get("description")
		switch {
		case desc.IsNull():
			fd.Set("description", jinja.None())
		case desc.Kind == ojson.String:
			fd.Set("description", jinja.NewString(desc.Str))
		default:
			return jinja.None(), inputErr(p+".function.description", "must be a string")
		}
		params := fn.Get("parameters")
		switch {
		case params.IsNull():
			fd.Set("parameters", jinja.None())
		case params.Kind == ojson.Object:
			fd.Set("parameters", st.value(params))
		default:
			return jinja.None(), inputErr(p+".function.parameters", "must be an object")
		}
		for _, mb := range fn.Members {
			switch mb.Key {
			case "name", "description", "parameters":
			default:
				fd.Set(mb.Key, st.value(mb.Value))
			}
		}
		d := newDict(len(t.Members) + 2)
		dd := d.AsDict()
		dd.Set("type", jinja.NewString("function"))
		dd.Set("function", f)
		for _, mb := range t.Members {
			switch mb.Key {
			case "type", "function":
			default:
				dd.Set(mb.Key, st.value(mb.Value))
			}
		}
		items = append(items, d)
	}
	return jinja.NewList(items), nil
}

var mmPartTypes = map[string]bool{
	"image_url": true, "input_image": true, "image_embeds": true, "image_pil": true, "image": true,
	"audio_url": true, "input_audio": true, "audio": true, "audio_embeds": true,
	"video_url": true, "video": true, "file": true,
}

// conversation is vLLM's parse_chat_messages followed by
// _postprocess_messages.
func (m *Model) conversation(mv *ojson.Value, format ContentFormat, st *convState, req *chatRequest) (jinja.Value, error) {
	if mv == nil || mv.Kind != ojson.Array {
		return jinja.None(), inputErr("messages", "must be an array of messages")
	}
	out := make([]jinja.Value, 0, len(mv.Items))
	for i, msg := range mv.Items {
		p := func() string { return fmt.Sprintf("messages[%d]", i) }
		if msg.Kind != ojson.Object {
			return jinja.None(), inputErr(p(), "must be an object")
		}
		rv := msg.Get("role")
		if rv == nil || rv.Kind != ojson.String {
			return jinja.None(), inputErr(p()+".role", "is required and must be a string")
		}
		role := rv.Str

		// Content parts: null is [], a string is one text part.
		var texts []string
		var one [1]string
		cv := msg.Get("content")
		switch {
		case cv.IsNull():
		case cv.Kind == ojson.String:
			one[0] = cv.Str
			texts = one[:]
		case cv.Kind == ojson.Array:
			for j, part := range cv.Items {
				pp := func() string { return fmt.Sprintf("messages[%d].content[%d]", i, j) }
				if part.Kind == ojson.String {
					texts = append(texts, part.Str)
					continue
				}
				if part.Kind != ojson.Object {
					return jinja.None(), inputErr(pp(), "must be an object")
				}
				tv := part.Get("type")
				if tv == nil || tv.Kind != ojson.String {
					return jinja.None(), inputErr(pp()+".type", "is required and must be a string")
				}
				switch {
				case tv.Str == "text" || tv.Str == "input_text":
					t := part.Get("text")
					if t == nil || t.Kind != ojson.String {
						return jinja.None(), inputErr(pp()+".text", "is required and must be a string")
					}
					texts = append(texts, t.Str)
				case mmPartTypes[tv.Str]:
					return jinja.None(), &NotExactError{"multimodal content (" + tv.Str + ")"}
				default:
					return jinja.None(), &NotExactError{"content part type " + strconv.Quote(tv.Str)}
				}
			}
		default:
			return jinja.None(), inputErr(p()+".content", "must be a string, an array of content parts or null")
		}

		d := newDict(6)
		dd := d.AsDict()
		dd.Set("role", jinja.NewString(role))
		var finalText finalContent
		if format == ContentOpenAI && !(role == "tool" && len(texts) > 0) {
			parts := make([]jinja.Value, len(texts))
			for j, t := range texts {
				pd := newDict(2)
				pd.AsDict().Set("type", jinja.NewString("text"))
				pd.AsDict().Set("text", jinja.NewString(t))
				parts[j] = pd
			}
			dd.Set("content", jinja.NewList(parts))
			if len(texts) > 0 {
				finalText = finalContent{texts[len(texts)-1], true}
			}
		} else {
			s := strings.Join(texts, "\n")
			dd.Set("content", jinja.NewString(s))
			finalText = finalContent{s, true}
		}
		if i == len(mv.Items)-1 {
			req.final = finalText
		}

		switch role {
		case "assistant":
			if tc := msg.Get("tool_calls"); !tc.IsNull() {
				calls, err := toolCalls(tc, p()+".tool_calls", st)
				if err != nil {
					return jinja.None(), err
				}
				if len(calls) > 0 {
					dd.Set("tool_calls", jinja.NewList(calls))
				}
			}
			r := msg.Get("reasoning")
			if r.IsNull() {
				r = msg.Get("reasoning_content")
			}
			if !r.IsNull() {
				if r.Kind != ojson.String {
					return jinja.None(), inputErr(p()+".reasoning_content", "must be a string")
				}
				dd.Set("reasoning", jinja.NewString(r.Str))
				dd.Set("reasoning_content", jinja.NewString(r.Str))
			}
		case "tool":
			if id := msg.Get("tool_call_id"); id != nil {
				dd.Set("tool_call_id", st.value(id))
			}
		}
		if n := msg.Get("name"); n != nil && n.Kind == ojson.String {
			dd.Set("name", jinja.NewString(n.Str))
		}
		out = append(out, d)
	}
	return jinja.NewList(out), nil
}

// toolCalls copies an assistant's tool_calls with string arguments parsed
// into objects (_postprocess_messages: empty or missing arguments become
// {}).
func toolCalls(tc *ojson.Value, p string, st *convState) ([]jinja.Value, error) {
	if tc.Kind != ojson.Array {
		return nil, inputErr(p, "must be an array")
	}
	calls := make([]jinja.Value, 0, len(tc.Items))
	for k, call := range tc.Items {
		cp := fmt.Sprintf("%s[%d]", p, k)
		if call.Kind != ojson.Object {
			return nil, inputErr(cp, "must be an object")
		}
		fn := call.Get("function")
		if fn == nil || fn.Kind != ojson.Object {
			return nil, inputErr(cp+".function", "is required and must be an object")
		}
		cd := newDict(len(call.Members))
		for _, mb := range call.Members {
			if mb.Key != "function" {
				cd.AsDict().Set(mb.Key, st.value(mb.Value))
				continue
			}
			fd := newDict(len(fn.Members) + 1)
			for _, fm := range fn.Members {
				if fm.Key != "arguments" {
					fd.AsDict().Set(fm.Key, st.value(fm.Value))
					continue
				}
				args, err := parseArguments(fm.Value, cp+".function.arguments", st)
				if err != nil {
					return nil, err
				}
				fd.AsDict().Set("arguments", args)
			}
			if !fd.AsDict().Has("arguments") {
				fd.AsDict().Set("arguments", newDict(0))
			}
			cd.AsDict().Set("function", fd)
		}
		calls = append(calls, cd)
	}
	return calls, nil
}

func parseArguments(a *ojson.Value, p string, st *convState) (jinja.Value, error) {
	truthy := false
	switch a.Kind {
	case ojson.String:
		truthy = a.Str != ""
	case ojson.Array:
		truthy = len(a.Items) > 0
	case ojson.Object:
		truthy = len(a.Members) > 0
	case ojson.Bool:
		truthy = a.Bool
	case ojson.Number:
		truthy = a.Float() != 0
	}
	if !truthy {
		return newDict(0), nil
	}
	switch a.Kind {
	case ojson.Array, ojson.Object:
		return st.value(a), nil
	case ojson.String:
		v, err := ojson.Parse([]byte(a.Str), ojson.DefaultMaxDepth)
		if err != nil {
			// Python's json.loads also takes NaN, Infinity and duplicate
			// keys (last wins); this parser does not.
			if strings.Contains(err.Error(), "duplicate") || strings.Contains(a.Str, "NaN") || strings.Contains(a.Str, "Infinity") {
				st.fail("tool call arguments that only Python's json.loads accepts")
				return jinja.None(), nil
			}
			return jinja.None(), inputErr(p, "is not valid JSON: %v", err)
		}
		return st.value(v), nil
	}
	return jinja.None(), inputErr(p, "must be a JSON string")
}
