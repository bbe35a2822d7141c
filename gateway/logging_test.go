package gateway

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// TestLogsCarryNoRequestContent sends prompts, a key and request fields
// marked with a secret through every path that logs (served, streamed,
// rejected by the door, by the template, by the context check, sampled by
// the tokenizer check) and reads every log entry at debug level: none may
// carry the secret. The client still gets the template's own message.
func TestLogsCarryNoRequestContent(t *testing.T) {
	const secret = "SECRET-7f3a9c"
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{ChatTemplate: `{%- for m in messages %}
{%- if m.content.startswith('RAISE') %}{{ raise_exception('refused: ' ~ m.content) }}{% endif %}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
{%- endfor %}<|im_start|>assistant
`})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", OutputTokens: 3, Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 256}, nil)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	core, logs := observer.New(zap.DebugLevel)
	tg := startGatewayFull(t, tok, extras{log: zap.New(core)}, func(c *config.Config) { c.Models[0].TokenizeCheckRate = 1 }, srv.URL)

	user := func(content string) string {
		return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}],"max_tokens":4`, content)
	}
	for _, tc := range []struct {
		body   string
		status int
	}{
		{user("hello "+secret) + `}`, 200},
		{user("hello "+secret) + `,"stream":true}`, 200},
		{`{"model":"m","prompt":"once ` + secret + `","max_tokens":4}`, 200},
		{user("RAISE "+secret) + `}`, 400},
		{user(strings.Repeat(secret+" ", 200)) + `}`, 400},
		{`{"model":"m","messages":[{"role":"` + secret + `","content":"hi"}]}`, 200}, // any role reaches the template
		{`{"model":"m","` + secret + `":1,"` + secret + `":2}`, 400},
		{`{"model":"` + secret + `","prompt":"x"}`, 404},
	} {
		path := "/v1/chat/completions"
		if strings.Contains(tc.body, `"prompt"`) {
			path = "/v1/completions"
		}
		res := tg.post(t, path, tc.body, "Authorization", "Bearer "+secret)
		body := readBodyT(t, res)
		if res.StatusCode != tc.status {
			t.Fatalf("%s: %d %s", tc.body[:40], res.StatusCode, body)
		}
		if strings.Contains(tc.body, "RAISE") && !strings.Contains(body, "refused: RAISE "+secret) {
			t.Errorf("the client should get the template's own message: %s", body)
		}
	}
	tg.quiesce() // access lines and sampled checks are written as handlers return
	entries := logs.All()
	requests := 0
	for _, e := range entries {
		if e.Message == "request" {
			requests++
		}
		line := e.Message + fmt.Sprint(e.ContextMap())
		if strings.Contains(line, secret) {
			t.Errorf("a log entry carries request content: %s", line)
		}
	}
	if requests != 8 {
		t.Errorf("%d access log lines for 8 requests", requests)
	}
}
