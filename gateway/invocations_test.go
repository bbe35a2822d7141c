package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/sim"
)

// TestInvocationsThroughTheGateway: SageMaker's POST /invocations through
// the gateway to the simulator over real HTTP: a body is checked by the
// door as the API it reads as (counted: refused by that API's context
// rule), forwarded to the backend's /invocations and answered by it as
// that API, and a body that reads as no API is refused 400 in OpenAI's
// envelope before any backend.
func TestInvocationsThroughTheGateway(t *testing.T) {
	e := startPooling(t, sim.Config{OutputTokens: 3}, nil)
	post := func(body string) (int, map[string]any) {
		t.Helper()
		res := e.gw.post(t, "/invocations", body)
		b := readBodyT(t, res)
		var got map[string]any
		if err := json.Unmarshal([]byte(b), &got); err != nil {
			t.Fatalf("%s: %d %s", body, res.StatusCode, b)
		}
		return res.StatusCode, got
	}
	for _, tc := range []struct{ body, object string }{
		{`{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":3}`, "chat.completion"},
		{`{"model":"m","prompt":"hello there","max_tokens":3}`, "text_completion"},
		{`{"model":"m","input":["hello there","and again"]}`, "list"},
	} {
		status, got := post(tc.body)
		if status != http.StatusOK || got["object"] != tc.object {
			t.Fatalf("%s: %d %v, want a %s", tc.body, status, got, tc.object)
		}
		usage, _ := got["usage"].(map[string]any)
		if usage == nil || usage["prompt_tokens"].(float64) < 2 {
			t.Errorf("%s: usage %v", tc.body, got["usage"])
		}
	}
	before := e.sim.Stats().Requests
	for _, tc := range []struct{ body, code string }{
		{`{"model":"m","inputs":"x"}`, "missing_required_parameter"},                                                                // no shape vLLM reads
		{`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 5000) + `"}]}`, "context_length_exceeded"}, // chat's context rule
		{`{"model":"nope","input":"x"}`, "model_not_found"},
	} {
		status, got := post(tc.body)
		er, _ := got["error"].(map[string]any)
		if status/100 != 4 || er == nil || er["code"] != tc.code {
			t.Errorf("%.60s: %d %v, want a 4xx %s", tc.body, status, got, tc.code)
		}
	}
	if after := e.sim.Stats().Requests; after != before {
		t.Errorf("refused requests reached the backend: %d -> %d", before, after)
	}
}
