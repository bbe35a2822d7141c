package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// digestOf is the sha256 a config names a key by.
func digestOf(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// withKeys configures auth with keys (each given as name, the key itself,
// its models) and, optionally, a second model "other" on the same
// backend, which the keys may or may not allow.
func withKeys(keys ...config.KeyConfig) func(*config.Config) {
	return func(c *config.Config) {
		c.Auth = &config.AuthConfig{Keys: keys}
	}
}

// withOther adds model "other" on the backends of "m".
func withOther(c *config.Config) {
	o := c.Models[0]
	o.Name = "other"
	c.Models = append(c.Models, o)
}

func both(fs ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

// keyed is an openai-go client of tg with key (none when "").
func keyedSDK(tg *testGateway, key string, opts ...option.RequestOption) openai.Client {
	o := []option.RequestOption{option.WithBaseURL(tg.URL + "/v1/"), option.WithHTTPClient(tg.client), option.WithMaxRetries(0)}
	if key != "" {
		o = append(o, option.WithAPIKey(key))
	} else {
		o = append(o, option.WithAPIKey(""))
	}
	return openai.NewClient(append(o, opts...)...)
}

// TestKeysUnauthorizedIsTyped: without a key, or with a wrong one, every
// model API endpoint answers 401 invalid_api_key (openai-go reads it as a
// typed error; Anthropic's SDK as authentication_error on Messages, where
// x-api-key is accepted too); the probes stay open (the admin pages are not
// on the API listener with auth: admin_test.go); the client's key never
// reaches the backend and the log names the key.
func TestKeysUnauthorizedIsTyped(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := sim.New(sim.Config{Model: "m", OutputTokens: 3}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, withKeys(
		config.KeyConfig{Name: "team-a", SHA256: digestOf("sk-a"), Models: []string{"*"}},
		config.KeyConfig{Name: "team-idle", SHA256: digestOf("sk-idle"), Models: []string{"*"}},
	), srv.URL)

	for _, key := range []string{"", "sk-wrong"} {
		sdk := keyedSDK(tg, key)
		_, err := sdk.Chat.Completions.New(t.Context(), chatParams(2))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != "invalid_api_key" || apiErr.Type != "invalid_request_error" {
			t.Fatalf("key %q: err = %v, want a typed 401 invalid_api_key", key, err)
		}
	}
	sdkA := keyedSDK(tg, "sk-a")
	res, err := sdkA.Chat.Completions.New(t.Context(), chatParams(2))
	if err != nil || res.Choices[0].Message.Content == "" {
		t.Fatalf("the right key: %v", err)
	}

	// Every model API route needs the key; the probes do not.
	for _, p := range []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/completions", `{"model":"m","prompt":"hi"}`},
		{"POST", "/v1/embeddings", `{"model":"m","input":"hi"}`},
		{"POST", "/pooling", `{"model":"m","input":"hi"}`},
		{"POST", "/classify", `{"model":"m","input":"hi"}`},
		{"POST", "/score", `{"model":"m","text_1":"a","text_2":"b"}`},
		{"POST", "/v1/score", `{"model":"m","text_1":"a","text_2":"b"}`},
		{"POST", "/rerank", `{"model":"m","query":"a","documents":["b"]}`},
		{"POST", "/v1/rerank", `{"model":"m","query":"a","documents":["b"]}`},
		{"POST", "/v2/rerank", `{"model":"m","query":"a","documents":["b"]}`},
		{"POST", "/v1/audio/transcriptions", ``},
		{"POST", "/v1/audio/translations", ``},
		{"POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/responses", `{"model":"m","input":"hi"}`},
		{"GET", "/v1/responses/resp_1", ``},
		{"POST", "/v1/responses/resp_1/cancel", ``},
		{"GET", "/version", ``},
		{"POST", "/tokenize", `{"model":"m","prompt":"hi"}`},
		{"POST", "/detokenize", `{"model":"m","tokens":[1]}`},
		{"POST", "/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/completions/render", `{"model":"m","prompt":"hi"}`},
		{"GET", "/v1/models", ``},
	} {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer sk-wrong"}, {"X-Api-Key", "sk-wrong"}, {"Authorization", "Basic sk-a"}} {
			req, _ := http.NewRequest(p.method, tg.URL+p.path, strings.NewReader(p.body))
			req.Header.Set("Content-Type", "application/json")
			if hdr != nil {
				req.Header.Set(hdr[0], hdr[1])
			}
			res, err := tg.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readBodyT(t, res)
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with %v: %d %s, want 401", p.method, p.path, hdr, res.StatusCode, body)
				continue
			}
			wantType := `"code":"invalid_api_key"`
			if strings.HasPrefix(p.path, "/v1/messages") {
				wantType = `"type":"authentication_error"`
			}
			if !strings.Contains(body, wantType) {
				t.Errorf("%s %s: body %s lacks %s", p.method, p.path, body, wantType)
			}
		}
	}
	for _, p := range []string{"/livez", "/readyz", "/health"} {
		res, err := tg.client.Get(tg.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		if readBodyT(t, res); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want the probes open", p, res.StatusCode)
		}
	}

	// Anthropic's SDK: x-api-key.
	wrong := anthropicSDK(tg.URL, tg.client)
	_, err = wrong.Messages.New(t.Context(), hiParams())
	var aErr *anthropic.Error
	if !errors.As(err, &aErr) || aErr.StatusCode != http.StatusUnauthorized || !strings.Contains(aErr.RawJSON(), `"authentication_error"`) {
		t.Fatalf("Anthropic SDK with a wrong key: %v", err)
	}
	ac := anthropic.NewClient(aoption.WithBaseURL(tg.URL+"/"), aoption.WithHTTPClient(tg.client), aoption.WithMaxRetries(0), aoption.WithAPIKey("sk-a"))
	if msg, err := ac.Messages.New(t.Context(), hiParams()); err != nil || len(msg.Content) == 0 {
		t.Fatalf("Anthropic SDK with the right x-api-key: %v", err)
	}

	tg.quiesce()
	for _, r := range clientRequests(s, func(string) bool { return true }) {
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "sk-a") || strings.Contains(v, "sk-wrong") {
					t.Errorf("a client key reached the backend in %s", k)
				}
			}
		}
	}
	var named int
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if strings.Contains(f.String, "sk-a") || strings.Contains(f.String, "sk-wrong") {
				t.Errorf("a key was logged: %s=%s", f.Key, f.String)
			}
			if f.Key == "key" && f.String == "team-a" {
				named++
			}
		}
	}
	if named < 2 {
		t.Errorf("the access log named the key %d times, want every keyed request", named)
	}
	text := tg.gathered(t)
	for _, want := range []string{
		`maitred_key_rejections_total{key="",reason="invalid_api_key"}`,
		`maitred_rejections_total{model="",reason="invalid_api_key"}`,
		`maitred_key_requests_total{key="team-a"} 2`,
		`maitred_key_in_flight_requests{key="team-a"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// A key's series are made at its first request: a keys_file of 100k
	// keys costs no series until they are used.
	if strings.Contains(text, `key="team-idle"`) {
		t.Error("a key that sent nothing has series")
	}
}

// TestKeysDisallowedModelIsUnknown: a configured model outside the key's
// allow-list gets the very 404 an unknown model gets (same status,
// headers and body but for the name the client sent), on the pipeline and
// on the local endpoints; GET /v1/models lists the key's models only.
func TestKeysDisallowedModelIsUnknown(t *testing.T) {
	e := startE2E(t, sim.Config{}, both(withOther, withKeys(
		config.KeyConfig{Name: "only-m", SHA256: digestOf("sk-m"), Models: []string{"m"}},
		config.KeyConfig{Name: "all", SHA256: digestOf("sk-all"), Models: []string{"*"}},
	)))
	tg := e.gw
	sdk := keyedSDK(tg, "sk-m")

	// openai-go: the same typed error.
	var errs [2]*openai.Error
	for i, name := range []string{"other", "nope"} {
		p := chatParams(2)
		p.Model = name
		_, err := sdk.Chat.Completions.New(t.Context(), p)
		if !errors.As(err, &errs[i]) {
			t.Fatalf("%s: err = %v", name, err)
		}
	}
	if a, b := errs[0], errs[1]; a.StatusCode != 404 || a.StatusCode != b.StatusCode || a.Code != b.Code || a.Param != b.Param || a.Type != b.Type ||
		strings.ReplaceAll(a.Message, `"other"`, `"nope"`) != b.Message {
		t.Errorf("disallowed: %d %s %q\nunknown: %d %s %q", a.StatusCode, a.Code, a.Message, b.StatusCode, b.Code, b.Message)
	}
	if strings.Contains(errs[1].Message, "other") {
		t.Errorf("the 404 lists a model the key may not use: %s", errs[1].Message)
	}

	// Raw bytes on every endpoint that names a model.
	for _, p := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"NAME","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/embeddings", `{"model":"NAME","input":"hi"}`},
		{"/v1/messages", `{"model":"NAME","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages/count_tokens", `{"model":"NAME","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"NAME","input":"hi"}`},
		{"/tokenize", `{"model":"NAME","prompt":"hi"}`},
		{"/detokenize", `{"model":"NAME","tokens":[1]}`},
		{"/v1/chat/completions/render", `{"model":"NAME","messages":[{"role":"user","content":"hi"}]}`},
	} {
		var got [2]string
		var hdrs [2]http.Header
		var codes [2]int
		for i, name := range []string{"other", "nope"} {
			res := tg.post(t, p.path, strings.ReplaceAll(p.body, "NAME", name), "Authorization", "Bearer sk-m")
			got[i], hdrs[i], codes[i] = readBodyT(t, res), res.Header, res.StatusCode
			hdrs[i].Del("X-Request-Id")
			hdrs[i].Del("Date")
		}
		if codes[0] != 404 || codes[0] != codes[1] || strings.ReplaceAll(got[0], `\"other\"`, `\"nope\"`) != got[1] {
			t.Errorf("%s: disallowed %d %s\nunknown %d %s", p.path, codes[0], got[0], codes[1], got[1])
		}
		if a, b := hdrs[0], hdrs[1]; len(a) != len(b) || a.Get("Content-Type") != b.Get("Content-Type") {
			t.Errorf("%s: headers differ: %v vs %v", p.path, a, b)
		}
	}

	// /v1/models per key.
	list := func(key string) []string {
		sdk := keyedSDK(tg, key)
		page, err := sdk.Models.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		return ids
	}
	if got := list("sk-m"); len(got) != 1 || got[0] != "m" {
		t.Errorf("/v1/models for only-m = %v, want [m]", got)
	}
	if got := list("sk-all"); len(got) != 2 {
		t.Errorf("/v1/models for all = %v, want [m other]", got)
	}
	tg.quiesce()
	text := tg.gathered(t)
	for _, want := range []string{`maitred_key_rejections_total{key="only-m",reason="model_not_allowed"}`, `maitred_key_rejections_total{key="only-m",reason="model_not_found"}`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestKeysPriorityIsTheKeys: a keyed request runs in its key's class; the
// priority header may lower it, never raise it.
func TestKeysPriorityIsTheKeys(t *testing.T) {
	e := startE2E(t, sim.Config{}, both(func(c *config.Config) {
		c.PriorityClasses, c.DefaultPriority = []string{"interactive", "standard", "batch"}, "standard"
	}, withKeys(
		config.KeyConfig{Name: "batchy", SHA256: digestOf("sk-b"), Models: []string{"*"}, Priority: "batch"},
		config.KeyConfig{Name: "vip", SHA256: digestOf("sk-v"), Models: []string{"*"}, Priority: "interactive"},
		config.KeyConfig{Name: "plain", SHA256: digestOf("sk-p"), Models: []string{"*"}},
	)))
	tg := e.gw
	for _, c := range []struct{ key, header string }{
		{"sk-b", "interactive"}, // may not raise: batch
		{"sk-b", ""},            // the key's: batch
		{"sk-v", "batch"},       // may lower: batch
		{"sk-v", ""},            // interactive
		{"sk-p", "interactive"}, // default_priority is the key's class: standard
	} {
		res := tg.post(t, "/v1/chat/completions", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`,
			"Authorization", "Bearer "+c.key, PriorityHeader, c.header)
		if b := readBodyT(t, res); res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, b)
		}
	}
	tg.quiesce()
	text := tg.gathered(t)
	for class, n := range map[string]int{"batch": 3, "interactive": 1, "standard": 1} {
		want := `maitred_queue_wait_seconds_count{class="` + class + `",model="m"} ` + string(rune('0'+n))
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// writeKeysFile writes a keys_file the way a Kubernetes ConfigMap volume
// updates one: the file is a symlink through ..data, a symlink to a
// timestamped folder, and an update swaps ..data to a new folder at once.
func writeKeysFile(t *testing.T, dir, content string) string {
	t.Helper()
	gen := fmt.Sprintf("..%d", time.Now().UnixNano())
	if err := os.Mkdir(filepath.Join(dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, gen, "keys.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "keys.yaml")
	if _, err := os.Lstat(path); err != nil {
		if err := os.Symlink(filepath.Join("..data", "keys.yaml"), path); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func keyEntry(name, key string) string {
	return "  - name: " + name + "\n    sha256: " + digestOf(key) + "\n    models: ['*']\n"
}

// TestKeysFileRotation: a key added to or removed from the keys_file (a
// ConfigMap-style symlink swap) takes effect while 100 streams are open,
// none of which is cut, not even those of the removed key; a file that
// fails validation is refused with a log naming the key path, and the keys
// in force keep serving; a file written as JSON is read too.
func TestKeysFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := writeKeysFile(t, dir, "keys:\n"+keyEntry("b", "sk-b"))
	gate := make(chan struct{})
	core, logs := observer.New(zap.InfoLevel)
	s := sim.New(sim.Config{Model: "m", OutputTokens: 3}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, func(c *config.Config) {
		c.Auth = &config.AuthConfig{KeysFile: path, Keys: []config.KeyConfig{{Name: "a", SHA256: digestOf("sk-a"), Models: []string{"*"}}}}
	}, srv.URL)
	warmupDone(t, s)
	s.Update(func(c *sim.Config) { c.TokenGate = gate })
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { tg.WatchKeys(ctx); close(watched) }()
	t.Cleanup(func() { cancel(); <-watched })

	status := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, tg.URL+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readBodyT(t, res)
		return res.StatusCode
	}
	if status("sk-b") != 200 || status("sk-c") != 401 {
		t.Fatal("the first keys_file is not in force")
	}

	// 100 streams, half on the key about to be removed.
	type result struct {
		body string
		err  error
	}
	results := make(chan result, 100)
	var started sync.WaitGroup
	for i := range 100 {
		key := "sk-a"
		if i%2 == 1 {
			key = "sk-b"
		}
		started.Add(1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, tg.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			res, err := tg.client.Do(req)
			started.Done()
			if err != nil {
				results <- result{err: err}
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				err = fmt.Errorf("status %d", res.StatusCode)
			}
			results <- result{string(b), err}
		}()
	}
	started.Wait() // every stream has its headers from the simulator, which holds their tokens

	// Rotate: b out, c in.
	begin := time.Now()
	writeKeysFile(t, dir, "keys:\n"+keyEntry("c", "sk-c"))
	eventually(t, "the rotated keys in force", func() bool { return status("sk-c") == 200 && status("sk-b") == 401 })
	t.Logf("keys_file rotation took effect after %s (poll interval %s)", time.Since(begin).Round(time.Millisecond), keysPollInterval)
	if status("sk-a") != 200 {
		t.Error("the config's own key stopped working")
	}

	// A bad file is refused, naming the key path; c keeps working.
	writeKeysFile(t, dir, "keys:\n"+keyEntry("a", "sk-d"))
	eventually(t, "the refusal logged", func() bool { return logs.FilterMessage("keys_file refused; the keys in force keep serving").Len() > 0 })
	if e := logs.FilterMessage("keys_file refused; the keys in force keep serving").All()[0]; !strings.Contains(e.ContextMap()["error"].(string), `keys[0].name: "a" is already auth.keys[0].name`) {
		t.Errorf("the refusal does not name the key path: %v", e.ContextMap())
	}
	if status("sk-c") != 200 || status("sk-d") != 401 {
		t.Error("a refused keys_file changed the keys in force")
	}

	// The same file written as JSON (what a generator of many keys
	// writes: read by the keys_file's JSON decoder) rotates c out, e in.
	writeKeysFile(t, dir, `{"keys": [{"name": "e", "sha256": "`+digestOf("sk-e")+`", "models": ["*"], "limits": {"max_concurrent": 8}}]}`)
	eventually(t, "the JSON keys_file in force", func() bool { return status("sk-e") == 200 && status("sk-c") == 401 })

	// Every stream runs to its end.
	close(gate)
	for range 100 {
		r := <-results
		if r.err != nil || !strings.HasSuffix(r.body, "data: [DONE]\n\n") || strings.Contains(r.body, `"error"`) {
			t.Fatalf("a stream was cut: %v\n%s", r.err, r.body)
		}
	}
}

// testClock is a quota clock the test can move forward; it runs with
// real time in between.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// qwen3Plain is the qwen3 tokenizer with a plain chat template, as the
// simulator counts it.
func qwen3Plain(t *testing.T) *tokenize.Model {
	t.Helper()
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{ChatTemplate: `{%- for m in messages %}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
{%- endfor %}<|im_start|>assistant
`})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// startKeyedCounted serves model m (counted with the qwen3 tokenizer and a
// plain chat template, as the simulator counts it) behind a gateway with
// the given keys on quota clock clock.
func startKeyedCounted(t *testing.T, sc sim.Config, clock func() time.Time, keys ...config.KeyConfig) (*testGateway, *sim.Server) {
	t.Helper()
	tok := qwen3Plain(t)
	sc.Model, sc.Tokenizer = "m", sim.ModelTokenizer(tok)
	s := sim.New(sc, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	tg := startGatewayFull(t, tok, extras{quotaClock: clock}, withKeys(keys...), srv.URL)
	return tg, s
}

// TestKeysRateLimitTyped: x-ratelimit-* headers on every answer, the
// remaining tokens going down as they are used; over the limit a typed 429
// (openai-go; Anthropic's SDK: rate_limit_error) naming the limit, whose
// Retry-After the SDK's own retry honours and then succeeds; a request
// that can never fit gets a 429 that says so, with x-should-retry: false
// and no Retry-After, and the SDK does not retry it.
func TestKeysRateLimitTyped(t *testing.T) {
	clock := &testClock{}
	tg, _ := startKeyedCounted(t, sim.Config{OutputTokens: 10, MaxModelLen: 512}, clock.now,
		config.KeyConfig{Name: "lim", SHA256: digestOf("sk-lim"), Models: []string{"*"},
			Limits: config.KeyLimits{TokensPerMinute: 60, RequestsPerMinute: 50}})
	var statuses []int
	var mu sync.Mutex
	count := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if err == nil {
			mu.Lock()
			statuses = append(statuses, res.StatusCode)
			mu.Unlock()
		}
		return res, err
	})
	sdk := keyedSDK(tg, "sk-lim", count)
	p := openai.ChatCompletionNewParams{
		Model:     "m",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello!")},
		MaxTokens: openai.Int(10),
	}
	// Each request asks its prompt (exact, 9 tokens) + 10: three fit in 60.
	remaining := int64(60)
	var ask int64
	for i := range 3 {
		var raw *http.Response
		if _, err := sdk.Chat.Completions.New(t.Context(), p, option.WithResponseInto(&raw)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		h := raw.Header
		left, _ := strconv.ParseInt(h.Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
		if h.Get("X-Ratelimit-Limit-Tokens") != "60" || h.Get("X-Ratelimit-Limit-Requests") != "50" ||
			h.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(49-i) || h.Get("X-Ratelimit-Reset-Tokens") == "" || h.Get("X-Ratelimit-Reset-Requests") == "" {
			t.Fatalf("request %d: headers %v", i, h)
		}
		if left >= remaining {
			t.Fatalf("request %d: remaining tokens %d, not below %d", i, left, remaining)
		}
		if i == 0 {
			ask = 60 - left
		}
		remaining = left
	}
	// The answers that reserve nothing carry the key's status too: a door
	// rejection, a local endpoint.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`},
		{"GET", "/v1/models", ""},
		{"POST", "/tokenize", `{"model":"m","prompt":"hi"}`},
	} {
		req, _ := http.NewRequest(c.method, tg.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer sk-lim")
		req.Header.Set("Content-Type", "application/json")
		res, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readBodyT(t, res)
		if res.Header.Get("X-Ratelimit-Remaining-Tokens") != strconv.FormatInt(remaining, 10) || res.Header.Get("X-Ratelimit-Limit-Requests") != "50" {
			t.Errorf("%s %s (%d): x-ratelimit headers %v", c.method, c.path, res.StatusCode, res.Header)
		}
	}
	// A fourth does not fit: a typed 429 naming the limit.
	noRetry := keyedSDK(tg, "sk-lim")
	var raw *http.Response
	_, err := noRetry.Chat.Completions.New(t.Context(), p, option.WithResponseInto(&raw))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "tokens" {
		t.Fatalf("over the limit: %v", err)
	}
	want := fmt.Sprintf("tokens per minute: limit 60, %d in use, %d requested", 60-remaining, ask)
	if !strings.Contains(apiErr.Message, want) {
		t.Errorf("429 message %q lacks %q", apiErr.Message, want)
	}
	if ra, err := strconv.Atoi(raw.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 61 ||
		raw.Header.Get("X-Ratelimit-Remaining-Tokens") != strconv.FormatInt(remaining, 10) {
		t.Errorf("429 headers: %v", raw.Header)
	}
	// Anthropic's SDK reads the same refusal as rate_limit_error.
	ac := anthropic.NewClient(aoption.WithBaseURL(tg.URL+"/"), aoption.WithHTTPClient(tg.client), aoption.WithMaxRetries(0), aoption.WithAPIKey("sk-lim"))
	_, err = ac.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "m", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello!"))}})
	var aErr *anthropic.Error
	if !errors.As(err, &aErr) || aErr.StatusCode != 429 || !strings.Contains(aErr.RawJSON(), `"rate_limit_error"`) {
		t.Fatalf("Anthropic SDK over the limit: %v", err)
	}

	// The window is nearly over: the first usage expires within a second
	// or two. The SDK's own retry waits Retry-After and succeeds.
	clock.advance(59 * time.Second)
	mu.Lock()
	statuses = nil
	mu.Unlock()
	retrying := keyedSDK(tg, "sk-lim", count, option.WithMaxRetries(1))
	if _, err := retrying.Chat.Completions.New(t.Context(), p); err != nil {
		t.Fatalf("the SDK's retry after Retry-After failed: %v", err)
	}
	mu.Lock()
	if len(statuses) != 2 || statuses[0] != 429 || statuses[1] != 200 {
		t.Errorf("attempts = %v, want [429 200]", statuses)
	}
	statuses = nil
	mu.Unlock()

	// Never fits: max_tokens alone is over the limit.
	big := p
	big.MaxTokens = openai.Int(200)
	raw = nil
	sdk3 := keyedSDK(tg, "sk-lim", count, option.WithMaxRetries(3))
	_, err = sdk3.Chat.Completions.New(t.Context(), big, option.WithResponseInto(&raw))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || !strings.Contains(apiErr.Message, "retrying cannot help") {
		t.Fatalf("never fits: %v", err)
	}
	if raw.Header.Get("X-Should-Retry") != "false" || raw.Header.Get("Retry-After") != "" {
		t.Errorf("never-fits headers: %v", raw.Header)
	}
	mu.Lock()
	if len(statuses) != 1 {
		t.Errorf("the SDK tried a never-fitting request %d times, want once", len(statuses))
	}
	mu.Unlock()
	tg.quiesce()
	text := tg.gathered(t)
	for _, w := range []string{`maitred_key_rate_limited_total{key="lim",limit="tokens"} 4`, `maitred_key_rejections_total{key="lim",reason="rate_limited"} 4`} {
		if !strings.Contains(text, w) {
			t.Errorf("metrics lack %s", w)
		}
	}
}

func TestResetString(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 20 * time.Millisecond: "20ms", 19100 * time.Microsecond: "20ms", time.Second: "1s",
		1200 * time.Millisecond: "2s", 6 * time.Minute: "6m0s", 5*time.Minute + 59500*time.Millisecond: "6m0s",
	} {
		if got := resetString(d); got != want {
			t.Errorf("resetString(%s) = %s, want %s", d, got, want)
		}
	}
}

// scaledClock runs speed times faster than real time from now on.
func scaledClock(speed time.Duration) func() time.Time {
	base := time.Now()
	return func() time.Time { return base.Add(time.Since(base) * speed) }
}

// tokenLog is the simulator's own accounting: when it processed how many
// tokens.
type tokenLog struct {
	mu  sync.Mutex
	at  []time.Time
	tok []int
}

func (l *tokenLog) add(at time.Time, n int) {
	l.mu.Lock()
	l.at, l.tok = append(l.at, at), append(l.tok, n)
	l.mu.Unlock()
}

// maxWindow is the most tokens processed in any window of length d, and
// the total.
func (l *tokenLog) maxWindow(d time.Duration) (most, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx := make([]int, len(l.at))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return l.at[a].Compare(l.at[b]) })
	sum, lo := 0, 0
	for _, i := range idx {
		total += l.tok[i]
		sum += l.tok[i]
		for !l.at[idx[lo]].After(l.at[i].Add(-d)) { // entries at or before at-d leave [at-d+ε, at]
			sum -= l.tok[idx[lo]]
			lo++
		}
		most = max(most, sum)
	}
	return most, total
}

// hammer runs clients closed-loop clients on one key until the quota
// clock reaches until: each sends a request, and on a 429 waits its
// Retry-After (scaled to real time by speed) before the next. It returns
// the number of requests answered 200.
func hammer(t *testing.T, tg *testGateway, key, body string, clients int, clock func() time.Time, until time.Time, speed time.Duration) int {
	t.Helper()
	var ok atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			stream := c%2 == 1
			b := body
			if stream {
				b = strings.Replace(body, `{`, `{"stream":true,`, 1)
			}
			for clock().Before(until) {
				req, _ := http.NewRequest(http.MethodPost, tg.URL+"/v1/chat/completions", strings.NewReader(b))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				res, err := tg.client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				out, _ := io.ReadAll(res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusOK:
					if stream && !strings.HasSuffix(string(out), "data: [DONE]\n\n") {
						errs <- fmt.Errorf("a stream ended early: %s", out)
						return
					}
					if res.Header.Get("X-Ratelimit-Remaining-Tokens") == "" {
						errs <- fmt.Errorf("an answer (stream %v) without x-ratelimit headers: %v", stream, res.Header)
						return
					}
					ok.Add(1)
				case http.StatusTooManyRequests:
					ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
					if err != nil {
						errs <- fmt.Errorf("429 without Retry-After: %s", out)
						return
					}
					// The client waits as told, in the test's time.
					timer := time.NewTimer(time.Duration(ra) * time.Second / speed)
					<-timer.C
				default:
					errs <- fmt.Errorf("status %d: %s", res.StatusCode, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(ok.Load())
}

// TestKeysTokensPerMinuteHoldUnderConcurrency: 50 concurrent clients on
// one key with tokens_per_minute T for 2 minutes (a quota clock running 30
// times real time, shared with the simulator's accounting): the tokens the
// simulator processed in any 60 s stay within T plus one request's
// settlement error (a stream without a usage chunk settles with its text
// counted by the gateway's tokenizer; at worst a request's whole ask).
func TestKeysTokensPerMinuteHoldUnderConcurrency(t *testing.T) {
	const speed = 30
	const T = 3000
	clock := scaledClock(speed)
	var processed tokenLog
	tg, _ := startKeyedCounted(t, sim.Config{OutputTokens: 40, ITL: time.Millisecond, OnProcessed: processed.add, Clock: clock}, clock,
		config.KeyConfig{Name: "busy", SHA256: digestOf("sk-busy"), Models: []string{"*"}, Limits: config.KeyLimits{TokensPerMinute: T}})
	start := clock()
	n := hammer(t, tg, "sk-busy", `{"model":"m","max_tokens":40,"messages":[{"role":"user","content":"Hello!"}]}`, 50, clock, start.Add(2*time.Minute), speed)
	most, total := processed.maxWindow(time.Minute)
	t.Logf("%d requests served; the simulator processed %d tokens, at most %d in any 60 s (tokens_per_minute %d)", n, total, most, T)
	const oneRequest = 9 + 40 // its exact prompt + max_tokens
	if most > T+oneRequest {
		t.Errorf("the simulator processed %d tokens in one 60 s window, over tokens_per_minute %d + %d", most, T, oneRequest)
	}
	if n == 0 || total < T {
		t.Errorf("only %d tokens processed in 2 minutes: the key was starved", total)
	}
}

// TestKeysSettlementGivesBack: completions stop at 10% of max_tokens; each
// request reserves its prompt + max_tokens but settles with what it used,
// so the key's admitted throughput (the simulator's accounting over 2
// quota-minutes) reaches at least 90% of tokens_per_minute.
func TestKeysSettlementGivesBack(t *testing.T) {
	// The simulator and the gateway must serve far more than T allows (on
	// a loaded machine under -race too): a slower clock and small answers.
	const speed = 15
	const T = 1200
	clock := scaledClock(speed)
	var processed tokenLog
	tg, _ := startKeyedCounted(t, sim.Config{OutputTokens: 5, OnProcessed: processed.add, Clock: clock}, clock,
		config.KeyConfig{Name: "thrifty", SHA256: digestOf("sk-thrifty"), Models: []string{"*"}, Limits: config.KeyLimits{TokensPerMinute: T}})
	start := clock()
	n := hammer(t, tg, "sk-thrifty", `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"Hello!"}]}`, 20, clock, start.Add(2*time.Minute), speed)
	most, total := processed.maxWindow(time.Minute)
	perMinute := float64(total) / 2
	t.Logf("%d requests served; the simulator processed %d tokens in 2 minutes (%.0f a minute, %.0f%% of tokens_per_minute %d; at most %d in any 60 s)",
		n, total, perMinute, 100*perMinute/T, T, most)
	if perMinute < 0.9*T {
		t.Errorf("admitted throughput %.0f tokens a minute, below 90%% of tokens_per_minute %d", perMinute, T)
	}
}
