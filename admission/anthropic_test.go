package admission

import (
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// A Messages request is counted as the chat conversation vLLM converts it
// to: the top-level system (string or text blocks) and system-role
// messages as one system message, a lone text block as a string, several
// as text parts, ctx and msg as user.
func TestMessagesCountedAsTheirChatConversation(t *testing.T) {
	m, err := tokenize.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDoor(catalog{"m": {Name: "m", Counter: m, MaxModelLen: 4096}})
	cases := []struct{ messages, chat string }{
		{`"system":"Be terse.","messages":[{"role":"user","content":"Hello, world! 你好"}]`,
			`[{"role":"system","content":"Be terse."},{"role":"user","content":"Hello, world! 你好"}]`},
		{`"system":[{"type":"text","text":"x-anthropic-billing-header: 1"},{"type":"text","text":"Be "},{"type":"text","text":"terse."}],"messages":[{"role":"system","content":" Really."},{"role":"ctx","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":"yo"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":""},{"type":"text","text":"b"}]}]`,
			`[{"role":"system","content":"Be terse. Really."},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`},
	}
	for _, tc := range cases {
		body := `{"model":"m","max_tokens":16,` + tc.messages + `}`
		dec, rej := d.Check(Messages, []byte(body))
		if rej != nil {
			t.Fatal(rej)
		}
		v, _ := ojson.Parse([]byte(`{"messages":`+tc.chat+`}`), 64)
		ids, err := m.TokenizeChat(v)
		if err != nil {
			t.Fatal(err)
		}
		if dec.PromptTokens != len(ids) || dec.Uncounted != Counted || dec.MaxTokens != 16 || string(dec.Body) != body {
			t.Errorf("%s: door counted %d (%s), the chat conversation %d", tc.messages, dec.PromptTokens, dec.Uncounted, len(ids))
		}
		cnt, rej := d.CountMessages([]byte(`{"model":"m",` + tc.messages + `}`))
		if rej != nil || cnt.PromptTokens != len(ids) || cnt.Uncounted != Counted {
			t.Errorf("count_tokens: %+v %v", cnt, rej)
		}
	}
	// What the door does not reproduce goes to vLLM uncounted.
	for _, extra := range []string{
		`"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]`,
		`"thinking":{"type":"enabled","budget_tokens":10},"messages":[{"role":"user","content":"hi"}]`,
		`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]`,
		`"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]`,
		`"system":[{"type":"image"}],"messages":[{"role":"user","content":"hi"}]`,
	} {
		dec, rej := d.Check(Messages, []byte(`{"model":"m","max_tokens":16,`+extra+`}`))
		if rej != nil || dec.Uncounted != NotExact || dec.Detail == "" {
			t.Errorf("%s: %+v %v", extra, dec, rej)
		}
	}
}

func TestMessagesContextAndClamp(t *testing.T) {
	fake := fakeCounter{c: tokenize.Count{Tokens: 90, Exact: true}}
	d := NewDoor(catalog{"m": {Name: "m", Counter: fake, MaxModelLen: 100}, "c": {Name: "c", Counter: fake, MaxModelLen: 100, Clamp: true}})
	_, rej := d.Check(Messages, []byte(`{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"x"}]}`))
	if rej == nil || rej.Reason != ContextLength || rej.Context.PromptTokens != 90 || rej.Context.MaxTokens != 20 {
		t.Fatalf("over the context: %v", rej)
	}
	dec, rej := d.Check(Messages, []byte(`{"model":"c","max_tokens":20,"messages":[{"role":"user","content":"x"}]}`))
	if rej != nil || dec.MaxTokens != 10 || string(dec.Body) != `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"x"}]}` {
		t.Fatalf("clamp: %+v %v", dec, rej)
	}
	// max_tokens is required, as Anthropic requires it.
	if _, rej := d.Check(Messages, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)); rej == nil || rej.Reason != InvalidParam || rej.Param != "max_tokens" {
		t.Fatalf("no max_tokens: %v", rej)
	}
}
