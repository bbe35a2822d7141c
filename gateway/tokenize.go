package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
	"github.com/maitred-dev/maitred/triage"
)

// tokenizeAnswer is vLLM's TokenizeResponse.
type tokenizeAnswer struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len"`
	Tokens      []int     `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

// tokenize answers POST /tokenize locally, with vLLM's request and response
// schema, from the model's own tokenizer and chat template: the same count
// the door uses. As vLLM's renderer does, it holds the prompt to
// max_model_len: the prompt is counted first, with the door's early stop
// and byte bounds, and one over the context is refused (400
// context_length_exceeded) before any id list is built (localwork.go). A
// model without a tokenizer, one whose max_model_len is not known yet,
// or a request this gateway cannot reproduce exactly, goes to a backend
// instead.
func (g *Gateway) tokenize(w http.ResponseWriter, r *http.Request, x *exchange) error {
	body, err := g.readJSONBody(w, r, x)
	if err != nil {
		return err
	}
	slot, err := g.localWork(x)
	if err != nil {
		return err
	}
	defer slot.release()
	// A prompt of token ids is parsed only as far as the longest context
	// holds: parsed whole, a body of short ids costs fifty times its
	// bytes. Any other body past that many values (a chat with large
	// tools) is parsed whole: its token count is not known yet.
	longest, maxValues := g.idsValueLimit()
	req, perr := ojson.ParseLimited(body, ojson.DefaultMaxDepth, maxValues)
	if tm, ok := errors.AsType[*ojson.TooManyValuesError](perr); ok {
		if strings.HasPrefix(tm.Path, "prompt[") {
			return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeContextLength, Param: "prompt", Layer: triage.LayerDoor,
				Outcome: admission.ContextLength.String(),
				Message: fmt.Sprintf("The prompt holds more than %d token ids: more than any model here holds (max_model_len %d at most). Please reduce the length of the prompt.", longest, longest)}
		}
		req, perr = ojson.Parse(body, ojson.DefaultMaxDepth)
	}
	if perr != nil {
		return badRequest(codeInvalidJSON, "", "The request body is not valid JSON: %v", perr)
	}
	if req.Kind != ojson.Object {
		return badRequest(codeInvalidJSON, "", "The request body must be a JSON object, got %s", req.Kind)
	}
	name := ""
	if mv := req.Get("model"); mv != nil && mv.Kind == ojson.String {
		name = mv.Str
	} else if names := g.fleet.Names(); len(names) == 1 && (mv == nil || mv.IsNull()) {
		name = names[0] // as vLLM: no model means the served one
	}
	rt, err := g.modelNamed(x, name) // the request's one lookup of its model
	if err != nil {
		return err
	}
	L := rt.fm.MaxModelLen()
	switch tok := rt.tok; {
	case tok == nil:
	case L <= 0:
		x.uncounted = admission.NoContextLimit.String() // the backend knows its own
	default:
		var ids []int
		var c tokenize.Count
		ep := admission.Completions
		if req.Has("messages") {
			ep = admission.Chat
			ids, c, err = tok.TokenizeChatWithin(req, L)
		} else {
			ids, c, err = tok.TokenizeCompletionWithin(req, L)
		}
		var ne *tokenize.NotExactError
		rej := admission.CountRejection(ep, err)
		switch {
		case err == nil && c.Tokens > L:
			// Refused as the door refuses it (not counted in
			// maitred_rejections_total, which counts generation requests).
			x.promptTokens, x.maxModelLen = c.Tokens, L
			return rejection(admission.OverContext(ep, c, L))
		case err == nil:
			x.promptTokens = len(ids)
			if ids == nil {
				ids = []int{}
			}
			writeJSON(w, http.StatusOK, tokenizeAnswer{Count: len(ids), MaxModelLen: L, Tokens: ids})
			return nil
		case rej != nil:
			return rejection(rej)
		case errors.As(err, &ne):
			x.uncounted = ne.Reason // fall through to a backend
		default:
			return err
		}
	}
	slot.release()
	return g.forwardOutsideQueue(w, r, x, rt, body)
}

// tokenizeChecker compares, on a sample of counted requests, the door's
// prompt count with the backend's own POST /tokenize. A tokenizer folder or
// chat template that differs from the one the backend loaded shows up here
// as mismatches, with both numbers in the log.
type tokenizeChecker struct {
	client *http.Client
	log    *zap.Logger
	sem    chan struct{}
	wg     sync.WaitGroup
}

func newTokenizeChecker(client *http.Client, log *zap.Logger) *tokenizeChecker {
	return &tokenizeChecker{client: client, log: log, sem: make(chan struct{}, 4)}
}

// Fields of a chat or completions request that change what /tokenize
// counts.
var (
	chatTokenizeKeys       = []string{"messages", "tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "documents", "add_special_tokens"}
	completionTokenizeKeys = []string{"prompt", "add_special_tokens"}
)

// sampled draws whether a request of rt's is checked (check_rate),
// before it is forwarded: only a sampled request keeps its decision
// while its answer streams (the pipeline).
func (c *tokenizeChecker) sampled(rt *modelRuntime) bool {
	rate := rt.checkRate
	return rate > 0 && rand.Float64() < rate
}

// maybeStart starts a sampled request's check, unless as many as may run
// at once already do.
func (c *tokenizeChecker) maybeStart(rt *modelRuntime, b *fleet.Backend, ep admission.Endpoint, dec admission.Decision) {
	select {
	case c.sem <- struct{}{}:
	default:
		return // checks are a sample: skip rather than queue
	}
	c.start(rt, b, ep, dec)
}

// start runs one sampled check in the background. Apart from maybeStart,
// so that only a sampled request's decision moves to the heap.
func (c *tokenizeChecker) start(rt *modelRuntime, b *fleet.Backend, ep admission.Endpoint, dec admission.Decision) {
	c.wg.Go(func() {
		defer func() { <-c.sem }()
		c.check(rt, b, ep, dec)
	})
}

func (c *tokenizeChecker) check(rt *modelRuntime, b *fleet.Backend, ep admission.Endpoint, dec admission.Decision) {
	req, body := dec.Request, dec.Body
	if req == nil || dec.ClampedFrom > 0 {
		return // a clamped body no longer matches the parsed spans
	}
	keys := chatTokenizeKeys
	if !ep.Chat() {
		keys = completionTokenizeKeys
		if p := req.Get("prompt"); p == nil || (p.Kind == ojson.Array && len(p.Items) > 0 && p.Items[0].Kind != ojson.Number) {
			return // several prompts: /tokenize takes one
		}
	}
	// Splice the client's own bytes for each field: no re-serialization
	// that could change what is counted.
	var out bytes.Buffer
	out.WriteString(`{"model":`)
	served, _ := json.Marshal(b.Served)
	out.Write(served)
	for _, k := range keys {
		if v := req.Get(k); v != nil {
			out.WriteString(`,"` + k + `":`)
			out.Write(v.Raw(body))
		}
	}
	out.WriteByte('}')
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL.String()+"/tokenize", &out)
	if err != nil {
		return
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(fleet.ProbeHeader, "tokenize-check")
	if b.Key != "" {
		hr.Header.Set("Authorization", "Bearer "+b.Key)
	}
	res, err := c.client.Do(hr)
	result := "error"
	var theirs tokenizeAnswer
	if err == nil {
		if res.StatusCode == http.StatusOK && json.NewDecoder(io.LimitReader(res.Body, 64<<20)).Decode(&theirs) == nil {
			result = "match"
			if theirs.Count != dec.PromptTokens {
				result = "mismatch"
			}
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	rt.metrics.tokChecks.WithLabelValues(result).Inc()
	switch result {
	case "mismatch":
		c.log.Warn("tokenizer mismatch: the backend counts this prompt differently",
			zap.String("model", dec.Model), zap.String("backend", b.URL.Host),
			zap.Int("local_prompt_tokens", dec.PromptTokens), zap.Int("backend_prompt_tokens", theirs.Count))
	case "error":
		status := ""
		if res != nil {
			status = strconv.Itoa(res.StatusCode)
		}
		c.log.Debug("tokenize check failed", zap.String("model", dec.Model), zap.String("backend", b.URL.Host),
			zap.String("status", status), zap.Error(err))
	}
}

func (c *tokenizeChecker) wait() { c.wg.Wait() }
