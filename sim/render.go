package sim

import (
	"encoding/json"
	"net/http"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// pyNum is a float encoded the way Python encodes one (1.0, not 1).
type pyNum float64

func (f pyNum) MarshalJSON() ([]byte, error) { return []byte(pyFloat(float64(f))), nil }

// renderSamplingParams is vLLM's SamplingParams as the render endpoints
// serialize it: msgspec's omit_defaults drops every field at its default
// (n 1, penalties 0/0/1, temperature 1.0, top_p 1.0, top_k 0, min_p 0.0,
// max_tokens 16, min_tokens 0, ignore_eos false, ...), in field order.
type renderSamplingParams struct {
	N                 *int            `json:"n,omitempty"`
	PresencePenalty   *pyNum          `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *pyNum          `json:"frequency_penalty,omitempty"`
	RepetitionPenalty *pyNum          `json:"repetition_penalty,omitempty"`
	Temperature       *pyNum          `json:"temperature,omitempty"`
	TopP              *pyNum          `json:"top_p,omitempty"`
	TopK              *int            `json:"top_k,omitempty"`
	MinP              *pyNum          `json:"min_p,omitempty"`
	Seed              *int            `json:"seed,omitempty"`
	Stop              json.RawMessage `json:"stop,omitempty"`
	StopTokenIDs      json.RawMessage `json:"stop_token_ids,omitempty"`
	IgnoreEOS         bool            `json:"ignore_eos,omitempty"`
	MaxTokens         *int            `json:"max_tokens,omitempty"`
	MinTokens         int             `json:"min_tokens,omitempty"`
	OutputKind        int             `json:"output_kind,omitempty"`
	SkipClone         bool            `json:"skip_clone,omitempty"`
}

type renderStreamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// renderResponse is vLLM's GenerateRequest, the answer of the render
// endpoints.
type renderResponse struct {
	RequestID        string               `json:"request_id"`
	TokenIDs         []int                `json:"token_ids"`
	Features         *struct{}            `json:"features"`
	SamplingParams   renderSamplingParams `json:"sampling_params"`
	Model            *string              `json:"model"`
	Stream           bool                 `json:"stream"`
	StreamOptions    *renderStreamOptions `json:"stream_options"`
	CacheSalt        *string              `json:"cache_salt"`
	Priority         int                  `json:"priority"`
	KVTransferParams *struct{}            `json:"kv_transfer_params"`
}

// render serves POST /v1/chat/completions/render and
// /v1/completions/render (vLLM >= 0.18): the request is validated and
// rendered exactly as a generation request would be (same parsing, 404,
// tokenization, length and sampling checks), then answered with the token
// ids instead of being scheduled. Chat answers one object, completions an
// array with one element per prompt. Nothing is queued or counted in Stats.
func (s *Server) render(w http.ResponseWriter, r *http.Request, body []byte, k kind) {
	cfg := s.Config()
	if e := checkContentType(r); e != nil {
		writeAPIError(w, e)
		return
	}
	req, v, e := parseRequest(k, body)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	if e := checkModel(v, cfg); e != nil {
		writeAPIError(w, e)
		return
	}
	if b := v.Get("use_beam_search"); b != nil && b.Kind == ojson.Bool && b.Bool {
		writeAPIError(w, badInput("Beam search is not supported by the render endpoint"))
		return
	}
	sp, e := renderParams(req, v, body)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ids, e := renderIDs(req, v, body, cfg.Tokenizer)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	req.promptTokens = make([]int, len(ids))
	for i := range ids {
		if len(ids[i]) == 0 {
			writeAPIError(w, badInput("No token_ids rendered"))
			return
		}
		req.promptTokens[i] = len(ids[i])
	}
	plans, e := validateBudget(req, cfg)
	if e != nil {
		writeAPIError(w, e)
		return
	}

	var model *string
	if m := v.Get("model"); m != nil && m.Kind == ojson.String {
		model = &m.Str
	}
	var so *renderStreamOptions
	if req.stream {
		if o := v.Get("stream_options"); o != nil && o.Kind == ojson.Object {
			inc, _ := optBool(o, "include_usage")
			cont, _ := optBool(o, "continuous_usage_stats")
			so = &renderStreamOptions{IncludeUsage: inc == nil || *inc, ContinuousUsageStats: cont != nil && *cont}
		}
	}
	var salt *string
	if c := v.Get("cache_salt"); c != nil && c.Kind == ojson.String {
		salt = &c.Str
	}
	priority := 0
	if p, _ := optInt(v, "priority"); p != nil {
		priority = *p
	}
	out := make([]renderResponse, len(ids))
	for i := range ids {
		p := sp
		if budget := plans[i].budget; budget != 16 {
			p.MaxTokens = &budget
		}
		id := "cmpl-" + randomID()
		if k == kindChat {
			id = "chatcmpl-" + randomID()
		}
		out[i] = renderResponse{RequestID: id, TokenIDs: ids[i], SamplingParams: p, Model: model,
			Stream: req.stream, StreamOptions: so, CacheSalt: salt, Priority: priority}
	}
	if k == kindChat {
		writeJSON(w, http.StatusOK, out[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// renderParams builds the sampling parameters vLLM's to_sampling_params
// makes from the request, max_tokens aside.
func renderParams(req *genRequest, v *ojson.Value, body []byte) (renderSamplingParams, *apiError) {
	p := renderSamplingParams{OutputKind: 2, SkipClone: true} // FINAL_ONLY
	if req.stream {
		p.OutputKind = 1 // DELTA
	}
	if req.n != 1 {
		n := req.n
		p.N = &n
	}
	greedy := req.temperature != nil && *req.temperature < 1e-5
	floats := []struct {
		name string
		dst  **pyNum
		def  float64
	}{
		{"presence_penalty", &p.PresencePenalty, 0},
		{"frequency_penalty", &p.FrequencyPenalty, 0},
		{"repetition_penalty", &p.RepetitionPenalty, 1},
		{"temperature", &p.Temperature, 1},
		{"top_p", &p.TopP, 1},
		{"min_p", &p.MinP, 0},
	}
	for _, f := range floats {
		x, e := optFloat(v, f.name)
		if e != nil {
			return p, e
		}
		if x == nil || *x == f.def || (greedy && (f.name == "top_p" || f.name == "min_p")) {
			continue
		}
		n := pyNum(*x)
		*f.dst = &n
	}
	for _, f := range []struct {
		name string
		dst  **int
	}{{"top_k", &p.TopK}, {"seed", &p.Seed}} {
		x, e := optInt(v, f.name)
		if e != nil {
			return p, e
		}
		if x == nil || (f.name == "top_k" && (*x == 0 || greedy)) {
			continue
		}
		*f.dst = x
	}
	for _, f := range []struct {
		name string
		dst  *json.RawMessage
	}{{"stop", &p.Stop}, {"stop_token_ids", &p.StopTokenIDs}} {
		if x := v.Get(f.name); !x.IsNull() && !(x.Kind == ojson.Array && len(x.Items) == 0) {
			*f.dst = json.RawMessage(x.Raw(body))
		}
	}
	p.IgnoreEOS = req.ignoreEOS
	p.MinTokens = req.minTokens
	if c := v.Get("cache_salt"); !c.IsNull() && (c.Kind != ojson.String || c.Str == "") {
		return p, modelValidatorError("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
	}
	if _, e := optInt(v, "priority"); e != nil {
		return p, e
	}
	return p, nil
}

// renderIDs tokenizes each prompt exactly as /tokenize does (the chat body
// as is; each text prompt with the request's add_special_tokens); token-id
// prompts are their own ids.
func renderIDs(req *genRequest, v *ojson.Value, body []byte, tok Tokenizer) ([][]int, *apiError) {
	notImpl := func(api string) *apiError {
		return &apiError{Status: http.StatusNotImplemented, Type: "NotImplementedError",
			Message: "The model does not support " + api + " Render API"}
	}
	fail := func(err error) *apiError {
		return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()}
	}
	if req.kind == kindChat {
		ider, ok := tok.(ChatTokenIDer)
		if !ok {
			return nil, notImpl("Chat Completions")
		}
		ids, err := ider.ChatTokenIDs(body)
		if err != nil {
			return nil, fail(err)
		}
		return [][]int{ids}, nil
	}
	ider, ok := tok.(CompletionTokenIDer)
	if !ok {
		return nil, notImpl("Completions")
	}
	out := make([][]int, len(req.prompts))
	for i, p := range req.prompts {
		if p.ids {
			pv, err := ojson.Parse(p.raw, ojson.DefaultMaxDepth)
			if err != nil {
				return nil, fail(err)
			}
			out[i], _ = intList(pv)
			continue
		}
		ids, err := ider.CompletionTokenIDs(singlePromptBody(v, body, p.raw))
		if err != nil {
			return nil, fail(err)
		}
		out[i] = ids
	}
	return out, nil
}
