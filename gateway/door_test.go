package gateway

// The door over real HTTP: the gateway with the model's tokenizer in front
// of the simulator counting with the same tokenizer and enforcing vLLM's own
// context check.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

var modelCache sync.Map // name -> *tokenize.Model

func loadTok(t *testing.T, name string) *tokenize.Model {
	t.Helper()
	if m, ok := modelCache.Load(name); ok {
		return m.(*tokenize.Model)
	}
	var m *tokenize.Model
	var err error
	if name == "demo" {
		m, err = tokenize.Builtin("demo")
	} else {
		m, err = fixtureLoader.LoadDir(fixtures.ModelDir(t, name), tokenize.LoadOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	modelCache.Store(name, m)
	return m
}

// startCounted serves the simulator (model "m", its context maxLen, counting
// with tok) behind a gateway that knows tok but not the context length: it
// learns it from the backend's /v1/models.
func startCounted(t *testing.T, tok *tokenize.Model, maxLen int, mutate func(*config.Config)) *e2e {
	t.Helper()
	s := sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, OutputTokens: 2, Tokenizer: sim.ModelTokenizer(tok)},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	tg := startGatewayToks(t, tok, mutate, srv.URL)
	sdk := openai.NewClient(option.WithBaseURL(tg.URL+"/v1/"), option.WithAPIKey("k"), option.WithHTTPClient(tg.client), option.WithMaxRetries(0))
	return &e2e{sim: s, gw: tg, sdk: sdk}
}

func TestDoorRulesOverHTTP(t *testing.T) {
	e := startCounted(t, loadTok(t, "demo"), 64, func(c *config.Config) { c.MaxBodyBytes = 4096 })
	words := strings.Repeat("lorem ipsum ", 40)
	tests := []struct {
		name, path, ctype, body string
		status                  int
		code, param, msg        string
	}{
		{"content type", "/v1/chat/completions", "text/plain", `{"model":"m"}`, 400, "unsupported_media_type", "<null>", "application/json"},
		{"too large", "/v1/chat/completions", "application/json", `{"model":"m","x":"` + strings.Repeat("y", 5000) + `"}`, 413, "request_too_large", "<null>", "4096 bytes"},
		{"not json", "/v1/chat/completions", "application/json", `{"model":"m",]`, 400, "invalid_json", "*", "not valid JSON"},
		{"case variant", "/v1/chat/completions", "application/json", `{"model":"m","Model":"other","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_json", "Model", "case-sensitive"},
		{"missing model", "/v1/completions", "application/json", `{"prompt":"x"}`, 400, "missing_required_parameter", "model", "model"},
		{"unknown model", "/v1/completions", "application/json", `{"model":"x","prompt":"x"}`, 404, "model_not_found", "model", "Available models: m."},
		{"role not a string", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":["user"],"content":"x"}]}`, 400, "invalid_type", "messages[0].role", "must be a string"},
		{"bad part", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":[{"type":"smell"}]}]}`, 400, "invalid_value", "messages[0].content[0].type", "Unsupported content part type"},
		{"bad prompt", "/v1/completions", "application/json", `{"model":"m","prompt":[true]}`, 400, "invalid_type", "prompt[0]", "prompt must be"},
		{"max_tokens zero", "/v1/completions", "application/json", `{"model":"m","prompt":"x","max_tokens":0}`, 400, "invalid_value", "max_tokens", "at least 1"},
		{"n zero", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":"x"}],"n":0}`, 400, "invalid_value", "n", "at least 1"},
		{"stream not bool", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":1}`, 400, "invalid_type", "stream", "boolean"},
		{"context chat", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":"` + words + `"}],"max_tokens":10}`, 400, "context_length_exceeded", "messages", "This model's maximum context length is 64 tokens."},
		{"context prompt", "/v1/completions", "application/json", `{"model":"m","prompt":"hello world","max_tokens":63}`, 400, "context_length_exceeded", "prompt", "However, you requested 65 tokens (2 in the prompt, 63 in the completion)."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.gw.post(t, tt.path, tt.body, "Content-Type", tt.ctype)
			body := readBodyT(t, res)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			var env struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error == nil {
				t.Fatalf("not an envelope: %s", body)
			}
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := env.Error[k]; !ok {
					t.Errorf("envelope lacks %q: %s", k, body)
				}
			}
			param := "<null>"
			if p, ok := env.Error["param"].(string); ok {
				param = p
			}
			if tt.param == "*" {
				tt.param = param
			}
			if env.Error["code"] != tt.code || param != tt.param || env.Error["type"] != "invalid_request_error" {
				t.Errorf("code/param/type = %v/%v/%v, want %s/%s", env.Error["code"], param, env.Error["type"], tt.code, tt.param)
			}
			if msg, _ := env.Error["message"].(string); !strings.Contains(msg, tt.msg) {
				t.Errorf("message %q lacks %q", msg, tt.msg)
			}
			if tt.code == "context_length_exceeded" {
				for _, k := range []string{"prompt_tokens", "max_tokens", "max_model_len", "prompt_tokens_exact"} {
					if _, ok := env.Error[k]; !ok {
						t.Errorf("context error lacks %q: %s", k, body)
					}
				}
				if env.Error["max_model_len"] != float64(64) {
					t.Errorf("max_model_len = %v", env.Error["max_model_len"])
				}
			}
		})
	}
	if n := len(completionRequests(e.sim)); n != 0 {
		t.Errorf("the simulator received %d requests; every one was a rejection", n)
	}
}

func TestContextErrorIsTypedInTheSDK(t *testing.T) {
	e := startCounted(t, loadTok(t, "demo"), 64, nil)
	_, err := e.sdk.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:     "m",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")},
		MaxTokens: openai.Int(60),
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" || apiErr.Param != "messages" {
		t.Fatalf("err = %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(apiErr.RawJSON()), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["prompt_tokens"] != float64(10) || raw["max_tokens"] != float64(60) || raw["max_model_len"] != float64(64) || raw["prompt_tokens_exact"] != true {
		t.Errorf("numbers in the error: %s", apiErr.RawJSON())
	}
	if !strings.Contains(apiErr.Message, "maximum context length") {
		t.Errorf("message %q", apiErr.Message)
	}
	// No max_tokens, prompt alone over the limit: max_tokens is null.
	_, err = e.sdk.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("many words here ", 30))},
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.RawJSON(), `"max_tokens":null`) {
		t.Fatalf("err = %v", err)
	}
	_, err = e.sdk.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: "nope", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Fatalf("unknown model: %v", err)
	}
	if n := len(completionRequests(e.sim)); n != 0 {
		t.Errorf("the simulator received %d requests", n)
	}
}

func TestClampLowersMaxTokens(t *testing.T) {
	e := startCounted(t, loadTok(t, "demo"), 64, func(c *config.Config) { c.Models[0].OnOverflow = "clamp" })
	res := e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":500}`)
	body := readBodyT(t, res)
	if res.StatusCode != 200 || res.Header.Get("X-Maitred-Max-Tokens-Clamped") != "54" {
		t.Fatalf("%d clamped=%q %s", res.StatusCode, res.Header.Get("X-Maitred-Max-Tokens-Clamped"), body)
	}
	got := completionRequests(e.sim)
	if len(got) != 1 || string(got[0].Body) != `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":54}` {
		t.Fatalf("backend got %q", got[0].Body)
	}
}

// TestContextSweep sends prompts of every size around the limit, with and
// without max_tokens, through the gateway to a simulator that counts with
// the same real tokenizer and applies vLLM's own context check. Whatever
// the gateway forwards, the backend must accept; whatever it rejects, the
// backend must reject too (checked by sending it straight to the backend).
func TestContextSweep(t *testing.T) {
	const maxLen = 128
	for _, name := range []string{"qwen3", "llama3_1"} {
		t.Run(name, func(t *testing.T) {
			tok := loadTok(t, name)
			e := startCounted(t, tok, maxLen, nil)
			direct := sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok)}, zap.NewNop())
			dsrv := httptest.NewServer(direct.Handler())
			defer func() { direct.Close(); dsrv.Close() }()
			forwarded, rejected := 0, 0
			for words := 90; words <= 135; words++ {
				text := strings.TrimSpace(strings.Repeat("tea ", words))
				for _, mt := range []string{"", `,"max_tokens":8`, `,"max_tokens":40`} {
					for _, ep := range []struct{ path, body string }{
						{"/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%s"}]%s}`, text, mt)},
						{"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"%s"%s}`, text, mt)},
					} {
						res := e.gw.post(t, ep.path, ep.body)
						gbody := readBodyT(t, res)
						dres := postTo(t, e.gw, dsrv.URL+ep.path, ep.body)
						dbody := readBodyT(t, dres)
						switch res.StatusCode {
						case 200:
							forwarded++
							if dres.StatusCode != 200 {
								t.Errorf("%s words=%d%s: forwarded but the backend rejects: %s", ep.path, words, mt, dbody)
							}
						case 400:
							rejected++
							if !strings.Contains(gbody, "context_length_exceeded") {
								t.Fatalf("unexpected rejection of %s: %s", ep.body, gbody)
							}
							if dres.StatusCode != 400 {
								t.Errorf("%s words=%d%s: rejected but the backend accepts: %s", ep.path, words, mt, gbody)
							}
						default:
							t.Fatalf("status %d: %s", res.StatusCode, gbody)
						}
					}
				}
			}
			if forwarded == 0 || rejected == 0 {
				t.Errorf("sweep did not straddle the limit: %d forwarded, %d rejected", forwarded, rejected)
			}
			if got := len(completionRequests(e.sim)); got != forwarded {
				t.Errorf("backend behind the gateway received %d requests, gateway forwarded %d", got, forwarded)
			}
			t.Logf("%s: %d forwarded (all accepted by the backend), %d rejected (all rejected by the backend)", name, forwarded, rejected)
		})
	}
}

// TestTokenizeEndpoint: the gateway's local POST /tokenize agrees with the
// simulator's (which counts as vLLM does, with the same tokenizer) and with
// the count the door uses.
func TestTokenizeEndpoint(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"} {
		t.Run(name, func(t *testing.T) {
			tok := loadTok(t, name)
			e := startCounted(t, tok, 4096, nil)
			direct := sim.New(sim.Config{Model: "m", Tokenizer: sim.ModelTokenizer(tok)}, zap.NewNop())
			dsrv := httptest.NewServer(direct.Handler())
			defer func() { direct.Close(); dsrv.Close() }()
			for _, body := range []string{
				`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello, 世界! 🎉"}]}`,
				`{"model":"m","prompt":"Once upon a time, 昔々"}`,
				// a role outside OpenAI's (Llama 3.1's tool result), which
				// vLLM hands to the template: counted as it renders
				`{"model":"m","messages":[{"role":"user","content":"Weather in Paris?"},{"role":"ipython","content":"{\"temp\": 21}"}]}`,
			} {
				res := e.gw.post(t, "/tokenize", body)
				gb := readBodyT(t, res)
				dres := postTo(t, e.gw, dsrv.URL+"/tokenize", body)
				db := readBodyT(t, dres)
				if res.StatusCode != dres.StatusCode {
					t.Fatalf("gateway %d %s, backend %d %s", res.StatusCode, gb, dres.StatusCode, db)
				}
				if res.StatusCode != 200 {
					continue // e.g. no chat template: both refuse
				}
				var ga, da tokenizeAnswer
				json.Unmarshal([]byte(gb), &ga)
				json.Unmarshal([]byte(db), &da)
				if ga.Count == 0 || ga.Count != da.Count || ga.Count != len(ga.Tokens) || ga.MaxModelLen != 4096 {
					t.Errorf("gateway %s\nbackend %s", gb, db)
				}
			}
		})
	}
}

func postTo(t *testing.T, tg *testGateway, url, body string) *http.Response {
	t.Helper()
	res, err := tg.client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestSampledTokenizeCheckCountsMismatches: with tokenize_check_rate 1,
// every counted request is re-counted by the backend's /tokenize; a
// backend that counts differently shows in maitred_tokenizer_checks_total.
func TestSampledTokenizeCheckCountsMismatches(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			io.WriteString(w, `{"count":999,"max_model_len":2048,"tokens":[]}`)
			return
		}
		io.WriteString(w, `{"choices":[]}`)
	})
	tg := startGatewayToks(t, loadTok(t, "demo"), func(c *config.Config) { c.Models[0].TokenizeCheckRate = 1 }, fb.URL)
	for range 3 {
		readBodyT(t, tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
	}
	tg.quiesce() // the check starts after the response is relayed: wait for handlers, then checks
	if m := tg.gathered(t); !strings.Contains(m, `maitred_tokenizer_checks_total{model="m",result="mismatch"} 3`) {
		t.Errorf("no mismatches counted")
	}
	reqs, bodies := fb.requests()
	n := 0
	for i, r := range reqs {
		if r.URL.Path == "/tokenize" {
			n++
			if !strings.Contains(string(bodies[i]), `"messages":[{"role":"user","content":"hi"}]`) || strings.Contains(string(bodies[i]), "max_tokens") {
				t.Errorf("check body %s", bodies[i])
			}
		}
	}
	if n != 3 {
		t.Errorf("backend got %d /tokenize checks, want 3", n)
	}
}

// TestTokenizeMatchesChatGoldens: POST /tokenize on the golden
// conversations of tokenize/testdata/chat (rendered by Python jinja2 and
// counted by HF tokenizers) answers the golden count, for every case the
// template renders. (No fixture template reads the clock; one that called
// strftime_now would need the goldens' fixed date.)
func TestTokenizeMatchesChatGoldens(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "tokenize", "testdata", "chat", name+".golden.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			e := startCounted(t, loadTok(t, name), 1<<20, nil)
			checked := 0
			for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
				var g struct {
					ID     string `json:"id"`
					Body   string `json:"body"`
					Tokens *int   `json:"tokens"`
				}
				if err := json.Unmarshal([]byte(line), &g); err != nil {
					t.Fatal(err)
				}
				if g.Tokens == nil {
					continue // the template raises: the door tests cover that
				}
				body := `{"model":"m",` + strings.TrimPrefix(g.Body, "{")
				res := e.gw.post(t, "/tokenize", body)
				got := readBodyT(t, res)
				var a tokenizeAnswer
				if res.StatusCode != 200 || json.Unmarshal([]byte(got), &a) != nil || a.Count != *g.Tokens {
					t.Errorf("%s: %d %.200s, want count %d", g.ID, res.StatusCode, got, *g.Tokens)
				}
				checked++
			}
			t.Logf("%s: %d golden conversations, /tokenize count equal to HF's for each", name, checked)
		})
	}
}

// errorEnvelope decodes OpenAI's error envelope with the context numbers.
type errorEnvelope struct {
	Error struct {
		Message           string `json:"message"`
		Type              string `json:"type"`
		Code              string `json:"code"`
		Param             string `json:"param"`
		PromptTokens      int    `json:"prompt_tokens"`
		MaxTokens         *int   `json:"max_tokens"`
		MaxModelLen       int    `json:"max_model_len"`
		PromptTokensExact *bool  `json:"prompt_tokens_exact"`
	} `json:"error"`
}

// TestWhitespaceFreePromptRefusedOnBound (issue 11, defect 2): a prompt
// that is one long pre-token ("abab…", no whitespace) over the context is
// refused without merging the whole pre-token: the door counts it by its
// byte bound, so the refusal reports a lower bound (prompt_tokens_exact
// false) far below the prompt's full count, which the door never computes.
// Four at once, as in the issue. Before the fix the door merged every byte
// (seconds of CPU and ~30 bytes of memory a byte for a 7 MB prompt) and
// reported the full count.
func TestWhitespaceFreePromptRefusedOnBound(t *testing.T) {
	tok := loadTok(t, "qwen3")
	const maxLen = 4096
	e := startCounted(t, tok, maxLen, nil)
	text := strings.Repeat("ab", 256<<10)
	bodies := map[string]string{
		"/v1/chat/completions": `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"` + text + `"}]}`,
		"/v1/completions":      `{"model":"m","max_tokens":100,"prompt":"` + text + `"}`,
	}
	full := map[string]int{}
	for path, body := range bodies {
		v, err := ojson.Parse([]byte(body), ojson.DefaultMaxDepth)
		if err != nil {
			t.Fatal(err)
		}
		var c tokenize.Count
		if path == "/v1/completions" {
			c, err = tok.CountCompletion(v, 0)
		} else {
			c, err = tok.CountChat(v, 0)
		}
		if err != nil || !c.Exact {
			t.Fatalf("%s: full count %+v %v", path, c, err)
		}
		full[path] = c.Tokens
	}
	var wg sync.WaitGroup
	for i := range 4 {
		path := "/v1/chat/completions"
		if i%2 == 1 {
			path = "/v1/completions"
		}
		wg.Go(func() {
			res := e.gw.post(t, path, bodies[path])
			body := readBodyT(t, res)
			var env errorEnvelope
			if res.StatusCode != 400 || json.Unmarshal([]byte(body), &env) != nil {
				t.Errorf("%s: %d %.300s", path, res.StatusCode, body)
				return
			}
			er := env.Error
			param := "messages"
			if path == "/v1/completions" {
				param = "prompt"
			}
			if er.Code != "context_length_exceeded" || er.Type != "invalid_request_error" || er.Param != param ||
				er.MaxModelLen != maxLen || er.MaxTokens == nil || *er.MaxTokens != 100 {
				t.Errorf("%s: envelope %.300s", path, body)
			}
			if er.PromptTokensExact == nil || *er.PromptTokensExact {
				t.Errorf("%s: a refusal on a bound must say prompt_tokens_exact false: %.300s", path, body)
			}
			// The full count merges every byte; the byte bound of "abab…"
			// (a token covers at most a few dozen bytes) is far below it.
			// A count that stopped only after the pre-token (the chat
			// template's closing tokens uncounted) is not far below.
			if er.PromptTokens+100 <= maxLen || er.PromptTokens > full[path]/2 {
				t.Errorf("%s: prompt_tokens %d: want a bound over the context (%d) and well below the full count %d", path, er.PromptTokens, maxLen-100, full[path])
			}
			if want := fmt.Sprintf("at least %d", er.PromptTokens); !strings.Contains(er.Message, want) {
				t.Errorf("%s: message %q lacks %q", path, er.Message, want)
			}
		})
	}
	wg.Wait()
	if n := len(completionRequests(e.sim)); n != 0 {
		t.Errorf("the simulator received %d requests; every one was refused", n)
	}
}

// TestWhitespaceFreePromptNearLimitStaysExact: around the limit, a prompt
// that is one long pre-token is still counted exactly: whatever the
// gateway forwards the backend accepts, whatever it refuses the backend
// refuses (checked by sending it straight to the backend, which counts
// with the same tokenizer), and /tokenize answers the backend's count.
func TestWhitespaceFreePromptNearLimitStaysExact(t *testing.T) {
	const maxLen = 512
	tok := loadTok(t, "qwen3")
	e := startCounted(t, tok, maxLen, nil)
	direct := sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok)}, zap.NewNop())
	dsrv := httptest.NewServer(direct.Handler())
	defer func() { direct.Close(); dsrv.Close() }()
	forwarded, refused := 0, 0
	for pairs := 480; pairs <= 520; pairs += 4 {
		text := strings.Repeat("ab", pairs) // one pre-token, about one token a pair
		for _, ep := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"` + text + `"}]}`},
			{"/v1/completions", `{"model":"m","max_tokens":8,"prompt":"` + text + `"}`},
		} {
			res := e.gw.post(t, ep.path, ep.body)
			gbody := readBodyT(t, res)
			dres := postTo(t, e.gw, dsrv.URL+ep.path, ep.body)
			dbody := readBodyT(t, dres)
			if res.StatusCode == 200 {
				forwarded++
			} else {
				refused++
			}
			if res.StatusCode != dres.StatusCode {
				t.Errorf("%s, %d pairs: gateway %d %.200s, backend %d %.200s", ep.path, pairs, res.StatusCode, gbody, dres.StatusCode, dbody)
			}
		}
	}
	if forwarded == 0 || refused == 0 {
		t.Errorf("the sweep did not straddle the limit: %d forwarded, %d refused", forwarded, refused)
	}
	// /tokenize holds a prompt to the context as vLLM's renderer does (and
	// the simulator): over it, both refuse; near it, the gateway's ids are
	// the backend's.
	body := `{"model":"m","prompt":"` + strings.Repeat("ab", 32<<10) + `"}`
	gres := e.gw.post(t, "/tokenize", body)
	gb := readBodyT(t, gres)
	dres := postTo(t, e.gw, dsrv.URL+"/tokenize", body)
	db := readBodyT(t, dres)
	if gres.StatusCode != 400 || dres.StatusCode != 400 || !strings.Contains(gb, "context_length_exceeded") {
		t.Errorf("/tokenize of a long pre-token over the context: gateway %d %.200s, backend %d %.200s", gres.StatusCode, gb, dres.StatusCode, db)
	}
	body = `{"model":"m","prompt":"` + strings.Repeat("ab", 500) + `"}`
	gres = e.gw.post(t, "/tokenize", body)
	gb = readBodyT(t, gres)
	dres = postTo(t, e.gw, dsrv.URL+"/tokenize", body)
	db = readBodyT(t, dres)
	var ga, da tokenizeAnswer
	if gres.StatusCode != 200 || json.Unmarshal([]byte(gb), &ga) != nil || json.Unmarshal([]byte(db), &da) != nil || ga.Count != da.Count || ga.Count != len(ga.Tokens) || ga.Count > maxLen {
		t.Errorf("/tokenize of a long pre-token near the limit: gateway %d count %d, backend %d count %d", gres.StatusCode, ga.Count, dres.StatusCode, da.Count)
	}
}

// BenchmarkGatewayLongPretoken: four concurrent 7 MB chat prompts through
// the gateway (qwen3's tokenizer, a 32k context) per iteration, refused at
// the door; whitespace-free ("aaaa…", one pre-token) side by side with
// spaced ("a a a …"). cpu-ms/req is the process's CPU time (gateway and
// the test's client together) per request, from getrusage.
func BenchmarkGatewayLongPretoken(b *testing.B) {
	const size = 7 << 20
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(b, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 32768, Tokenizer: sim.ModelTokenizer(tok)}, zap.NewNop())
	srv := httptest.NewServer(s.Handler())
	defer func() { s.Close(); srv.Close() }()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: srv.URL}}}}
	gtr := NewTransport(cfg)
	defer gtr.CloseIdleConnections()
	toks := map[string]*tokenize.Model{"m": tok}
	fl, _ := fleet.New(cfg.Fleet(), &http.Client{Transport: gtr}, zap.NewNop(), PromptCounters(toks))
	g, err := New(Options{Config: cfg, Fleet: fl, Logger: zap.NewNop(), Registry: prometheus.NewRegistry(), Transport: gtr, Tokenizers: toks})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	fl.ProbeAll(context.Background())
	g.SetPhase(Serving)
	gw := httptest.NewServer(g.Handler())
	defer gw.Close()
	ctr := &http.Transport{}
	defer ctr.CloseIdleConnections()
	client := &http.Client{Transport: ctr}
	for _, tx := range []struct{ name, text string }{
		{"pretoken", strings.Repeat("a", size)},
		{"spaced", strings.Repeat("a ", size/2)},
	} {
		body := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"` + tx.text + `"}]}`
		b.Run(tx.name, func(b *testing.B) {
			b.ReportAllocs()
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			for b.Loop() {
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						res, err := client.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
						if err != nil {
							b.Error(err)
							return
						}
						got, _ := io.ReadAll(res.Body)
						res.Body.Close()
						if res.StatusCode != 400 || !strings.Contains(string(got), "context_length_exceeded") {
							b.Errorf("%d %.200s", res.StatusCode, got)
						}
					})
				}
				wg.Wait()
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Milliseconds())/float64(4*b.N), "cpu-ms/req")
		})
	}
}

// TestBatchedCompletionsCountEveryPrompt (issue 11, defect 9): a list
// prompt is a batch that vLLM runs as that many requests, each checked
// against the context on its own and each with n choices of up to
// max_tokens. The door counts every prompt (the context error names the
// one that does not fit), the reservation covers them all (prompts plus
// prompts × n × max_tokens, so a batch beyond every backend's KV budget is
// refused as n=100000 is), and the access log's prompt_tokens is the sum.
func TestBatchedCompletionsCountEveryPrompt(t *testing.T) {
	const maxLen = 8192
	tok := loadTok(t, "qwen3")
	s := sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok)}, zap.NewNop())
	url := httptestServer(t, s)
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, tok, extras{log: zap.New(core)}, func(c *config.Config) {
		c.Models[0].Backends[0].KVTokens = 100_000
	}, url)
	direct := httptestServer(t, sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok)}, zap.NewNop()))

	list := func(item string, k int) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", k), ",") + "]"
	}
	for _, tc := range []struct{ name, body string }{
		{"5000 strings", `{"model":"m","max_tokens":4000,"prompt":` + list(`"hi"`, 5000) + `}`},
		{"2000 id lists", `{"model":"m","max_tokens":100,"prompt":` + list(`[1,2,3]`, 2000) + `}`},
		{"10 prompts n=3000", `{"model":"m","max_tokens":4,"n":3000,"prompt":` + list(`"hi"`, 10) + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tg.post(t, "/v1/completions", tc.body)
			body := readBodyT(t, res)
			if res.StatusCode != 400 || !strings.Contains(body, `"code":"exceeds_kv_capacity"`) {
				t.Errorf("%d %.300s", res.StatusCode, body)
			}
		})
	}

	// One prompt of the batch does not fit with max_tokens: the error
	// names it, with its own count, and the backend refuses it too.
	long := strings.TrimSpace(strings.Repeat("tea ", 8150)) // 8150 tokens
	body := `{"model":"m","max_tokens":100,"prompt":["hi","` + long + `","hello"]}`
	res := tg.post(t, "/v1/completions", body)
	gb := readBodyT(t, res)
	var env errorEnvelope
	if res.StatusCode != 400 || json.Unmarshal([]byte(gb), &env) != nil || env.Error.Code != "context_length_exceeded" || env.Error.Param != "prompt" {
		t.Fatalf("%d %.300s", res.StatusCode, gb)
	}
	one, err := tok.CountCompletion(mustParse(t, `{"prompt":"`+long+`"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if env.Error.PromptTokens != one.Tokens || env.Error.PromptTokensExact == nil || !*env.Error.PromptTokensExact ||
		!strings.Contains(env.Error.Message, fmt.Sprintf("(%d in prompt[1] of the batch of 3, 100 in the completion)", one.Tokens)) {
		t.Errorf("context error %s: want prompt[1]'s exact count %d", gb, one.Tokens)
	}
	if dres := postTo(t, tg, direct+"/v1/completions", body); dres.StatusCode != 400 {
		t.Errorf("the backend accepts what the gateway refused: %s", readBodyT(t, dres))
	} else {
		readBodyT(t, dres)
	}

	// A batch that fits is forwarded, logged with the sum of its prompts.
	prompts := []string{"hi there", "once upon a time", "tea for two"}
	res = tg.post(t, "/v1/completions", `{"model":"m","max_tokens":3,"prompt":["hi there","once upon a time","tea for two"]}`)
	if b := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	sum := 0
	for _, p := range prompts {
		c, err := tok.CountCompletion(mustParse(t, `{"prompt":"`+p+`"}`), 0)
		if err != nil {
			t.Fatal(err)
		}
		sum += c.Tokens
	}
	if n := len(completionRequests(s)); n != 1 {
		t.Errorf("the simulator received %d requests, want only the batch that fits", n)
	}
	tg.quiesce()
	var logged []int64
	for _, e := range logs.FilterMessage("request").All() {
		if p, ok := e.ContextMap()["prompt_tokens"].(int64); ok && e.ContextMap()["status"] == int64(200) {
			logged = append(logged, p)
		}
	}
	if len(logged) != 1 || logged[0] != int64(sum) {
		t.Errorf("logged prompt_tokens %v, want the batch's sum %d", logged, sum)
	}
}

func mustParse(t *testing.T, s string) *ojson.Value {
	t.Helper()
	v, err := ojson.Parse([]byte(s), ojson.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUncountedMaxTokensBeyondContext (issue 11, defect 16): without a
// tokenizer the door cannot count the prompt, but a prompt vLLM accepts is
// at least one token, so max_tokens >= max_model_len can never fit: it is
// refused at the door with the lower bound 1 as not exact, and never
// reaches the backend. One token less is forwarded for the backend to
// decide.
func TestUncountedMaxTokensBeyondContext(t *testing.T) {
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 64, OutputTokens: 1}, zap.NewNop())
	tg := startGateway(t, nil, httptestServer(t, s))
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":64}`, "messages"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"max_completion_tokens":500}`, "messages"},
		{"/v1/completions", `{"model":"m","prompt":"","max_tokens":64}`, "prompt"},
		{"/v1/completions", `{"model":"m","prompt":["a","b"],"max_tokens":1000}`, "prompt"},
	} {
		res := tg.post(t, tc.path, tc.body)
		body := readBodyT(t, res)
		var env errorEnvelope
		if res.StatusCode != 400 || json.Unmarshal([]byte(body), &env) != nil {
			t.Errorf("%s: %d %.300s", tc.body, res.StatusCode, body)
			continue
		}
		er := env.Error
		if er.Code != "context_length_exceeded" || er.Param != tc.param || er.PromptTokens != 1 || er.PromptTokensExact == nil ||
			*er.PromptTokensExact || er.MaxModelLen != 64 || er.MaxTokens == nil || !strings.Contains(er.Message, "at least 1 in ") {
			t.Errorf("%s: %s", tc.body, body)
		}
	}
	if n := len(completionRequests(s)); n != 0 {
		t.Fatalf("the backend received %d requests that can never fit", n)
	}
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":63}`)
	readBodyT(t, res)
	if n := len(completionRequests(s)); n != 1 {
		t.Errorf("max_tokens one below the context: the backend received %d requests, want it forwarded", n)
	}
}

// TestMaxTokensOutOfRangeNamedAsSent (issue 11, defect 17): max_tokens,
// max_completion_tokens or n beyond any context (2^63 and more, past
// int64) is refused with the value the client sent, not a wrapped or
// clamped number, with or without a tokenizer.
func TestMaxTokensOutOfRangeNamedAsSent(t *testing.T) {
	counted := startCounted(t, loadTok(t, "demo"), 64, nil)
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 64, OutputTokens: 1}, zap.NewNop())
	uncounted := startGateway(t, nil, httptestServer(t, s))
	for _, tc := range []struct{ field, value string }{
		{"max_tokens", "9223372036854775808"},
		{"max_tokens", "9223372036854775807"},
		{"max_completion_tokens", "100000000000000000000000000000"},
		{"max_tokens", "2147483649"},
		{"n", "9223372036854775808"},
	} {
		for _, tg := range []*testGateway{counted.gw, uncounted} {
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"` + tc.field + `":` + tc.value + `}`
			res := tg.post(t, "/v1/chat/completions", body)
			got := readBodyT(t, res)
			var env errorEnvelope
			if res.StatusCode != 400 || json.Unmarshal([]byte(got), &env) != nil || env.Error.Code != "invalid_value" ||
				env.Error.Param != tc.field || !strings.Contains(env.Error.Message, "got "+tc.value) {
				t.Errorf("%s=%s: %d %s", tc.field, tc.value, res.StatusCode, got)
			}
		}
	}
	if n := len(completionRequests(s)) + len(completionRequests(counted.sim)); n != 0 {
		t.Errorf("the backends received %d requests", n)
	}
}

// TestAnyRoleReachesTheTemplate: vLLM's message union takes any role
// string (its custom message param), and a tool message without
// tool_call_id, and hands them to the chat template. The door counts them
// as rendered and forwards; the backend answers with the same count.
func TestAnyRoleReachesTheTemplate(t *testing.T) {
	e := startCounted(t, loadTok(t, "llama3_1"), 4096, nil)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"Weather in Paris?"},{"role":"ipython","content":"{\"temp\": 21}"}],"max_tokens":2}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","content":"42"}],"max_tokens":2}`,
	} {
		res := e.gw.post(t, "/v1/chat/completions", body)
		got := readBodyT(t, res)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, res.StatusCode, got)
		}
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(got), &out); err != nil || out.Usage.PromptTokens == 0 {
			t.Fatalf("%s: usage %s (%v)", body, got, err)
		}
		tres := e.gw.post(t, "/tokenize", body)
		var tok tokenizeAnswer
		if err := json.Unmarshal([]byte(readBodyT(t, tres)), &tok); err != nil || tok.Count != out.Usage.PromptTokens {
			t.Errorf("%s: the gateway counts %d, the backend %d (%v)", body, tok.Count, out.Usage.PromptTokens, err)
		}
	}
	if n := len(completionRequests(e.sim)); n != 2 {
		t.Errorf("the backend got %d requests, want 2", n)
	}
}
