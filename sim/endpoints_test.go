package sim

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestHealthVersionModels(t *testing.T) {
	e := newEnv(t, Config{Model: "llama", Root: "meta-llama/Llama-3.1-8B", MaxModelLen: 8192, Version: "0.20.0"})
	code, _, body := e.get("/health")
	if code != 200 || len(body) != 0 {
		t.Errorf("health = %d %q", code, body)
	}
	e.sim.Update(func(c *Config) { c.FailHealth = true })
	if code, _, body := e.get("/health"); code != 503 || len(body) != 0 {
		t.Errorf("failing health = %d %q", code, body)
	}
	if code, _, body := e.get("/version"); code != 200 || string(body) != `{"version":"0.20.0"}` {
		t.Errorf("version = %d %s", code, body)
	}
	code, _, body = e.get("/v1/models")
	if code != 200 {
		t.Fatalf("models = %d", code)
	}
	ml := decode[map[string]any](t, string(body))
	if ml["object"] != "list" {
		t.Errorf("object = %v", ml["object"])
	}
	card := ml["data"].([]any)[0].(map[string]any)
	for k, want := range map[string]any{
		"id": "llama", "object": "model", "owned_by": "vllm", "root": "meta-llama/Llama-3.1-8B",
		"parent": nil, "max_model_len": 8192.0,
	} {
		if v, ok := card[k]; !ok || v != want {
			t.Errorf("card[%s] = %v, want %v", k, v, want)
		}
	}
	perm := card["permission"].([]any)[0].(map[string]any)
	if !strings.HasPrefix(perm["id"].(string), "modelperm-") || perm["object"] != "model_permission" ||
		perm["allow_sampling"] != true || perm["organization"] != "*" || perm["group"] != nil {
		t.Errorf("permission = %v", perm)
	}
}

func TestTokenize(t *testing.T) {
	e := newEnv(t, Config{MaxModelLen: 10})
	for _, tc := range []struct {
		name, body string
		status     int
		count      int
		contains   string
	}{
		{"chat", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`, 200, chatHiTokens, ""},
		{"chat no generation prompt", `{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`, 200, 5, ""},
		{"prompt", `{"prompt":"hi"}`, 200, completionHiTokens, ""},
		{"too long", `{"prompt":"aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj"}`, 400, 0,
			"However, you requested 0 output tokens and your prompt contains at least 11 input tokens"},
		{"unknown model", `{"model":"x","prompt":"hi"}`, 404, 0, "The model `x` does not exist."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.post("/tokenize", tc.body)
			if code != tc.status {
				t.Fatalf("status %d: %s", code, body)
			}
			if tc.status != 200 {
				if !strings.Contains(string(body), tc.contains) {
					t.Errorf("body %s", body)
				}
				return
			}
			r := decode[map[string]any](t, string(body))
			if r["count"] != float64(tc.count) || r["max_model_len"] != 10.0 || len(r["tokens"].([]any)) != tc.count {
				t.Errorf("tokenize = %s", body)
			}
			if v, ok := r["token_strs"]; !ok || v != nil {
				t.Errorf("token_strs = %v", v)
			}
		})
	}
}

// countOnly is a Tokenizer without id support.
type countOnly struct{ n int }

func (c countOnly) ChatPromptTokens([]byte) (int, error)       { return c.n, nil }
func (c countOnly) CompletionPromptTokens([]byte) (int, error) { return c.n, nil }

func TestCustomTokenizer(t *testing.T) {
	e := newEnv(t, Config{Tokenizer: countOnly{n: 42}, OutputTokens: 1})
	code, _, body := e.post("/tokenize", `{"prompt":"whatever"}`)
	if code != 200 || string(body) != `{"count":42,"max_model_len":4096,"tokens":[],"token_strs":null}` {
		t.Errorf("tokenize = %d %s", code, body)
	}
	code, _, body = e.post("/v1/chat/completions", chatBody)
	if r := decode[chatResponse](t, string(body)); code != 200 || r.Usage.PromptTokens != 42 {
		t.Errorf("chat = %d %s", code, body)
	}
}

func TestAdminEndpoints(t *testing.T) {
	e := newEnv(t, Config{})
	code, _, body := e.post("/sim/config", `{"fail_health":true,"ttft_ms":200,"max_num_seqs":3,"api_key":"k"}`)
	if code != 200 {
		t.Fatalf("config = %d %s", code, body)
	}
	v := decode[knobsView](t, string(body))
	if !v.FailHealth || v.TTFTMillis != 200 || v.MaxNumSeqs != 3 || !v.APIKeySet || strings.Contains(string(body), `"k"`) {
		t.Errorf("view = %s", body)
	}
	cfg := e.sim.Config()
	if cfg.TTFT.Milliseconds() != 200 || !cfg.FailHealth || cfg.APIKey != "k" || cfg.Model != "demo" {
		t.Errorf("config = %+v", cfg)
	}
	if code, _, _ := e.get("/health"); code != 503 {
		t.Errorf("health = %d", code)
	}
	for _, bad := range []string{`{"nope":1}`, `{"ttft_ms":-1}`, `{"fail_status":200}`, `not json`} {
		if code, _, body := e.post("/sim/config", bad); code != 400 {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
	e.post("/v1/chat/completions", chatBody) // 401: key now required
	code, _, body = e.get("/sim/stats")
	if st := decode[Stats](t, string(body)); code != 200 || st.Requests != 1 || st.Rejected != 1 {
		t.Errorf("stats = %d %s", code, body)
	}
}

func TestReceived(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 1})
	e.post("/v1/chat/completions", chatBody, "Authorization", "Bearer abc", "X-Custom", "1")
	e.get("/health") // not recorded
	e.post("/tokenize", `{"prompt":"hi"}`)
	got := e.sim.Received()
	if len(got) != 2 || got[1].Path != "/tokenize" || string(got[1].Body) != `{"prompt":"hi"}` {
		t.Fatalf("received %+v", got)
	}
	r := got[0]
	if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" || string(r.Body) != chatBody ||
		r.Header.Get("X-Custom") != "1" || r.Header.Get("Authorization") != "Bearer abc" {
		t.Errorf("received = %+v", r)
	}
	// The ring keeps the last 1000.
	for i := range receivedCap + 5 {
		e.sim.record(&http.Request{Method: "GET", URL: r0URL(t, i)}, nil)
	}
	got = e.sim.Received()
	if len(got) != receivedCap || got[0].Path != "/v1/x5" || got[len(got)-1].Path != "/v1/x1004" {
		t.Errorf("ring: %d, first %s, last %s", len(got), got[0].Path, got[len(got)-1].Path)
	}
}

func r0URL(t *testing.T, i int) *url.URL {
	t.Helper()
	u, err := url.Parse(fmt.Sprintf("/v1/x%d", i))
	if err != nil {
		t.Fatal(err)
	}
	return u
}
