package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// docErrorRow is one row of docs/errors.md's table of the gateway's own
// errors: the statuses, and the types a code may carry.
type docErrorRow struct {
	status string
	types  []string
}

// docErrorTable reads the first table of docs/errors.md ("Errors the
// gateway makes itself"), by code.
func docErrorTable(t *testing.T) map[string]docErrorRow {
	t.Helper()
	b, err := os.ReadFile("../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, "# Errors the gateway makes itself\n") {
		t.Fatal("docs/errors.md does not start with its title, Errors the gateway makes itself")
	}
	ticked := regexp.MustCompile("`([^`]+)`")
	rows := map[string]docErrorRow{}
	header, inTable := false, false
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break // the first table only
			}
			continue
		}
		inTable = true
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if !header {
			if len(cells) < 4 || cells[2] != "type" {
				t.Fatalf("the error table of docs/errors.md has no type column: %q", line)
			}
			header = true
			continue
		}
		if len(cells) < 4 {
			t.Fatalf("docs/errors.md error row %q: want status | code | type | when", line)
		}
		var types []string
		for _, m := range ticked.FindAllStringSubmatch(cells[2], -1) {
			types = append(types, m[1])
		}
		for _, m := range ticked.FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = docErrorRow{status: cells[0], types: types}
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/errors.md has no error table")
	}
	return rows
}

// TestErrorTypesAsDocumented provokes the gateway's own errors over real
// HTTP and checks each answer's status and error type against the
// table in docs/errors.md: 429 queue_full is server_error (the fleet is full, not
// the request wrong), 429 rate_limit_exceeded is requests or tokens, the
// client's 4xx are invalid_request_error, 5xx server_error.
func TestErrorTypesAsDocumented(t *testing.T) {
	table := docErrorTable(t)
	gate := make(chan struct{})
	e := startE2E(t, sim.Config{OutputTokens: 1, TokenGate: gate}, func(c *config.Config) {
		c.MaxBodyBytes = 4096
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueSize = 1
		c.Models[0].QueueTimeout = config.Duration(time.Second)
		c.Models = append(c.Models, config.ModelConfig{Name: "down", Backends: []config.BackendConfig{{URL: "http://127.0.0.1:1"}}})
		c.Auth = &config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "team", SHA256: digestOf("sk-team"), Models: []string{"*"}},
			{Name: "tiny", SHA256: digestOf("sk-tiny"), Models: []string{"*"}, Limits: config.KeyLimits{RequestsPerMinute: 1}},
		}}
	})
	pool := e.gw.live().byName["m"].pool
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	type answer struct {
		status int
		Error  struct{ Type, Code string }
	}
	send := func(ctx context.Context, method, path, key, ctype, body string) answer {
		req, _ := http.NewRequestWithContext(ctx, method, e.gw.URL+path, strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := e.gw.client.Do(req)
		if err != nil {
			t.Error(err)
			return answer{}
		}
		var a answer
		raw := readBodyT(t, res)
		a.status = res.StatusCode
		if res.StatusCode != 200 {
			if err := json.Unmarshal([]byte(raw), &a); err != nil {
				t.Errorf("%s %s: %d %q is not OpenAI's envelope", method, path, res.StatusCode, raw)
			}
		}
		return a
	}
	const js = "application/json"
	seen := map[string]bool{}
	check := func(what string, a answer, code string) {
		t.Helper()
		seen[code] = true
		row, ok := table[code]
		if !ok {
			t.Errorf("%s: code %s is not in docs/errors.md's table", what, code)
			return
		}
		if a.Error.Code != code || !strings.Contains(row.status, strconv.Itoa(a.status)) {
			t.Errorf("%s: %d %s, want %s %s", what, a.status, a.Error.Code, row.status, code)
		}
		if !slices.Contains(row.types, a.Error.Type) {
			t.Errorf("%s: %s has type %q; docs/errors.md says %v", what, code, a.Error.Type, row.types)
		}
	}

	// The queue: one running at the gate, one waiting, the next refused.
	first := make(chan answer, 1)
	go func() { first <- send(t.Context(), "POST", "/v1/chat/completions", "sk-team", js, chat) }()
	eventually(t, "the first request to run", func() bool { return e.sim.Stats().Running == 1 })
	waiting := make(chan answer, 1)
	go func() { waiting <- send(t.Context(), "POST", "/v1/chat/completions", "sk-team", js, chat) }()
	eventually(t, "one waiting", func() bool { return pool.Advice().Depth == 1 })
	check("a full queue", send(t.Context(), "POST", "/v1/chat/completions", "sk-team", js, chat), "queue_full")
	check("a wait past queue_timeout", <-waiting, "queue_timeout")
	close(gate) // every later request runs at once
	if a := <-first; a.status != 200 {
		t.Fatalf("the first request: %d %+v", a.status, a.Error)
	}

	check("no key", send(t.Context(), "POST", "/v1/chat/completions", "", js, chat), "invalid_api_key")
	check("not JSON", send(t.Context(), "POST", "/v1/chat/completions", "sk-team", js, `{`), "invalid_json")
	check("text/plain", send(t.Context(), "POST", "/v1/chat/completions", "sk-team", "text/plain", chat), "unsupported_media_type")
	check("an unknown model", send(t.Context(), "POST", "/v1/chat/completions", "sk-team", js, strings.Replace(chat, `"m"`, `"nope"`, 1)), "model_not_found")
	check("an unknown path", send(t.Context(), "GET", "/v1/nope", "sk-team", "", ""), "unknown_url")
	check("a wrong method", send(t.Context(), "DELETE", "/v1/models", "sk-team", "", ""), "method_not_allowed")
	check("a large body", send(t.Context(), "POST", "/v1/chat/completions", "sk-team", js, `{"model":"m","prompt":"`+strings.Repeat("a", 8192)+`"}`), "request_too_large")
	check("a model without a ready backend", send(t.Context(), "POST", "/v1/chat/completions", "sk-team", js, strings.Replace(chat, `"m"`, `"down"`, 1)), "model_not_ready")
	send(t.Context(), "POST", "/v1/chat/completions", "sk-tiny", js, chat)
	check("a key over its requests per minute", send(t.Context(), "POST", "/v1/chat/completions", "sk-tiny", js, chat), "rate_limit_exceeded")
	if len(seen) != 11 {
		t.Errorf("checked %d codes, want 11", len(seen))
	}
}
