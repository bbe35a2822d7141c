package gateway

// The pooling endpoints (embeddings, /pooling, /classify, score, rerank)
// and GET /version through the gateway, against the simulator and a
// hand-written backend, over real HTTP.

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

var (
	qwenOnce sync.Once
	qwenTok  *tokenize.Model
	qwenErr  error
)

// qwen3 loads the qwen3 fixture tokenizer once for the package's tests.
func qwen3(t *testing.T) *tokenize.Model {
	t.Helper()
	dir := fixtures.ModelDir(t, "qwen3")
	qwenOnce.Do(func() { qwenTok, qwenErr = fixtureLoader.LoadDir(dir, tokenize.LoadOptions{}) })
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}

type poolingE2E struct {
	sim    *sim.Server
	simURL string
	gw     *testGateway
	sdk    openai.Client
}

// startPooling serves a simulator counting with the qwen3 tokenizer and a
// gateway counting with the same one. The TokenGate is set once the
// warm-up generation is done.
func startPooling(t *testing.T, sc sim.Config, mutate func(*config.Config)) *poolingE2E {
	t.Helper()
	tok := qwen3(t)
	sc.Model = "m"
	sc.Tokenizer = sim.ModelTokenizer(tok)
	gate := sc.TokenGate
	sc.TokenGate = nil
	s := sim.New(sc, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	tg := startGatewayToks(t, tok, mutate, srv.URL)
	warmupDone(t, s)
	if gate != nil {
		s.Update(func(c *sim.Config) { c.TokenGate = gate })
	}
	sdk := openai.NewClient(option.WithBaseURL(tg.URL+"/v1/"), option.WithAPIKey("k"),
		option.WithHTTPClient(tg.client), option.WithMaxRetries(0))
	return &poolingE2E{sim: s, simURL: srv.URL, gw: tg, sdk: sdk}
}

var poolingPaths = []string{"/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"}

func isPoolingPath(p string) bool {
	for _, pp := range poolingPaths {
		if p == pp {
			return true
		}
	}
	return false
}

// TestE2EEmbeddingsSDK sends embeddings through maitred with the official
// SDK, as float and as base64, and gets the simulator's own vectors.
func TestE2EEmbeddingsSDK(t *testing.T) {
	e := startPooling(t, sim.Config{}, nil)
	direct := openai.NewClient(option.WithBaseURL(e.simURL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	inputs := map[string]openai.EmbeddingNewParamsInputUnion{
		"string":     {OfString: openai.String("The quick brown fox")},
		"strings":    {OfArrayOfStrings: []string{"one", "two words", "three little words"}},
		"token ids":  {OfArrayOfTokens: []int64{785, 3974, 13876}},
		"id batches": {OfArrayOfTokenArrays: [][]int64{{785, 3974}, {13876}}},
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			p := openai.EmbeddingNewParams{Model: "m", Input: in}
			via, err := e.sdk.Embeddings.New(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			want, err := direct.Embeddings.New(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			if len(via.Data) != len(want.Data) || len(via.Data) == 0 {
				t.Fatalf("%d embeddings through maitred, %d direct", len(via.Data), len(want.Data))
			}
			for i := range via.Data {
				if fmt.Sprint(via.Data[i].Embedding) != fmt.Sprint(want.Data[i].Embedding) {
					t.Errorf("embedding %d differs through maitred", i)
				}
			}
			if via.Usage.PromptTokens != want.Usage.PromptTokens || via.Usage.PromptTokens == 0 {
				t.Errorf("usage through maitred %+v, direct %+v", via.Usage, want.Usage)
			}
			// base64: the same vectors, little-endian float32, untouched.
			p.EncodingFormat = openai.EmbeddingNewParamsEncodingFormatBase64
			b64, err := e.sdk.Embeddings.New(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			for i := range b64.Data {
				var s string
				if err := json.Unmarshal([]byte(b64.Data[i].JSON.Embedding.Raw()), &s); err != nil {
					t.Fatalf("base64 embedding %d: %v (%s)", i, err, b64.Data[i].JSON.Embedding.Raw())
				}
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil || len(raw) != 4*len(want.Data[i].Embedding) {
					t.Fatalf("base64 embedding %d: %v, %d bytes", i, err, len(raw))
				}
				for j, f := range want.Data[i].Embedding {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])); got != float32(f) {
						t.Fatalf("base64 embedding %d[%d] = %v, want %v", i, j, got, f)
					}
				}
			}
		})
	}
}

// TestPoolingBadInputsNeverReachBackend: each pooling endpoint's bad
// inputs get OpenAI's envelope from the door, and the backend receives
// nothing.
func TestPoolingBadInputsNeverReachBackend(t *testing.T) {
	e := startPooling(t, sim.Config{MaxModelLen: 32}, nil)
	long := strings.TrimSpace(strings.Repeat("word ", 40))
	ids := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = "11"
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	cases := []struct {
		name, path, body string
		status           int
		code, param      string
		msg              string
	}{
		{"embeddings input number", "/v1/embeddings", `{"model":"m","input":5}`, 400, "invalid_type", "input", ""},
		{"embeddings mixed batch", "/v1/embeddings", `{"model":"m","input":["a",5]}`, 400, "invalid_type", "input[1]", ""},
		{"embeddings float ids", "/v1/embeddings", `{"model":"m","input":[1,2.5]}`, 400, "invalid_type", "input[1]", ""},
		{"embeddings empty", "/v1/embeddings", `{"model":"m","input":[]}`, 400, "invalid_value", "input", ""},
		{"embeddings no input", "/v1/embeddings", `{"model":"m"}`, 400, "missing_required_parameter", "input", ""},
		{"embeddings encoding", "/v1/embeddings", `{"model":"m","input":"x","encoding_format":5}`, 400, "invalid_type", "encoding_format", ""},
		{"embeddings truncate type", "/v1/embeddings", `{"model":"m","input":"x","truncate_prompt_tokens":"all"}`, 400, "invalid_type", "truncate_prompt_tokens", ""},
		{"embeddings messages type", "/v1/embeddings", `{"model":"m","messages":"hi"}`, 400, "invalid_type", "messages", ""},
		{"embeddings unknown model", "/v1/embeddings", `{"model":"nope","input":"x"}`, 404, "model_not_found", "model", ""},
		{"embeddings model type", "/v1/embeddings", `{"model":7,"input":"x"}`, 400, "invalid_type", "model", ""},
		{"embeddings over-long text", "/v1/embeddings", `{"model":"m","input":"` + long + `"}`, 400, "context_length_exceeded", "input",
			"This model's maximum context length is 32 tokens. However, you requested at least 33 tokens in the input for embedding generation. Please reduce the length of the input."},
		{"embeddings over-long ids", "/v1/embeddings", `{"model":"m","input":` + ids(33) + `}`, 400, "context_length_exceeded", "input",
			"you requested 33 tokens in the input for embedding generation."},
		{"embeddings over-long in batch", "/v1/embeddings", `{"model":"m","input":["short",` + ids(40) + `]}`, 400, "context_length_exceeded", "input[1]",
			"you requested 40 tokens in input[1] of the batch of 2 for embedding generation"},
		{"embeddings over-long messages", "/v1/embeddings", `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "context_length_exceeded", "messages",
			"in the input for embedding generation"},
		{"pooling input object", "/pooling", `{"model":"m","input":{"a":1}}`, 400, "invalid_type", "input", ""},
		{"pooling over-long", "/pooling", `{"model":"m","input":` + ids(33) + `}`, 400, "context_length_exceeded", "input", "embedding generation"},
		{"classify input bool", "/classify", `{"model":"m","input":true}`, 400, "invalid_type", "input", ""},
		{"classify over-long", "/classify", `{"model":"m","input":"` + long + `"}`, 400, "context_length_exceeded", "input", "for classification"},
		{"classify unknown model", "/classify", `{"model":"nope","input":"x"}`, 404, "model_not_found", "model", ""},
		{"score text_1 number", "/score", `{"model":"m","text_1":5,"text_2":"x"}`, 400, "invalid_type", "text_1", ""},
		{"score text_2 missing", "/v1/score", `{"model":"m","text_1":"q"}`, 400, "missing_required_parameter", "text_2", ""},
		{"score document number", "/v1/score", `{"model":"m","queries":"q","documents":["a",1]}`, 400, "invalid_type", "documents[1]", ""},
		{"score unknown model", "/score", `{"model":"nope","text_1":"a","text_2":"b"}`, 404, "model_not_found", "model", ""},
		{"rerank query list", "/rerank", `{"model":"m","query":["a"],"documents":["x"]}`, 400, "invalid_type", "query", ""},
		{"rerank top_n", "/v1/rerank", `{"model":"m","query":"a","documents":["x"],"top_n":"2"}`, 400, "invalid_type", "top_n", ""},
		{"rerank no documents", "/v2/rerank", `{"model":"m","query":"a"}`, 400, "missing_required_parameter", "documents", ""},
		{"rerank unknown model", "/v2/rerank", `{"model":"nope","query":"a","documents":["x"]}`, 404, "model_not_found", "model", ""},
		{"rerank not json", "/rerank", `{"model":"m",`, 400, "invalid_json", "model", ""},
	}
	for _, tc := range cases {
		res := e.gw.post(t, tc.path, tc.body)
		body := readBodyT(t, res)
		var env struct {
			Error struct {
				Message      string  `json:"message"`
				Type         string  `json:"type"`
				Param        *string `json:"param"`
				Code         *string `json:"code"`
				PromptTokens *int    `json:"prompt_tokens"`
				MaxModelLen  *int    `json:"max_model_len"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Code == nil {
			t.Errorf("%s: %d %s: not OpenAI's envelope", tc.name, res.StatusCode, body)
			continue
		}
		param := ""
		if env.Error.Param != nil {
			param = *env.Error.Param
		}
		if res.StatusCode != tc.status || *env.Error.Code != tc.code || param != tc.param || env.Error.Type != "invalid_request_error" ||
			!strings.Contains(env.Error.Message, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, res.StatusCode, body)
		}
		if tc.code == "context_length_exceeded" && (env.Error.PromptTokens == nil || *env.Error.PromptTokens <= 32 ||
			env.Error.MaxModelLen == nil || *env.Error.MaxModelLen != 32) {
			t.Errorf("%s: the context error lacks its counts: %s", tc.name, body)
		}
	}
	if got := clientRequests(e.sim, isPoolingPath); len(got) != 0 {
		t.Errorf("the simulator received %d pooling requests; the door should have refused them all (first: %s %s)", len(got), got[0].Path, got[0].Body)
	}
}

// TestPoolingValidInputsReachBackend: every input form vLLM accepts is
// forwarded, the bytes unchanged, and vLLM's answer returned; an over-long
// input with truncate_prompt_tokens is vLLM's to truncate.
func TestPoolingValidInputsReachBackend(t *testing.T) {
	e := startPooling(t, sim.Config{MaxModelLen: 32}, nil)
	long := strings.TrimSpace(strings.Repeat("word ", 40))
	cases := []struct{ path, body string }{
		{"/v1/embeddings", `{"model":"m","input":"hello there"}`},
		{"/v1/embeddings", `{"model":"m","input":["a","b"],"encoding_format":"base64"}`},
		{"/v1/embeddings", `{"model":"m","input":[[1,2,3],"mixed"]}`},
		{"/v1/embeddings", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/embeddings", `{"model":"m","input":[{"role":"user","content":"as input"}]}`},
		{"/v1/embeddings", `{"model":"m","input":"` + long + `","truncate_prompt_tokens":16}`},
		{"/v1/embeddings", `{"model":"m","input":"` + long + `","truncate_prompt_tokens":-1}`},
		{"/pooling", `{"model":"m","input":"x","task":"embed"}`},
		{"/classify", `{"model":"m","input":["good","bad"]}`},
		{"/score", `{"model":"m","text_1":"q","text_2":["a","b"]}`},
		{"/v1/score", `{"model":"m","queries":"q","documents":["a","b"]}`},
		{"/v1/score", `{"model":"m","data_1":["q1","q2"],"data_2":["a","b"]}`},
		{"/rerank", `{"model":"m","query":"q","documents":["a","b","c"],"top_n":2}`},
		{"/v1/rerank", `{"model":"m","query":"q","documents":["a"]}`},
		{"/v2/rerank", `{"model":"m","query":"q","documents":["a","b"]}`},
	}
	for i, tc := range cases {
		res := e.gw.post(t, tc.path, tc.body)
		if body := readBodyT(t, res); res.StatusCode != 200 {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, res.StatusCode, body)
		}
		got := clientRequests(e.sim, isPoolingPath)
		if len(got) != i+1 || got[i].Path != tc.path || string(got[i].Body) != tc.body {
			t.Fatalf("%s: the simulator did not receive the request as sent", tc.path)
		}
	}
}

// TestPoolingAnswersPassThroughByteForByte: each endpoint's answer is the
// backend's bytes, whatever they are, and the backend gets the client's.
func TestPoolingAnswersPassThroughByteForByte(t *testing.T) {
	answer := func(path string) string {
		return fmt.Sprintf(`{"id":"x","path":%q,  "data":[{"embedding":"AACAPw==","index":0}], "odd" : 1.50}`, path)
	}
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer(r.URL.Path))
	})
	tg := startGateway(t, nil, fb.URL)
	bodies := map[string]string{
		"/v1/embeddings": `{"model":"m","input":"x","encoding_format":"base64"}`,
		"/pooling":       `{"model":"m","input":[1,2]}`,
		"/classify":      `{"model":"m","input":"x"}`,
		"/score":         `{"model":"m","text_1":"a","text_2":"b"}`,
		"/v1/score":      `{"model":"m","text_1":"a","text_2":"b"}`,
		"/rerank":        `{"model":"m","query":"a","documents":["b"]}`,
		"/v1/rerank":     `{"model":"m","query":"a","documents":["b"]}`,
		"/v2/rerank":     `{"model":"m","query":"a","documents":["b"]}`,
	}
	for _, path := range poolingPaths {
		res := tg.post(t, path, bodies[path])
		if body := readBodyT(t, res); res.StatusCode != 200 || body != answer(path) {
			t.Errorf("%s: %d %s", path, res.StatusCode, body)
		}
	}
	reqs, got := fb.requests()
	if len(reqs) != len(poolingPaths) {
		t.Fatalf("the backend received %d requests, want %d", len(reqs), len(poolingPaths))
	}
	for i, r := range reqs {
		if string(got[i]) != bodies[r.URL.Path] {
			t.Errorf("%s: the backend received %s", r.URL.Path, got[i])
		}
	}
	// GET /version passes through from a ready backend.
	res, err := tg.client.Get(tg.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBodyT(t, res); res.StatusCode != 200 || body != `{"version":"fake"}` {
		t.Errorf("/version: %d %s", res.StatusCode, body)
	}
	// Paths vLLM does not serve keep their 404.
	for _, p := range []string{"/v1/embedding", "/v3/rerank", "/v1/classify"} {
		res := tg.post(t, p, `{"model":"m","input":"x"}`)
		if body := readBodyT(t, res); res.StatusCode != 404 || !strings.Contains(body, `"code":"unknown_url"`) {
			t.Errorf("%s: %d %s", p, res.StatusCode, body)
		}
	}
}

// TestE2EVersionFromSimulator: GET /version answers the backend's version.
func TestE2EVersionFromSimulator(t *testing.T) {
	e := startPooling(t, sim.Config{}, nil)
	res, err := e.gw.client.Get(e.gw.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	direct, err := http.Get(e.simURL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	want := readBodyT(t, direct)
	if body := readBodyT(t, res); res.StatusCode != 200 || body != want {
		t.Errorf("/version: %d %s, want %s", res.StatusCode, body, want)
	}
}

// TestEmbeddingsWaitInQueue: with the backend at max_in_flight, an
// embeddings request waits in the model's queue like a chat request and
// runs once the slot frees.
func TestEmbeddingsWaitInQueue(t *testing.T) {
	gate := make(chan struct{})
	e := startPooling(t, sim.Config{TokenGate: gate}, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
	})
	pool := e.gw.live().byName["m"].pool
	send := func(path, body string) chan int {
		ch := make(chan int, 1)
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.gw.URL+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := e.gw.client.Do(req)
			if err != nil {
				ch <- 0
				return
			}
			res.Body.Close()
			ch <- res.StatusCode
		}()
		return ch
	}
	first := send("/v1/embeddings", `{"model":"m","input":"first"}`)
	eventually(t, "the first embeddings request to run", func() bool {
		return e.sim.Stats().Running == 1 && len(clientRequests(e.sim, isPoolingPath)) == 1
	})
	second := send("/v1/embeddings", `{"model":"m","input":"second"}`)
	eventually(t, "the second to wait in the queue", func() bool { return pool.Advice().Depth == 1 })
	if n := len(clientRequests(e.sim, isPoolingPath)); n != 1 {
		t.Fatalf("the simulator received %d requests while the slot was taken", n)
	}
	gate <- struct{}{}
	if c := <-first; c != 200 {
		t.Fatalf("first: %d", c)
	}
	gate <- struct{}{}
	if c := <-second; c != 200 {
		t.Fatalf("second: %d", c)
	}
}

// TestEmbeddingsClientDisconnectAbortsUpstream: a client that leaves
// cancels the backend request; vLLM aborts it.
func TestEmbeddingsClientDisconnectAbortsUpstream(t *testing.T) {
	gate := make(chan struct{})
	e := startPooling(t, sim.Config{TokenGate: gate}, nil)
	eventually(t, "the warm-up to be counted", func() bool { s := e.sim.Stats(); return s.Completed >= 1 && s.Running == 0 })
	base := e.sim.Stats()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := e.sdk.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "m", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("bye")}})
		done <- err
	}()
	eventually(t, "the request to run", func() bool { return e.sim.Stats().Running == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error = %v, want context.Canceled", err)
	}
	eventually(t, "the simulator to count an abort and free its slot", func() bool { s := e.sim.Stats(); return s.Aborted == 1 && s.Running == 0 })
	if s := e.sim.Stats(); s.Completed != base.Completed {
		t.Errorf("sim stats after abort: %+v", s)
	}
	eventually(t, "the gateway to release the request", func() bool {
		return e.gw.Fleet.Models()[0].Backends()[0].Status().InFlight == 0
	})
}

// TestEmbeddingsReserveNoOutput: a pooling request reserves its inputs
// alone. With a token budget smaller than expected_output_tokens, a chat
// request without max_tokens can never run, an embeddings request can.
func TestEmbeddingsReserveNoOutput(t *testing.T) {
	e := startPooling(t, sim.Config{KVTokens: 128}, func(c *config.Config) {
		c.Models[0].Backends[0].KVTokens = 128
		c.Models[0].ExpectedOutputTokens = 200
	})
	e.gw.scrapeOnce(t)
	res := e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if body := readBodyT(t, res); res.StatusCode != 400 || !strings.Contains(body, "exceeds_kv_capacity") {
		t.Fatalf("chat reserving 200 output tokens in a budget of 128: %d %s", res.StatusCode, body)
	}
	for _, body := range []string{`{"model":"m","input":["a","b","c"]}`, `{"model":"m","input":"x","truncate_prompt_tokens":4}`} {
		res = e.gw.post(t, "/v1/embeddings", body)
		if b := readBodyT(t, res); res.StatusCode != 200 {
			t.Errorf("embeddings %s: %d %s", body, res.StatusCode, b)
		}
	}
	res = e.gw.post(t, "/rerank", `{"model":"m","query":"q","documents":["a","b"]}`)
	if b := readBodyT(t, res); res.StatusCode != 200 {
		t.Errorf("rerank: %d %s", res.StatusCode, b)
	}
}
