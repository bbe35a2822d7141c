package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
	"github.com/maitred-dev/maitred/triage"
)

// TestOneOutcomeVocabulary sends a request of every door rejection class
// reachable over HTTP and checks that each is named alike everywhere: the
// access log's outcome, the reason label of maitred_rejections_total and,
// once the model is known, triage's reason. POST /tokenize refuses the
// same inputs under the same outcome (one mapping from tokenizer errors to
// rejections).
func TestOneOutcomeVocabulary(t *testing.T) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{ChatTemplate: `{%- for m in messages %}
{%- if m.content.startswith('RAISE') %}{{ raise_exception('refused') }}{% endif %}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
{%- endfor %}<|im_start|>assistant
`})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptestServer(t, sim.New(sim.Config{Model: "m", OutputTokens: 2, Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 64}, nil))
	core, logs := observer.New(zap.InfoLevel)
	tri := triage.New(triage.DefaultConfig(), time.Now)
	// With API keys: key "k" may use model m only; "other" is configured
	// (on the same backend) but outside its allow-list.
	tg := startGatewayFull(t, tok, extras{log: zap.New(core), triage: tri}, func(c *config.Config) {
		c.MaxBodyBytes = 4096
		withOther(c)
		c.Auth = &config.AuthConfig{Keys: []config.KeyConfig{{Name: "k", SHA256: digestOf("sk-k"), Models: []string{"m"}},
			{Name: "tiny", SHA256: digestOf("sk-tiny"), Models: []string{"m"}, Limits: config.KeyLimits{TokensPerMinute: 3}}}}
	}, srv)

	chat := func(msgs string) string { return `{"model":"m","messages":[` + msgs + `]}` }
	user := `{"role":"user","content":"hi"}`
	cases := []struct {
		reason      admission.Reason
		path, ctype string
		body        string
		modelKnown  bool
		id          string // "": "vocab-" + reason
	}{
		{admission.InvalidJSON, "/v1/chat/completions", "", `{"model":"m",`, false, ""},
		{admission.UnsupportedMedia, "/v1/chat/completions", "text/plain", chat(user), false, ""},
		{admission.TooLarge, "/v1/chat/completions", "", chat(`{"role":"user","content":"` + strings.Repeat("y", 5000) + `"}`), false, ""},
		{admission.MissingModel, "/v1/chat/completions", "", `{"messages":[` + user + `]}`, false, ""},
		{admission.UnknownModel, "/v1/chat/completions", "", `{"model":"nope","messages":[` + user + `]}`, false, ""},
		{admission.InvalidMessages, "/v1/chat/completions", "", chat(`{"role":7,"content":"hi"}`), true, ""},
		{admission.InvalidPrompt, "/v1/completions", "", `{"model":"m","prompt":5}`, true, ""},
		{admission.InvalidParam, "/v1/chat/completions", "", `{"model":"m","max_tokens":-1,"messages":[` + user + `]}`, true, ""},
		{admission.TemplateError, "/v1/chat/completions", "", chat(`{"role":"user","content":"RAISE now"}`), true, ""},
		{admission.ContextLength, "/v1/chat/completions", "", chat(`{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}`), true, ""},
		{admission.InvalidInput, "/v1/embeddings", "", `{"model":"m","input":5}`, true, ""},
		// The pooling endpoints name their rejections alike.
		{admission.ContextLength, "/v1/embeddings", "", `{"model":"m","input":"` + strings.Repeat("word ", 100) + `"}`, true, "embeddings-context"},
		{admission.InvalidParam, "/v1/embeddings", "", `{"model":"m","input":"x","encoding_format":["float"]}`, true, "embeddings-param"},
		{admission.InvalidJSON, "/classify", "", `{"model":"m",`, false, "classify-json"},
		{admission.UnsupportedMedia, "/pooling", "text/plain", `{"model":"m","input":"x"}`, false, "pooling-media"},
		{admission.UnknownModel, "/v2/rerank", "", `{"model":"nope","query":"a","documents":["b"]}`, false, "rerank-model"},
		{admission.InvalidInput, "/score", "", `{"model":"m","text_1":5,"text_2":"b"}`, true, "score-input"},
		{admission.ContextLength, "/classify", "", `{"model":"m","input":"` + strings.Repeat("word ", 100) + `"}`, true, "classify-context"},
		// The audio endpoints (a multipart form) name theirs alike.
		{admission.UnsupportedMedia, "/v1/audio/transcriptions", "", `{"model":"m"}`, false, "audio-media"},
		{admission.MissingModel, "/v1/audio/translations", audioForm, formPart("language", "en"), false, "audio-no-model"},
		{admission.UnknownModel, "/v1/audio/transcriptions", audioForm, formPart("model", "nope"), false, "audio-model"},
		{admission.InvalidParam, "/v1/audio/transcriptions", audioForm, formPart("model", "m") + formPart("stream", "maybe"), true, "audio-param"},
		{admission.InvalidForm, "/v1/audio/transcriptions", audioForm, formPart("model", "m") + formPart("model", "other"), false, "audio-form"},
		// Anthropic Messages names its rejections alike, in its own envelope.
		{admission.InvalidJSON, "/v1/messages", "", `{"model":"m",`, false, "messages-json"},
		{admission.UnsupportedMedia, "/v1/messages", "text/plain", `{"model":"m","max_tokens":5,"messages":[` + user + `]}`, false, "messages-media"},
		{admission.TooLarge, "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("y", 5000) + `"}]}`, false, "messages-large"},
		{admission.MissingModel, "/v1/messages", "", `{"max_tokens":5,"messages":[` + user + `]}`, false, "messages-model"},
		{admission.UnknownModel, "/v1/messages", "", `{"model":"nope","max_tokens":5,"messages":[` + user + `]}`, false, "messages-unknown"},
		{admission.InvalidMessages, "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"wizard","content":"hi"}]}`, true, "messages-role"},
		{admission.InvalidParam, "/v1/messages", "", `{"model":"m","messages":[` + user + `]}`, true, "messages-max-tokens"},
		{admission.TemplateError, "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"RAISE now"}]}`, true, "messages-template"},
		{admission.ContextLength, "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}]}`, true, "messages-context"},
		// The key checks (their cases send no key or a wrong one; every
		// other case sends key k).
		{admission.InvalidAPIKey, "/v1/chat/completions", "", chat(user), false, ""},
		{admission.InvalidAPIKey, "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[` + user + `]}`, false, "messages-key"},
		{admission.ModelNotAllowed, "/v1/chat/completions", "", `{"model":"other","messages":[` + user + `]}`, false, ""},
		{admission.ModelNotAllowed, "/v1/embeddings", "", `{"model":"other","input":"x"}`, false, "embeddings-not-allowed"},
		{admission.RateLimited, "/v1/chat/completions", "", chat(user), true, ""}, // key tiny: 3 tokens a minute
		{admission.RateLimited, "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[` + user + `]}`, true, "messages-rate"},
	}
	for i := range cases {
		if cases[i].id == "" {
			cases[i].id = cases[i].reason.String()
		}
	}
	seen := map[admission.Reason]bool{}
	for _, tc := range cases {
		seen[tc.reason] = true
		ctype := tc.ctype
		if ctype == "" {
			ctype = "application/json"
		}
		body := tc.body
		if ctype == audioForm {
			body += "--B--\r\n"
		}
		key := "Bearer sk-k"
		switch tc.reason {
		case admission.InvalidAPIKey:
			key = "Bearer sk-wrong"
		case admission.RateLimited:
			key = "Bearer sk-tiny"
		}
		res := tg.post(t, tc.path, body, "Content-Type", ctype, "X-Request-Id", "vocab-"+tc.id, "Authorization", key)
		if body := readBodyT(t, res); res.StatusCode/100 != 4 {
			t.Fatalf("%s: %d %s", tc.id, res.StatusCode, body)
		}
	}
	for _, r := range admission.Reasons() {
		if !seen[r] {
			t.Errorf("reason %s has no case here: add one", r)
		}
	}
	// POST /tokenize refuses what the door refuses, under the door's
	// outcome.
	tokenizeCases := map[string]string{
		"tokenize-prompt":   `{"model":"m","prompt":5}`,
		"tokenize-template": chat(`{"role":"user","content":"RAISE now"}`),
		// count_tokens too, though in Anthropic's envelope.
		"count-tokens-template": chat(`{"role":"user","content":"RAISE now"}`),
	}
	for id, body := range tokenizeCases {
		path := "/tokenize"
		if strings.HasPrefix(id, "count-tokens") {
			path = "/v1/messages/count_tokens"
		}
		res := tg.post(t, path, body, "X-Request-Id", id, "Authorization", "Bearer sk-k")
		if b := readBodyT(t, res); res.StatusCode != 400 {
			t.Fatalf("%s: %d %s", id, res.StatusCode, b)
		}
	}
	tg.quiesce()

	outcomes := map[string]string{}
	for _, e := range logs.FilterMessage("request").All() {
		f := e.ContextMap()
		id, _ := f["request_id"].(string)
		o, _ := f["outcome"].(string)
		outcomes[id] = o
	}
	text := tg.gathered(t)
	rep := tri.Report()
	var byReason map[string]int
	for _, m := range rep.Models {
		if m.Model == "m" {
			byReason = triageRejections(t, m.Evidence)
		}
	}
	type label struct{ model, reason string }
	counted := map[label]int{}
	for _, tc := range cases {
		want := tc.reason.String()
		if got := outcomes["vocab-"+tc.id]; got != want {
			t.Errorf("%s: the access log's outcome is %q, want %q", tc.id, got, want)
		}
		model := ""
		if tc.modelKnown {
			model = "m"
		}
		counted[label{model, want}]++
	}
	for l, n := range counted {
		if line := fmt.Sprintf(`maitred_rejections_total{model=%q,reason=%q} %d`, l.model, l.reason, n); !strings.Contains(text, line+"\n") {
			t.Errorf("%s: metrics lack %s", l.reason, line)
		}
		if l.model != "" && byReason[l.reason] != n {
			t.Errorf("%s: triage counts %d rejections under that reason (%v), want %d", l.reason, byReason[l.reason], byReason, n)
		}
	}
	if got := outcomes["tokenize-prompt"]; got != admission.InvalidPrompt.String() {
		t.Errorf("/tokenize with an invalid prompt logged outcome %q, want the door's %q", got, admission.InvalidPrompt)
	}
	if got := outcomes["count-tokens-template"]; got != admission.TemplateError.String() {
		t.Errorf("count_tokens with a raising template logged outcome %q, want the door's %q", got, admission.TemplateError)
	}
	if got := outcomes["tokenize-template"]; got != admission.TemplateError.String() {
		t.Errorf("/tokenize with a raising template logged outcome %q, want the door's %q", got, admission.TemplateError)
	}
}

// audioForm is the Content-Type of a form written with formPart.
const audioForm = "multipart/form-data; boundary=B"

// formPart is one field of a multipart form with boundary B.
func formPart(name, value string) string {
	return "--B\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + value + "\r\n"
}

// triageRejections reads rejections_by_reason from a model's evidence.
func triageRejections(t *testing.T, ev map[string]any) map[string]int {
	t.Helper()
	out := map[string]int{}
	switch m := ev["rejections_by_reason"].(type) {
	case map[string]int:
		return m
	case map[string]any:
		for k, v := range m {
			switch n := v.(type) {
			case int:
				out[k] = n
			case float64:
				out[k] = int(n)
			}
		}
	default:
		t.Fatalf("no rejections_by_reason in the model's evidence: %v", ev)
	}
	return out
}
