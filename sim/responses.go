package sim

import (
	"fmt"
	"net/http"
	"strings"
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
