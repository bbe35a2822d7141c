package tokenize

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// This file turns a chat request into the variables vLLM's renderer hands
// to apply_chat_template (vllm/entrypoints/chat_utils.py and the request's
// build_chat_params), in the same order and with the same types.

type chatRequest struct {
	tmpl          *Template
	vars          chatVars
	addSpecial    bool
	continueFinal bool
	final         finalContent
	conv          convState
	// room for the variables' usual count, without allocating
	namesBuf [8]string
	valsBuf  [8]value
	// The messages' values and dicts: slabs kept with the request when
	// it goes back to its model's pool (release).
	msgVals  []value
	msgDicts []dictSlot
}

// maxPooledMessages bounds the slabs a pooled request keeps: a rare huge
// conversation's are left to the collector.
const maxPooledMessages = 256

// newChatRequest is a cleared request from m's pool (or a new one).
func (m *Model) newChatRequest() *chatRequest {
	if req, ok := m.chatReqs.Get().(*chatRequest); ok {
		return req
	}
	return &chatRequest{}
}

// release clears req, which nothing may use any more (its values point
// into the request body and its render is done), and gives it back to
// m's pool.
func (m *Model) release(req *chatRequest) {
	vals, dicts := req.msgVals, req.msgDicts
	if cap(vals) > maxPooledMessages || cap(dicts) > maxPooledMessages {
		vals, dicts = nil, nil
	}
	clear(vals[:cap(vals)])
	clear(dicts[:cap(dicts)])
	*req = chatRequest{msgVals: vals[:0], msgDicts: dicts[:0]}
	m.chatReqs.Put(req)
}

// finalContent is the text transformers looks for with
// continue_final_message.
type finalContent struct {
	text string
	ok   bool
}

// chatVars are a chat request's template variables: the model's special
// tokens, under the request's own (kwargs, tools, documents, messages,
// add_generation_prompt), built as the evaluator's values.
type chatVars struct {
	special map[string]value // the model's, shared and read-only
	own     fields           // the request's, in the order set
	// bodyLen is the request body's length, about the render's.
	bodyLen int
}

func (cv *chatVars) outputHint() int { return cv.bodyLen }

func (cv *chatVars) lookup(name string) (value, bool) {
	if v, ok := cv.own.get(name); ok {
		return v, true
	}
	if v, ok := cv.special[name]; ok {
		return v, true
	}
	return undef, false
}

// convState converts ojson values to template values and remembers the
// first reason the result would not be exact.
type convState struct{ reason string }

func (s *convState) value(v *ojson.Value) value {
	switch v.Kind {
	case ojson.Null:
		return noneV
	case ojson.Bool:
		return boolV(v.Bool)
	case ojson.String:
		return strV(v.Str)
	case ojson.Number:
		if v.IsInt() {
			if n, ok := v.Int(); ok {
				return intV(n)
			}
			if s.reason == "" {
				s.reason = "an integer beyond 64 bits (Python keeps it exact)"
			}
			return floatV(v.Float())
		}
		return floatV(v.Float())
	case ojson.Array:
		items := make([]value, len(v.Items))
		for i, it := range v.Items {
			items[i] = s.value(it)
		}
		return listV(items)
	case ojson.Object:
		m := &mapVal{fields{keys: make([]string, len(v.Members)), vals: make([]value, len(v.Members))}}
		for i, mb := range v.Members {
			m.keys[i] = mb.Key
			m.vals[i] = s.value(mb.Value)
		}
		return value{k: kMap, p: m}
	}
	return undef
}

func (s *convState) fail(reason string) {
	if s.reason == "" {
		s.reason = reason
	}
}

// newMap returns an empty request dict with room for n entries; add
// appends an entry (the callers never add a key twice).
func newMap(n int) *mapVal {
	return &mapVal{fields{keys: make([]string, 0, n), vals: make([]value, 0, n)}}
}

func (m *mapVal) add(k string, v value) {
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
}

func (m *mapVal) val() value { return value{k: kMap, p: m} }

// apply_chat_template's own parameters: vLLM accepts them in
// chat_template_kwargs even when the template does not reference them.
var chatFnKwargs = map[string]bool{
	"conversation": true, "tools": true, "documents": true, "chat_template": true,
	"add_generation_prompt": true, "continue_final_message": true, "tokenize": true,
	"padding": true, "truncation": true, "max_length": true, "return_tensors": true,
	"return_dict": true, "return_assistant_tokens_mask": true, "tokenizer_kwargs": true,
}

// prepareChat reads a chat request's body into the template's variables
// and chooses the template, as vLLM's chat preprocessing does.
func (m *Model) prepareChat(body *ojson.Value) (*chatRequest, error) {
	if body == nil || body.Kind != ojson.Object {
		return nil, inputErr("", "the request body must be a JSON object")
	}
	req := m.newChatRequest()
	st := &req.conv
	addGen, err := chatFlags(body, req)
	if err != nil {
		return nil, err
	}
	if v := body.Get("chat_template"); !v.IsNull() {
		return nil, &NotExactError{"the request carries its own chat_template"}
	}

	// Tools, as [tool.model_dump() for tool in request.tools].
	tools := noneV
	if tv := body.Get("tools"); !tv.IsNull() {
		tools, err = dumpTools(tv, st)
		if err != nil {
			return nil, err
		}
	}
	if req.tmpl, err = m.chooseTemplate(tools); err != nil {
		return nil, err
	}
	format := m.contentFormat
	if format == "" {
		format = req.tmpl.ContentFormat()
	}
	msgs, err := m.conversation(body.Get("messages"), format, st, req)
	if err != nil {
		return nil, err
	}
	if err := m.setChatVars(body, req, tools, msgs, addGen); err != nil {
		return nil, err
	}
	if st.reason != "" {
		return nil, &NotExactError{st.reason}
	}
	return req, nil
}

// chatFlags reads add_generation_prompt (returned), continue_final_message
// and add_special_tokens.
func chatFlags(body *ojson.Value, req *chatRequest) (addGen bool, err error) {
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
	if addGen, err = boolField("add_generation_prompt", true); err != nil {
		return false, err
	}
	if req.continueFinal, err = boolField("continue_final_message", false); err != nil {
		return false, err
	}
	if req.continueFinal && addGen {
		return false, inputErr("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	if req.addSpecial, err = boolField("add_special_tokens", false); err != nil {
		return false, err
	}
	return addGen, nil
}

// chooseTemplate is transformers' get_chat_template: tool_use when the
// request has tools and the model has that template, else the default.
func (m *Model) chooseTemplate(tools value) (*Template, error) {
	var t *Template
	switch {
	case tools.k != kNone && m.templates["tool_use"] != nil:
		t = m.templates["tool_use"]
	case m.templates["default"] != nil:
		t = m.templates["default"]
	case len(m.templates) > 0:
		return nil, &TemplateError{"This model has multiple chat templates with no default specified! Please either pass a chat template or the name of the template you wish to use to the `chat_template` argument. Available template names are " + templateNames(m.templates) + "."}
	default:
		return nil, &NotExactError{"the model has no chat template (vLLM refuses chat requests without one)"}
	}
	if ce := t.broken; ce != nil {
		return nil, &NotExactError{ce.Error()}
	}
	return t, nil
}

// setChatVars sets the template's keyword arguments: defaults, then the
// request's chat_template_kwargs (filtered as resolve_chat_template_kwargs
// does), then the top-level fields, which win. The model's special tokens
// are under all of them.
func (m *Model) setChatVars(body *ojson.Value, req *chatRequest, tools, msgs value, addGen bool) error {
	st := &req.conv
	vars := &req.vars
	vars.special = m.special
	vars.bodyLen = body.End - body.Start
	vars.own = fields{keys: req.namesBuf[:0], vals: req.valsBuf[:0]}
	if m.defaultKwargs != nil {
		if err := addKwargs(req, m.defaultKwargs, false); err != nil {
			return err
		}
	}
	if v := body.Get("chat_template_kwargs"); !v.IsNull() {
		if v.Kind != ojson.Object {
			return inputErr("chat_template_kwargs", "must be an object")
		}
		if err := addKwargs(req, v, true); err != nil {
			return err
		}
	}
	if v := body.Get("documents"); !v.IsNull() {
		if v.Kind != ojson.Array {
			return inputErr("documents", "must be an array of objects")
		}
		vars.own.set("documents", st.value(v))
	}
	if v := body.Get("reasoning_effort"); !v.IsNull() {
		vars.own.set("reasoning_effort", st.value(v))
	}
	if tools.k != kNone {
		vars.own.set("tools", tools)
	}
	if _, ok := vars.own.get("tools"); !ok {
		vars.own.set("tools", noneV)
	}
	if _, ok := vars.own.get("documents"); !ok {
		vars.own.set("documents", noneV)
	}
	vars.own.set("messages", msgs)
	vars.own.set("add_generation_prompt", boolV(addGen))
	return nil
}

// addKwargs sets the keyword arguments of obj (the model's defaults, or
// the request's chat_template_kwargs) that the template may read.
func addKwargs(req *chatRequest, obj *ojson.Value, fromRequest bool) error {
	st, vars := &req.conv, &req.vars
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
		vars.own.set(k, st.value(mb.Value))
	}
	return nil
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
func dumpTools(tv *ojson.Value, st *convState) (value, error) {
	if tv.Kind != ojson.Array {
		return noneV, inputErr("tools", "must be an array")
	}
	items := make([]value, 0, len(tv.Items))
	for i, t := range tv.Items {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Kind != ojson.Object {
			return noneV, inputErr(p, "must be an object")
		}
		if ty := t.Get("type"); ty != nil && !(ty.Kind == ojson.String && ty.Str == "function") {
			return noneV, inputErr(p+".type", "must be 'function'")
		}
		fn := t.Get("function")
		if fn == nil || fn.Kind != ojson.Object {
			return noneV, inputErr(p+".function", "is required and must be an object")
		}
		name := fn.Get("name")
		if name == nil || name.Kind != ojson.String {
			return noneV, inputErr(p+".function.name", "is required and must be a string")
		}
		f := newMap(len(fn.Members) + 3)
		f.add("name", strV(name.Str))
		desc := fn.Get("description")
		switch {
		case desc.IsNull():
			f.add("description", noneV)
		case desc.Kind == ojson.String:
			f.add("description", strV(desc.Str))
		default:
			return noneV, inputErr(p+".function.description", "must be a string")
		}
		params := fn.Get("parameters")
		switch {
		case params.IsNull():
			f.add("parameters", noneV)
		case params.Kind == ojson.Object:
			f.add("parameters", st.value(params))
		default:
			return noneV, inputErr(p+".function.parameters", "must be an object")
		}
		for _, mb := range fn.Members {
			switch mb.Key {
			case "name", "description", "parameters":
			default:
				f.add(mb.Key, st.value(mb.Value))
			}
		}
		d := newMap(len(t.Members) + 2)
		d.add("type", strV("function"))
		d.add("function", f.val())
		for _, mb := range t.Members {
			switch mb.Key {
			case "type", "function":
			default:
				d.add(mb.Key, st.value(mb.Value))
			}
		}
		items = append(items, d.val())
	}
	return listV(items), nil
}

var mmPartTypes = map[string]bool{
	"image_url": true, "input_image": true, "image_embeds": true, "image_pil": true, "image": true,
	"audio_url": true, "input_audio": true, "audio": true, "audio_embeds": true,
	"video_url": true, "video": true, "file": true,
}

// Shared key lists of the commonest message shapes (a dict's keys are
// never modified in place).
var (
	keysRoleContent = []string{"role", "content"}
	keysTypeText    = []string{"type", "text"}
)

// msgPath and partPath name a message and a content part in errors
// (not closures: a closure capturing the loop variables would move them
// to the heap on every message).
func msgPath(i int) string { return fmt.Sprintf("messages[%d]", i) }

func partPath(i, j int) string { return fmt.Sprintf("messages[%d].content[%d]", i, j) }

// msgFields are the members of a message that vLLM reads (nil: absent).
type msgFields struct {
	role, content, toolCalls, reasoning, reasoningContent, toolCallID, name *ojson.Value
}

// dictSlot is a request dict with room for two values.
type dictSlot struct {
	m mapVal
	v [2]value
}

func (s *dictSlot) init(keys []string) *mapVal {
	s.m.keys, s.m.vals = keys, s.v[:]
	return &s.m
}

// conversation is vLLM's parse_chat_messages followed by
// _postprocess_messages.
func (m *Model) conversation(mv *ojson.Value, format ContentFormat, st *convState, req *chatRequest) (value, error) {
	if mv == nil || mv.Kind != ojson.Array {
		return noneV, inputErr("messages", "must be an array of messages")
	}
	n := len(mv.Items)
	// The messages' values and their dicts with their first two values,
	// from the request's slabs (reused when the request came from the
	// pool); content parts from one slab grown as needed.
	if cap(req.msgVals) < n {
		req.msgVals, req.msgDicts = make([]value, n), make([]dictSlot, n)
	}
	out, dicts := req.msgVals[:n], req.msgDicts[:n]
	var slabs partSlabs
	for i, msg := range mv.Items {
		if msg.Kind != ojson.Object {
			return noneV, inputErr(msgPath(i), "must be an object")
		}
		f := readMsgFields(msg)
		rv := f.role
		if rv == nil || rv.Kind != ojson.String {
			return noneV, inputErr(msgPath(i)+".role", "is required and must be a string")
		}
		role := rv.Str

		// Content parts: null is [], a string is one text part.
		var texts []string
		var one [1]string
		switch cv := f.content; {
		case cv.IsNull():
		case cv.Kind == ojson.String:
			one[0] = cv.Str
			texts = one[:]
		case cv.Kind == ojson.Array:
			var err error
			if texts, err = partTexts(cv, i); err != nil {
				return noneV, err
			}
		default:
			return noneV, inputErr(msgPath(i)+".content", "must be a string, an array of content parts or null")
		}

		d := dicts[i].init(keysRoleContent)
		d.vals[0] = strV(role)
		var finalText finalContent
		if format == ContentOpenAI && !(role == "tool" && len(texts) > 0) {
			d.vals[1] = slabs.list(texts, i, n)
			if len(texts) > 0 {
				finalText = finalContent{texts[len(texts)-1], true}
			}
		} else {
			s := strings.Join(texts, "\n")
			d.vals[1] = strV(s)
			finalText = finalContent{s, true}
		}
		if i == n-1 {
			req.final = finalText
		}
		if err := roleFields(d, role, &f, i, st); err != nil {
			return noneV, err
		}
		out[i] = value{k: kMap, p: d}
	}
	return listV(out), nil
}

// readMsgFields reads the fields of a message, in one pass over its
// members.
func readMsgFields(msg *ojson.Value) msgFields {
	var f msgFields
	for _, mb := range msg.Members {
		switch mb.Key {
		case "role":
			f.role = mb.Value
		case "content":
			f.content = mb.Value
		case "tool_calls":
			f.toolCalls = mb.Value
		case "reasoning":
			f.reasoning = mb.Value
		case "reasoning_content":
			f.reasoningContent = mb.Value
		case "tool_call_id":
			f.toolCallID = mb.Value
		case "name":
			f.name = mb.Value
		}
	}
	return f
}

// partTexts reads message i's content parts: their texts; multimodal and
// unknown parts are not exact.
func partTexts(cv *ojson.Value, i int) ([]string, error) {
	var texts []string
	for j, part := range cv.Items {
		if part.Kind == ojson.String {
			texts = append(texts, part.Str)
			continue
		}
		if part.Kind != ojson.Object {
			return nil, inputErr(partPath(i, j), "must be an object")
		}
		tv := part.Get("type")
		if tv == nil || tv.Kind != ojson.String {
			return nil, inputErr(partPath(i, j)+".type", "is required and must be a string")
		}
		switch {
		case tv.Str == "text" || tv.Str == "input_text":
			t := part.Get("text")
			if t == nil || t.Kind != ojson.String {
				return nil, inputErr(partPath(i, j)+".text", "is required and must be a string")
			}
			texts = append(texts, t.Str)
		case mmPartTypes[tv.Str]:
			return nil, &NotExactError{"multimodal content (" + tv.Str + ")"}
		default:
			return nil, &NotExactError{"content part type " + strconv.Quote(tv.Str)}
		}
	}
	return texts, nil
}

// partSlabs hold a conversation's content part lists (openai format):
// the parts' dicts and values, and the lists, each slab allocated once.
type partSlabs struct {
	parts    []dictSlot
	partVals []value
	lists    []seqVal
}

// list returns message i's content (of n messages) as a list of
// {"type": "text", "text": t} parts.
func (sl *partSlabs) list(texts []string, i, n int) value {
	if sl.parts == nil && len(texts) > 0 {
		sl.parts, sl.partVals = make([]dictSlot, 0, n), make([]value, 0, n)
	}
	start := len(sl.partVals)
	for _, t := range texts {
		sl.parts = append(sl.parts, dictSlot{})
		pd := sl.parts[len(sl.parts)-1].init(keysTypeText)
		pd.vals[0], pd.vals[1] = strV("text"), strV(t)
		sl.partVals = append(sl.partVals, value{k: kMap, p: pd})
	}
	if sl.lists == nil {
		sl.lists = make([]seqVal, n)
	}
	l := &sl.lists[i]
	if len(texts) == 0 {
		l.items = []value{}
	} else {
		l.items = sl.partVals[start:len(sl.partVals):len(sl.partVals)]
	}
	return value{k: kSeq, p: l}
}

// roleFields adds message i's fields beyond role and content: an
// assistant's tool calls and reasoning, a tool's tool_call_id, a name.
func roleFields(d *mapVal, role string, f *msgFields, i int, st *convState) error {
	switch role {
	case "assistant":
		if tc := f.toolCalls; !tc.IsNull() {
			calls, err := toolCalls(tc, msgPath(i)+".tool_calls", st)
			if err != nil {
				return err
			}
			if len(calls) > 0 {
				d.add("tool_calls", listV(calls))
			}
		}
		r := f.reasoning
		if r.IsNull() {
			r = f.reasoningContent
		}
		if !r.IsNull() {
			if r.Kind != ojson.String {
				return inputErr(msgPath(i)+".reasoning_content", "must be a string")
			}
			d.add("reasoning", strV(r.Str))
			d.add("reasoning_content", strV(r.Str))
		}
	case "tool":
		if id := f.toolCallID; id != nil {
			d.add("tool_call_id", st.value(id))
		}
	}
	if nv := f.name; nv != nil && nv.Kind == ojson.String {
		d.add("name", strV(nv.Str))
	}
	return nil
}

// toolCalls copies an assistant's tool_calls with string arguments parsed
// into objects (_postprocess_messages: empty or missing arguments become
// {}).
func toolCalls(tc *ojson.Value, p string, st *convState) ([]value, error) {
	if tc.Kind != ojson.Array {
		return nil, inputErr(p, "must be an array")
	}
	calls := make([]value, 0, len(tc.Items))
	for k, call := range tc.Items {
		cp := fmt.Sprintf("%s[%d]", p, k)
		if call.Kind != ojson.Object {
			return nil, inputErr(cp, "must be an object")
		}
		fn := call.Get("function")
		if fn == nil || fn.Kind != ojson.Object {
			return nil, inputErr(cp+".function", "is required and must be an object")
		}
		cd := newMap(len(call.Members))
		for _, mb := range call.Members {
			if mb.Key != "function" {
				cd.add(mb.Key, st.value(mb.Value))
				continue
			}
			fd := newMap(len(fn.Members) + 1)
			hasArgs := false
			for _, fm := range fn.Members {
				if fm.Key != "arguments" {
					fd.add(fm.Key, st.value(fm.Value))
					continue
				}
				args, err := parseArguments(fm.Value, cp+".function.arguments", st)
				if err != nil {
					return nil, err
				}
				fd.add("arguments", args)
				hasArgs = true
			}
			if !hasArgs {
				fd.add("arguments", newMap(0).val())
			}
			cd.add("function", fd.val())
		}
		calls = append(calls, cd.val())
	}
	return calls, nil
}

func parseArguments(a *ojson.Value, p string, st *convState) (value, error) {
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
		return newMap(0).val(), nil
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
				return noneV, nil
			}
			return noneV, inputErr(p, "is not valid JSON: %v", err)
		}
		return st.value(v), nil
	}
	return noneV, inputErr(p, "must be a JSON string")
}
