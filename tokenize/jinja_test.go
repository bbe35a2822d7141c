package tokenize

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// chatFixtures are the fixture models with a chat template.
var chatFixtures = []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"}

// TestOwnedFixtureTemplates: every fixture chat template (and the demo
// model's) compiles, so the golden suites exercise the evaluator; one
// that does not compile is a regression.
func TestOwnedFixtureTemplates(t *testing.T) {
	for _, name := range chatFixtures {
		if tm := fixtureModel(t, name).ChatTemplate(); tm.CompileErr() != nil || tm.owned == nil {
			t.Errorf("%s: the chat template did not compile: %v", name, tm.CompileErr())
		}
	}
	if tm, err := CompileTemplate(demoTemplate); err != nil || tm.owned == nil {
		t.Errorf("demo: %v", err)
	}
}

// TestNotOwnedIsCompileError: a construct the evaluator does not
// implement (a filter block) is decided at compile time: a *CompileError
// naming the template line and the construct, never a render that guesses.
func TestNotOwnedIsCompileError(t *testing.T) {
	_, err := CompileTemplate("{{ l|join(',') }}\n{% filter upper %}ab{% endfilter %}")
	var ce *CompileError
	if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(ce.Reason, `"filter"`) {
		t.Fatalf("err %v, want a CompileError at line 2 naming the filter statement", err)
	}
}

// TestOwnedFeatures: the single-feature templates the owned evaluator
// takes render as Python jinja2 renders them (the goldens), or are
// declined as not exact.
func TestOwnedFeatures(t *testing.T) {
	owned := 0
	for _, g := range readFeatureGoldens(t) {
		tm, err := CompileTemplate(g.Template)
		if err != nil || tm.owned == nil {
			continue
		}
		owned++
		o := outcome(tm.renderOwned(mapVars(featureVars(t, g.Vars)), goldenNow))
		want := renderOutcome{text: g.Text}
		if g.ErrorType != "" {
			want = renderOutcome{template: g.Error}
		}
		if o != want && !strings.Contains(o.notExact, notPythonPrefix) {
			t.Errorf("%s: owned %+v, Python %+v", g.ID, o, want)
		}
	}
	t.Logf("%d feature templates on the owned evaluator", owned)
}

type featureGolden struct {
	ID, Template, Vars, Text, Error string
	ErrorType                       string `json:"error_type"`
}

func readFeatureGoldens(t testing.TB) []featureGolden {
	t.Helper()
	var out []featureGolden
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, "testdata/chat/features.golden.jsonl")), "\n") {
		var g featureGolden
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

func featureVars(t testing.TB, s string) map[string]Value {
	v, err := ojson.Parse([]byte(s), ojson.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	st := &convState{}
	vars := map[string]Value{}
	for _, mb := range v.Members {
		vars[mb.Key] = st.value(mb.Value)
	}
	return vars
}

// renderOutcome classifies a render: the text, a TemplateError's message,
// or "not exact".
type renderOutcome struct {
	text     string
	template string // TemplateError message
	notExact string // reason
}

func outcome(s string, err error) renderOutcome {
	var te *TemplateError
	switch {
	case err == nil:
		return renderOutcome{text: s}
	case errors.As(err, &te):
		return renderOutcome{template: te.Message}
	}
	return renderOutcome{notExact: err.Error()}
}

// compareRenders renders a chat request twice: on its prepared variables
// (as Model renders) and on the same variables given by name through the
// public Template.Render, each time on a renderer the pool has used
// before. Both must give the same outcome, and the evaluator must never
// fail (a panic is recovered as not exact, and is a bug here).
func compareRenders(t *testing.T, id string, tm *Template, vars *chatVars) (declined bool) {
	t.Helper()
	now := func() time.Time { return time.Date(2026, 3, 5, 14, 7, 9, 0, time.UTC) }
	byName := map[string]Value{}
	for k, v := range vars.special {
		byName[k] = v
	}
	for i, k := range vars.own.keys {
		byName[k] = vars.own.vals[i]
	}
	o := outcome(tm.renderChat(vars, now))
	p := outcome(tm.Render(byName, now))
	if o != p {
		t.Errorf("%s: prepared %+v, by name %+v", id, o, p)
	}
	if strings.Contains(o.notExact, "evaluator failed") {
		t.Errorf("%s: %s", id, o.notExact)
	}
	return o.notExact != ""
}

// TestOwnedRandomChats renders random conversations (roles, unicode and
// whitespace content, tool calls and tools, content parts, generation
// prompt on and off, chat_template_kwargs) with every fixture template,
// through both ways of giving the variables (compareRenders).
func TestOwnedRandomChats(t *testing.T) {
	models := differentialModels(t)
	rng := rand.New(rand.NewPCG(1, 2))
	declined := 0
	for i := range 400 {
		seed := make([]byte, 64)
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		declined += differential(t, models, seed, i)
	}
	t.Logf("declined %d renders (Python would raise or differ)", declined)
}

// FuzzOwnedDifferential is TestOwnedRandomChats with the fuzzer
// choosing the conversation.
func FuzzOwnedDifferential(f *testing.F) {
	for _, s := range []string{"", "\x00", "\x01\x02\x03\x04\x05\x06", strings.Repeat("\x07\x13\xff", 20), "tool\x03\x03\x02\x01"} {
		f.Add([]byte(s))
	}
	models := differentialModels(f)
	f.Fuzz(func(t *testing.T, seed []byte) {
		differential(t, models, seed, 0)
	})
}

func differentialModels(tb testing.TB) []*Model {
	var ms []*Model
	for _, name := range chatFixtures {
		ms = append(ms, fixtureModel(tb, name))
	}
	return ms
}

func differential(t *testing.T, models []*Model, seed []byte, i int) (declined int) {
	c := &chooser{b: seed}
	body := randomChat(c)
	parsed, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		t.Fatalf("generated body: %v", err)
	}
	for _, m := range models {
		req, err := m.prepareChat(parsed)
		if err != nil {
			continue // refused before rendering
		}
		if req.tmpl.owned == nil {
			t.Fatalf("%s: template not compiled", m.Name)
		}
		if compareRenders(t, m.Name+" "+string(body), req.tmpl, &req.vars) {
			declined++
		}
		m.release(req)
	}
	return declined
}

// chooser draws choices from the fuzzer's bytes (zero once they run out).
type chooser struct {
	b []byte
	i int
}

func (c *chooser) n(k int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % k
}

func (c *chooser) pick(xs ...any) any { return xs[c.n(len(xs))] }

var chatTexts = []string{
	"Hello!", "", " ", "  padded  ", "\n\nlead", "trail\n\n", "tab\there", "\x1c\x1dsep\x1e\x1f",
	"東京の天気は？", "Emoji 👩‍👩‍👧‍👦 🇫🇷", "Combining é and zero-width\u200bspace", "quotes \" ' \\ backslash",
	"<think>\nreason\n</think>\n\nanswer", "<tool_response>x</tool_response>", "{{ raise_exception('x') }}",
	"</think>only close", "line\r\nwindows", "\u00a0nbsp\u2028sep", "a\x00nul", "% 100%s",
}

func (c *chooser) text() string { return chatTexts[c.n(len(chatTexts))] }

func (c *chooser) content() any {
	switch c.n(6) {
	case 0:
		return nil
	case 1:
		parts := []any{}
		for range c.n(3) + 1 {
			if c.n(8) == 0 {
				parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x"}})
				continue
			}
			parts = append(parts, map[string]any{"type": "text", "text": c.text()})
		}
		return parts
	}
	return c.text()
}

func (c *chooser) value(depth int) any {
	switch c.n(9) {
	case 0:
		return nil
	case 1:
		return c.n(2) == 0
	case 2:
		return c.n(1000) - 500
	case 3:
		return float64(c.n(1000)) / 8
	case 4:
		if depth > 1 {
			return "x"
		}
		return []any{c.value(depth + 1), c.value(depth + 1)}
	case 5:
		if depth > 1 {
			return 1
		}
		return map[string]any{"k": c.value(depth + 1), "type": "string"}
	}
	return c.text()
}

func randomChat(c *chooser) []byte {
	var msgs []any
	roles := []string{"system", "user", "assistant", "tool", "user", "assistant", "developer"}
	for i := range c.n(9) {
		role := roles[c.n(len(roles))]
		if i == 0 && c.n(2) == 0 {
			role = "system"
		}
		m := map[string]any{"role": role, "content": c.content()}
		switch role {
		case "assistant":
			if c.n(3) == 0 {
				var calls []any
				for k := range c.n(3) + 1 {
					var args any = `{"city": "Paris", "n": 2}`
					switch c.n(4) {
					case 1:
						args = map[string]any{"q": c.value(0), "n": c.value(0)}
					case 2:
						args = ""
					case 3:
						args = `[1, "two"]`
					}
					calls = append(calls, map[string]any{"id": "c" + string(rune('0'+k)), "type": "function",
						"function": map[string]any{"name": c.pick("get_weather", "search", "").(string), "arguments": args}})
				}
				m["tool_calls"] = calls
			}
			if c.n(3) == 0 {
				m["reasoning_content"] = c.text()
			}
		case "tool":
			m["tool_call_id"] = c.pick("c0", 7, nil)
		}
		if c.n(6) == 0 {
			m["name"] = "bob"
		}
		msgs = append(msgs, m)
	}
	body := map[string]any{"messages": msgs}
	if c.n(3) == 0 {
		var tools []any
		for range c.n(3) + 1 {
			fn := map[string]any{"name": c.pick("get_weather", "search").(string)}
			if c.n(2) == 0 {
				fn["description"] = c.text()
			}
			if c.n(2) == 0 {
				fn["parameters"] = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "n": c.value(0)}}
			}
			tools = append(tools, map[string]any{"type": "function", "function": fn})
		}
		body["tools"] = tools
	}
	switch c.n(4) {
	case 1:
		body["add_generation_prompt"] = false
	case 2:
		body["add_generation_prompt"] = false
		body["continue_final_message"] = true
	}
	if c.n(2) == 0 {
		kw := map[string]any{}
		for range c.n(3) + 1 {
			kw[c.pick("enable_thinking", "bos_token", "tools", "reasoning_effort", "unused", "add_generation_prompt").(string)] = c.value(0)
		}
		body["chat_template_kwargs"] = kw
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

func readFile(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
