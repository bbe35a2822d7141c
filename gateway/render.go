package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// Render: POST /v1/chat/completions/render and /v1/completions/render
// (vLLM >= 0.18) return what vLLM would hand its engine for the request, a
// GenerateRequest, without generating: the prompt's token ids and the
// sampling parameters. llm-d's router and llm-d-inference-sim call them
// for prefix-cache-aware routing. The gateway answers them itself when it
// reproduces vLLM exactly: the door's checks (the same rejections as the
// generation endpoint), the door's own token ids (the ids /tokenize
// answers), and a request whose every field is one this file renders; any
// other request goes to a ready backend outside the queue, as /tokenize's
// uncounted requests do.

// renderSampling is vLLM's SamplingParams as the render endpoints
// serialize it (msgspec, omit_defaults): only fields off their default, in
// field order. max_tokens is absent at 16, its default.
type renderSampling struct {
	N                 *int            `json:"n,omitempty"`
	PresencePenalty   *pyFloat        `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *pyFloat        `json:"frequency_penalty,omitempty"`
	RepetitionPenalty *pyFloat        `json:"repetition_penalty,omitempty"`
	Temperature       *pyFloat        `json:"temperature,omitempty"`
	TopP              *pyFloat        `json:"top_p,omitempty"`
	TopK              *int            `json:"top_k,omitempty"`
	MinP              *pyFloat        `json:"min_p,omitempty"`
	Seed              *int64          `json:"seed,omitempty"`
	Stop              json.RawMessage `json:"stop,omitempty"`
	StopTokenIDs      json.RawMessage `json:"stop_token_ids,omitempty"`
	IgnoreEOS         bool            `json:"ignore_eos,omitempty"`
	MaxTokens         *int            `json:"max_tokens,omitempty"`
	MinTokens         int             `json:"min_tokens,omitempty"`
	OutputKind        int             `json:"output_kind,omitempty"` // 1 DELTA (stream), 2 FINAL_ONLY
	SkipClone         bool            `json:"skip_clone,omitempty"`
}

type renderStreamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// renderAnswer is vLLM's GenerateRequest.
type renderAnswer struct {
	RequestID        string               `json:"request_id"`
	TokenIDs         []int                `json:"token_ids"`
	Features         *struct{}            `json:"features"` // null: text only
	SamplingParams   renderSampling       `json:"sampling_params"`
	Model            *string              `json:"model"`
	Stream           bool                 `json:"stream"`
	StreamOptions    *renderStreamOptions `json:"stream_options"`
	CacheSalt        *string              `json:"cache_salt"`
	Priority         int                  `json:"priority"`
	KVTransferParams *struct{}            `json:"kv_transfer_params"`
}

// pyFloat is a float written as Python's repr writes it (1.0, 0.7, 1e-05).
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if x != 0 {
		if e := math.Floor(math.Log10(math.Abs(x))); e < -4 || e >= 16 {
			return []byte(strconv.FormatFloat(x, 'e', -1, 64)), nil
		}
	}
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return []byte(s), nil
}

// Fields the local renderer reads; a request with any other field set
// (logprobs, response_format, logit_bias, ...) is rendered by a backend.
var (
	renderCommonKeys = []string{"model", "max_tokens", "n", "stream", "stream_options", "temperature", "top_p", "top_k",
		"min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "stop", "stop_token_ids",
		"ignore_eos", "min_tokens", "cache_salt", "priority", "user", "add_special_tokens"}
	renderChatKeys       = []string{"messages", "max_completion_tokens", "tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "documents"}
	renderCompletionKeys = []string{"prompt"}
)

// render handles POST /v1/chat/completions/render (ep Chat: one object)
// and /v1/completions/render (ep Completions: an array, one element per
// prompt).
func (g *Gateway) render(ep admission.Endpoint) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		body, err := g.readJSONBody(w, r, x)
		if err != nil {
			return err
		}
		slot, err := g.localWork(x)
		if err != nil {
			return err
		}
		defer slot.release()
		door, kc := g.doorFor(x)
		dec, rej := door.Check(ep, body)
		if rej != nil {
			return notAllowed(kc, g.refused(x, rej))
		}
		rt := g.decided(x, dec)
		x.stream, x.promptTokens, x.maxTokens = dec.Stream, dec.PromptTokens, dec.MaxTokens
		switch {
		case dec.Uncounted != admission.Counted:
			x.uncounted = dec.Uncounted.String()
		case dec.ClampedFrom > 0:
			x.uncounted = "clamped" // vLLM refuses what the door would clamp
		default:
			out, reason, err := renderLocal(rt, ep, dec)
			if err != nil {
				return err
			}
			if reason == "" {
				if ep.Chat() {
					writeJSONRaw(w, http.StatusOK, out[0])
				} else {
					writeJSONRaw(w, http.StatusOK, out)
				}
				return nil
			}
			x.uncounted = reason
		}
		slot.release()
		return g.forwardOutsideQueue(w, r, x, rt, body)
	}
}

// renderLocal builds the answer, or names why it cannot reproduce vLLM's
// (reason != ""). err is a request the door's own tokenizer refuses.
func renderLocal(rt *modelRuntime, ep admission.Endpoint, dec admission.Decision) ([]renderAnswer, string, error) {
	req, body := dec.Request, dec.Body
	keys := renderCompletionKeys
	if ep.Chat() {
		keys = renderChatKeys
	}
	for _, m := range req.Members {
		if !contains(renderCommonKeys, m.Key) && !contains(keys, m.Key) && !m.Value.IsNull() {
			return nil, "render_field_" + m.Key, nil
		}
	}
	ids, reason, err := renderIDs(rt.tok, ep, req, body)
	if reason != "" || err != nil {
		return nil, reason, err
	}
	sp, reason := renderSamplingParams(req, dec)
	if reason != "" {
		return nil, reason, nil
	}
	var so *renderStreamOptions
	if o := req.Get("stream_options"); !o.IsNull() {
		if !dec.Stream || o.Kind != ojson.Object {
			return nil, "stream_options", nil
		}
		inc, ok1 := optionalBool(o.Get("include_usage"))
		cont, ok2 := optionalBool(o.Get("continuous_usage_stats"))
		if !ok1 || !ok2 {
			return nil, "stream_options", nil
		}
		so = &renderStreamOptions{IncludeUsage: inc == nil || *inc, ContinuousUsageStats: cont != nil && *cont}
	}
	var salt *string
	if c := req.Get("cache_salt"); !c.IsNull() {
		if c.Kind != ojson.String || c.Str == "" {
			return nil, "cache_salt", nil
		}
		salt = &c.Str
	}
	priority := 0
	if p := req.Get("priority"); !p.IsNull() {
		n, ok := intValue(p)
		if !ok || n != int64(int(n)) {
			return nil, "priority", nil
		}
		priority = int(n)
	}
	model := dec.Model
	L := rt.fm.MaxModelLen()
	out := make([]renderAnswer, len(ids))
	for i := range ids {
		if len(ids[i]) == 0 {
			return nil, "empty_prompt", nil
		}
		p := sp
		budget := L - len(ids[i]) // vLLM's get_max_tokens
		if dec.MaxTokens > 0 {
			budget = min(budget, dec.MaxTokens)
		}
		if budget < 1 || p.MinTokens > budget {
			return nil, "output_budget", nil
		}
		if budget != 16 {
			p.MaxTokens = &budget
		}
		prefix := "cmpl-"
		if ep.Chat() {
			prefix = "chatcmpl-"
		}
		out[i] = renderAnswer{RequestID: prefix + randomHex(), TokenIDs: ids[i], SamplingParams: p, Model: &model,
			Stream: dec.Stream, StreamOptions: so, CacheSalt: salt, Priority: priority}
	}
	return out, "", nil
}

// renderIDs is each prompt's token ids: the chat conversation as /tokenize
// renders it, each completions prompt as /tokenize encodes it on its own
// (the request's add_special_tokens), token-id prompts as given.
func renderIDs(tok *tokenize.Model, ep admission.Endpoint, req *ojson.Value, body []byte) ([][]int, string, error) {
	one := func(ids []int, err error) ([]int, string, error) {
		var ne *tokenize.NotExactError
		switch {
		case err == nil:
			return ids, "", nil
		case errors.As(err, &ne):
			return nil, ne.Reason, nil
		}
		if rej := admission.CountRejection(ep, err); rej != nil {
			return nil, "", rejection(rej)
		}
		return nil, "", err
	}
	if ep.Chat() {
		ids, reason, err := one(tok.TokenizeChat(req))
		return [][]int{ids}, reason, err
	}
	p := req.Get("prompt")
	if p.Kind != ojson.Array || len(p.Items) == 0 || p.Items[0].Kind == ojson.Number {
		ids, reason, err := one(tok.TokenizeCompletion(req))
		return [][]int{ids}, reason, err
	}
	out := make([][]int, len(p.Items))
	for i, it := range p.Items {
		// One prompt at a time, with the request's add_special_tokens.
		var b bytes.Buffer
		b.WriteString(`{"prompt":`)
		b.Write(it.Raw(body))
		if a := req.Get("add_special_tokens"); a != nil {
			b.WriteString(`,"add_special_tokens":`)
			b.Write(a.Raw(body))
		}
		b.WriteByte('}')
		v, perr := ojson.Parse(b.Bytes(), ojson.DefaultMaxDepth)
		if perr != nil {
			return nil, "prompt", nil
		}
		ids, reason, err := one(tok.TokenizeCompletion(v))
		if reason != "" || err != nil {
			return nil, reason, err
		}
		out[i] = ids
	}
	return out, "", nil
}

// renderSamplingParams is vLLM's to_sampling_params for the fields the
// local renderer reads, max_tokens aside; a value vLLM would refuse or
// normalize in a way not reproduced here names its field as the reason.
func renderSamplingParams(req *ojson.Value, dec admission.Decision) (renderSampling, string) {
	p := renderSampling{OutputKind: 2, SkipClone: true}
	if dec.Stream {
		p.OutputKind = 1
	}
	if dec.N != 1 {
		n := dec.N
		p.N = &n
	}
	temp, ok := optionalFloat(req.Get("temperature"))
	if !ok || temp != nil && *temp < 0 {
		return p, "temperature"
	}
	greedy := temp != nil && *temp < 1e-5
	if greedy && dec.N > 1 {
		return p, "n"
	}
	for _, f := range []struct {
		name   string
		dst    **pyFloat
		def    float64
		lo, hi float64
	}{
		{"presence_penalty", &p.PresencePenalty, 0, -2, 2},
		{"frequency_penalty", &p.FrequencyPenalty, 0, -2, 2},
		{"repetition_penalty", &p.RepetitionPenalty, 1, math.SmallestNonzeroFloat64, math.MaxFloat64},
		{"temperature", &p.Temperature, 1, 0, math.MaxFloat64},
		{"top_p", &p.TopP, 1, math.SmallestNonzeroFloat64, 1},
		{"min_p", &p.MinP, 0, 0, 1},
	} {
		v, ok := optionalFloat(req.Get(f.name))
		if !ok || v != nil && (*v < f.lo || *v > f.hi) {
			return p, f.name
		}
		if v == nil || *v == f.def || greedy && (f.name == "top_p" || f.name == "min_p") {
			continue
		}
		x := pyFloat(*v)
		*f.dst = &x
	}
	if v := req.Get("top_k"); !v.IsNull() {
		k, ok := intValue(v)
		if !ok || k < 0 || k > math.MaxInt32 {
			return p, "top_k" // -1 is normalized by vLLM
		}
		if k != 0 && !greedy {
			kk := int(k)
			p.TopK = &kk
		}
	}
	if v := req.Get("seed"); !v.IsNull() {
		s, ok := intValue(v)
		if !ok {
			return p, "seed"
		}
		p.Seed = &s
	}
	if v := req.Get("stop"); !v.IsNull() {
		if v.Kind != ojson.Array {
			return p, "stop" // a string becomes a list in vLLM
		}
		var ss []string
		for _, it := range v.Items {
			if it.Kind != ojson.String {
				return p, "stop"
			}
			ss = append(ss, it.Str)
		}
		if len(ss) > 0 {
			p.Stop = rawJSON(ss)
		}
	}
	if v := req.Get("stop_token_ids"); !v.IsNull() {
		if v.Kind != ojson.Array {
			return p, "stop_token_ids"
		}
		var ids []int64
		for _, it := range v.Items {
			n, ok := intValue(it)
			if !ok {
				return p, "stop_token_ids"
			}
			ids = append(ids, n)
		}
		if len(ids) > 0 {
			p.StopTokenIDs = rawJSON(ids)
		}
	}
	if b, ok := optionalBool(req.Get("ignore_eos")); !ok {
		return p, "ignore_eos"
	} else if b != nil {
		p.IgnoreEOS = *b
	}
	if v := req.Get("min_tokens"); !v.IsNull() {
		n, ok := intValue(v)
		if !ok || n < 0 || n > math.MaxInt32 {
			return p, "min_tokens"
		}
		p.MinTokens = int(n)
	}
	return p, ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func optionalFloat(v *ojson.Value) (*float64, bool) {
	if v.IsNull() {
		return nil, true
	}
	if v.Kind != ojson.Number {
		return nil, false
	}
	f, err := strconv.ParseFloat(v.Str, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, false
	}
	return &f, true
}

func optionalBool(v *ojson.Value) (*bool, bool) {
	if v.IsNull() {
		return nil, true
	}
	if v.Kind != ojson.Bool {
		return nil, false
	}
	b := v.Bool
	return &b, true
}

func intValue(v *ojson.Value) (int64, bool) {
	return v.LaxInt() // pydantic's lax int: 2.0 is 2
}

func rawJSON(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
