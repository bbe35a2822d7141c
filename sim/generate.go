package sim

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
)

// words is the deterministic vocabulary of generated text: token i of
// choice j is words[(i+j) % len(words)], with a leading space after the
// first token.
var words = strings.Fields("Lorem ipsum dolor sit amet consectetur adipiscing elit sed do " +
	"eiusmod tempor incididunt ut labore et dolore magna aliqua")

func tokenText(choice, step int) string {
	w := words[(choice+step)%len(words)]
	if step == 0 {
		return w
	}
	return " " + strings.ToLower(w)
}

// GeneratedText is the text the simulator generates for a choice index and
// a token count, for tests that check content.
func GeneratedText(choice, tokens int) string {
	var b strings.Builder
	for i := range tokens {
		b.WriteString(tokenText(choice, i))
	}
	return b.String()
}

// choiceState is one choice (sequence) being generated.
type choiceState struct {
	index     int // choice index in the response
	prompt    int // index of its prompt
	target    int
	finish    string
	generated int
	text      strings.Builder
}

// reject writes an error answer for a generation request and counts it.
func (s *Server) reject(w http.ResponseWriter, e *apiError) {
	s.rejectWith(w, e, writeAPIError)
}

// generate serves /v1/chat/completions and /v1/completions.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, body []byte, k kind) {
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
	req, v, e := parseRequest(k, body)
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
	req.wantIDs = s.cache != nil
	if e := countPrompts(req, v, body, cfg.Tokenizer); e != nil {
		s.reject(w, e)
		return
	}
	plans, e := validateBudget(req, cfg)
	if e != nil {
		s.reject(w, e)
		return
	}

	reqID := r.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = randomID()
	}
	g := &generation{
		s: s, w: w, req: req, cfg: cfg, model: servedName(v, cfg), arrival: arrival, created: arrival.Unix(),
	}
	if k == kindChat {
		g.id = "chatcmpl-" + reqID
	} else {
		g.id = "cmpl-" + reqID
	}
	totalPrompt := 0
	for i, pl := range plans {
		totalPrompt += req.promptTokens[i]
		for range req.n {
			g.choices = append(g.choices, &choiceState{
				index: len(g.choices), prompt: i, target: pl.target, finish: pl.finish,
			})
		}
	}
	g.promptTotal = totalPrompt
	g.prefix = s.prefixRequest(req, v, cfg, g.model)
	g.log = log.With(zap.String("request_id", g.id))
	g.log.Debug("sim request accepted",
		zap.Int("prompt_tokens", totalPrompt), zap.Int("choices", len(g.choices)),
		zap.Int("max_tokens", plans[0].budget), zap.Bool("stream", req.stream))
	g.run(ctx)
}

// generation is one admitted request on its way through the engine.
type generation struct {
	s           *Server
	w           http.ResponseWriter
	rc          *http.ResponseController
	log         *zap.Logger
	req         *genRequest
	cfg         Config
	model       string // the name answers carry (servedName)
	id          string
	created     int64
	arrival     time.Time
	choices     []*choiceState
	promptTotal int
	prefix      *prefixReq // the prefix cache's view (nil without one)
	cached      int        // prompt tokens the prefix cache had
	generated   int
	chunks      int // content chunks written
	headersOut  bool
}

func (g *generation) run(ctx context.Context) {
	s, cfg := g.s, g.cfg
	if g.req.stream {
		h := g.w.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		g.w.WriteHeader(http.StatusOK)
		g.rc = http.NewResponseController(g.w)
		if err := g.rc.Flush(); err != nil {
			s.aborted(g.log, cfg.Model, len(g.choices), "write")
			return
		}
		g.headersOut = true
	}

	t, err := s.admitPrefix(ctx, g.promptTotal, 1, g.prefix)
	if err != nil {
		g.fail(err, "waiting")
		return
	}
	defer s.release(t)
	g.cached = t.cachedTokens()
	admitted := time.Now()
	s.m.queue.WithLabelValues(cfg.Model, "0").Observe(admitted.Sub(g.arrival).Seconds())

	maxTarget := 0
	for _, c := range g.choices {
		maxTarget = max(maxTarget, c.target)
	}
	var last time.Time
	for step := range maxTarget {
		var err error
		phase := "decode"
		if step == 0 {
			phase, err = "prefill", s.prefill(ctx, &cfg, g.promptTotal-g.cached)
		} else {
			err = s.wait(ctx, cfg.ITL, cfg.TokenGate)
		}
		if err != nil {
			g.fail(err, phase)
			return
		}
		now := time.Now()
		if step == 0 {
			s.m.ttft.WithLabelValues(cfg.Model, "0").Observe(now.Sub(g.arrival).Seconds())
			s.m.promptTok.WithLabelValues(cfg.Model, "0").Add(float64(g.promptTotal))
		} else {
			s.m.itl.WithLabelValues(cfg.Model, "0").Observe(now.Sub(last).Seconds())
		}
		last = now
		n := 0
		for _, c := range g.choices {
			if step < c.target {
				c.text.WriteString(tokenText(c.index, step))
				c.generated++
				n++
			}
		}
		g.generated += n
		if step == 0 {
			cfg.processed(g.promptTotal + n)
		} else {
			cfg.processed(n)
		}
		s.grow(t, n)
		s.m.genTok.WithLabelValues(cfg.Model, "0").Add(float64(n))
		if g.req.stream {
			if err := g.streamStep(step); err != nil {
				g.fail(errClientGone, "write")
				return
			}
		}
	}

	if g.req.stream {
		if err := g.streamEnd(); err != nil {
			g.fail(errClientGone, "write")
			return
		}
	} else {
		if ctx.Err() != nil {
			g.fail(errClientGone, "write")
			return
		}
		writeJSON(g.w, http.StatusOK, g.response())
	}
	end := time.Now()
	s.m.e2e.WithLabelValues(cfg.Model, "0").Observe(end.Sub(g.arrival).Seconds())
	s.m.reqPrompt.WithLabelValues(cfg.Model, "0").Observe(float64(g.promptTotal))
	s.m.reqGen.WithLabelValues(cfg.Model, "0").Observe(float64(g.generated))
	for _, c := range g.choices {
		s.m.success.WithLabelValues(cfg.Model, "0", c.finish).Inc()
	}
	s.count(func(st *Stats) { st.Completed++ })
	g.log.Debug("sim request finished", zap.Int("completion_tokens", g.generated),
		zap.String("finish_reason", g.choices[0].finish), zap.Duration("e2e", end.Sub(g.arrival)))
}

// fail ends a generation that was interrupted by the client or shutdown.
func (g *generation) fail(err error, phase string) {
	s := g.s
	if !errors.Is(err, errStopped) {
		s.aborted(g.log, g.cfg.Model, len(g.choices), phase)
		return
	}
	// Shutdown: vLLM aborts with finish reason ERROR -> GenerationError.
	for range g.choices {
		s.m.success.WithLabelValues(g.cfg.Model, "0", "error").Inc()
	}
	s.count(func(st *Stats) { st.Failed++ })
	g.log.Info("sim request aborted by shutdown", zap.String("phase", phase))
	if !g.headersOut {
		writeAPIError(g.w, generationError())
		return
	}
	// Headers are out: an in-band error event, then [DONE].
	_ = g.event(generationError().envelope())
	_ = g.done()
}

// aborted counts a client disconnect.
func (s *Server) aborted(log *zap.Logger, model string, choices int, phase string) {
	// Metrics first: a caller that sees the count sees them too.
	s.m.simAborted.WithLabelValues(model, "0").Inc()
	for range choices {
		s.m.success.WithLabelValues(model, "0", "abort").Inc()
	}
	s.count(func(st *Stats) { st.Aborted++ })
	log.Info("sim request aborted: client disconnected", zap.String("phase", phase))
}

// cut aborts the connection on purpose (CutAfterChunks).
func (g *generation) cut() {
	s := g.s
	s.m.simCut.WithLabelValues(g.cfg.Model, "0").Inc()
	for range g.choices {
		s.m.success.WithLabelValues(g.cfg.Model, "0", "abort").Inc()
	}
	s.count(func(st *Stats) { st.Cut++ })
	g.log.Info("sim cutting stream (CutAfterChunks)", zap.Int("chunks", g.chunks))
	// Unwinding runs the deferred release; net/http then drops the
	// connection without the terminating chunk.
	panic(http.ErrAbortHandler)
}

// --- wire types ----------------------------------------------------------

type usageInfo struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details"`
}

// promptTokensDetails is vLLM's PromptTokenUsageInfo, set only with
// Config.PromptTokensDetails and a prefix-cache hit.
type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// streamUsage is UsageInfo serialised with exclude_unset (details only when
// set).
type streamUsage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

type chatMessage struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	Refusal          *string    `json:"refusal"`
	Annotations      *string    `json:"annotations"`
	Audio            *string    `json:"audio"`
	FunctionCall     *string    `json:"function_call"`
	ToolCalls        []struct{} `json:"tool_calls"`
	ReasoningContent *string    `json:"reasoning_content"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   *string     `json:"stop_reason"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	ServiceTier       *string      `json:"service_tier"`
	SystemFingerprint *string      `json:"system_fingerprint"`
	Usage             usageInfo    `json:"usage"`
	PromptLogprobs    *struct{}    `json:"prompt_logprobs"`
	KVTransferParams  *struct{}    `json:"kv_transfer_params"`
}

type completionChoice struct {
	Index          int       `json:"index"`
	Text           string    `json:"text"`
	Logprobs       *struct{} `json:"logprobs"`
	FinishReason   string    `json:"finish_reason"`
	StopReason     *string   `json:"stop_reason"`
	PromptLogprobs *struct{} `json:"prompt_logprobs"`
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	ServiceTier       *string            `json:"service_tier"`
	SystemFingerprint *string            `json:"system_fingerprint"`
	Usage             usageInfo          `json:"usage"`
	KVTransferParams  *struct{}          `json:"kv_transfer_params"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        chatDelta       `json:"delta"`
	Logprobs     *struct{}       `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"` // "null" on the final chunk only
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *streamUsage      `json:"usage,omitempty"`
}

type completionChunkChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	StopReason   *string   `json:"stop_reason"`
}

type completionChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []completionChunkChoice `json:"choices"`
	Usage   *streamUsage            `json:"usage,omitempty"`
}

var jsonNull = json.RawMessage("null")

func (g *generation) usage() usageInfo {
	return usageInfo{PromptTokens: g.promptTotal, CompletionTokens: g.generated, TotalTokens: g.promptTotal + g.generated,
		PromptTokensDetails: g.promptDetails()}
}

func (g *generation) streamUsage() *streamUsage {
	return &streamUsage{PromptTokens: g.promptTotal, CompletionTokens: g.generated, TotalTokens: g.promptTotal + g.generated,
		PromptTokensDetails: g.promptDetails()}
}

// promptDetails is vLLM's: the cached tokens, with
// --enable-prompt-tokens-details and a hit only.
func (g *generation) promptDetails() *promptTokensDetails {
	if !g.cfg.PromptTokensDetails || g.cached == 0 {
		return nil
	}
	return &promptTokensDetails{CachedTokens: g.cached}
}

func (g *generation) response() any {
	if g.req.kind == kindChat {
		out := chatResponse{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.model, Usage: g.usage()}
		for _, c := range g.choices {
			out.Choices = append(out.Choices, chatChoice{
				Index: c.index, FinishReason: c.finish,
				Message: chatMessage{Role: "assistant", Content: c.text.String(), ToolCalls: []struct{}{}},
			})
		}
		return out
	}
	out := completionResponse{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model, Usage: g.usage()}
	for _, c := range g.choices {
		out.Choices = append(out.Choices, completionChoice{Index: c.index, Text: c.text.String(), FinishReason: c.finish})
	}
	return out
}

// event writes one SSE frame and flushes it.
func (g *generation) event(v any) error {
	var b []byte
	b = append(b, "data: "...)
	b = append(b, marshal(v)...)
	b = append(b, "\n\n"...)
	if _, err := g.w.Write(b); err != nil {
		return err
	}
	return g.rc.Flush()
}

func (g *generation) done() error {
	if _, err := g.w.Write([]byte("data: [DONE]\n\n")); err != nil {
		return err
	}
	return g.rc.Flush()
}

func (g *generation) chunkUsage() *streamUsage {
	if g.req.continuousUsage {
		return g.streamUsage()
	}
	return nil
}

// streamStep writes the chunks of one engine step: on the first step the
// role chunk of every chat choice, then one content chunk per choice that
// produced a token. A choice that hit its budget carries finish_reason
// "length" on its last token; one that stops gets a separate empty-delta
// chunk with finish_reason "stop" (the EOS step).
func (g *generation) streamStep(step int) error {
	if step == 0 && g.req.kind == kindChat {
		for _, c := range g.choices {
			empty := ""
			if err := g.event(chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
				Choices: []chatChunkChoice{{Index: c.index, Delta: chatDelta{Role: "assistant", Content: &empty}}},
				Usage:   g.chunkUsage()}); err != nil {
				return err
			}
		}
	}
	for _, c := range g.choices {
		if step >= c.target {
			continue
		}
		last := step == c.target-1
		var finish *string
		if last && c.finish == "length" {
			finish = strp("length")
		}
		text := tokenText(c.index, step)
		if err := g.event(g.chunk(c.index, &text, finish)); err != nil {
			return err
		}
		g.chunks++
		if g.cfg.CutAfterChunks > 0 && g.chunks >= g.cfg.CutAfterChunks {
			g.cut()
		}
		if last && c.finish == "stop" {
			empty := ""
			if err := g.event(g.chunk(c.index, &empty, strp("stop"))); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *generation) chunk(index int, text *string, finish *string) any {
	if g.req.kind == kindChat {
		ch := chatChunkChoice{Index: index, Delta: chatDelta{Content: text}, FinishReason: finish}
		if finish != nil {
			ch.StopReason = jsonNull
		}
		return chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
			Choices: []chatChunkChoice{ch}, Usage: g.chunkUsage()}
	}
	return completionChunk{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
		Choices: []completionChunkChoice{{Index: index, Text: *text, FinishReason: finish}}, Usage: g.chunkUsage()}
}

// streamEnd writes the usage chunk (when asked for) and [DONE].
func (g *generation) streamEnd() error {
	if g.req.includeUsage {
		var v any
		if g.req.kind == kindChat {
			v = chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
				Choices: []chatChunkChoice{}, Usage: g.streamUsage()}
		} else {
			v = completionChunk{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
				Choices: []completionChunkChoice{}, Usage: g.streamUsage()}
		}
		if err := g.event(v); err != nil {
			return err
		}
	}
	return g.done()
}
