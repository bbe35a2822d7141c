package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/tokenize"
)

var (
	fixtureMu     sync.Mutex
	fixtureModels = map[string]*tokenize.Model{}
)

// fixtureTokenizer loads a fixture model once per test binary, with the
// clock the tokenize package's chat goldens were rendered with.
func fixtureTokenizer(t *testing.T, name string) *tokenize.Model {
	t.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if m := fixtureModels[name]; m != nil {
		return m
	}
	now := func() time.Time { return time.Date(2026, 3, 5, 14, 7, 9, 0, time.Local) }
	m, err := tokenize.LoadDir(fixtures.ModelDir(t, name), tokenize.LoadOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	fixtureModels[name] = m
	return m
}

// chatGoldens returns the request bodies of the tokenize package's golden
// conversations for a model.
func chatGoldens(t *testing.T, model string) []struct{ ID, Body string } {
	t.Helper()
	f, err := os.Open(filepath.Join(fixtures.Root(), "tokenize", "testdata", "chat", model+".golden.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []struct{ ID, Body string }
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var g struct {
			ID   string `json:"id"`
			Body string `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, struct{ ID, Body string }{g.ID, g.Body})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type renderAnswer struct {
	RequestID      string          `json:"request_id"`
	TokenIDs       []int           `json:"token_ids"`
	Features       json.RawMessage `json:"features"`
	SamplingParams map[string]any  `json:"sampling_params"`
	Model          *string         `json:"model"`
	Stream         bool            `json:"stream"`
	StreamOptions  map[string]any  `json:"stream_options"`
}

// TestRenderMatchesTokenize: for every golden conversation of the fixture
// models, /v1/chat/completions/render answers the token ids /tokenize
// gives (or the same error).
func TestRenderMatchesTokenize(t *testing.T) {
	for _, model := range []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"} {
		t.Run(model, func(t *testing.T) {
			e := newEnv(t, Config{Model: model, MaxModelLen: 1 << 20, Tokenizer: ModelTokenizer(fixtureTokenizer(t, model))})
			ok := 0
			for _, g := range chatGoldens(t, model) {
				tc, _, tb := e.post("/tokenize", g.Body)
				rc, _, rb := e.post("/v1/chat/completions/render", g.Body)
				if tc != rc {
					t.Errorf("%s: /tokenize %d %s, render %d %s", g.ID, tc, tb, rc, rb)
					continue
				}
				if tc != 200 {
					if string(tb) != string(rb) {
						t.Errorf("%s: errors differ: %s vs %s", g.ID, tb, rb)
					}
					continue
				}
				want := decode[tokenizeResponse](t, string(tb)).Tokens
				r := decode[renderAnswer](t, string(rb))
				if fmt.Sprint(r.TokenIDs) != fmt.Sprint(want) || len(want) == 0 {
					t.Errorf("%s: render %v\n/tokenize %v", g.ID, r.TokenIDs, want)
				}
				ok++
			}
			if ok < 80 {
				t.Errorf("only %d goldens rendered", ok)
			}
		})
	}
}

// TestRenderShape checks the GenerateRequest fields, the computed
// max_tokens, completions' array, and a client written from llm-d's
// documented behaviour (POST {model, messages}, read token_ids; for
// completions [0].token_ids).
func TestRenderShape(t *testing.T) {
	e := newEnv(t, Config{MaxModelLen: 100})
	code, _, b := e.post("/v1/chat/completions/render", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	// The exact shape: field order and nulls as vLLM's model_dump.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"features": "null", "model": `"demo"`, "stream": "false", "stream_options": "null", "cache_salt": "null",
		"priority": "0", "kv_transfer_params": "null",
		// chatHiTokens = 8: max_tokens = 100 - 8; FINAL_ONLY; defaults omitted.
		"sampling_params": `{"max_tokens":92,"output_kind":2,"skip_clone":true}`,
	} {
		if string(raw[k]) != want {
			t.Errorf("%s = %s, want %s", k, raw[k], want)
		}
	}
	if !strings.HasPrefix(string(b), `{"request_id":"chatcmpl-`) || len(raw) != 10 {
		t.Errorf("render = %s", b)
	}
	_, _, tb := e.post("/tokenize", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`)
	r := decode[renderAnswer](t, string(b))
	if fmt.Sprint(r.TokenIDs) != fmt.Sprint(decode[tokenizeResponse](t, string(tb)).Tokens) {
		t.Errorf("token_ids %v, /tokenize %s", r.TokenIDs, tb)
	}

	// Sampling fields, streaming, no model.
	code, _, b = e.post("/v1/chat/completions/render", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,`+
		`"temperature":0.5,"top_k":3,"n":2,"seed":7,"stop":["x"],"stream":true,"stream_options":{"include_usage":false},`+
		`"cache_salt":"salt","priority":-1}`)
	r = decode[renderAnswer](t, string(b))
	if code != 200 || r.Model != nil || !r.Stream || fmt.Sprint(r.StreamOptions) != "map[continuous_usage_stats:false include_usage:false]" {
		t.Errorf("stream render = %d %s", code, b)
	}
	if !strings.Contains(string(b), `"sampling_params":{"n":2,"temperature":0.5,"top_k":3,"seed":7,"stop":["x"],"max_tokens":5,"output_kind":1,"skip_clone":true}`) ||
		!strings.Contains(string(b), `"cache_salt":"salt","priority":-1,`) {
		t.Errorf("stream render = %s", b)
	}

	// Completions: one element per prompt; the default max_tokens (16) is
	// omitted like every default, a smaller computed one is not.
	code, _, b = e.post("/v1/completions/render", `{"model":"demo","prompt":["hi","a b c d"]}`)
	var list []renderAnswer
	if err := json.Unmarshal(b, &list); code != 200 || err != nil || len(list) != 2 {
		t.Fatalf("completions render = %d %s", code, b)
	}
	_, _, tb = e.post("/tokenize", `{"model":"demo","prompt":"a b c d"}`)
	if !strings.HasPrefix(list[0].RequestID, "cmpl-") || list[0].SamplingParams["max_tokens"] != nil ||
		fmt.Sprint(list[1].TokenIDs) != fmt.Sprint(decode[tokenizeResponse](t, string(tb)).Tokens) {
		t.Errorf("completions render = %s", b)
	}
	e.sim.Update(func(c *Config) { c.MaxModelLen = 12 })
	code, _, b = e.post("/v1/completions/render", `{"prompt":[[5,6,7]],"max_tokens":null}`)
	if err := json.Unmarshal(b, &list); code != 200 || err != nil || len(list) != 1 ||
		fmt.Sprint(list[0].TokenIDs) != "[5 6 7]" || list[0].SamplingParams["max_tokens"] != 9.0 {
		t.Errorf("ids render = %d %s", code, b)
	}
	if st := e.sim.Stats(); st.Requests != 0 || st.Completed != 0 {
		t.Errorf("render reached the engine: %+v", st)
	}
}

// TestRenderErrors: the OpenAI envelope with code = status, in vLLM's order.
func TestRenderErrors(t *testing.T) {
	e := newEnv(t, Config{MaxModelLen: 10, Tokenizer: countOnly{n: 3}})
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"unknown model", "/v1/chat/completions/render", `{"model":"x","messages":[]}`, 404,
			"{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"},
		{"messages missing", "/v1/chat/completions/render", `{}`, 400,
			`{"error":{"message":"[{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required'}]","type":"Bad Request","param":"body.messages","code":400}}`},
		{"beam search", "/v1/completions/render", `{"prompt":"a","use_beam_search":true}`, 400,
			`{"error":{"message":"Beam search is not supported by the render endpoint","type":"BadRequestError","param":null,"code":400}}`},
		{"no ids", "/v1/chat/completions/render", `{"messages":[]}`, 501,
			`{"error":{"message":"The model does not support Chat Completions Render API","type":"NotImplementedError","param":null,"code":501}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.post(tc.path, tc.body)
			if code != tc.status || string(body) != tc.want {
				t.Errorf("got %d %s\nwant %d %s", code, body, tc.status, tc.want)
			}
		})
	}
	e.sim.Update(func(c *Config) { c.Tokenizer = nil })
	code, _, body := e.post("/v1/completions/render", `{"prompt":"a b c d e f g h i j k","max_tokens":2}`)
	if code != 400 || !strings.Contains(string(body), "This model's maximum context length is 10 tokens. However, you requested 2 output tokens and your prompt contains at least 9 input tokens") {
		t.Errorf("too long = %d %s", code, body)
	}
	code, _, body = e.post("/v1/completions/render", `{"prompt":"","add_special_tokens":false}`)
	if code != 400 || !strings.Contains(string(body), "No token_ids rendered") {
		t.Errorf("empty = %d %s", code, body)
	}
}
