package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/sim"
)

// loraE2E is two simulators of model "m" (A and B) counting with the
// qwen3 tokenizer, B with the adapter "sql" loaded at start, and a gateway
// in front of both whose fleet runs its probers (Run), so that adapters
// loaded and unloaded at runtime are followed as in production.
type loraE2E struct {
	a, b   *sim.Server
	urls   []string
	gw     *testGateway
	sdk    openai.Client
	adapts *adapterWatch
}

// adapterWatch hears the fleet's adapter changes: each wakes whoever
// awaits a condition on the backends' adapters.
type adapterWatch struct {
	mu   sync.Mutex
	wake chan struct{}
}

func (w *adapterWatch) heard(*fleet.Model, *fleet.Backend, []fleet.Adapter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// await blocks until cond holds, re-checking it at each adapter change the
// fleet reports; it fails after a generous deadline.
func (w *adapterWatch) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-w.wake:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

const loraMaxModelLen = 256

func startLoRA(t *testing.T, interval time.Duration, more ...func(*config.Config)) *loraE2E {
	t.Helper()
	tok := qwen3(t)
	e := &loraE2E{adapts: &adapterWatch{wake: make(chan struct{}, 1)}}
	for i, mods := range [][]sim.LoRAModule{nil, {{Name: "sql", Path: "/loras/sql"}}} {
		s := sim.New(sim.Config{Model: "m", MaxModelLen: loraMaxModelLen, OutputTokens: 2, Tokenizer: sim.ModelTokenizer(tok),
			LoRAModules: mods, RuntimeLoRA: true}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(func() { s.Close(); srv.Close() })
		if i == 0 {
			e.a = s
		} else {
			e.b = s
		}
		e.urls = append(e.urls, srv.URL)
	}
	e.gw = startGatewayToks(t, tok, func(c *config.Config) {
		c.Health.Interval = config.Duration(interval)
		for _, f := range more {
			f(c)
		}
	}, e.urls...)
	e.gw.Fleet.OnAdapters(e.adapts.heard)
	listed := func(s *sim.Server) int {
		n := 0
		for _, r := range s.Received() {
			if r.Path == "/v1/models" && r.Header.Get(fleet.ProbeHeader) != "" {
				n++
			}
		}
		return n
	}
	before := []int{listed(e.a), listed(e.b)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.gw.Fleet.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Run probes every backend at once, and a ready backend's probe lists
	// its adapters: wait for that listing, so that a test changing
	// adapters afterwards is not overtaken by it.
	deadline := time.Now().Add(30 * time.Second)
	for listed(e.a) == before[0] || listed(e.b) == before[1] {
		if time.Now().After(deadline) {
			t.Fatal("Run's first probe listed no adapters within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.sdk = openai.NewClient(option.WithBaseURL(e.gw.URL+"/v1/"), option.WithAPIKey("k"),
		option.WithHTTPClient(e.gw.client), option.WithMaxRetries(0))
	return e
}

// backend is the gateway's view of simulator i (0: A, 1: B).
func (e *loraE2E) backend(i int) *fleet.Backend {
	m, _ := e.gw.Fleet.Model("m")
	return m.Backends()[i]
}

// adapterRequests counts the client requests s received naming model.
func adapterRequests(t *testing.T, s *sim.Server, model string) int {
	t.Helper()
	n := 0
	for _, r := range clientRequests(s, func(string) bool { return true }) {
		var body struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(r.Body, &body) == nil && body.Model == model {
			n++
		}
	}
	return n
}

// loraAdmin calls a simulator's runtime LoRA endpoint directly, as an
// operator does.
func loraAdmin(t *testing.T, url, path, body string) {
	t.Helper()
	res, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", path, res.StatusCode, b)
	}
}

type listedModel struct {
	ID          string  `json:"id"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
}

// listed is GET /v1/models through the gateway.
func (e *loraE2E) listed(t *testing.T) []listedModel {
	t.Helper()
	res, err := e.gw.client.Get(e.gw.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct{ Data []listedModel }
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list.Data
}

func find(models []listedModel, id string) []listedModel {
	var out []listedModel
	for _, m := range models {
		if m.ID == id {
			out = append(out, m)
		}
	}
	return out
}

func (e *loraE2E) chat(t *testing.T, model, prompt string) (*openai.ChatCompletion, error) {
	t.Helper()
	return e.sdk.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(4),
	})
}

// TestE2ELoRAAdapters: an adapter loaded only on B is served by B alone,
// listed by the gateway with its parent, counted with the base model's
// tokenizer and max_model_len; loaded on A at runtime it appears and A
// takes adapter traffic, without a restart; unloaded from both it is gone
// and named as an unknown model.
func TestE2ELoRAAdapters(t *testing.T) {
	e := startLoRA(t, 20*time.Millisecond)
	if !e.backend(1).HasAdapter("sql") || e.backend(0).HasAdapter("sql") {
		t.Fatalf("adapters after warm-up: A %v, B %v", e.backend(0).Adapters(), e.backend(1).Adapters())
	}

	// Adapter requests reach B, every one; base-model requests still
	// spread over both.
	const n = 20
	for i := range n {
		c, err := e.chat(t, "sql", "Hello!")
		if err != nil {
			t.Fatalf("adapter request %d: %v", i, err)
		}
		if c.Model != "sql" {
			t.Fatalf("answer's model %q, want the adapter's", c.Model)
		}
	}
	if a, b := adapterRequests(t, e.a, "sql"), adapterRequests(t, e.b, "sql"); a != 0 || b != n {
		t.Fatalf("adapter requests reached A %d times and B %d times, want 0 and %d", a, b, n)
	}
	for i := range n {
		if _, err := e.chat(t, "m", "Hello!"); err != nil {
			t.Fatalf("base request %d: %v", i, err)
		}
	}
	if a, b := adapterRequests(t, e.a, "m"), adapterRequests(t, e.b, "m"); a == 0 || b == 0 || a+b != n {
		t.Fatalf("base requests reached A %d times and B %d times, want both of %d", a, b, n)
	}

	// /v1/models lists it once, with its parent.
	got := find(e.listed(t), "sql")
	if len(got) != 1 || got[0].Parent == nil || *got[0].Parent != "m" || got[0].Root != "/loras/sql" || got[0].MaxModelLen != loraMaxModelLen {
		t.Fatalf("/v1/models lists sql as %+v", got)
	}

	// Over the base model's context: refused at the door, in its numbers,
	// and no byte reaches a backend.
	before := len(clientRequests(e.a, func(string) bool { return true })) + len(clientRequests(e.b, func(string) bool { return true }))
	_, err := e.chat(t, "sql", strings.Repeat("word ", 400))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "context_length_exceeded" ||
		!strings.Contains(apiErr.Message, "maximum context length is 256 tokens") {
		t.Fatalf("over-long adapter request: %v", err)
	}
	if after := len(clientRequests(e.a, func(string) bool { return true })) + len(clientRequests(e.b, func(string) bool { return true })); after != before {
		t.Fatalf("an over-long request reached a backend (%d requests, then %d)", before, after)
	}

	// Loaded on A at runtime: the gateway follows, and A takes its share.
	loraAdmin(t, e.urls[0], "/v1/load_lora_adapter", `{"lora_name":"sql","lora_path":"/loras/sql"}`)
	e.adapts.await(t, "A listing sql", func() bool { return e.backend(0).HasAdapter("sql") })
	if got := find(e.listed(t), "sql"); len(got) != 1 {
		t.Fatalf("/v1/models lists sql %d times with two backends holding it", len(got))
	}
	for i := range n {
		if _, err := e.chat(t, "sql", "Hello!"); err != nil {
			t.Fatalf("adapter request %d after loading on A: %v", i, err)
		}
	}
	if a := adapterRequests(t, e.a, "sql"); a == 0 {
		t.Fatal("A loaded the adapter but received none of its requests")
	}

	// Unloaded from both: an unknown model, answered at the door.
	loraAdmin(t, e.urls[0], "/v1/unload_lora_adapter", `{"lora_name":"sql"}`)
	loraAdmin(t, e.urls[1], "/v1/unload_lora_adapter", `{"lora_name":"sql"}`)
	e.adapts.await(t, "sql unloaded everywhere", func() bool { return !e.backend(0).HasAdapter("sql") && !e.backend(1).HasAdapter("sql") })
	before = adapterRequests(t, e.a, "sql") + adapterRequests(t, e.b, "sql")
	_, err = e.chat(t, "sql", "Hello!")
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Fatalf("request for an adapter no backend has: %v", err)
	}
	if after := adapterRequests(t, e.a, "sql") + adapterRequests(t, e.b, "sql"); after != before {
		t.Fatal("a request for an unloaded adapter reached a backend")
	}
	if got := find(e.listed(t), "sql"); len(got) != 0 {
		t.Fatalf("/v1/models still lists the unloaded adapter: %+v", got)
	}
}

// TestE2ELoRAUnloadedBetweenRefreshes: B unloads the adapter behind the
// gateway's back (its periodic listing is an hour away): the request sent
// to B gets B's 404 as B wrote it, and B's adapters are listed again at
// once, so that the next request is refused at the door.
func TestE2ELoRAUnloadedBetweenRefreshes(t *testing.T) {
	e := startLoRA(t, time.Hour)
	if _, err := e.chat(t, "sql", "Hello!"); err != nil {
		t.Fatal(err)
	}
	loraAdmin(t, e.urls[1], "/v1/unload_lora_adapter", `{"lora_name":"sql"}`)
	if !e.backend(1).HasAdapter("sql") {
		t.Fatal("the gateway learned of the unload before any request")
	}
	res := e.gw.post(t, "/v1/chat/completions", `{"model":"sql","messages":[{"role":"user","content":"Hello!"}]}`)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"message":"The model `+"`sql`"+` does not exist."`) ||
		!strings.Contains(string(body), `"type":"NotFoundError"`) {
		t.Fatalf("backend's 404: %d %s", res.StatusCode, body)
	}
	e.adapts.await(t, "B's adapters listed again", func() bool { return !e.backend(1).HasAdapter("sql") })
	before := adapterRequests(t, e.b, "sql")
	_, err := e.chat(t, "sql", "Hello!")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Fatalf("after the refresh: %v", err)
	}
	if adapterRequests(t, e.b, "sql") != before {
		t.Fatal("the request reached B after the refresh")
	}
}

// TestLoRAEveryModelEndpoint: every model-routed endpoint takes the
// adapter's name: those answered locally count with the base model's
// tokenizer, those forwarded reach only the backend that has it loaded.
func TestLoRAEveryModelEndpoint(t *testing.T) {
	e := startLoRA(t, time.Hour)
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"sql","messages":[{"role":"user","content":"Hi"}],"max_tokens":2}`},
		{"/v1/completions", `{"model":"sql","prompt":"Hi","max_tokens":2}`},
		{"/v1/embeddings", `{"model":"sql","input":"Hi"}`},
		{"/pooling", `{"model":"sql","input":"Hi"}`},
		{"/v1/responses", `{"model":"sql","input":"Hi","max_output_tokens":2}`},
		{"/v1/messages", `{"model":"sql","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}`},
		{"/v1/messages/count_tokens", `{"model":"sql","messages":[{"role":"user","content":"Hi"}]}`},
		{"/tokenize", `{"model":"sql","prompt":"Hi"}`},
		{"/detokenize", `{"model":"sql","tokens":[9707]}`},
		{"/v1/chat/completions/render", `{"model":"sql","messages":[{"role":"user","content":"Hi"}]}`},
		{"/v1/completions/render", `{"model":"sql","prompt":"Hi"}`},
	} {
		res := e.gw.post(t, c.path, c.body)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %s", c.path, res.StatusCode, body)
		}
	}
	if a := adapterRequests(t, e.a, "sql"); a != 0 {
		t.Errorf("A, without the adapter, received %d of its requests", a)
	}
	if b := adapterRequests(t, e.b, "sql"); b == 0 {
		t.Error("B received none of the adapter's requests")
	}
	res := e.gw.post(t, "/tokenize", `{"model":"nope","prompt":"Hi"}`)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("/tokenize with an unknown name: %d", res.StatusCode)
	}
	// Loading adapters is an operator's call on each backend: not served.
	res = e.gw.post(t, "/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/loras/x"}`)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "unknown_url") {
		t.Errorf("/v1/load_lora_adapter through the gateway: %d %s", res.StatusCode, body)
	}
}

// TestKeysAllowListAndLoRA: an adapter is a model of its own to a key's
// allow-list: a key that names the adapter may call it (and only it) and
// sees it in /v1/models; a key that names only the base model gets the
// unknown model's 404 for the adapter, on the door's endpoints and on
// /tokenize, and does not see it listed; nothing refused reaches a
// backend.
func TestKeysAllowListAndLoRA(t *testing.T) {
	const sqlKey, baseKey = "sk-tenant-sql", "sk-tenant-base"
	e := startLoRA(t, time.Hour, withKeys(
		config.KeyConfig{Name: "tenant-sql", SHA256: digestOf(sqlKey), Models: []string{"sql"}},
		config.KeyConfig{Name: "tenant-base", SHA256: digestOf(baseKey), Models: []string{"m"}},
	))
	if !e.backend(1).HasAdapter("sql") {
		t.Fatalf("B's adapters after warm-up: %v", e.backend(1).Adapters())
	}
	chat := func(key, model string) error {
		c := keyedSDK(e.gw, key)
		_, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello!")}, MaxTokens: openai.Int(4),
		})
		return err
	}
	notFound := func(what string, err error) {
		t.Helper()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
			t.Fatalf("%s: %v, want 404 model_not_found", what, err)
		}
	}
	before := adapterRequests(t, e.a, "sql") + adapterRequests(t, e.b, "sql") + adapterRequests(t, e.a, "m") + adapterRequests(t, e.b, "m")
	if err := chat(sqlKey, "sql"); err != nil {
		t.Fatalf("the adapter's key calling it: %v", err)
	}
	if got := adapterRequests(t, e.b, "sql"); got != 1 {
		t.Fatalf("B received %d adapter requests, want 1", got)
	}
	notFound("the adapter's key calling the base model", chat(sqlKey, "m"))
	notFound("the base model's key calling the adapter", chat(baseKey, "sql"))
	if after := adapterRequests(t, e.a, "sql") + adapterRequests(t, e.b, "sql") + adapterRequests(t, e.a, "m") + adapterRequests(t, e.b, "m"); after != before+1 {
		t.Fatalf("backends received %d model requests, want 1 (the allowed one)", after-before)
	}

	listed := func(key string) []string {
		c := keyedSDK(e.gw, key)
		m, err := c.Models.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range m.Data {
			ids = append(ids, c.ID)
		}
		return ids
	}
	if got := listed(sqlKey); len(got) != 1 || got[0] != "sql" {
		t.Fatalf("tenant-sql lists %v, want [sql]", got)
	}
	if got := listed(baseKey); len(got) != 1 || got[0] != "m" {
		t.Fatalf("tenant-base lists %v, want [m]", got)
	}

	tokenize := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, e.gw.URL+"/tokenize", strings.NewReader(`{"model":"sql","prompt":"Hello!"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := e.gw.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if got := tokenize(sqlKey); got != http.StatusOK {
		t.Fatalf("/tokenize of the adapter with its key: %d", got)
	}
	if got := tokenize(baseKey); got != http.StatusNotFound {
		t.Fatalf("/tokenize of the adapter with the base model's key: %d, want 404", got)
	}
}
