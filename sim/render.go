package sim

import (
	"net/http"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// The render endpoints (vLLM >= 0.18, vllm/entrypoints/serve/render) are
// modelled on vLLM's ServingRender: the request is first validated as the
// generation request it is (pydantic, then the model check), then
// render_chat_request / render_completion_request refuse beam search,
// render the prompt into engine inputs (token ids), and build one
// GenerateRequest per engine input from get_max_tokens and the request's
// to_sampling_params. The sampling parameters are vLLM's SamplingParams
// (render_sampling.go).

// generateRequest is vLLM's GenerateRequest (serve/disagg/protocol.py), the
// answer of the render endpoints, with its fields in vLLM's order.
type generateRequest struct {
	RequestID        string             `json:"request_id"`
	TokenIDs         []int              `json:"token_ids"`
	Features         *struct{}          `json:"features"` // null: text-only prompts
	SamplingParams   samplingParams     `json:"sampling_params"`
	Model            *string            `json:"model"`
	Stream           bool               `json:"stream"`
	StreamOptions    *streamOptionsEcho `json:"stream_options"`
	CacheSalt        *string            `json:"cache_salt"`
	Priority         int                `json:"priority"`
	KVTransferParams *struct{}          `json:"kv_transfer_params"`
}

// streamOptionsEcho is the request's StreamOptions as pydantic holds it
// (include_usage defaults to true, continuous_usage_stats to false).
type streamOptionsEcho struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// renderFields are the request fields the render endpoints carry into the
// GenerateRequest besides the prompt and the budget.
type renderFields struct {
	model     *string
	streamOpt *streamOptionsEcho
	cacheSalt *string
	priority  int
	sampling  samplingRequest
}

// render serves POST /v1/chat/completions/render (one GenerateRequest) and
// /v1/completions/render (a list, one per prompt). Nothing is queued or
// counted in Stats.
func (s *Server) render(w http.ResponseWriter, r *http.Request, body []byte, k kind) {
	out, e := s.renderRequest(r, body, k)
	switch {
	case e != nil:
		writeAPIError(w, e)
	case k == kindChat:
		writeJSON(w, http.StatusOK, out[0])
	default:
		writeJSON(w, http.StatusOK, out)
	}
}

// renderRequest is the validation (content type, pydantic, model) followed
// by ServingRender's render_*_request.
func (s *Server) renderRequest(r *http.Request, body []byte, k kind) ([]generateRequest, *apiError) {
	cfg := s.Config()
	if e := checkContentType(r); e != nil {
		return nil, e
	}
	req, v, e := parseRequest(k, body)
	if e != nil {
		return nil, e
	}
	f, e := readRenderFields(req, v)
	if e != nil {
		return nil, e
	}
	if e := checkModel(v, cfg); e != nil {
		return nil, e
	}
	if b := v.Get("use_beam_search"); b != nil && b.Kind == ojson.Bool && b.Bool {
		return nil, badInput("Beam search is not supported by the render endpoint")
	}
	inputs, e := renderEngineInputs(req, v, body, cfg.Tokenizer)
	if e != nil {
		return nil, e
	}
	req.promptTokens = make([]int, len(inputs))
	for i, ids := range inputs {
		if len(ids) == 0 {
			return nil, badInput("No token_ids rendered")
		}
		req.promptTokens[i] = len(ids)
	}
	plans, e := validateBudget(req, cfg) // the renderer's length checks, get_max_tokens
	if e != nil {
		return nil, e
	}
	prefix := "cmpl-"
	if k == kindChat {
		prefix = "chatcmpl-"
	}
	out := make([]generateRequest, len(inputs))
	for i, ids := range inputs {
		out[i] = generateRequest{
			RequestID:      prefix + randomID(),
			TokenIDs:       ids,
			SamplingParams: f.sampling.toSamplingParams(plans[i].budget),
			Model:          f.model,
			Stream:         req.stream,
			StreamOptions:  f.streamOpt,
			CacheSalt:      f.cacheSalt,
			Priority:       f.priority,
		}
	}
	return out, nil
}

// readRenderFields validates, as pydantic does, the request fields a
// GenerateRequest carries that parseRequest does not read.
func readRenderFields(req *genRequest, v *ojson.Value) (renderFields, *apiError) {
	var f renderFields
	if m := v.Get("model"); m != nil && m.Kind == ojson.String {
		f.model = &m.Str
	}
	// stream_options is echoed only with stream (parseRequest has checked
	// its type and refused it, non-empty, without stream).
	if o := v.Get("stream_options"); req.stream && o != nil && o.Kind == ojson.Object {
		f.streamOpt = &streamOptionsEcho{IncludeUsage: req.includeUsage,
			ContinuousUsageStats: optTrue(o, "continuous_usage_stats")}
	}
	if c := v.Get("cache_salt"); !c.IsNull() {
		// validate_cache_salt, a model validator before the fields'.
		if c.Kind != ojson.String || c.Str == "" {
			return f, modelValidatorError("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
		}
		f.cacheSalt = &c.Str
	}
	p, e := optInt(v, "priority")
	if e != nil {
		return f, e
	}
	if p != nil {
		f.priority = *p
	}
	f.sampling, e = readSamplingRequest(req, v)
	return f, e
}

// optTrue reports whether obj's boolean field name is present and true.
func optTrue(obj *ojson.Value, name string) bool {
	b := obj.Get(name)
	return b != nil && b.Kind == ojson.Bool && b.Bool
}

// renderEngineInputs is the online renderer's output, one engine input per
// prompt: a chat conversation through the chat template, each text prompt
// of a completions request tokenized on its own with the request's
// add_special_tokens, token-id prompts as given. The ids are exactly the
// ones /tokenize answers; a Tokenizer that gives no ids answers 501.
func renderEngineInputs(req *genRequest, v *ojson.Value, body []byte, tok Tokenizer) ([][]int, *apiError) {
	unsupported := func(api string) *apiError {
		return &apiError{Status: http.StatusNotImplemented, Type: "NotImplementedError",
			Message: "The model does not support " + api + " Render API"}
	}
	renderFailed := func(err error) *apiError {
		return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()}
	}
	if req.kind == kindChat {
		chat, ok := tok.(ChatTokenIDer)
		if !ok {
			return nil, unsupported("Chat Completions")
		}
		ids, err := chat.ChatTokenIDs(body)
		if err != nil {
			return nil, renderFailed(err)
		}
		return [][]int{ids}, nil
	}
	text, ok := tok.(CompletionTokenIDer)
	if !ok {
		return nil, unsupported("Completions")
	}
	inputs := make([][]int, 0, len(req.prompts))
	for _, p := range req.prompts {
		if p.ids {
			ids, err := tokenIDs(p.raw)
			if err != nil {
				return nil, renderFailed(err)
			}
			inputs = append(inputs, ids)
			continue
		}
		ids, err := text.CompletionTokenIDs(singlePromptBody(v, body, p.raw))
		if err != nil {
			return nil, renderFailed(err)
		}
		inputs = append(inputs, ids)
	}
	return inputs, nil
}

// tokenIDs decodes a token-id prompt (parsePrompts has checked it is a
// list of integers).
func tokenIDs(raw []byte) ([]int, error) {
	a, err := ojson.Parse(raw, ojson.DefaultMaxDepth)
	if err != nil {
		return nil, err
	}
	ids := make([]int, len(a.Items))
	for i, it := range a.Items {
		n, _ := it.Int()
		ids[i] = int(n)
	}
	return ids, nil
}
