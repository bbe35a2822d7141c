package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
)

type wireError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// decodeEnvelope checks that body is exactly OpenAI's error envelope: the
// four keys, param and code present even when null.
func decodeEnvelope(t *testing.T, body string) wireError {
	t.Helper()
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatalf("not a JSON envelope: %v: %s", err, body)
	}
	if len(raw) != 1 || len(raw["error"]) != 4 {
		t.Fatalf("envelope must be {\"error\":{message,type,param,code}}, got %s", body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Fatalf("envelope lacks %q: %s", k, body)
		}
	}
	var e wireError
	json.Unmarshal([]byte(body), &e)
	return e
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

func TestGatewayErrorsUseEnvelopeAndNeverReachBackend(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("backend got %s %s", r.Method, r.URL.Path)
	})
	tg := startGateway(t, func(c *config.Config) { c.MaxBodyBytes = 1024 }, fb.URL)
	big := `{"model":"m","prompt":"` + strings.Repeat("x", 2000) + `"}`
	tests := []struct {
		name, method, path, ctype, body string
		status                          int
		typ, code, param                string
		msg                             string
	}{
		{"unknown route", "POST", "/v1/nope", "application/json", `{}`, 404, "invalid_request_error", "unknown_url", "<null>", "Invalid URL (POST /v1/nope)"},
		{"wrong method", "GET", "/v1/chat/completions", "", ``, 405, "invalid_request_error", "method_not_allowed", "<null>", "GET"},
		{"not json", "POST", "/v1/chat/completions", "application/json", `hello`, 400, "invalid_request_error", "invalid_json", "<null>", "not valid JSON"},
		{"truncated json", "POST", "/v1/completions", "application/json", `{"model":"m",`, 400, "invalid_request_error", "invalid_json", "*", "not valid JSON"},
		{"json array", "POST", "/v1/chat/completions", "application/json", `[1]`, 400, "invalid_request_error", "invalid_json", "<null>", "must be a JSON object"},
		{"duplicate key", "POST", "/v1/chat/completions", "application/json", `{"model":"m","model":"x"}`, 400, "invalid_request_error", "invalid_json", "model", "duplicate"},
		{"missing model", "POST", "/v1/chat/completions", "application/json", `{"messages":[]}`, 400, "invalid_request_error", "missing_required_parameter", "model", "model"},
		{"model not a string", "POST", "/v1/chat/completions", "application/json", `{"model":7}`, 400, "invalid_request_error", "invalid_type", "model", "must be a string"},
		{"unknown model", "POST", "/v1/chat/completions", "application/json", `{"model":"gpt-9"}`, 404, "invalid_request_error", "model_not_found", "model", `"gpt-9" does not exist. Available models: m.`},
		{"form content type", "POST", "/v1/completions", "application/x-www-form-urlencoded", `{"model":"m"}`, 400, "invalid_request_error", "unsupported_media_type", "<null>", "application/json"},
		// vLLM refuses all three (validate_json_request), outside the envelope.
		{"no content type", "POST", "/v1/completions", "", `{"model":"m","prompt":"x"}`, 400, "invalid_request_error", "unsupported_media_type", "<null>", "sent none"},
		{"+json content type", "POST", "/v1/chat/completions", "application/vnd.api+json", `{"model":"m"}`, 400, "invalid_request_error", "unsupported_media_type", "<null>", "application/vnd.api+json"},
		{"space before the parameters", "POST", "/tokenize", "application/json ; charset=utf-8", `{"model":"m","prompt":"x"}`, 400, "invalid_request_error", "unsupported_media_type", "<null>", "application/json"},
		{"body over limit", "POST", "/v1/completions", "application/json", big, 413, "invalid_request_error", "request_too_large", "<null>", "1024 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tg.URL+tt.path, strings.NewReader(tt.body))
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			res, err := tg.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readBodyT(t, res)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if res.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on an error answer")
			}
			e := decodeEnvelope(t, body)
			if tt.param == "*" {
				tt.param = str(e.Error.Param)
			}
			if e.Error.Type != tt.typ || str(e.Error.Code) != tt.code || str(e.Error.Param) != tt.param {
				t.Errorf("type/code/param = %s/%s/%s, want %s/%s/%s", e.Error.Type, str(e.Error.Code), str(e.Error.Param), tt.typ, tt.code, tt.param)
			}
			if !strings.Contains(e.Error.Message, tt.msg) {
				t.Errorf("message %q lacks %q", e.Error.Message, tt.msg)
			}
		})
	}
	if reqs, _ := fb.requests(); len(reqs) != 0 {
		t.Errorf("backend received %d requests", len(reqs))
	}
}

func TestForwardsBodyVerbatimWithBackendCredentials(t *testing.T) {
	t.Setenv("TEST_BACKEND_KEY", "backend-secret")
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", "yes")
		io.WriteString(w, `{"id":"cmpl-1",  "choices":[]}`)
	})
	tg := startGateway(t, func(c *config.Config) { c.Models[0].Backends[0].APIKeyEnv = "TEST_BACKEND_KEY" }, fb.URL)
	// Odd spacing, key order, unknown fields and escapes must survive.
	body := "{ \"zeta\": 1,\n \"model\":\"m\", \"prompt\": \"caf\\u00e9\", \"vendor_ext\": {\"b\":2,\"a\":1.0} }"
	res := tg.post(t, "/v1/completions", body,
		"Authorization", "Bearer client-secret",
		"Cookie", "session=client",
		"Connection", "X-Hop",
		"X-Hop", "must-not-pass",
		"X-Request-Id", "client-id-42")
	got := readBodyT(t, res)
	if res.StatusCode != 200 || got != `{"id":"cmpl-1",  "choices":[]}` {
		t.Fatalf("answer changed: %d %q", res.StatusCode, got)
	}
	if res.Header.Get("X-Backend") != "yes" || !slices.Equal(res.Header.Values("X-Request-Id"), []string{"client-id-42"}) {
		t.Errorf("response headers: %v", res.Header)
	}
	reqs, bodies := fb.requests()
	if len(reqs) != 1 {
		t.Fatalf("backend got %d requests", len(reqs))
	}
	if string(bodies[0]) != body {
		t.Errorf("body re-serialized:\n got %q\nwant %q", bodies[0], body)
	}
	h := reqs[0].Header
	if a := h.Values("Authorization"); len(a) != 1 || a[0] != "Bearer backend-secret" {
		t.Errorf("backend Authorization = %q, want only the backend's key", a)
	}
	for _, k := range []string{"Cookie", "X-Hop"} {
		if h.Get(k) != "" {
			t.Errorf("%s reached the backend: %q", k, h.Get(k))
		}
	}
	// The backend gets an id of the gateway's own, never the client's.
	if id := h.Values("X-Request-Id"); len(id) != 1 || len(id[0]) != 32 || id[0] == "client-id-42" {
		t.Errorf("backend X-Request-Id = %q, want one fresh id", id)
	}
}

func TestNoBackendKeyMeansNoAuthorization(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	tg := startGateway(t, nil, fb.URL)
	readBodyT(t, tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer client-secret"))
	reqs, _ := fb.requests()
	if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "" {
		t.Fatalf("client Authorization reached the backend: %v", reqs[0].Header)
	}
}

func TestBackendErrorsPassThroughUnchanged(t *testing.T) {
	const vllm400 = `{"error":{"message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}}`
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		io.WriteString(w, vllm400)
	})
	tg := startGateway(t, nil, fb.URL)
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if got := readBodyT(t, res); res.StatusCode != 400 || got != vllm400 {
		t.Fatalf("got %d %q", res.StatusCode, got)
	}
}

func TestUnreachableBackendIs502(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {})
	tg := startGateway(t, nil, fb.URL)
	fb.Close() // ready at the last probe, gone now
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	body := readBodyT(t, res)
	e := decodeEnvelope(t, body)
	if res.StatusCode != 502 || str(e.Error.Code) != "backend_unavailable" || e.Error.Type != "server_error" {
		t.Fatalf("got %d %s", res.StatusCode, body)
	}
	if !strings.Contains(e.Error.Message, "connection refused") {
		t.Errorf("message does not say why: %q", e.Error.Message)
	}
}

func TestSilentBackendIs504(t *testing.T) {
	release := make(chan struct{})
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	tg := startGateway(t, func(c *config.Config) { c.FirstByteTimeout = config.Duration(50 * time.Millisecond) }, fb.URL)
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	body := readBodyT(t, res)
	if e := decodeEnvelope(t, body); res.StatusCode != 504 || str(e.Error.Code) != "backend_timeout" {
		t.Fatalf("got %d %s", res.StatusCode, body)
	}
}

func TestModelWithoutReadyBackendIs503(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { t.Error("request sent to an unready backend") })
	fb.setHealth(503)
	tg := startGateway(t, nil, fb.URL)
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	body := readBodyT(t, res)
	e := decodeEnvelope(t, body)
	if res.StatusCode != 503 || str(e.Error.Code) != "model_not_ready" || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("got %d Retry-After=%q %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if !strings.Contains(e.Error.Message, "/health answered 503") {
		t.Errorf("message lacks the backend's state: %q", e.Error.Message)
	}
}

func TestReadyzFollowsBackendsAndPhase(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {})
	tg := startGateway(t, nil, fb.URL)
	get := func() (int, readyBody) {
		res, err := tg.client.Get(tg.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var rb readyBody
		if err := json.Unmarshal([]byte(readBodyT(t, res)), &rb); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, rb
	}
	if code, rb := get(); code != 200 || rb.Status != "ready" || !rb.Models[0].Ready {
		t.Fatalf("ready backend: %d %+v", code, rb)
	}
	fb.setHealth(503)
	// One failed probe is a blip; unhealthy_threshold (3) in a row is not.
	tg.Fleet.ProbeAll(t.Context())
	if code, _ := get(); code != 200 {
		t.Fatalf("one failed probe made the model unready: %d", code)
	}
	tg.Fleet.ProbeAll(t.Context())
	tg.Fleet.ProbeAll(t.Context())
	code, rb := get()
	if code != 503 || rb.Models[0].Ready || rb.Models[0].Backends[0].State != fleet.Unhealthy ||
		rb.Models[0].Backends[0].Reason != "/health answered 503" {
		t.Fatalf("unhealthy backend: %d %+v", code, rb)
	}
	fb.setHealth(200)
	tg.Fleet.ProbeAll(t.Context())
	tg.SetPhase(Draining)
	if code, rb := get(); code != 503 || rb.Phase != "draining" {
		t.Fatalf("draining: %d %+v", code, rb)
	}
	res, err := tg.client.Get(tg.URL + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	if readBodyT(t, res); res.StatusCode != 200 {
		t.Errorf("/livez = %d while draining", res.StatusCode)
	}
}

func TestModelsMergesBackendReports(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {})
	tg := startGateway(t, nil, fb.URL)
	res, err := tg.client.Get(tg.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}
	if err := json.Unmarshal([]byte(readBodyT(t, res)), &list); err != nil {
		t.Fatal(err)
	}
	want := modelEntry{ID: "m", Object: "model", Created: 1700000000, OwnedBy: "maitred", MaxModelLen: 2048}
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0] != want {
		t.Fatalf("models = %+v, want [%+v]", list, want)
	}
}
