package tokenize

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/ojson"
)

func parseBody(tb testing.TB, s string) *ojson.Value {
	tb.Helper()
	v, err := ojson.Parse([]byte(s), ojson.DefaultMaxDepth)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func TestBuiltinDemo(t *testing.T) {
	m, err := Builtin("demo")
	if err != nil {
		t.Fatal(err)
	}
	body := parseBody(t, `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`)
	text, err := m.RenderChat(body)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
	if text != want {
		t.Fatalf("render %q, want %q", text, want)
	}
	c, err := m.CountChat(body, 0)
	if err != nil || !c.Exact {
		t.Fatalf("count %+v %v", c, err)
	}
	ids, _ := m.TokenizeChat(body)
	if len(ids) != c.Tokens || ids[0] != demoSpecials["<|im_start|>"] {
		t.Fatalf("ids %v, count %d", ids, c.Tokens)
	}
	// Early stop.
	c2, _ := m.CountChat(body, 3)
	if !c2.Truncated || c2.Tokens <= 3 {
		t.Fatalf("limit: %+v", c2)
	}
}

// TestBuiltinDemoAppendEncode: the demo model's encoder appends ids to a
// caller's buffer (the door's precise routing needs it: without it a
// routing: precise model on the demo tokenizer routed every request by
// p2c), the same ids as Encode.
func TestBuiltinDemoAppendEncode(t *testing.T) {
	m, err := Builtin("demo")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := m.Encoder().(interface {
		AppendEncode(dst []int, text string, addSpecial bool) []int
	})
	if !ok {
		t.Fatalf("the demo encoder %T has no AppendEncode", m.Encoder())
	}
	for _, text := range []string{"", "plain words only", "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", "<|im_end|><|im_start|>"} {
		want := m.Encoder().Encode(text, false)
		got := a.AppendEncode([]int{7}, text, false)
		if len(got) != len(want)+1 || got[0] != 7 || !slices.Equal(got[1:], want) {
			t.Fatalf("AppendEncode(%q) = %v, want [7] + %v", text, got, want)
		}
	}
}

func TestCountChatErrors(t *testing.T) {
	m, err := Builtin("demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		body, param, reason string
	}{
		{`[]`, "", ""},
		{`{"messages": 3}`, "messages", ""},
		{`{"messages":[{"content":"x"}]}`, "messages[0].role", ""},
		{`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text", ""},
		{`{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}`, "continue_final_message", ""},
		{`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{bad"}}]}]}`, "messages[0].tool_calls[0].function.arguments", ""},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name", ""},
		{`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"tokenize":true}}`, "chat_template_kwargs", ""},
		{`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, "", "multimodal"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"n":123456789012345678901234}}}]}`, "", "64 bits"},
	} {
		c, err := m.CountChat(parseBody(t, tc.body), 0)
		if tc.reason != "" {
			if err != nil || c.Exact || !strings.Contains(c.Reason, tc.reason) {
				t.Errorf("%s: got %+v %v, want not exact (%s)", tc.body, c, err, tc.reason)
			}
			continue
		}
		var ie *InputError
		if !errors.As(err, &ie) || ie.Param != tc.param {
			t.Errorf("%s: got %+v %v, want InputError param %q", tc.body, c, err, tc.param)
		}
	}
}

func TestCountChatTemplateError(t *testing.T) {
	m := fixtureModel(t, "gemma3")
	_, err := m.CountChat(parseBody(t, `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`), 0)
	var te *TemplateError
	if !errors.As(err, &te) || te.Message != "Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Fatalf("got %v", err)
	}
}

func TestNoChatTemplate(t *testing.T) {
	m := fixtureModel(t, "gptoss")
	c, err := m.CountChat(parseBody(t, `{"messages":[{"role":"user","content":"a"}]}`), 0)
	if err != nil || c.Exact || c.Reason == "" {
		t.Fatalf("got %+v %v", c, err)
	}
}

func TestCountCompletion(t *testing.T) {
	m := fixtureModel(t, "llama3_1")
	one := func(s string) int {
		c, err := m.CountCompletion(parseBody(t, s), 0)
		if err != nil || !c.Exact {
			t.Fatalf("%s: %+v %v", s, c, err)
		}
		return c.Tokens
	}
	n := one(`{"prompt":"Hello world"}`)
	if bare := len(m.Encoder().Encode("Hello world", false)); n != bare+1 {
		t.Errorf("string prompt: %d tokens, want %d+1 (BOS)", n, bare)
	}
	if got := one(`{"prompt":"Hello world","add_special_tokens":false}`); got != n-1 {
		t.Errorf("add_special_tokens=false: %d", got)
	}
	if got := one(`{"prompt":["a","Hello world, longer prompt here"]}`); got <= n {
		t.Errorf("list: %d", got)
	}
	if got := one(`{"prompt":[1,2,3]}`); got != 3 {
		t.Errorf("ids: %d", got)
	}
	// A batch: the sum, and each prompt's count in order.
	if got := one(`{"prompt":[[1],[1,2,3,4]]}`); got != 5 {
		t.Errorf("id lists: %d", got)
	}
	c, _ := m.CountCompletion(parseBody(t, `{"prompt":["Hello world","Hello world","Hello world"]}`), 0)
	if c.Tokens != 3*n || !slices.Equal(c.Each, []int{n, n, n}) || c.Truncated {
		t.Errorf("batch: %+v, want each %d", c, n)
	}
	for _, bad := range []string{`{}`, `{"prompt":[]}`, `{"prompt":[1,"a"]}`, `{"prompt":{"x":1}}`, `{"prompt":[-1]}`} {
		_, err := m.CountCompletion(parseBody(t, bad), 0)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.HasPrefix(ie.Param, "prompt") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	c, _ = m.CountCompletion(parseBody(t, `{"prompt":"`+strings.Repeat("word ", 1000)+`"}`), 10)
	if !c.Truncated || c.Tokens <= 10 || c.Each != nil {
		t.Errorf("limit: %+v", c)
	}
	// The limit is per prompt; counting stops at the first over it.
	c, _ = m.CountCompletion(parseBody(t, `{"prompt":["Hello world","`+strings.Repeat("word ", 1000)+`","Hello world"]}`), 10)
	if !c.Truncated || len(c.Each) != 2 || c.Each[0] != n || c.Each[1] <= 10 || c.Tokens != n+c.Each[1] {
		t.Errorf("batch over the limit: %+v", c)
	}
}

// FuzzCountChat: any body, never a panic; every outcome is a count, an
// InputError, a TemplateError or not exact.
func FuzzCountChat(f *testing.F) {
	for _, g := range readChatGoldens(f, "qwen3")[:40] {
		f.Add(g.Body)
	}
	for _, s := range []string{`{}`, `[]`, `null`, `{"messages":[]}`, `{"messages":[{"role":"user","content":[1]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"[1,2]"}}]}]}`,
		`{"messages":[{"role":"tool","content":[{"type":"text","text":"x"}]}],"tools":[{"function":{"name":"f","parameters":{"a":1e999}}}]}`,
		`{"messages":[{"role":"user","content":"{{ raise_exception('x') }}"}],"chat_template_kwargs":{"enable_thinking":false,"messages":1}}`} {
		f.Add(s)
	}
	models := []*Model{fixtureModel(f, "qwen3"), fixtureModel(f, "gemma3"), fixtureModel(f, "llama3_1"), fixtureModel(f, "deepseek_v3")}
	f.Fuzz(func(t *testing.T, s string) {
		body, err := ojson.Parse([]byte(s), ojson.DefaultMaxDepth)
		if err != nil {
			return
		}
		for _, m := range models {
			c, err := m.CountChat(body, 0)
			var ie *InputError
			var te *TemplateError
			switch {
			case err == nil:
				if !c.Exact && c.Reason == "" {
					t.Fatalf("not exact without a reason")
				}
				if strings.HasPrefix(c.Reason, "internal error") {
					t.Fatalf("%s: %s", m.Name, c.Reason)
				}
			case errors.As(err, &ie), errors.As(err, &te):
			default:
				t.Fatalf("%s: unexpected error %T %v", m.Name, err, err)
			}
		}
	})
}

// tenTurnBody is a ~700-token, 10-turn conversation.
func tenTurnBody() string {
	var b strings.Builder
	b.WriteString(`{"messages":[{"role":"system","content":"You are a helpful assistant that answers concisely and accurately."}`)
	for i := range 10 {
		fmt.Fprintf(&b, `,{"role":"user","content":"Question %d: explain how a hash map handles collisions, and when it resizes its buckets. Keep it short and give one concrete example."}`, i)
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Answer %d: collisions go into chains or probe sequences; the table grows when the load factor passes a threshold."}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func BenchmarkCountChat(b *testing.B) {
	for _, name := range []string{"qwen3", "llama3_1"} {
		b.Run(name, func(b *testing.B) {
			m := fixtureModel(b, name)
			raw := []byte(tenTurnBody())
			body := parseBody(b, string(raw))
			c, err := m.CountChat(body, 0)
			if err != nil || !c.Exact {
				b.Fatal(c, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := m.CountChat(body, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.Tokens), "tokens")
		})
	}
}

// BenchmarkRenderChat renders the 10-turn chat with each fixture model's
// template (the render alone: request to prompt text, no tokenizing):
//
//	go test -run '^$' -bench 'RenderChat|RenderTemplate' -benchmem -cpu 1 ./tokenize
func BenchmarkRenderChat(b *testing.B) {
	for _, name := range chatFixtures {
		b.Run(name, func(b *testing.B) {
			m := fixtureModel(b, name)
			body := parseBody(b, tenTurnBody())
			if _, err := m.RenderChat(body); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.RenderChat(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenderTemplate is the template render alone (Template.Render
// on the request's prepared variables).
func BenchmarkRenderTemplate(b *testing.B) {
	for _, name := range chatFixtures {
		b.Run(name, func(b *testing.B) {
			m := fixtureModel(b, name)
			req, err := m.prepareChat(parseBody(b, tenTurnBody()))
			if err != nil {
				b.Fatal(err)
			}
			render := func() (string, error) { return req.tmpl.renderChat(&req.vars, m.now) }
			if _, err := render(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := render(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
