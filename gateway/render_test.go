package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
)

// startTokenizing runs the simulator with the fixture model's tokenizer
// (ids for /tokenize and render, its tokenizer.json decoder for
// /detokenize) behind a gateway that has the same tokenizer.
type tokE2E struct {
	*e2e
	simURL string
}

func startTokenizing(t *testing.T, name string, maxLen int) tokE2E {
	t.Helper()
	tok := loadTok(t, name)
	dec, err := sim.LoadVocabDecoder(filepath.Join(fixtures.ModelDir(t, name), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, OutputTokens: 2, Tokenizer: sim.ModelTokenizer(tok), Detokenizer: dec},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	return tokE2E{&e2e{sim: s, gw: startGatewayToks(t, tok, nil, srv.URL)}, srv.URL}
}

// received counts the requests the simulator saw on path.
func received(s *sim.Server, path string) int {
	n := 0
	for _, r := range s.Received() {
		if r.Path == path {
			n++
		}
	}
	return n
}

// postTo posts a JSON body to base+path.
func postJSONTo(t *testing.T, base, path, body string) (int, string) {
	t.Helper()
	res, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, strings.TrimSpace(readBodyT(t, res))
}

var requestIDField = regexp.MustCompile(`"request_id":"(chat)?cmpl-[0-9a-f]+"`)

// TestRenderMatchesTokenizeForChatGoldens (issue 12): for every golden
// conversation of the fixture models, /v1/chat/completions/render answers
// locally (the backend sees no render request) with token_ids equal to
// /tokenize's tokens and to HF's count.
func TestRenderMatchesTokenizeForChatGoldens(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "tokenize", "testdata", "chat", name+".golden.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			e := startTokenizing(t, name, 1<<20)
			checked, refused := 0, 0
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
					continue
				}
				body := `{"model":"m",` + strings.TrimPrefix(g.Body, "{")
				var tk tokenizeAnswer
				if err := json.Unmarshal([]byte(readBodyT(t, e.gw.post(t, "/tokenize", body))), &tk); err != nil {
					t.Fatal(err)
				}
				res := e.gw.post(t, "/v1/chat/completions/render", body)
				got := readBodyT(t, res)
				if res.StatusCode == 400 && strings.Contains(got, "is required for role") {
					// The door refuses it for generation (vLLM's chat endpoint
					// does too), and render validates as the door does.
					refused++
					continue
				}
				var ra struct {
					TokenIDs []int `json:"token_ids"`
				}
				if res.StatusCode != 200 || json.Unmarshal([]byte(got), &ra) != nil || len(ra.TokenIDs) != *g.Tokens || !equalInts(ra.TokenIDs, tk.Tokens) {
					t.Errorf("%s: %d %.300s\nwant the %d ids of /tokenize", g.ID, res.StatusCode, got, *g.Tokens)
				}
				checked++
			}
			if n := received(e.sim, "/v1/chat/completions/render"); n != 0 {
				t.Errorf("the backend received %d render requests; all should be answered by the gateway", n)
			}
			t.Logf("%s: %d golden conversations rendered, token_ids equal to /tokenize's; %d refused by the door", name, checked, refused)
			if refused > 1 {
				t.Errorf("%d conversations refused", refused)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRenderLikeVLLM (issue 12): a client written from llm-d's documented
// behaviour (POST {model, messages} and read token_ids; for completions
// read [0].token_ids) works, and for a set of requests the gateway's local
// answer is byte for byte the simulator's (vLLM's shape), request_id
// aside; none of them reaches the backend.
func TestRenderLikeVLLM(t *testing.T) {
	e := startTokenizing(t, "qwen3", 4096)

	// llm-d's client.
	var chat struct {
		TokenIDs []int `json:"token_ids"`
		Features any   `json:"features"`
	}
	st, b := postJSONTo(t, e.gw.URL, "/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hello there"}]}`)
	if st != 200 || json.Unmarshal([]byte(b), &chat) != nil || len(chat.TokenIDs) == 0 || chat.Features != nil {
		t.Fatalf("chat render: %d %s", st, b)
	}
	var comp []struct {
		TokenIDs []int `json:"token_ids"`
	}
	st, b = postJSONTo(t, e.gw.URL, "/v1/completions/render", `{"model":"m","prompt":"Hello there"}`)
	if st != 200 || json.Unmarshal([]byte(b), &comp) != nil || len(comp) != 1 || len(comp[0].TokenIDs) == 0 {
		t.Fatalf("completions render: %d %s", st, b)
	}

	msgs := `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"<b>Hi</b> & bye"}]`
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions/render", `{"model":"m",` + msgs + `}`},
		{"/v1/chat/completions/render", `{"model":"m",` + msgs + `,"max_tokens":100,"temperature":0.7,"top_p":0.9,"top_k":20,"seed":7}`},
		{"/v1/chat/completions/render", `{"model":"m",` + msgs + `,"max_completion_tokens":16,"n":2,"stop":["</s>","\n\n"],"stop_token_ids":[1,2]}`},
		{"/v1/chat/completions/render", `{"model":"m",` + msgs + `,"stream":true,"stream_options":{"include_usage":true},"cache_salt":"s1","priority":3}`},
		{"/v1/chat/completions/render", `{"model":"m",` + msgs + `,"temperature":0,"top_p":0.5,"min_tokens":3,"ignore_eos":true,"presence_penalty":0.5,"repetition_penalty":1.1}`},
		{"/v1/chat/completions/render", `{"model":"m",` + msgs + `,"add_generation_prompt":false,"continue_final_message":true}`},
		{"/v1/completions/render", `{"model":"m","prompt":"Once upon a time"}`},
		{"/v1/completions/render", `{"model":"m","prompt":["one","two <tag>"],"max_tokens":null}`},
		{"/v1/completions/render", `{"model":"m","prompt":[[1,2,3],[4,5]],"max_tokens":40,"frequency_penalty":-0.5,"min_p":0.1}`},
		{"/v1/completions/render", `{"model":"m","prompt":[5,6,7],"add_special_tokens":false,"stream":true}`},
	} {
		gst, gb := postJSONTo(t, e.gw.URL, c.path, c.body)
		sst, sb := postJSONTo(t, e.simURL, c.path, c.body)
		g, s := requestIDField.ReplaceAllString(gb, `"request_id":"X"`), requestIDField.ReplaceAllString(sb, `"request_id":"X"`)
		if gst != 200 || gst != sst || g != s {
			t.Errorf("%s %s:\ngateway %d %s\nsim     %d %s", c.path, c.body, gst, g, sst, s)
		}
	}
	if n := gatewayForwarded(e.e2e); n != 0 {
		t.Errorf("the backend received %d render requests from the gateway, want 0", n)
	}
}

// gatewayForwarded is how many render requests reached the simulator
// through the gateway (the test's direct requests carry no X-Request-Id;
// the gateway's forwards do).
func gatewayForwarded(e *e2e) int {
	n := 0
	for _, r := range e.sim.Received() {
		if strings.HasSuffix(r.Path, "/render") && r.Header.Get("X-Request-Id") != "" {
			n++
		}
	}
	return n
}

// TestRenderRefusesLikeTheDoor (issue 12): bad render requests get the
// door's answers in OpenAI's envelope, and the backend receives nothing.
func TestRenderRefusesLikeTheDoor(t *testing.T) {
	e := startTokenizing(t, "qwen3", 64)
	long := strings.Repeat("lorem ipsum ", 40)
	for _, c := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/chat/completions/render", `{"model":"m",]`, 400, "invalid_json"},
		{"/v1/chat/completions/render", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found"},
		{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":7,"content":"x"}]}`, 400, "invalid_type"},
		{"/v1/chat/completions/render", `{"model":"m","messages":"x"}`, 400, "invalid_type"},
		{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "context_length_exceeded"},
		{"/v1/completions/render", `{"model":"m","prompt":[true]}`, 400, "invalid_type"},
		{"/v1/completions/render", `{"model":"m","prompt":"x","max_tokens":0}`, 400, "invalid_value"},
		{"/v1/completions/render", `{"model":"m","prompt":"hello","max_tokens":64}`, 400, "context_length_exceeded"},
	} {
		res := e.gw.post(t, c.path, c.body)
		body := readBodyT(t, res)
		var env errorEnvelope
		if res.StatusCode != c.status || json.Unmarshal([]byte(body), &env) != nil || env.Error.Code != c.code || env.Error.Message == "" {
			t.Errorf("%s %.80s: %d %s, want %d %s", c.path, c.body, res.StatusCode, body, c.status, c.code)
		}
	}
	if n := gatewayForwarded(e.e2e); n != 0 {
		t.Errorf("the backend received %d render requests", n)
	}
	res := e.gw.post(t, "/v1/chat/completions/render", `{"model":"m"}`, "Content-Type", "text/plain")
	if b := readBodyT(t, res); res.StatusCode != 400 || !strings.Contains(b, "unsupported_media_type") {
		t.Errorf("content type: %d %s", res.StatusCode, b)
	}
}

// TestRenderForwardsWhatItCannotReproduce (issue 12): a request with a
// field the local renderer does not reproduce, or for a model without a
// tokenizer, is rendered by a backend, and its answer passes through.
func TestRenderForwardsWhatItCannotReproduce(t *testing.T) {
	e := startTokenizing(t, "qwen3", 4096)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stop":"x"}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"top_k":-1}`,
	} {
		st, b := postJSONTo(t, e.gw.URL, "/v1/chat/completions/render", body)
		if st != 200 || !strings.Contains(b, `"token_ids":[`) {
			t.Errorf("%s: %d %s", body, st, b)
		}
	}
	if n := gatewayForwarded(e.e2e); n != 3 {
		t.Errorf("forwarded %d, want 3", n)
	}

	// No tokenizer at the gateway: every render goes to the backend.
	tok := loadTok(t, "qwen3")
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 4096, Tokenizer: sim.ModelTokenizer(tok)}, nil)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	gw := startGatewayToks(t, nil, nil, srv.URL)
	st, b := postJSONTo(t, gw.URL, "/v1/completions/render", `{"model":"m","prompt":"hi"}`)
	if st != 200 || !strings.HasPrefix(b, `[{"request_id":"cmpl-`) {
		t.Errorf("no tokenizer: %d %s", st, b)
	}
	if n := gatewayForwarded(&e2e{sim: s}); n != 1 {
		t.Errorf("no tokenizer: forwarded %d, want 1", n)
	}
}

// TestDetokenizeLikeVLLM (issue 12): /detokenize is answered by the
// gateway, byte for byte as the simulator's tokenizer.json decoder answers,
// for byte-level (Qwen 3, Llama 3.1) and SentencePiece (Llama 2, Gemma 3)
// models; bad input (ids outside the vocabulary included) gets the
// envelope and reaches nobody.
func TestDetokenizeLikeVLLM(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "llama2", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			e := startTokenizing(t, name, 4096)
			tok := loadTok(t, name)
			texts := []string{"Hello world", "  leading spaces, <b>tags</b> & ünïcödé 日本語 🤖\n\ttabs", "x"}
			for _, text := range texts {
				ids := tok.Encoder().Encode(text, true)
				idsJSON, _ := json.Marshal(ids)
				body := `{"model":"m","tokens":` + string(idsJSON) + `}`
				gst, gb := postJSONTo(t, e.gw.URL, "/detokenize", body)
				sst, sb := postJSONTo(t, e.simURL, "/detokenize", body)
				if gst != 200 || gst != sst || gb != sb {
					t.Errorf("%q:\ngateway %d %s\nsim     %d %s", text, gst, gb, sst, sb)
				}
			}
			// A chat rendering, special tokens and all.
			var tk tokenizeAnswer
			json.Unmarshal([]byte(readBodyT(t, e.gw.post(t, "/tokenize", `{"model":"m","messages":[{"role":"user","content":"Hi there"}]}`))), &tk)
			if len(tk.Tokens) == 0 { // no chat template (Llama 2): special tokens by hand
				bos, _ := json.Marshal(append([]int{1, 2}, tok.Encoder().Encode("<s>x</s>", false)...))
				json.Unmarshal(bos, &tk.Tokens)
			}
			idsJSON, _ := json.Marshal(tk.Tokens)
			body := `{"tokens":` + string(idsJSON) + `}`
			gst, gb := postJSONTo(t, e.gw.URL, "/detokenize", body)
			sst, sb := postJSONTo(t, e.simURL, "/detokenize", body)
			if gst != 200 || gb != sb {
				t.Errorf("chat ids:\ngateway %d %s\nsim     %d %s", gst, gb, sst, sb)
			}
			if n := detokenizeForwarded(e.e2e); n != 0 {
				t.Errorf("forwarded %d, want 0", n)
			}
			// An id outside the vocabulary is refused here (issue 26),
			// like the other bad inputs.
			for _, bad := range []string{`{"model":"m"}`, `{"model":"m","tokens":"x"}`, `{"model":"m","tokens":[1.5]}`, `{"model":"zz","tokens":[1]}`, `[1]`,
				`{"model":"m","tokens":[1,99999999]}`, `{"model":"m","tokens":[-1]}`} {
				res := e.gw.post(t, "/detokenize", bad)
				b := readBodyT(t, res)
				var env errorEnvelope
				if res.StatusCode/100 != 4 || json.Unmarshal([]byte(b), &env) != nil || env.Error.Message == "" {
					t.Errorf("%s: %d %s", bad, res.StatusCode, b)
				}
			}
			if n := detokenizeForwarded(e.e2e); n != 0 {
				t.Errorf("bad inputs reached the backend: forwarded %d", n)
			}
		})
	}
}

func detokenizeForwarded(e *e2e) int {
	n := 0
	for _, r := range e.sim.Received() {
		if r.Path == "/detokenize" && r.Header.Get("X-Request-Id") != "" {
			n++
		}
	}
	return n
}
