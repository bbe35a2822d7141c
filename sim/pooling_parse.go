package sim

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// parseObject parses a JSON request body that must be an object, with
// pydantic's errors for anything else.
func parseObject(body []byte) (*ojson.Value, *apiError) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		off := 0
		if se, ok := err.(*ojson.SyntaxError); ok {
			off = se.Offset
		}
		return nil, requestValidationError("json_invalid", []any{"body", off}, "JSON decode error", nil)
	}
	if v.Kind != ojson.Object {
		return nil, requestValidationError("model_attributes_type", []any{"body"},
			"Input should be a valid dictionary or object to extract fields from", strp("body"))
	}
	if m := v.Get("model"); !m.IsNull() && m.Kind != ojson.String {
		return nil, fieldError("model", "string_type", "Input should be a valid string")
	}
	return v, nil
}

// optLiteral checks an optional string field against its allowed values.
func optLiteral(obj *ojson.Value, name string, allowed ...string) (string, *apiError) {
	f := obj.Get(name)
	if f.IsNull() {
		return "", nil
	}
	if f.Kind == ojson.String {
		for _, a := range allowed {
			if f.Str == a {
				return a, nil
			}
		}
	}
	msg := "Input should be "
	for i, a := range allowed {
		switch {
		case i == 0:
		case i == len(allowed)-1:
			msg += " or "
		default:
			msg += ", "
		}
		msg += "'" + a + "'"
	}
	return "", fieldError(name, "literal_error", msg)
}

// optIntMin is optInt with pydantic's ge constraint.
func optIntMin(obj *ojson.Value, name string, lo int) (*int, *apiError) {
	n, e := optInt(obj, name)
	if e != nil || n == nil {
		return n, e
	}
	if *n < lo {
		return nil, fieldError(name, "greater_than_equal", fmt.Sprintf("Input should be greater than or equal to %d", lo))
	}
	return n, nil
}

// badInput is a ValueError raised while vLLM prepares the prompts: 400
// BadRequestError with no param.
func badInput(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: msg}
}

// parsePoolRequest does pydantic's work for the pooling families. Errors
// vLLM raises later, while it prepares the prompts (score input lengths),
// come back in late.
func parsePoolRequest(k poolKind, body []byte) (req *poolRequest, v *ojson.Value, late, e *apiError) {
	if v, e = parseObject(body); e != nil {
		return nil, nil, nil, e
	}
	req = &poolRequest{kind: k}
	if req.truncate, e = optIntMin(v, "truncate_prompt_tokens", -1); e != nil {
		return nil, nil, nil, e
	}
	side, e := optLiteral(v, "truncation_side", "left", "right")
	if e != nil {
		return nil, nil, nil, e
	}
	req.keepFirst = side == "right"
	if _, e = optInt(v, "priority"); e != nil {
		return nil, nil, nil, e
	}
	if cs := v.Get("cache_salt"); !cs.IsNull() && (cs.Kind != ojson.String || cs.Str == "") {
		return nil, nil, nil, modelValidatorError("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
	}
	switch k {
	case poolScore:
		late, e = parseScore(req, v, body)
	case poolRerank:
		late, e = parseRerank(req, v, body)
	default:
		if k != poolClassify {
			enc, e := optLiteral(v, "encoding_format", "float", "base64")
			if e != nil {
				return nil, nil, nil, e
			}
			req.base64 = enc == "base64"
			if req.dimensions, e = optInt(v, "dimensions"); e != nil {
				return nil, nil, nil, e
			}
		}
		if k == poolPooling {
			if req.task, e = optLiteral(v, "task", "embed", "classify", "token_embed", "token_classify"); e != nil {
				return nil, nil, nil, e
			}
		}
		req.inputs, e = parseTextOrChat(v, body)
	}
	if e != nil {
		return nil, nil, nil, e
	}
	return req, v, late, nil
}

// parseTextOrChat reads the completion form (input: a string, strings,
// token ids or lists of ids) or the chat form (messages: one conversation
// or a batch; or input holding messages).
func parseTextOrChat(v *ojson.Value, body []byte) ([]poolInput, *apiError) {
	addSpecial, e := optBool(v, "add_special_tokens")
	if e != nil {
		return nil, e
	}
	if msgs := v.Get("messages"); msgs != nil {
		if msgs.Kind != ojson.Array {
			return nil, fieldError("messages", "list_type", "Input should be a valid list")
		}
		return chatInputs(v, body, msgs, "messages")
	}
	in := v.Get("input")
	if in == nil {
		return nil, fieldError("input", "missing", "Field required")
	}
	if isConversation(in) || (in.Kind == ojson.Array && len(in.Items) > 0 && isConversation(in.Items[0])) {
		return chatInputs(v, body, in, "input")
	}
	special := addSpecial == nil || *addSpecial // completion form default: true
	bad := fieldError("input", "union_type",
		"Input should be a valid string, a list of strings, a list of integers or a list of lists of integers")
	switch in.Kind {
	case ojson.String:
		return []poolInput{textInput(in.Raw(body), special)}, nil
	case ojson.Array:
		if len(in.Items) == 0 {
			return nil, badInput("You must pass at least one prompt")
		}
		if ids, ok := intList(in); ok {
			return []poolInput{{ids: ids, isIDs: true}}, nil
		}
		out := make([]poolInput, 0, len(in.Items))
		for _, it := range in.Items {
			if it.Kind == ojson.String {
				out = append(out, textInput(it.Raw(body), special))
				continue
			}
			ids, ok := intList(it)
			if !ok || len(ids) == 0 {
				return nil, bad
			}
			out = append(out, poolInput{ids: ids, isIDs: true})
		}
		return out, nil
	}
	return nil, bad
}

// isConversation reports whether a is a non-empty list of objects with a
// string role (vLLM's test for chat messages given as input).
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

// intList returns the ids of an array of integers.
func intList(a *ojson.Value) ([]int, bool) {
	if a.Kind != ojson.Array {
		return nil, false
	}
	ids := make([]int, len(a.Items))
	for i, it := range a.Items {
		n, ok := it.Int()
		if !ok {
			return nil, false
		}
		ids[i] = int(n)
	}
	return ids, true
}

// textInput is a prompt body for CompletionPromptTokens.
func textInput(rawString []byte, addSpecial bool) poolInput {
	var b bytes.Buffer
	b.WriteString(`{"prompt":`)
	b.Write(rawString)
	fmt.Fprintf(&b, `,"add_special_tokens":%t}`, addSpecial)
	return poolInput{body: b.Bytes()}
}

// chatInputs builds one chat body per conversation of msgs (a conversation
// or a list of them), with the pooling defaults add_generation_prompt and
// add_special_tokens false.
func chatInputs(v *ojson.Value, body []byte, msgs *ojson.Value, field string) ([]poolInput, *apiError) {
	for _, name := range []string{"add_generation_prompt", "continue_final_message"} {
		if _, e := optBool(v, name); e != nil {
			return nil, e
		}
	}
	if g, c := v.Get("add_generation_prompt"), v.Get("continue_final_message"); g != nil && g.Kind == ojson.Bool && g.Bool &&
		c != nil && c.Kind == ojson.Bool && c.Bool {
		return nil, modelValidatorError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", field)
	}
	convs := []*ojson.Value{msgs}
	if len(msgs.Items) > 0 && msgs.Items[0].Kind == ojson.Array {
		convs = msgs.Items
	}
	out := make([]poolInput, 0, len(convs))
	for ci, conv := range convs {
		loc := []any{"body", field}
		if len(convs) > 1 || conv != msgs {
			loc = append(loc, ci)
		}
		if conv.Kind != ojson.Array {
			return nil, requestValidationError("list_type", loc, "Input should be a valid list", strp(dotted(loc)))
		}
		if len(conv.Items) == 0 && conv != msgs {
			return nil, requestValidationError("too_short", loc,
				"List should have at least 1 item after validation, not 0", strp(dotted(loc)))
		}
		for i, m := range conv.Items {
			mloc := append(cloneLoc(loc), i)
			if m.Kind != ojson.Object {
				return nil, requestValidationError("dict_type", mloc, "Input should be a valid dictionary", strp(dotted(mloc)))
			}
			role := m.Get("role")
			rloc := append(cloneLoc(mloc), "role")
			if role == nil {
				return nil, requestValidationError("missing", rloc, "Field required", strp(dotted(rloc)))
			}
			if role.Kind != ojson.String {
				return nil, requestValidationError("string_type", rloc, "Input should be a valid string", strp(dotted(rloc)))
			}
		}
		out = append(out, poolInput{chat: true, body: chatInputBody(v, body, conv.Raw(body))})
	}
	return out, nil
}

func cloneLoc(a []any) []any { return append([]any(nil), a...) }

// dotted renders a pydantic loc as vLLM's param ("body.messages.0.role").
func dotted(loc []any) string {
	var b bytes.Buffer
	for i, l := range loc {
		if i > 0 {
			b.WriteByte('.')
		}
		fmt.Fprint(&b, l)
	}
	return b.String()
}

// chatInputBody is the chat form the Tokenizer counts: the conversation,
// the template fields of the request, and add_generation_prompt and
// add_special_tokens defaulting to false as in vLLM's pooling requests.
func chatInputBody(v *ojson.Value, body, conv []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"messages":`)
	b.Write(conv)
	for _, k := range []string{"add_generation_prompt", "add_special_tokens"} {
		b.WriteString(`,"` + k + `":`)
		if f := v.Get(k); !f.IsNull() {
			b.Write(f.Raw(body))
		} else {
			b.WriteString("false")
		}
	}
	for _, k := range []string{"continue_final_message", "chat_template", "chat_template_kwargs", "tools"} {
		if f := v.Get(k); f != nil {
			b.WriteString(`,"` + k + `":`)
			b.Write(f.Raw(body))
		}
	}
	b.WriteString(`}`)
	return b.Bytes()
}

// scoreSide reads one side of a score request: a string or a list of them.
func scoreSide(v *ojson.Value, name string) ([]*ojson.Value, *apiError) {
	f := v.Get(name)
	if f == nil {
		return nil, fieldError(name, "missing", "Field required")
	}
	switch f.Kind {
	case ojson.String:
		return []*ojson.Value{f}, nil
	case ojson.Array:
		for _, it := range f.Items {
			if it.Kind != ojson.String {
				return nil, fieldError(name, "union_type", "Input should be a valid string or a list of strings")
			}
		}
		return f.Items, nil
	}
	return nil, fieldError(name, "union_type", "Input should be a valid string or a list of strings")
}

// parseScore reads the score forms vLLM accepts (queries/documents,
// queries/items, data_1/data_2, text_1/text_2) and pairs them 1:N or N:N.
func parseScore(req *poolRequest, v *ojson.Value, body []byte) (late, e *apiError) {
	names := [2]string{"text_1", "text_2"}
	for _, p := range [][2]string{{"queries", "documents"}, {"queries", "items"}, {"data_1", "data_2"}} {
		if v.Has(p[0]) && v.Has(p[1]) {
			names = p
			break
		}
	}
	if v.Has("queries") && names[0] != "queries" {
		names = [2]string{"queries", "documents"}
	}
	q, e := scoreSide(v, names[0])
	if e != nil {
		return nil, e
	}
	d, e := scoreSide(v, names[1])
	if e != nil {
		return nil, e
	}
	req.inputs, late = pairInputs(q, d, body)
	return late, nil
}

// parseRerank reads query, documents and top_n.
func parseRerank(req *poolRequest, v *ojson.Value, body []byte) (late, e *apiError) {
	q := v.Get("query")
	if q == nil {
		return nil, fieldError("query", "missing", "Field required")
	}
	if q.Kind != ojson.String {
		return nil, fieldError("query", "union_type", "Input should be a valid string")
	}
	d, e := scoreSide(v, "documents")
	if e != nil {
		return nil, e
	}
	top, e := optIntMin(v, "top_n", 0)
	if e != nil {
		return nil, e
	}
	if top != nil {
		req.topN = *top
	}
	req.inputs, late = pairInputs([]*ojson.Value{q}, d, body)
	return late, nil
}

// pairInputs pairs queries with documents as vLLM's score does: the query
// with special tokens, the document after it without.
func pairInputs(q, d []*ojson.Value, body []byte) ([]poolInput, *apiError) {
	switch {
	case len(q) == 0:
		return nil, badInput("At least one text element must be given")
	case len(d) == 0:
		return nil, badInput("At least one text_pair element must be given")
	case len(q) > 1 && len(q) != len(d):
		return nil, badInput("Input lengths must be either 1:1, 1:N or N:N")
	}
	out := make([]poolInput, len(d))
	for i := range d {
		qi := q[0]
		if len(q) > 1 {
			qi = q[i]
		}
		doc := textInput(d[i].Raw(body), false)
		doc.doc = d[i].Str
		out[i] = textInput(qi.Raw(body), true)
		out[i].pair = &doc
	}
	return out, nil
}
