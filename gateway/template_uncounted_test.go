package gateway

// A model whose chat template maitred cannot compile (issue 26): the
// gateway starts, serves the model uncounted, and says so.

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// uncompilableTemplate is a chat template Python's jinja2 renders (vLLM
// serves it: `with` is built into jinja2) that no engine of maitred
// parses; the statement is on line 3.
const uncompilableTemplate = "{{ bos_token }}\n{%- for m in messages %}\n{%- with c = m['content'] %}<|im_start|>{{ m['role'] }}\n{{ c }}<|im_end|>\n{% endwith %}\n{%- endfor %}<|im_start|>assistant\n"

// TestUncompilableTemplateServedUncounted: through real HTTP, a chat
// request to such a model reaches the backend (the simulator, counting
// with the real template as vLLM would) and is answered, counted as
// uncounted (not_exact), never refused; the log names the template's line
// and reason, maitred_model_uncounted says so, and /debug/backends and
// the status page give the reason.
func TestUncompilableTemplateServedUncounted(t *testing.T) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{ChatTemplate: uncompilableTemplate})
	if err != nil {
		t.Fatalf("the model did not load: %v", err)
	}
	s := sim.New(sim.Config{Model: "m", OutputTokens: 3, Tokenizer: sim.ModelTokenizer(qwen3(t))}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, tok, extras{log: zap.New(core)}, nil, srv.URL)
	warmupDone(t, s)

	warn := logs.FilterMessageSnippet("chat template did not compile").All()
	if len(warn) != 1 || warn[0].Level != zap.WarnLevel || warn[0].ContextMap()["line"] != int64(3) ||
		!strings.Contains(warn[0].ContextMap()["reason"].(string), `"with"`) || warn[0].ContextMap()["model"] != "m" {
		t.Fatalf("start-up warning: %+v", warn)
	}

	sdk := openai.NewClient(option.WithBaseURL(tg.URL+"/v1/"), option.WithAPIKey("k"), option.WithHTTPClient(tg.client), option.WithMaxRetries(0))
	before := len(completionRequests(s))
	resp, err := sdk.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello!")},
	})
	if err != nil {
		t.Fatalf("the chat request was not served: %v", err)
	}
	if resp.Choices[0].Message.Content != sim.GeneratedText(0, 3) || resp.Usage.PromptTokens == 0 {
		t.Errorf("answer %+v", resp)
	}
	if got := completionRequests(s); len(got) != before+1 {
		t.Fatalf("the backend received %d requests, want the chat forwarded", len(got)-before)
	}

	res, err := tg.client.Get(tg.URL + "/debug/backends")
	if err != nil {
		t.Fatal(err)
	}
	var recs []backendRecord
	if err := json.NewDecoder(res.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(recs) != 1 || !strings.Contains(recs[0].Uncounted, `chat template "default" did not compile: line 3: not supported: statement "with"`) {
		t.Errorf("/debug/backends: %+v", recs)
	}
	res, err = tg.client.Get(tg.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(page), "Chat requests forwarded uncounted: chat template &#34;default&#34; did not compile: line 3") {
		t.Errorf("the status page does not say why the model is uncounted")
	}

	tg.quiesce()
	m := tg.gathered(t)
	for _, want := range []string{
		`maitred_model_uncounted{model="m",reason="chat_template_not_compiled"} 1`,
		`maitred_admission_uncounted_total{model="m",reason="not_exact"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "maitred_model_uncounted")+"\n"+grepLines(m, "maitred_admission_uncounted_total"))
		}
	}
}

// TestJambaLikeTemplateCounted: the Jamba-like template (a list of macros
// called with *args unpacking, which used to stop the gateway at start)
// is counted exactly: the gateway's count of the prompt is the one the
// backend reports.
func TestJambaLikeTemplateCounted(t *testing.T) {
	src, err := os.ReadFile("../tokenize/testdata/chat/jamba_like.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{ChatTemplate: string(src)})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if ps := tok.TemplateProblems(); len(ps) != 0 {
		t.Fatalf("template problems: %+v", ps)
	}
	s := sim.New(sim.Config{Model: "m", OutputTokens: 3, Tokenizer: sim.ModelTokenizer(tok)}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, tok, extras{log: zap.New(core)}, nil, srv.URL)
	warmupDone(t, s)
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello!"}]}`)
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(readBodyT(t, res)), &out); err != nil || res.StatusCode != 200 {
		t.Fatalf("%d %v", res.StatusCode, err)
	}
	tg.quiesce()
	lines := logs.FilterMessage("request").FilterField(zap.String("endpoint", "/v1/chat/completions")).All()
	if len(lines) != 1 {
		t.Fatalf("%d request lines", len(lines))
	}
	f := lines[0].ContextMap()
	if f["uncounted"] != nil || f["prompt_tokens"] != int64(out.Usage.PromptTokens) || out.Usage.PromptTokens == 0 {
		t.Errorf("logged %v, backend usage %d: want counted, the same", f, out.Usage.PromptTokens)
	}
}
