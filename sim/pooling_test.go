package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
)

func norm(v []float64) float64 {
	var s float64
	for _, f := range v {
		s += f * f
	}
	return math.Sqrt(s)
}

// TestEmbeddingsSDK drives /v1/embeddings with the official SDK in every
// input form, float and base64, and checks determinism and counts.
func TestEmbeddingsSDK(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.openai("")
	ctx := context.Background()
	embed := func(p openai.EmbeddingNewParams) *openai.CreateEmbeddingResponse {
		t.Helper()
		p.Model = "demo"
		r, err := c.Embeddings.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if r.Object != "list" || r.Model != "demo" || !strings.HasPrefix(r.RawJSON(), `{"id":"embd-`) {
			t.Errorf("response = %s", r.RawJSON())
		}
		return r
	}
	// "hello world" with Approx: BOS + hell, o, worl, d.
	f := embed(openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello world")}})
	if len(f.Data) != 1 || len(f.Data[0].Embedding) != DefaultEmbeddingDim || f.Data[0].Object != "embedding" ||
		f.Usage.PromptTokens != 5 || f.Usage.TotalTokens != 5 {
		t.Fatalf("float = %s", f.RawJSON())
	}
	if n := norm(f.Data[0].Embedding); math.Abs(n-1) > 1e-6 {
		t.Errorf("norm = %v", n)
	}
	b := embed(openai.EmbeddingNewParams{
		Input:          openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello world")},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
	})
	if !strings.Contains(b.RawJSON(), `"embedding":"`) {
		t.Errorf("base64 answer is not a string: %s", b.RawJSON())
	}
	if fmt.Sprint(b.Data[0].Embedding) != fmt.Sprint(f.Data[0].Embedding) {
		t.Errorf("base64 %v != float %v", b.Data[0].Embedding, f.Data[0].Embedding)
	}

	// A batch: one vector per input, in order, the same as alone.
	batch := embed(openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{
		OfArrayOfStrings: []string{"something else", "hello world"}}})
	if len(batch.Data) != 2 || batch.Data[1].Index != 1 ||
		fmt.Sprint(batch.Data[1].Embedding) != fmt.Sprint(f.Data[0].Embedding) ||
		fmt.Sprint(batch.Data[0].Embedding) == fmt.Sprint(f.Data[0].Embedding) {
		t.Errorf("batch = %s", batch.RawJSON())
	}

	// Token ids embed like the text they tokenize to.
	code, _, tb := e.post("/tokenize", `{"prompt":"hello world"}`)
	ids := decode[tokenizeResponse](t, string(tb)).Tokens
	if code != 200 || len(ids) != 5 {
		t.Fatalf("tokenize = %d %s", code, tb)
	}
	ids64 := make([]int64, len(ids))
	for i, id := range ids {
		ids64[i] = int64(id)
	}
	byIDs := embed(openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: ids64}})
	lists := embed(openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{
		OfArrayOfTokenArrays: [][]int64{ids64, ids64[:2]}}})
	if fmt.Sprint(byIDs.Data[0].Embedding) != fmt.Sprint(f.Data[0].Embedding) || byIDs.Usage.PromptTokens != 5 ||
		len(lists.Data) != 2 || lists.Usage.PromptTokens != 7 ||
		fmt.Sprint(lists.Data[0].Embedding) != fmt.Sprint(f.Data[0].Embedding) {
		t.Errorf("ids: %s / %s", byIDs.RawJSON(), lists.RawJSON())
	}

	st := e.sim.Stats()
	if st.Requests != 5 || st.Completed != 5 || st.Rejected != 0 {
		t.Errorf("stats = %+v", st)
	}
	fams := e.scrape()
	if v, _ := metricValue(fams, "vllm:request_success_total", map[string]string{"finished_reason": "stop"}); v != 7 {
		t.Errorf("success{stop} = %v, want 7 (one per prompt)", v)
	}
	if v, _ := metricValue(fams, "vllm:prompt_tokens_total", nil); v != 5+5+(5+5)+5+7 {
		t.Errorf("prompt tokens = %v", v)
	}
}

// TestEmbeddingsForms covers the chat form, truncation and matryoshka
// dimensions through real HTTP.
func TestEmbeddingsForms(t *testing.T) {
	e := newEnv(t, Config{MaxModelLen: 10, Matryoshka: true, EmbeddingDim: 8})
	type resp struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	for _, tc := range []struct {
		name, body string
		prompts    int
		tokens     int
		dim        int
	}{
		// Approx chat: 4 per message + text; no generation prompt by default.
		{"messages", `{"messages":[{"role":"user","content":"hi"}]}`, 1, 5, 8},
		{"messages with generation prompt", `{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}`, 1, 8, 8},
		{"batched messages", `{"messages":[[{"role":"user","content":"hi"}],[{"role":"user","content":"a b"}]]}`, 2, 5 + 6, 8},
		{"messages as input", `{"input":[{"role":"user","content":"hi"}]}`, 1, 5, 8},
		{"truncated", `{"input":"a b c d e f g h i j k","truncate_prompt_tokens":4}`, 1, 4, 8},
		{"truncated to max_model_len", `{"input":"a b c d e f g h i j k","truncate_prompt_tokens":-1}`, 1, 10, 8},
		{"no special tokens", `{"input":"a b","add_special_tokens":false}`, 1, 2, 8},
		{"dimensions", `{"input":"a b","dimensions":3}`, 1, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.post("/v1/embeddings", tc.body)
			r := decode[resp](t, string(body))
			if code != 200 || len(r.Data) != tc.prompts || r.Usage.PromptTokens != tc.tokens {
				t.Fatalf("%d %s", code, body)
			}
			if len(r.Data[0].Embedding) != tc.dim || math.Abs(norm(r.Data[0].Embedding)-1) > 1e-6 {
				t.Errorf("embedding %v", r.Data[0].Embedding)
			}
		})
	}
}

// TestPoolingBadInputs checks the exact envelopes of bad pooling requests
// and that none of them reaches the engine.
func TestPoolingBadInputs(t *testing.T) {
	e := newEnv(t, Config{MaxModelLen: 10})
	br := func(msg string) string {
		return `{"error":{"message":"` + msg + `","type":"BadRequestError","param":null,"code":400}}`
	}
	pyd := func(typ, field, msg string) string {
		return `{"error":{"message":"[{'type': '` + typ + `', 'loc': ('body', '` + field + `'), 'msg': '` + msg +
			`'}]","type":"Bad Request","param":"body.` + field + `","code":400}}`
	}
	long := `"a b c d e f g h i j k"` // 12 tokens with BOS
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"embeddings too long", "/v1/embeddings", `{"input":` + long + `}`, 400,
			br("This model's maximum context length is 10 tokens. However, you requested 12 tokens in the input for embedding generation. Please reduce the length of the input.")},
		{"one of a batch too long", "/v1/embeddings", `{"input":["a",` + long + `]}`, 400,
			br("This model's maximum context length is 10 tokens. However, you requested 12 tokens in the input for embedding generation. Please reduce the length of the input.")},
		{"classify too long", "/classify", `{"input":` + long + `}`, 400,
			br("This model's maximum context length is 10 tokens. However, you requested 12 tokens in the input for classification. Please reduce the length of the input.")},
		{"score too long", "/score", `{"text_1":"a b c d e","text_2":"f g h i j k"}`, 400,
			br("This model's maximum context length is 10 tokens. However, you requested 12 tokens in the input for score. Please reduce the length of the input.")},
		{"rerank too long", "/rerank", `{"query":"a b c d e","documents":["f g h i j k"]}`, 400,
			br("This model's maximum context length is 10 tokens. However, you requested 12 tokens in the input for embedding generation. Please reduce the length of the input.")},
		{"truncation above max_model_len", "/v1/embeddings", `{"input":"a","truncate_prompt_tokens":11}`, 400,
			br("truncate_prompt_tokens value is greater than max_model_len. Please request a smaller truncation size.")},
		{"truncation below -1", "/v1/embeddings", `{"input":"a","truncate_prompt_tokens":-2}`, 400,
			pyd("greater_than_equal", "truncate_prompt_tokens", "Input should be greater than or equal to -1")},
		{"dimensions without matryoshka", "/v1/embeddings", `{"input":"a","dimensions":4}`, 400,
			br(`Model \"demo\" does not support matryoshka representation, changing output dimensions will lead to poor results.`)},
		{"input missing", "/v1/embeddings", `{"model":"demo"}`, 400, pyd("missing", "input", "Field required")},
		{"input wrong type", "/v1/embeddings", `{"input":5}`, 400,
			pyd("union_type", "input", "Input should be a valid string, a list of strings, a list of integers or a list of lists of integers")},
		{"input mixed list", "/v1/embeddings", `{"input":["a",[1,"x"]]}`, 400,
			pyd("union_type", "input", "Input should be a valid string, a list of strings, a list of integers or a list of lists of integers")},
		{"empty input list", "/v1/embeddings", `{"input":[]}`, 400, br("You must pass at least one prompt")},
		{"encoding format", "/v1/embeddings", `{"input":"a","encoding_format":"bytes"}`, 400,
			`{"error":{"message":"[{'type': 'literal_error', 'loc': ('body', 'encoding_format'), 'msg': \"Input should be 'float' or 'base64'\"}]","type":"Bad Request","param":"body.encoding_format","code":400}}`},
		{"model not a string", "/v1/embeddings", `{"input":"a","model":3}`, 400, pyd("string_type", "model", "Input should be a valid string")},
		{"unknown model", "/v1/embeddings", `{"input":"a","model":"other"}`, 404,
			"{\"error\":{\"message\":\"The model `other` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"},
		{"unknown model rerank", "/v2/rerank", `{"query":"a","documents":["b"],"model":"other"}`, 404,
			"{\"error\":{\"message\":\"The model `other` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"},
		{"score lengths", "/v1/score", `{"text_1":["a","b"],"text_2":["c","d","e"]}`, 400, br("Input lengths must be either 1:1, 1:N or N:N")},
		{"score no documents", "/score", `{"queries":"a","documents":[]}`, 400, br("At least one text_pair element must be given")},
		{"score missing side", "/score", `{"text_1":"a"}`, 400, pyd("missing", "text_2", "Field required")},
		{"rerank missing query", "/rerank", `{"documents":["a"]}`, 400, pyd("missing", "query", "Field required")},
		{"rerank negative top_n", "/v1/rerank", `{"query":"a","documents":["b"],"top_n":-1}`, 400,
			pyd("greater_than_equal", "top_n", "Input should be greater than or equal to 0")},
		{"pooling task", "/pooling", `{"input":"a","task":"generate"}`, 400,
			`{"error":{"message":"[{'type': 'literal_error', 'loc': ('body', 'task'), 'msg': \"Input should be 'embed', 'classify', 'token_embed' or 'token_classify'\"}]","type":"Bad Request","param":"body.task","code":400}}`},
		{"not json", "/v1/embeddings", `{"input":`, 400,
			`{"error":{"message":"[{'type': 'json_invalid', 'loc': ('body', 9), 'msg': 'JSON decode error'}]","type":"Bad Request","param":null,"code":400}}`},
		{"messages role", "/v1/embeddings", `{"messages":[{"content":"x"}]}`, 400,
			`{"error":{"message":"[{'type': 'missing', 'loc': ('body', 'messages', 0, 'role'), 'msg': 'Field required'}]","type":"Bad Request","param":"body.messages.0.role","code":400}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.post(tc.path, tc.body)
			if code != tc.status || string(body) != tc.want {
				t.Errorf("got %d %s\nwant %d %s", code, body, tc.status, tc.want)
			}
		})
	}
	// Wrong content type, the dependency vLLM runs first.
	code, _, body := e.post("/classify", `{"input":"a"}`, "Content-Type", "text/plain")
	if code != 400 || !strings.Contains(string(body), "Unsupported Media Type") {
		t.Errorf("content type: %d %s", code, body)
	}
	if st := e.sim.Stats(); st.Completed != 0 || st.Rejected != st.Requests {
		t.Errorf("stats = %+v: a bad request reached the engine", st)
	}
	if v, _ := metricValue(e.scrape(), "vllm:prompt_tokens_total", nil); v != 0 {
		t.Errorf("prompt tokens = %v", v)
	}
}

// TestScoreRerankClassifyPooling checks the answers' shapes, determinism,
// rerank order and top_n, and usage.
func TestScoreRerankClassifyPooling(t *testing.T) {
	e := newEnv(t, Config{})
	type score struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Data   []struct {
			Index  int     `json:"index"`
			Object string  `json:"object"`
			Score  float64 `json:"score"`
		} `json:"data"`
		Usage map[string]any `json:"usage"`
	}
	// 1:N, in every request form vLLM accepts.
	var first []float64
	for _, body := range []string{
		`{"text_1":"what is a cat","text_2":["a cat is an animal","paris","cats"]}`,
		`{"queries":"what is a cat","documents":["a cat is an animal","paris","cats"]}`,
		`{"queries":"what is a cat","items":["a cat is an animal","paris","cats"]}`,
		`{"data_1":["what is a cat"],"data_2":["a cat is an animal","paris","cats"]}`,
	} {
		code, _, b := e.post("/score", body)
		r := decode[score](t, string(b))
		if code != 200 || !strings.HasPrefix(r.ID, "score-") || r.Object != "list" || len(r.Data) != 3 ||
			r.Data[2].Index != 2 || r.Data[0].Object != "score" {
			t.Fatalf("%s: %d %s", body, code, b)
		}
		// q = BOS + what, is, a, cat (5); docs 6, 2, 1 tokens.
		if r.Usage["prompt_tokens"] != 3*5.0+6+2+1 || r.Usage["completion_tokens"] != 0.0 {
			t.Errorf("usage = %v", r.Usage)
		}
		var got []float64
		for _, d := range r.Data {
			if d.Score <= 0 || d.Score >= 1 {
				t.Errorf("score %v", d.Score)
			}
			got = append(got, d.Score)
		}
		if first == nil {
			first = got
		} else if fmt.Sprint(got) != fmt.Sprint(first) {
			t.Errorf("%s: scores %v, want %v", body, got, first)
		}
	}
	// N:N pairs each query with its document.
	code, _, b := e.post("/v1/score", `{"text_1":["what is a cat","x"],"text_2":["a cat is an animal","y"]}`)
	if r := decode[score](t, string(b)); code != 200 || len(r.Data) != 2 || r.Data[0].Score != first[0] {
		t.Errorf("N:N = %d %s", code, b)
	}

	type rerank struct {
		ID      string         `json:"id"`
		Model   string         `json:"model"`
		Usage   map[string]any `json:"usage"`
		Results []struct {
			Index    int `json:"index"`
			Document struct {
				Text string `json:"text"`
			} `json:"document"`
			Score float64 `json:"relevance_score"`
		} `json:"results"`
	}
	docs := `["a cat is an animal","paris","cats"]`
	for _, path := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} {
		code, _, b := e.post(path, `{"model":"demo","query":"what is a cat","documents":`+docs+`,"top_n":2}`)
		r := decode[rerank](t, string(b))
		if code != 200 || !strings.HasPrefix(r.ID, "rerank-") || r.Model != "demo" || len(r.Results) != 2 ||
			r.Usage["prompt_tokens"] != 24.0 || r.Usage["total_tokens"] != 24.0 || len(r.Usage) != 2 {
			t.Fatalf("%s: %d %s", path, code, b)
		}
		for i, res := range r.Results {
			if res.Score != first[res.Index] || res.Document.Text != []string{"a cat is an animal", "paris", "cats"}[res.Index] ||
				(i > 0 && res.Score > r.Results[i-1].Score) {
				t.Errorf("%s: results %s", path, b)
			}
		}
	}

	code, _, b = e.post("/classify", `{"input":["good","bad"]}`)
	type classify struct {
		ID   string `json:"id"`
		Data []struct {
			Index      int       `json:"index"`
			Label      string    `json:"label"`
			Probs      []float64 `json:"probs"`
			NumClasses int       `json:"num_classes"`
		} `json:"data"`
	}
	if r := decode[classify](t, string(b)); code != 200 || !strings.HasPrefix(r.ID, "classify-") || len(r.Data) != 2 ||
		r.Data[1].NumClasses != 2 || len(r.Data[1].Probs) != 2 || math.Abs(r.Data[1].Probs[0]+r.Data[1].Probs[1]-1) > 1e-6 ||
		(r.Data[1].Label != "LABEL_0" && r.Data[1].Label != "LABEL_1") {
		t.Errorf("classify = %d %s", code, b)
	}

	type pooling struct {
		ID   string `json:"id"`
		Data []struct {
			Object string `json:"object"`
			Data   any    `json:"data"`
		} `json:"data"`
	}
	_, _, eb := e.post("/v1/embeddings", `{"input":"hello world"}`)
	for _, tc := range []struct{ task, check string }{{"", "vector"}, {"embed", "vector"}, {"classify", "probs"}, {"token_embed", "rows"}} {
		body := `{"input":"hello world"}`
		if tc.task != "" {
			body = `{"input":"hello world","task":"` + tc.task + `"}`
		}
		code, _, b := e.post("/pooling", body)
		r := decode[pooling](t, string(b))
		if code != 200 || !strings.HasPrefix(r.ID, "pool-") || len(r.Data) != 1 || r.Data[0].Object != "pooling" {
			t.Fatalf("pooling %q = %d %s", tc.task, code, b)
		}
		switch tc.check {
		case "vector":
			// The same vector /v1/embeddings gives.
			emb := decode[struct {
				Data []struct {
					Embedding any `json:"embedding"`
				} `json:"data"`
			}](t, string(eb))
			if fmt.Sprint(r.Data[0].Data) != fmt.Sprint(emb.Data[0].Embedding) {
				t.Errorf("pooling %v != embedding %v", r.Data[0].Data, emb.Data[0].Embedding)
			}
		case "probs":
			if v, ok := r.Data[0].Data.([]any); !ok || len(v) != 2 {
				t.Errorf("probs = %v", r.Data[0].Data)
			}
		case "rows":
			if v, ok := r.Data[0].Data.([]any); !ok || len(v) != 5 {
				t.Errorf("rows = %v", r.Data[0].Data)
			}
		}
	}
}

// TestPoolingAuthAndFaults: /v1 pooling routes need the key, the others do
// not (as in vLLM); FailStatus answers them; 405 for GET.
func TestPoolingAuthAndFaults(t *testing.T) {
	e := newEnv(t, Config{APIKey: "k"})
	if code, _, body := e.post("/v1/embeddings", `{"input":"a"}`); code != 401 || string(body) != `{"error":"Unauthorized"}` {
		t.Errorf("embeddings without key = %d %s", code, body)
	}
	if code, _, body := e.post("/v1/embeddings", `{"input":"a"}`, "Authorization", "Bearer k"); code != 200 {
		t.Errorf("embeddings with key = %d %s", code, body)
	}
	if code, _, body := e.post("/rerank", `{"query":"a","documents":["b"]}`); code != 200 {
		t.Errorf("rerank without key = %d %s", code, body)
	}
	if code, hdr, _ := e.get("/score"); code != 405 || hdr.Get("Allow") != "POST" {
		t.Errorf("GET /score = %d", code)
	}
	e.sim.Update(func(c *Config) { c.FailStatus = 500 })
	code, _, body := e.post("/pooling", `{"input":"a"}`)
	if code != 500 || !strings.Contains(string(body), `"type":"InternalServerError"`) {
		t.Errorf("FailStatus = %d %s", code, body)
	}
	if st := e.sim.Stats(); st.Requests != 4 || st.Rejected != 1 || st.Failed != 1 || st.Completed != 2 {
		t.Errorf("stats = %+v", st)
	}
}

// TestPoolingScheduling: a batch takes one running slot per prompt, so a
// request that does not fit waits, and a client that leaves is aborted.
func TestPoolingScheduling(t *testing.T) {
	gate := make(chan struct{})
	e := newEnv(t, Config{MaxNumSeqs: 4, TokenGate: gate})
	var wg sync.WaitGroup
	results := make(chan int, 2)
	post := func(body string) {
		defer wg.Done()
		code, _, _ := e.post("/v1/embeddings", body)
		results <- code
	}
	wg.Add(1)
	go post(`{"input":["a","b","c"]}`)
	eventually(t, "the batch running", func() bool { return e.sim.Stats().Running == 3 })
	ctx, cancel := context.WithCancel(context.Background())
	aborted := make(chan error, 1)
	go func() {
		resp, err := e.send(ctx, http.MethodPost, "/score", `{"text_1":"a","text_2":["b","c"]}`)
		if err == nil {
			resp.Body.Close()
		}
		aborted <- err
	}()
	eventually(t, "the score request waiting", func() bool { st := e.sim.Stats(); return st.Waiting == 1 && st.Running == 3 })
	fams := e.scrape()
	if v, _ := metricValue(fams, "vllm:num_requests_running", nil); v != 3 {
		t.Errorf("running gauge = %v", v)
	}
	cancel()
	if err := <-aborted; !errors.Is(err, context.Canceled) {
		t.Errorf("score: %v", err)
	}
	eventually(t, "the abort", func() bool { st := e.sim.Stats(); return st.Aborted == 1 && st.Waiting == 0 })
	wg.Add(1)
	go post(`{"input":"d"}`) // fits: 3 + 1 <= 4
	eventually(t, "four running", func() bool { return e.sim.Stats().Running == 4 })
	gate <- struct{}{}
	gate <- struct{}{}
	wg.Wait()
	close(results)
	for code := range results {
		if code != 200 {
			t.Errorf("status %d", code)
		}
	}
	if v, _ := metricValue(e.scrape(), "vllm:request_success_total", map[string]string{"finished_reason": "abort"}); v != 2 {
		t.Errorf("success{abort} = %v, want 2 (one per pair)", v)
	}
}
