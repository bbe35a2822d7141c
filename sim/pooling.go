package sim

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"
)

// poolKind is one of vLLM's pooling endpoint families.
type poolKind int

const (
	poolEmbed    poolKind = iota // POST /v1/embeddings
	poolPooling                  // POST /pooling
	poolClassify                 // POST /classify
	poolScore                    // POST /score, /v1/score
	poolRerank                   // POST /rerank, /v1/rerank, /v2/rerank
)

// idPrefix is the response id prefix vLLM uses for the family.
func (k poolKind) idPrefix() string {
	switch k {
	case poolPooling:
		return "pool-"
	case poolClassify:
		return "classify-"
	case poolScore:
		return "score-"
	case poolRerank:
		return "rerank-"
	}
	return "embd-"
}

// operation names the family in vLLM's pooling context-length message.
func (k poolKind) operation() string {
	switch k {
	case poolScore:
		return "score"
	case poolClassify:
		return "classification"
	}
	return "embedding generation"
}

// classLabels are the labels of the simulated sequence classifier (the
// id2label Hugging Face gives a config without one).
var classLabels = []string{"LABEL_0", "LABEL_1"}

// poolInput is one prompt of a pooling request: a text, token ids or a chat
// conversation, or for score and rerank a (query, document) pair.
type poolInput struct {
	body  []byte // what the Tokenizer receives (prompt or chat form); nil for ids
	chat  bool
	ids   []int // the prompt, when given as token ids
	isIDs bool
	pair  *poolInput // the document of a score/rerank pair
	doc   string     // rerank: the document text, echoed in the result
}

// poolRequest is a parsed and validated pooling request.
type poolRequest struct {
	kind       poolKind
	inputs     []poolInput
	truncate   *int // truncate_prompt_tokens
	keepFirst  bool // truncation_side "right": keep the first tokens
	base64     bool // encoding_format "base64"
	dimensions *int
	task       string // /pooling: embed, classify, token_embed, token_classify
	topN       int    // rerank
}

// poolPrompt is one input after counting.
type poolPrompt struct {
	ids    []int // nil when the Tokenizer only counts
	tokens int
	seed   uint64
}

// pool serves the pooling endpoints: validation in vLLM's order (content
// type, pydantic, model, then FailStatus, truncation and context length),
// one scheduler ticket taking a running slot per prompt, a prefill of TTFT
// (one TokenGate step), then the family's answer.
func (s *Server) pool(w http.ResponseWriter, r *http.Request, body []byte, k poolKind) {
	arrival := time.Now()
	ctx := r.Context()
	cfg := s.Config()
	log := s.log.With(zap.String("route", r.URL.Path))

	if s.admissionFaults(ctx, w, cfg, log, writeAPIError) {
		return
	}
	if e := checkContentType(r); e != nil {
		s.reject(w, e)
		return
	}
	req, v, late, e := parsePoolRequest(k, body)
	if e != nil {
		s.reject(w, e)
		return
	}
	if e := checkModel(v, cfg); e != nil {
		s.reject(w, e)
		return
	}
	if cfg.FailStatus > 0 {
		log.Debug("sim failing request (FailStatus)", zap.Int("status", cfg.FailStatus))
		s.reject(w, failError(cfg.FailStatus, cfg.FailMessage))
		return
	}
	if req.truncate != nil && *req.truncate > cfg.MaxModelLen {
		s.reject(w, &apiError{Status: http.StatusBadRequest, Type: "BadRequestError",
			Message: "truncate_prompt_tokens value is greater than max_model_len. Please request a smaller truncation size."})
		return
	}
	if late != nil {
		s.reject(w, late)
		return
	}
	if e := checkDimensions(req, cfg); e != nil {
		s.reject(w, e)
		return
	}
	prompts, total, e := countPool(req, cfg)
	if e != nil {
		s.reject(w, e)
		return
	}

	reqID := r.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = randomID()
	}
	id := k.idPrefix() + reqID
	log = log.With(zap.String("request_id", id))
	log.Debug("sim pooling request accepted", zap.Int("prompts", len(prompts)), zap.Int("prompt_tokens", total))

	if err := s.runPool(ctx, cfg, arrival, len(prompts), total); err != nil {
		s.poolFailed(w, log, cfg.Model, len(prompts), err)
		return
	}
	if ctx.Err() != nil {
		s.aborted(log, cfg.Model, len(prompts), "write")
		return
	}
	writeJSON(w, http.StatusOK, poolResponse(req, prompts, total, id, cfg, servedName(v, cfg), arrival.Unix()))
	cfg.processed(total)
	end := time.Now()
	for _, p := range prompts {
		s.m.e2e.WithLabelValues(cfg.Model, "0").Observe(end.Sub(arrival).Seconds())
		s.m.reqPrompt.WithLabelValues(cfg.Model, "0").Observe(float64(p.tokens))
		s.m.reqGen.WithLabelValues(cfg.Model, "0").Observe(0)
		s.m.success.WithLabelValues(cfg.Model, "0", "stop").Inc()
	}
	s.count(func(st *Stats) { st.Completed++ })
}

// runPool schedules the prompts (one running slot each, their tokens of KV
// space) and waits for the prefill.
func (s *Server) runPool(ctx context.Context, cfg Config, arrival time.Time, seqs, tokens int) error {
	t, err := s.admitSeqs(ctx, tokens, seqs)
	if err != nil {
		return fmt.Errorf("waiting: %w", err)
	}
	defer s.release(t)
	s.m.queue.WithLabelValues(cfg.Model, "0").Observe(time.Since(arrival).Seconds())
	if err := s.wait(ctx, cfg.TTFT, cfg.TokenGate); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	s.m.promptTok.WithLabelValues(cfg.Model, "0").Add(float64(tokens))
	return nil
}

// poolFailed ends a pooling request interrupted by its client or shutdown.
func (s *Server) poolFailed(w http.ResponseWriter, log *zap.Logger, model string, seqs int, err error) {
	if !errors.Is(err, errStopped) {
		s.aborted(log, model, seqs, err.Error())
		return
	}
	for range seqs {
		s.m.success.WithLabelValues(model, "0", "error").Inc()
	}
	s.count(func(st *Stats) { st.Failed++ })
	log.Info("sim request aborted by shutdown")
	writeAPIError(w, generationError())
}

// checkDimensions is PoolingParams' matryoshka check for embed requests.
func checkDimensions(req *poolRequest, cfg Config) *apiError {
	if req.dimensions == nil || (req.kind != poolEmbed && req.kind != poolPooling) {
		return nil
	}
	bad := func(msg string) *apiError {
		return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: msg}
	}
	if !cfg.Matryoshka {
		return bad(fmt.Sprintf("Model %q does not support matryoshka representation, "+
			"changing output dimensions will lead to poor results.", cfg.Model))
	}
	if *req.dimensions < 1 {
		return bad("Dimensions must be greater than 0")
	}
	return nil
}

// countPool counts every input with the Tokenizer, applies
// truncate_prompt_tokens and vLLM's pooling length check.
func countPool(req *poolRequest, cfg Config) ([]poolPrompt, int, *apiError) {
	L := cfg.MaxModelLen
	limit := -1
	if req.truncate != nil {
		limit = *req.truncate
		if limit == -1 {
			limit = L
		}
	}
	out := make([]poolPrompt, len(req.inputs))
	total := 0
	for i := range req.inputs {
		in := &req.inputs[i]
		ids, n, err := countInput(cfg.Tokenizer, in)
		if err == nil && in.pair != nil {
			var ids2 []int
			var n2 int
			ids2, n2, err = countInput(cfg.Tokenizer, in.pair)
			n += n2
			if ids != nil && ids2 != nil {
				ids = append(ids, ids2...)
			} else {
				ids = nil
			}
		}
		if err != nil {
			return nil, 0, &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()}
		}
		if limit >= 0 && n > limit {
			if ids != nil {
				if req.keepFirst {
					ids = ids[:limit]
				} else {
					ids = ids[len(ids)-limit:]
				}
			}
			n = limit
		}
		if n > L {
			return nil, 0, &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: fmt.Sprintf(
				"This model's maximum context length is %d tokens. However, you requested %d tokens in the input for %s. "+
					"Please reduce the length of the input.", L, n, req.kind.operation())}
		}
		out[i] = poolPrompt{ids: ids, tokens: n, seed: inputSeed(in, ids, n)}
		total += n
	}
	return out, total, nil
}

// countInput returns the token ids of one input when the Tokenizer can
// give them, and its count.
func countInput(tok Tokenizer, in *poolInput) ([]int, int, error) {
	if in.isIDs {
		return in.ids, len(in.ids), nil
	}
	if in.chat {
		if ider, ok := tok.(ChatTokenIDer); ok {
			ids, err := ider.ChatTokenIDs(in.body)
			return ids, len(ids), err
		}
		n, err := tok.ChatPromptTokens(in.body)
		return nil, n, err
	}
	if ider, ok := tok.(CompletionTokenIDer); ok {
		ids, err := ider.CompletionTokenIDs(in.body)
		return ids, len(ids), err
	}
	n, err := tok.CompletionPromptTokens(in.body)
	return nil, n, err
}

// inputSeed makes an input's outputs deterministic: from its token ids when
// known (so a text and its ids embed alike), else from its bytes and count.
func inputSeed(in *poolInput, ids []int, n int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	if ids != nil {
		for _, id := range ids {
			binary.LittleEndian.PutUint64(b[:], uint64(id))
			h.Write(b[:])
		}
		return h.Sum64()
	}
	for p := in; p != nil; p = p.pair {
		h.Write(p.body)
		h.Write([]byte{0})
	}
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	return h.Sum64()
}

// splitmix64 is a small deterministic generator for simulated outputs.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	z := x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unitFloat maps a seed to (0, 1).
func unitFloat(seed uint64) float64 {
	return (float64(splitmix64(seed)>>11) + 0.5) / (1 << 53)
}

// embedVector is the simulated embedding of a seed: dim components from a
// seeded generator, truncated to dimensions (when smaller) and normalized
// to unit length, in float32 as a model returns them.
func embedVector(seed uint64, dim int, dimensions *int) []float32 {
	v := make([]float32, dim)
	x := seed
	for i := range v {
		x = splitmix64(x)
		v[i] = float32(float64(x>>11)/(1<<53)*2 - 1)
	}
	if dimensions != nil && *dimensions < dim {
		v = v[:*dimensions]
	}
	var norm float64
	for _, f := range v {
		norm += float64(f) * float64(f)
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range v {
			v[i] = float32(float64(v[i]) / norm)
		}
	}
	return v
}

// classProbs are the simulated class probabilities of a seed.
func classProbs(seed uint64) []float64 {
	p := float64(float32(unitFloat(seed)))
	return []float64{float64(float32(1 - p)), p}
}

// pyFloats converts float32 outputs to the float64 values Python's
// tolist() gives them.
func pyFloats(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, f := range v {
		out[i] = float64(f)
	}
	return out
}

// base64Floats is vLLM's base64 encoding: little-endian float32 bytes.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// --- wire types ----------------------------------------------------------

type embeddingData struct {
	Index     int    `json:"index"`
	Object    string `json:"object"`
	Embedding any    `json:"embedding"` // []float64 or a base64 string
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   usageInfo       `json:"usage"`
}

type poolingData struct {
	Index  int    `json:"index"`
	Object string `json:"object"`
	Data   any    `json:"data"`
}

type poolingResponse struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Data    []poolingData `json:"data"`
	Usage   usageInfo     `json:"usage"`
}

type classificationData struct {
	Index      int       `json:"index"`
	Label      string    `json:"label"`
	Probs      []float64 `json:"probs"`
	NumClasses int       `json:"num_classes"`
}

type classificationResponse struct {
	ID      string               `json:"id"`
	Object  string               `json:"object"`
	Created int64                `json:"created"`
	Model   string               `json:"model"`
	Data    []classificationData `json:"data"`
	Usage   usageInfo            `json:"usage"`
}

type scoreData struct {
	Index  int     `json:"index"`
	Object string  `json:"object"`
	Score  float64 `json:"score"`
}

type scoreResponse struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Data    []scoreData `json:"data"`
	Usage   usageInfo   `json:"usage"`
}

type rerankDocument struct {
	Text       string    `json:"text"`
	MultiModal *struct{} `json:"multi_modal"`
}

type rerankResult struct {
	Index          int            `json:"index"`
	Document       rerankDocument `json:"document"`
	RelevanceScore float64        `json:"relevance_score"`
}

type rerankUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type rerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Usage   rerankUsage    `json:"usage"`
	Results []rerankResult `json:"results"`
}

func poolResponse(req *poolRequest, prompts []poolPrompt, total int, id string, cfg Config, model string, created int64) any {
	usage := usageInfo{PromptTokens: total, TotalTokens: total}
	switch req.kind {
	case poolEmbed:
		out := embeddingResponse{ID: id, Object: "list", Created: created, Model: model, Usage: usage,
			Data: make([]embeddingData, len(prompts))}
		for i, p := range prompts {
			v := embedVector(p.seed, cfg.EmbeddingDim, req.dimensions)
			d := embeddingData{Index: i, Object: "embedding", Embedding: pyFloats(v)}
			if req.base64 {
				d.Embedding = base64Floats(v)
			}
			out.Data[i] = d
		}
		return out
	case poolPooling:
		out := poolingResponse{ID: id, Object: "list", Created: created, Model: model, Usage: usage,
			Data: make([]poolingData, len(prompts))}
		for i, p := range prompts {
			out.Data[i] = poolingData{Index: i, Object: "pooling", Data: poolingOutput(req, p, cfg)}
		}
		return out
	case poolClassify:
		out := classificationResponse{ID: id, Object: "list", Created: created, Model: model, Usage: usage,
			Data: make([]classificationData, len(prompts))}
		for i, p := range prompts {
			probs := classProbs(p.seed)
			label := classLabels[0]
			if probs[1] > probs[0] {
				label = classLabels[1]
			}
			out.Data[i] = classificationData{Index: i, Label: label, Probs: probs, NumClasses: len(probs)}
		}
		return out
	case poolScore:
		out := scoreResponse{ID: id, Object: "list", Created: created, Model: model, Usage: usage,
			Data: make([]scoreData, len(prompts))}
		for i, p := range prompts {
			out.Data[i] = scoreData{Index: i, Object: "score", Score: pairScore(p.seed)}
		}
		return out
	}
	out := rerankResponse{ID: id, Model: model, Usage: rerankUsage{PromptTokens: total, TotalTokens: total},
		Results: make([]rerankResult, len(prompts))}
	for i, p := range prompts {
		out.Results[i] = rerankResult{Index: i, Document: rerankDocument{Text: req.inputs[i].pair.doc},
			RelevanceScore: pairScore(p.seed)}
	}
	slices.SortStableFunc(out.Results, func(a, b rerankResult) int {
		switch {
		case a.RelevanceScore > b.RelevanceScore:
			return -1
		case a.RelevanceScore < b.RelevanceScore:
			return 1
		}
		return 0
	})
	if req.topN > 0 && req.topN < len(out.Results) {
		out.Results = out.Results[:req.topN]
	}
	return out
}

// pairScore is the simulated relevance of a (query, document) pair, in
// (0, 1) like a cross-encoder's sigmoid.
func pairScore(seed uint64) float64 { return float64(float32(unitFloat(seed))) }

// poolingOutput is one /pooling result for the requested task.
func poolingOutput(req *poolRequest, p poolPrompt, cfg Config) any {
	vec := func(seed uint64) any {
		v := embedVector(seed, cfg.EmbeddingDim, req.dimensions)
		if req.base64 {
			return base64Floats(v)
		}
		return pyFloats(v)
	}
	switch req.task {
	case "classify":
		return classProbs(p.seed)
	case "token_embed":
		rows := make([]any, p.tokens)
		for i := range rows {
			rows[i] = vec(p.seed + uint64(i) + 1)
		}
		return rows
	case "token_classify":
		rows := make([][]float64, p.tokens)
		for i := range rows {
			rows[i] = classProbs(p.seed + uint64(i) + 1)
		}
		return rows
	}
	return vec(p.seed)
}
