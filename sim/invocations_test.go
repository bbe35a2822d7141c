package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestInvocationsDispatch: POST /invocations serves a body as the first
// request type that takes it, in vLLM's order, as that type's own route
// would; no API key (it is outside /v1); a body none takes is refused 400
// with vLLM's message, and a GET is 405.
func TestInvocationsDispatch(t *testing.T) {
	e := newEnv(t, Config{APIKey: "secret", OutputTokens: 3})
	for _, tc := range []struct{ body, field, want string }{
		{`{"model":"demo","messages":[{"role":"user","content":"hi"}]}`, "object", "chat.completion"},
		{`{"model":"demo","prompt":"hello","max_tokens":2}`, "object", "text_completion"},
		{`{"model":"demo","input":"hello"}`, "object", "list"},
		{`{"model":"demo","text_1":"a","text_2":["b","c"]}`, "object", "list"},
		{`{"model":"demo","query":"q","documents":["a","b"]}`, "model", "demo"},
	} {
		before := e.sim.Stats().Requests
		status, _, b := e.post("/invocations", tc.body, "Content-Type", "application/json")
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil || status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.body, status, b)
		}
		if got[tc.field] != tc.want {
			t.Errorf("%s: %s = %v, want %q (%s)", tc.body, tc.field, got[tc.field], tc.want, b)
		}
		if after := e.sim.Stats().Requests; after != before+1 {
			t.Errorf("%s: Stats.Requests %d -> %d, want one engine request", tc.body, before, after)
		}
	}
	status, _, b := e.post("/invocations", `{"model":"demo","Messages":[]}`, "Content-Type", "application/json")
	if status != http.StatusBadRequest || !strings.Contains(string(b), "Cannot find suitable handler for request. Expected one of: ['ChatCompletionRequest'") {
		t.Errorf("no shape: %d %s, want vLLM's 400", status, b)
	}
	status, _, b = e.post("/invocations", `{"model":`, "Content-Type", "application/json")
	if status != http.StatusBadRequest || !strings.Contains(string(b), "JSON decode error") {
		t.Errorf("bad JSON: %d %s, want 400", status, b)
	}
	if status, _, b := e.get("/invocations"); status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d %s, want 405", status, b)
	}
}
