package sim

import (
	"github.com/maitred-dev/maitred/internal/ojson"
)

// The pooling requests are read the way vLLM's protocol classes are built
// (vllm/entrypoints/pooling/*/protocol.py):
//
//   - every request has PoolingBasicRequestMixin's fields
//     (truncate_prompt_tokens >= -1, truncation_side, priority, cache_salt,
//     whose validator runs before the fields');
//   - embeddings and /pooling add EncodingRequestMixin's encoding_format and
//     EmbedRequestMixin's dimensions; /pooling its task;
//   - the input is one of the classes of vLLM's request union: the completion
//     form (CompletionRequestMixin: input a string, strings, token ids or
//     lists of ids; add_special_tokens default true) or a chat form
//     (ChatRequestOptionsMixin: add_generation_prompt and add_special_tokens
//     default false, continue_final_message, chat_template and its kwargs)
//     holding one conversation or a batch, in messages or in input;
//   - score is the union of ScoreQueriesDocumentsRequest,
//     ScoreQueriesItemsRequest, ScoreDataRequest and ScoreTextRequest, each
//     side a string or strings; rerank is RerankRequest (query, documents,
//     top_n).
//
// pydantic tries every class of a union and keeps one that validates. The
// simulator picks the class by the rules the classes themselves use to
// claim a body (vLLM's _is_chat_messages and _is_batched_chat_messages for
// input holding messages) and answers that class's first error; the
// prompts are then built as vLLM's IO processors build them
// (pooling_prompts.go).

// poolingForm is the class of vLLM's embeddings/classify/pooling request
// union a body validates as.
type poolingForm int

const (
	formCompletion     poolingForm = iota // input: text or token ids
	formChat                              // messages: one conversation
	formBatchChat                         // messages: a list of conversations
	formChatInput                         // input: one conversation
	formBatchChatInput                    // input: a list of conversations
)

// field is where the form's prompts are, for error locations.
func (f poolingForm) field() string {
	if f == formChat || f == formBatchChat {
		return "messages"
	}
	return "input"
}

func (f poolingForm) batch() bool { return f == formBatchChat || f == formBatchChatInput }

// poolingFormOf names the class a body is meant for: messages claims a chat
// class (a batch when its first element is a list); input holding chat
// messages (every element an object with a string role), or a non-empty
// list of such conversations, claims a chat-input class; anything else is
// the completion form.
func poolingFormOf(v *ojson.Value) poolingForm {
	if msgs := v.Get("messages"); msgs != nil {
		if msgs.Kind == ojson.Array && len(msgs.Items) > 0 && msgs.Items[0].Kind == ojson.Array {
			return formBatchChat
		}
		return formChat
	}
	in := v.Get("input")
	switch {
	case isChatMessages(in):
		return formChatInput
	case isBatchedChatMessages(in):
		return formBatchChatInput
	}
	return formCompletion
}

// isChatMessages is vLLM's _is_chat_messages: a non-empty list whose every
// element is an object with a string role.
func isChatMessages(a *ojson.Value) bool {
	if a == nil || a.Kind != ojson.Array || len(a.Items) == 0 {
		return false
	}
	for _, m := range a.Items {
		if r := m.Get("role"); m.Kind != ojson.Object || r == nil || r.Kind != ojson.String {
			return false
		}
	}
	return true
}

// isBatchedChatMessages is vLLM's _is_batched_chat_messages: a non-empty
// list whose every element is chat messages.
func isBatchedChatMessages(a *ojson.Value) bool {
	if a == nil || a.Kind != ojson.Array || len(a.Items) == 0 {
		return false
	}
	for _, c := range a.Items {
		if !isChatMessages(c) {
			return false
		}
	}
	return true
}

// parsePoolRequest validates a pooling request as its protocol class does.
// Errors vLLM raises later, while it prepares the prompts (score input
// lengths), come back in late.
func parsePoolRequest(k poolKind, body []byte) (req *poolRequest, v *ojson.Value, late, e *apiError) {
	if v, e = parseObject(body); e != nil {
		return nil, nil, nil, e
	}
	req = &poolRequest{kind: k}
	if e = readPoolingBasic(req, v); e != nil {
		return nil, nil, nil, e
	}
	switch k {
	case poolScore:
		late, e = readScoreRequest(req, v, body)
	case poolRerank:
		late, e = readRerankRequest(req, v, body)
	default:
		e = readEmbedLikeRequest(req, v, body)
	}
	if e != nil {
		return nil, nil, nil, e
	}
	return req, v, late, nil
}

// readPoolingBasic reads PoolingBasicRequestMixin.
func readPoolingBasic(req *poolRequest, v *ojson.Value) *apiError {
	if cs := v.Get("cache_salt"); !cs.IsNull() && (cs.Kind != ojson.String || cs.Str == "") {
		return modelValidatorError("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
	}
	var e *apiError
	if req.truncate, e = optIntMin(v, "truncate_prompt_tokens", -1); e != nil {
		return e
	}
	side, e := optLiteral(v, "truncation_side", "left", "right")
	if e != nil {
		return e
	}
	req.keepFirst = side == "right"
	_, e = optInt(v, "priority")
	return e
}

// readEmbedLikeRequest reads the embeddings, /classify and /pooling
// classes: the encoding mixins (not for classify), /pooling's task, then
// the input of the form the body claims.
func readEmbedLikeRequest(req *poolRequest, v *ojson.Value, body []byte) *apiError {
	var e *apiError
	if req.kind != poolClassify {
		enc, e := optLiteral(v, "encoding_format", "float", "base64")
		if e != nil {
			return e
		}
		req.base64 = enc == "base64"
		if req.dimensions, e = optInt(v, "dimensions"); e != nil {
			return e
		}
	}
	if req.kind == poolPooling {
		if req.task, e = optLiteral(v, "task", "embed", "classify", "token_embed", "token_classify"); e != nil {
			return e
		}
	}
	// add_special_tokens is a field of every class (its default differs).
	special, e := optBool(v, "add_special_tokens")
	if e != nil {
		return e
	}
	form := poolingFormOf(v)
	if form == formCompletion {
		req.inputs, e = readCompletionInput(v, body, special == nil || *special)
		return e
	}
	if e := readChatOptions(v, form); e != nil {
		return e
	}
	convs, e := readConversations(v.Get(form.field()), form)
	if e != nil {
		return e
	}
	req.inputs = make([]poolInput, len(convs))
	for i, conv := range convs {
		req.inputs[i] = chatPrompt(v, body, conv.Raw(body))
	}
	return nil
}

// readCompletionInput reads CompletionRequestMixin's input:
// list[int] | list[list[int]] | str | list[str]. An empty list validates
// (as list[int]) and is refused when the prompts are prepared. A list
// mixing strings and token-id lists is accepted, each item one prompt (the
// simulator has always served it and the gateway's tests rely on it;
// vLLM's union as written would refuse it).
func readCompletionInput(v *ojson.Value, body []byte, addSpecial bool) ([]poolInput, *apiError) {
	in := v.Get("input")
	if in == nil {
		return nil, fieldError("input", "missing", "Field required")
	}
	bad := fieldError("input", "union_type",
		"Input should be a valid string, a list of strings, a list of integers or a list of lists of integers")
	switch {
	case in.Kind == ojson.String:
		return []poolInput{textPrompt(in.Raw(body), addSpecial)}, nil
	case in.Kind != ojson.Array:
		return nil, bad
	case len(in.Items) == 0:
		return nil, badInput("You must pass at least one prompt")
	}
	if ids, ok := laxIntList(in); ok { // list[int]: one prompt of ids
		return []poolInput{{ids: ids, isIDs: true}}, nil
	}
	out := make([]poolInput, 0, len(in.Items))
	for _, it := range in.Items { // list[str] or list[list[int]]
		if it.Kind == ojson.String {
			out = append(out, textPrompt(it.Raw(body), addSpecial))
			continue
		}
		ids, ok := laxIntList(it)
		if !ok || len(ids) == 0 {
			return nil, bad
		}
		out = append(out, poolInput{ids: ids, isIDs: true})
	}
	return out, nil
}

// laxIntList reads a list of integers as pydantic's lax mode does (a
// float with no fractional part is an integer).
func laxIntList(a *ojson.Value) ([]int, bool) {
	if a.Kind != ojson.Array {
		return nil, false
	}
	ids := make([]int, len(a.Items))
	for i, it := range a.Items {
		if it.Kind != ojson.Number || !isInt(it) {
			return nil, false
		}
		if n, ok := it.Int(); ok {
			ids[i] = int(n)
		} else {
			ids[i] = int(it.Float())
		}
	}
	return ids, true
}

// readChatOptions reads ChatRequestOptionsMixin's flags and runs its
// check_generation_prompt validator.
func readChatOptions(v *ojson.Value, form poolingForm) *apiError {
	for _, name := range []string{"add_generation_prompt", "continue_final_message"} {
		if _, e := optBool(v, name); e != nil {
			return e
		}
	}
	if optTrue(v, "add_generation_prompt") && optTrue(v, "continue_final_message") {
		return modelValidatorError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", form.field())
	}
	return nil
}

// readConversations validates the chat form's conversations: messages is
// list[ChatCompletionMessageParam] (one conversation, which may be empty)
// or, batched, a list of non-empty such lists; every message is an object
// with a string role (the chat template judges the rest).
func readConversations(msgs *ojson.Value, form poolingForm) ([]*ojson.Value, *apiError) {
	if msgs.Kind != ojson.Array {
		return nil, fieldError(form.field(), "list_type", "Input should be a valid list")
	}
	convs := []*ojson.Value{msgs}
	if form.batch() {
		convs = msgs.Items
	}
	for ci, conv := range convs {
		loc := []any{"body", form.field()}
		if form.batch() {
			loc = append(loc, ci)
		}
		if conv.Kind != ojson.Array {
			return nil, requestValidationError("list_type", loc, "Input should be a valid list", strp(dotted(loc)))
		}
		if len(conv.Items) == 0 && form.batch() {
			return nil, requestValidationError("too_short", loc,
				"List should have at least 1 item after validation, not 0", strp(dotted(loc)))
		}
		for i, m := range conv.Items {
			if e := checkMessage(m, append(cloneLoc(loc), i)); e != nil {
				return nil, e
			}
		}
	}
	return convs, nil
}

// checkMessage is what ChatCompletionMessageParam requires of every
// message: an object with a string role.
func checkMessage(m *ojson.Value, loc []any) *apiError {
	if m.Kind != ojson.Object {
		return requestValidationError("dict_type", loc, "Input should be a valid dictionary", strp(dotted(loc)))
	}
	role := m.Get("role")
	rloc := append(cloneLoc(loc), "role")
	if role == nil {
		return requestValidationError("missing", rloc, "Field required", strp(dotted(rloc)))
	}
	if role.Kind != ojson.String {
		return requestValidationError("string_type", rloc, "Input should be a valid string", strp(dotted(rloc)))
	}
	return nil
}

// scoreClasses are the members of vLLM's ScoreRequest union, in its order:
// the two fields each reads as data_1 and data_2.
var scoreClasses = [][2]string{{"queries", "documents"}, {"queries", "items"}, {"data_1", "data_2"}, {"text_1", "text_2"}}

// readScoreRequest reads the ScoreRequest union: the first class whose two
// fields are present; when none is complete, the errors are those of the
// first class the body names a field of (else ScoreTextRequest's).
func readScoreRequest(req *poolRequest, v *ojson.Value, body []byte) (late, e *apiError) {
	class := scoreClasses[len(scoreClasses)-1]
	for _, c := range scoreClasses {
		if v.Has(c[0]) && v.Has(c[1]) {
			class = c
			break
		}
	}
	if !v.Has(class[0]) || !v.Has(class[1]) {
		for _, c := range scoreClasses {
			if v.Has(c[0]) || v.Has(c[1]) {
				class = c
				break
			}
		}
	}
	data1, e := scoreInputs(v, class[0])
	if e != nil {
		return nil, e
	}
	data2, e := scoreInputs(v, class[1])
	if e != nil {
		return nil, e
	}
	req.inputs, late = scorePairs(data1, data2, body)
	return late, nil
}

// readRerankRequest reads RerankRequest: query (one string), documents
// (strings) and top_n (>= 0, default 0: all).
func readRerankRequest(req *poolRequest, v *ojson.Value, body []byte) (late, e *apiError) {
	q := v.Get("query")
	if q == nil {
		return nil, fieldError("query", "missing", "Field required")
	}
	if q.Kind != ojson.String {
		return nil, fieldError("query", "union_type", "Input should be a valid string")
	}
	docs, e := scoreInputs(v, "documents")
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
	req.inputs, late = scorePairs([]*ojson.Value{q}, docs, body)
	return late, nil
}

// scoreInputs reads ScoreInputs for a text-only model: a string or a list
// of strings.
func scoreInputs(v *ojson.Value, name string) ([]*ojson.Value, *apiError) {
	f := v.Get(name)
	if f == nil {
		return nil, fieldError(name, "missing", "Field required")
	}
	bad := fieldError(name, "union_type", "Input should be a valid string or a list of strings")
	switch f.Kind {
	case ojson.String:
		return []*ojson.Value{f}, nil
	case ojson.Array:
		for _, it := range f.Items {
			if it.Kind != ojson.String {
				return nil, bad
			}
		}
		return f.Items, nil
	}
	return nil, bad
}
