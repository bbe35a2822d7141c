package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/maitred-dev/maitred/internal/ojson"
	"go.uber.org/zap"
)

// The OpenAI Responses API as vLLM serves it (vllm/entrypoints/openai/
// responses): POST /v1/responses, GET /v1/responses/{id},
// POST /v1/responses/{id}/cancel. The simulator behaves like a vLLM started
// with VLLM_ENABLE_RESPONSES_API_STORE=1 unless Config.NoResponsesStore is
// set: stored responses live in this server's memory only.

const responsesPath = "/v1/responses"

// isGenPath reports whether path is one of the generation routes of this
// file family (counted in Stats.Requests like chat).
func isGenPath(path string) bool {
	return path == responsesPath || path == messagesPath || isAudioPath(path)
}

// serveAPIs routes the Responses and Messages endpoints; it reports whether
// it answered.
func (s *Server) serveAPIs(w http.ResponseWriter, r *http.Request, body []byte) bool {
	path := r.URL.Path
	switch {
	case path == responsesPath:
		if allow(w, r, http.MethodPost) {
			s.responsesCreate(w, r, body)
		}
	case strings.HasPrefix(path, responsesPath+"/"):
		rest := strings.TrimPrefix(path, responsesPath+"/")
		if id, ok := strings.CutSuffix(rest, "/cancel"); ok && id != "" && !strings.Contains(id, "/") {
			if allow(w, r, http.MethodPost) {
				s.responsesCancel(w, id)
			}
			return true
		}
		if rest == "" || strings.Contains(rest, "/") {
			writeAPIError(w, httpError(http.StatusNotFound, ""))
			return true
		}
		if allow(w, r, http.MethodGet) {
			s.responsesRetrieve(w, r, rest)
		}
	case path == messagesPath:
		if allow(w, r, http.MethodPost) {
			s.messagesCreate(w, r, body)
		}
	case path == countTokensPath:
		if allow(w, r, http.MethodPost) {
			s.messagesCountTokens(w, r, body)
		}
	default:
		return false
	}
	return true
}

// --- store ---------------------------------------------------------------

// responseStore holds the Responses API objects of one server, as vLLM's
// in-memory response_store and msg_store do (never evicted).
type responseStore struct {
	mu sync.Mutex
	m  map[string]*storedResponse
}

// storedResponse is one stored response. obj is replaced, never mutated,
// so a snapshot taken under the lock can be encoded outside it.
type storedResponse struct {
	obj    *responseObject
	msgs   []any                   // the chat messages its input became
	cancel context.CancelCauseFunc // background jobs only
	done   chan struct{}           // closed when a background job ends
	events *eventLog               // background streams only
}

func (st *responseStore) get(id string) (*storedResponse, *responseObject) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.m[id]
	if e == nil {
		return nil, nil
	}
	return e, e.obj
}

func (st *responseStore) put(id string, e *storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]*storedResponse{}
	}
	st.m[id] = e
}

func (st *responseStore) len() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.m)
}

// setObj replaces the object of e unless it was cancelled (vLLM keeps a
// cancelled response as it is).
func (st *responseStore) setObj(e *storedResponse, o *responseObject) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e.obj != nil && e.obj.Status == "cancelled" {
		return
	}
	e.obj = o
}

// HasResponse reports whether this server stores the Responses API object
// id (so GET /v1/responses/{id} answers it here).
func (s *Server) HasResponse(id string) bool {
	_, o := s.resp.get(id)
	return o != nil
}

// --- wire types ------------------------------------------------------------

type respOutputText struct {
	Annotations []struct{}      `json:"annotations"`
	Text        string          `json:"text"`
	Type        string          `json:"type"`
	Logprobs    json.RawMessage `json:"logprobs"`
}

type respMessage struct {
	ID      string           `json:"id"`
	Content []respOutputText `json:"content"`
	Role    string           `json:"role"`
	Status  string           `json:"status"`
	Type    string           `json:"type"`
	// Summary appears (empty) on the streamed output_item.done only, as
	// vLLM's simple stream sets it there.
	Summary *[]struct{} `json:"summary,omitempty"`
}

type respInputDetails struct {
	CachedTokens        int   `json:"cached_tokens"`
	InputTokensPerTurn  []int `json:"input_tokens_per_turn"`
	CachedTokensPerTurn []int `json:"cached_tokens_per_turn"`
}

type respOutputDetails struct {
	ReasoningTokens         int   `json:"reasoning_tokens"`
	ToolOutputTokens        int   `json:"tool_output_tokens"`
	OutputTokensPerTurn     []int `json:"output_tokens_per_turn"`
	ToolOutputTokensPerTurn []int `json:"tool_output_tokens_per_turn"`
}

type respUsage struct {
	InputTokens         int               `json:"input_tokens"`
	InputTokensDetails  respInputDetails  `json:"input_tokens_details"`
	OutputTokens        int               `json:"output_tokens"`
	OutputTokensDetails respOutputDetails `json:"output_tokens_details"`
	TotalTokens         int               `json:"total_tokens"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

// responseObject is vLLM's ResponsesResponse, serialised with every field.
type responseObject struct {
	ID                 string             `json:"id"`
	CreatedAt          int64              `json:"created_at"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	Metadata           json.RawMessage    `json:"metadata"`
	Model              string             `json:"model"`
	Object             string             `json:"object"`
	Output             []respMessage      `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	Temperature        float64            `json:"temperature"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopP               float64            `json:"top_p"`
	Background         bool               `json:"background"`
	MaxOutputTokens    int                `json:"max_output_tokens"`
	MaxToolCalls       *int               `json:"max_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Prompt             *struct{}          `json:"prompt"`
	Reasoning          json.RawMessage    `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Status             string             `json:"status"`
	Text               json.RawMessage    `json:"text"`
	TopLogprobs        *int               `json:"top_logprobs"`
	Truncation         string             `json:"truncation"`
	Usage              *respUsage         `json:"usage"`
	User               *string            `json:"user"`
	InputMessages      *struct{}          `json:"input_messages"`
	OutputMessages     *struct{}          `json:"output_messages"`
}

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

// --- POST /v1/responses ----------------------------------------------------

func (s *Server) responsesCreate(w http.ResponseWriter, r *http.Request, body []byte) {
	arrival := time.Now()
	ctx := r.Context()
	cfg := s.Config()
	log := s.log.With(zap.String("route", r.URL.Path))
	if s.admissionFaults(ctx, w, cfg, log, writeAPIError) {
		return
	}
	reject := func(e *apiError) { s.rejectWith(w, e, writeAPIError) }
	if e := checkContentType(r); e != nil {
		reject(e)
		return
	}
	req, e := parseResponsesRequest(body)
	if e != nil {
		reject(e)
		return
	}
	if e := checkModel(req.v, cfg); e != nil {
		reject(e)
		return
	}
	if req.store && cfg.NoResponsesStore && req.background {
		reject(invalidRequest(http.StatusBadRequest, "This vLLM engine does not support `store=True` and "+
			"therefore does not support the background mode. To enable these features, set the environment "+
			"variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.", "background"))
		return
	}
	if cfg.FailStatus > 0 {
		reject(failError(cfg.FailStatus, cfg.FailMessage))
		return
	}
	store := req.store && !cfg.NoResponsesStore
	var prev *storedResponse
	var prevObj *responseObject
	if req.prevID != nil {
		if prev, prevObj = s.resp.get(*req.prevID); prevObj == nil {
			reject(responseNotFound(*req.prevID))
			return
		}
	}
	msgs := req.chatMessages(prev, prevObj)
	promptTokens, err := cfg.Tokenizer.ChatPromptTokens(chatRequestBody(cfg.Model, msgs))
	if err != nil {
		reject(&apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()})
		return
	}
	budget, e := responsesBudget(cfg.MaxModelLen, promptTokens, req.maxOutput)
	if e != nil {
		reject(e)
		return
	}
	id := req.id
	if id == "" {
		id = "resp_" + randomID()
	}
	j := s.newJob(cfg, log.With(zap.String("request_id", id)), arrival, promptTokens, budget)
	base := req.object(id, servedName(req.v, cfg), arrival.Unix(), budget)
	j.log.Debug("sim request accepted", zap.Int("prompt_tokens", promptTokens), zap.Int("max_tokens", budget),
		zap.Bool("stream", req.stream), zap.Bool("background", req.background))

	if req.background {
		s.responsesBackground(w, r, j, req, base, msgs)
		return
	}
	if !req.stream {
		if !j.runWhole(ctx, w, writeAPIError) {
			return
		}
		final := finalResponse(base, j)
		if store {
			s.resp.put(id, &storedResponse{obj: final, msgs: msgs})
		}
		writeJSON(w, http.StatusOK, final)
		j.done()
		return
	}
	sw := j.startStream(w)
	if sw == nil {
		return
	}
	ev := &respEvents{emit: func(name string, data []byte) error { return sw.frame(name, data) }}
	if err := ev.run(ctx, j, base); err != nil {
		if err == errStopped {
			_ = ev.send("error", responseErrorEvent{Type: "error", Code: "InternalServerError", Message: "Internal server error"})
		}
		return
	}
	final := finalResponse(base, j)
	if store {
		s.resp.put(id, &storedResponse{obj: final, msgs: msgs})
	}
	if err := ev.completed(final); err != nil {
		_ = j.fail(ctx, errClientGone, "write")
		return
	}
	j.done()
}

// responsesBudget runs the renderer's length checks (max_output_tokens
// against max_model_len, prompt + max_output_tokens against max_model_len),
// then _validate_generator_input (the prompt must leave room for one
// token), and returns the generation budget: min(max_output_tokens,
// max_model_len - prompt).
func responsesBudget(L, P int, maxOutput *int) (int, *apiError) {
	checkM := 0
	if maxOutput != nil {
		checkM = *maxOutput
	}
	if checkM > L {
		return 0, validationError(fmt.Sprintf("max_output_tokens=%d cannot be greater than max_model_len=max_total_tokens=%d. "+
			"Please request fewer output tokens.", checkM, L), "max_output_tokens", checkM)
	}
	if P > L-checkM {
		return 0, contextError(L, checkM, P, true)
	}
	if P >= L {
		return 0, invalidRequest(http.StatusBadRequest, fmt.Sprintf("The engine prompt length %d exceeds the max_model_len %d. "+
			"Please reduce prompt.", P, L), "input")
	}
	budget := L - P
	if maxOutput != nil {
		budget = min(budget, *maxOutput)
	}
	if budget < 1 {
		return 0, validationError(fmt.Sprintf("max_tokens must be at least 1, got %d.", budget), "max_tokens", budget)
	}
	return budget, nil
}

// object is the response before generation (status in_progress, no output,
// no usage), echoing the request's settings.
func (req *responsesRequest) object(id, model string, created int64, budget int) *responseObject {
	v, body := req.v, req.body
	o := &responseObject{
		ID: id, CreatedAt: created, Instructions: req.instructions, Model: model, Object: "response",
		Output: []respMessage{}, ParallelToolCalls: true, Temperature: req.temperature, TopP: req.topP,
		Background: req.background, MaxOutputTokens: budget, PreviousResponseID: req.prevID,
		ServiceTier: "auto", Status: "in_progress", Truncation: "disabled",
		Metadata: rawOr(v, body, "metadata", "null"), ToolChoice: rawOr(v, body, "tool_choice", `"auto"`),
		Tools: rawOr(v, body, "tools", "[]"), Reasoning: rawOr(v, body, "reasoning", "null"),
		Text: rawOr(v, body, "text", "null"),
	}
	if p := v.Get("parallel_tool_calls"); p != nil && p.Kind == ojson.Bool {
		o.ParallelToolCalls = p.Bool
	}
	if st := v.Get("service_tier"); st != nil && st.Kind == ojson.String {
		o.ServiceTier = st.Str
	}
	if t := v.Get("truncation"); t != nil && t.Kind == ojson.String {
		o.Truncation = t.Str
	}
	if u := v.Get("user"); u != nil && u.Kind == ojson.String {
		o.User = &u.Str
	}
	if m := v.Get("max_tool_calls"); m.IsInt() {
		n, _ := m.Int()
		x := int(n)
		o.MaxToolCalls = &x
	}
	return o
}

// finalResponse is the completed (or, cut by the budget, incomplete)
// response of a finished job.
func finalResponse(base *responseObject, j *job) *responseObject {
	o := *base
	o.Status = "completed"
	if j.finish == "length" {
		o.Status = "incomplete"
		o.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	}
	o.Output = []respMessage{{
		ID: "msg_" + randomID(), Role: "assistant", Status: "completed", Type: "message",
		Content: []respOutputText{{Annotations: []struct{}{}, Text: j.text.String(), Type: "output_text", Logprobs: jsonNull}},
	}}
	o.Usage = &respUsage{
		InputTokens:  j.prompt,
		OutputTokens: j.generated,
		TotalTokens:  j.prompt + j.generated,
		InputTokensDetails: respInputDetails{
			InputTokensPerTurn: []int{}, CachedTokensPerTurn: []int{},
		},
		OutputTokensDetails: respOutputDetails{
			OutputTokensPerTurn: []int{}, ToolOutputTokensPerTurn: []int{},
		},
	}
	return &o
}

// --- stream events -----------------------------------------------------------

type responseStateEvent struct {
	Response       *responseObject `json:"response"`
	SequenceNumber int             `json:"sequence_number"`
	Type           string          `json:"type"`
}

type itemEvent struct {
	Item           respMessage `json:"item"`
	OutputIndex    int         `json:"output_index"`
	SequenceNumber int         `json:"sequence_number"`
	Type           string      `json:"type"`
}

type partEvent struct {
	ContentIndex   int            `json:"content_index"`
	ItemID         string         `json:"item_id"`
	OutputIndex    int            `json:"output_index"`
	Part           respOutputText `json:"part"`
	SequenceNumber int            `json:"sequence_number"`
	Type           string         `json:"type"`
}

type textDeltaEvent struct {
	ContentIndex   int        `json:"content_index"`
	Delta          string     `json:"delta"`
	ItemID         string     `json:"item_id"`
	Logprobs       []struct{} `json:"logprobs"`
	OutputIndex    int        `json:"output_index"`
	SequenceNumber int        `json:"sequence_number"`
	Type           string     `json:"type"`
}

type textDoneEvent struct {
	ContentIndex   int        `json:"content_index"`
	ItemID         string     `json:"item_id"`
	Logprobs       []struct{} `json:"logprobs"`
	OutputIndex    int        `json:"output_index"`
	SequenceNumber int        `json:"sequence_number"`
	Text           string     `json:"text"`
	Type           string     `json:"type"`
}

type responseErrorEvent struct {
	Code           string  `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
	SequenceNumber int     `json:"sequence_number"`
	Type           string  `json:"type"`
}

// respEvents writes one response's stream of events in vLLM's order:
// response.created, response.in_progress, then with the first token
// response.output_item.added and response.content_part.added, one
// response.output_text.delta per token, and after the last one
// response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed. Every event carries
// sequence_number 0, 1, 2, ... The content_index values reproduce vLLM's
// simple stream, which advances the index after every event (part 0, deltas
// 1..n, then n+1 and n+2).
type respEvents struct {
	emit    func(name string, data []byte) error
	seq     int
	itemID  string
	content int
	text    strings.Builder
}

func (ev *respEvents) send(name string, v any) error {
	switch x := v.(type) {
	case *responseStateEvent:
		x.SequenceNumber = ev.seq
	case *itemEvent:
		x.SequenceNumber = ev.seq
	case *partEvent:
		x.SequenceNumber = ev.seq
	case *textDeltaEvent:
		x.SequenceNumber = ev.seq
	case *textDoneEvent:
		x.SequenceNumber = ev.seq
	case responseErrorEvent:
		x.SequenceNumber = ev.seq
		v = x
	}
	ev.seq++
	return ev.emit(name, marshal(v))
}

// run sends the opening events and generates the job with one delta per
// token, then the done events (not response.completed).
func (ev *respEvents) run(ctx context.Context, j *job, base *responseObject) error {
	initial := *base
	for _, t := range []string{"response.created", "response.in_progress"} {
		if err := ev.send(t, &responseStateEvent{Response: &initial, Type: t}); err != nil {
			return j.fail(ctx, errClientGone, "write")
		}
	}
	err := j.run(ctx, func(step int, tok string) error {
		if step == 0 {
			ev.itemID = newUUID()
			if err := ev.send("response.output_item.added", &itemEvent{Type: "response.output_item.added",
				Item: respMessage{ID: ev.itemID, Content: []respOutputText{}, Role: "assistant", Status: "in_progress", Type: "message"}}); err != nil {
				return err
			}
			if err := ev.send("response.content_part.added", &partEvent{Type: "response.content_part.added",
				ContentIndex: ev.content, ItemID: ev.itemID,
				Part: respOutputText{Annotations: []struct{}{}, Type: "output_text", Logprobs: json.RawMessage("[]")}}); err != nil {
				return err
			}
			ev.content++
		}
		ev.text.WriteString(tok)
		err := ev.send("response.output_text.delta", &textDeltaEvent{Type: "response.output_text.delta",
			ContentIndex: ev.content, Delta: tok, ItemID: ev.itemID, Logprobs: []struct{}{}})
		ev.content++
		return err
	})
	if err != nil {
		return err
	}
	text := ev.text.String()
	if err := ev.send("response.output_text.done", &textDoneEvent{Type: "response.output_text.done",
		ContentIndex: ev.content, ItemID: ev.itemID, Logprobs: []struct{}{}, Text: text}); err != nil {
		return j.fail(ctx, errClientGone, "write")
	}
	ev.content++
	part := respOutputText{Annotations: []struct{}{}, Text: text, Type: "output_text", Logprobs: jsonNull}
	if err := ev.send("response.content_part.done", &partEvent{Type: "response.content_part.done",
		ContentIndex: ev.content, ItemID: ev.itemID, Part: part}); err != nil {
		return j.fail(ctx, errClientGone, "write")
	}
	ev.content++
	if err := ev.send("response.output_item.done", &itemEvent{Type: "response.output_item.done",
		Item: respMessage{ID: ev.itemID, Content: []respOutputText{part}, Role: "assistant", Status: "completed",
			Type: "message", Summary: &[]struct{}{}}}); err != nil {
		return j.fail(ctx, errClientGone, "write")
	}
	return nil
}

func (ev *respEvents) completed(final *responseObject) error {
	return ev.send("response.completed", &responseStateEvent{Response: final, Type: "response.completed"})
}

// newUUID is a random UUID in its dashed form (the item id of vLLM's simple
// stream).
func newUUID() string {
	h := randomID()
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// --- background ---------------------------------------------------------------

// responsesBackground stores the response as "queued" and runs it detached
// from the client: a background request survives its client and ends only
// when it completes, is cancelled, or the server stops. Without stream it
// answers the queued object at once; with stream it relays the job's events
// (which GET /v1/responses/{id}?stream=true can replay).
func (s *Server) responsesBackground(w http.ResponseWriter, r *http.Request, j *job, req *responsesRequest, base *responseObject, msgs []any) {
	queued := *base
	queued.Status = "queued"
	bctx, cancel := context.WithCancelCause(context.Background())
	e := &storedResponse{obj: &queued, msgs: msgs, cancel: cancel, done: make(chan struct{})}
	if req.stream {
		e.events = &eventLog{changed: make(chan struct{})}
	}
	s.resp.put(base.ID, e)
	go s.runBackground(bctx, cancel, j, e, base)
	if !req.stream {
		writeJSON(w, http.StatusOK, &queued)
		return
	}
	s.replayEvents(w, r, e.events, 0)
}

func (s *Server) runBackground(ctx context.Context, cancel context.CancelCauseFunc, j *job, e *storedResponse, base *responseObject) {
	defer close(e.done)
	defer cancel(nil)
	var err error
	var final *responseObject
	if e.events != nil {
		defer e.events.close()
		ev := &respEvents{emit: e.events.append}
		if err = ev.run(ctx, j, base); err == nil {
			final = finalResponse(base, j)
			s.resp.setObj(e, final)
			_ = ev.completed(final)
		}
	} else if err = j.run(ctx, nil); err == nil {
		final = finalResponse(base, j)
		s.resp.setObj(e, final)
	}
	if err == nil {
		j.done()
		return
	}
	if err == errStopped {
		s.resp.mu.Lock()
		if st := e.obj.Status; st != "completed" && st != "cancelled" {
			failed := *e.obj
			failed.Status = "failed"
			e.obj = &failed
		}
		s.resp.mu.Unlock()
	}
}

// eventLog is the event history of a background stream.
type eventLog struct {
	mu      sync.Mutex
	frames  []sseFrame
	closed  bool
	changed chan struct{} // closed and replaced on every change
}

type sseFrame struct {
	name string
	data []byte
}

func (l *eventLog) append(name string, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frames = append(l.frames, sseFrame{name, data})
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	close(l.changed)
	l.changed = make(chan struct{})
}

// since returns the frames from index i on, whether the log is closed, and
// a channel closed at the next change.
func (l *eventLog) since(i int) ([]sseFrame, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sseFrame
	if i < len(l.frames) {
		out = append(out, l.frames[i:]...)
	}
	return out, l.closed, l.changed
}

// replayEvents streams a background response's events from index start
// until response.completed or the end of the job. Unlike vLLM, whose replay
// waits forever when a background stream is cancelled, the stream ends
// when the job does.
func (s *Server) replayEvents(w http.ResponseWriter, r *http.Request, l *eventLog, start int) {
	sw, err := startSSE(w)
	if err != nil {
		return
	}
	for i := start; ; {
		frames, closed, changed := l.since(i)
		for _, f := range frames {
			if err := sw.frame(f.name, f.data); err != nil {
				return
			}
			if f.name == "response.completed" {
				return
			}
		}
		i += len(frames)
		if closed && len(frames) == 0 {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
	}
}

// --- GET /v1/responses/{id} and cancel -------------------------------------------

func (s *Server) responsesRetrieve(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	stream := false
	if v := q.Get("stream"); v != "" {
		b, ok := pyBool(v)
		if !ok {
			writeAPIError(w, requestValidationError("bool_parsing", []any{"query", "stream"},
				"Input should be a valid boolean, unable to interpret input", strp("query.stream")))
			return
		}
		stream = b
	}
	start := 0
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeAPIError(w, requestValidationError("int_parsing", []any{"query", "starting_after"},
				"Input should be a valid integer, unable to parse string as an integer", strp("query.starting_after")))
			return
		}
		start = n + 1
	}
	e, o := s.resp.get(id)
	if o == nil {
		writeAPIError(w, responseNotFound(id))
		return
	}
	if !stream {
		writeJSON(w, http.StatusOK, o)
		return
	}
	if e.events == nil {
		writeAPIError(w, validationError("Unknown response_id: "+id, "response_id", id))
		return
	}
	s.replayEvents(w, r, e.events, max(start, 0))
}

func (s *Server) responsesCancel(w http.ResponseWriter, id string) {
	s.resp.mu.Lock()
	e := s.resp.m[id]
	if e == nil || e.obj == nil {
		s.resp.mu.Unlock()
		writeAPIError(w, responseNotFound(id))
		return
	}
	if st := e.obj.Status; st != "queued" && st != "in_progress" {
		s.resp.mu.Unlock()
		writeAPIError(w, invalidRequest(http.StatusBadRequest, "Cannot cancel a synchronous response.", "response_id"))
		return
	}
	cancelled := *e.obj
	cancelled.Status = "cancelled"
	e.obj = &cancelled
	s.resp.mu.Unlock()
	if e.cancel != nil {
		e.cancel(errCancelled)
		<-e.done // vLLM awaits the cancelled task before answering
	}
	writeJSON(w, http.StatusOK, &cancelled)
}

// pyBool parses a query or form boolean the way pydantic does in lax mode.
func pyBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "1", "true", "t", "yes", "y", "on":
		return true, true
	case "0", "false", "f", "no", "n", "off":
		return false, true
	}
	return false, false
}
