package admission

import (
	"fmt"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// catalog is a hand-written Catalog.
type catalog map[string]Model

func (c catalog) Lookup(name string) (Model, bool) { m, ok := c[name]; return m, ok }
func (c catalog) Names() []string {
	return []string{"demo", "fake", "nocount"}
}

// fakeCounter returns a fixed count or error, to drive the door's handling
// of each tokenize outcome.
type fakeCounter struct {
	c   tokenize.Count
	err error
}

func (f fakeCounter) CountChat(*ojson.Value, int) (tokenize.Count, error)       { return f.c, f.err }
func (f fakeCounter) CountCompletion(*ojson.Value, int) (tokenize.Count, error) { return f.c, f.err }

func demoModel(t testing.TB) *tokenize.Model {
	t.Helper()
	m, err := tokenize.Builtin("demo")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newDoor(t testing.TB, fake Counter) *Door {
	return NewDoor(catalog{
		"demo":    {Name: "demo", Counter: demoModel(t), MaxModelLen: 64},
		"fake":    {Name: "fake", Counter: fake, MaxModelLen: 100},
		"nocount": {Name: "nocount", MaxModelLen: 100},
	})
}

func TestDoorRejections(t *testing.T) {
	d := newDoor(t, fakeCounter{c: tokenize.Count{Tokens: 10, Exact: true}})
	long := strings.Repeat("word ", 200)
	tests := []struct {
		name   string
		ep     Endpoint
		body   string
		reason Reason
		status int
		code   string
		param  string
		msg    string
	}{
		{"not json", Chat, `nope`, InvalidJSON, 400, "invalid_json", "", "not valid JSON"},
		{"array body", Chat, `[]`, InvalidJSON, 400, "invalid_json", "", "must be a JSON object"},
		{"duplicate key", Chat, `{"model":"demo","model":"fake"}`, InvalidJSON, 400, "invalid_json", "model", "duplicate"},
		{"case variant", Chat, `{"model":"demo","MODEL":"fake","messages":[{"role":"user","content":"x"}]}`, InvalidJSON, 400, "invalid_json", "MODEL", `did you mean "model"`},
		{"case variant in message", Chat, `{"model":"demo","messages":[{"Role":"user","role":"user","content":"x"}]}`, InvalidJSON, 400, "invalid_json", "messages[0].Role", `did you mean "role"`},
		{"invalid utf8", Chat, "{\"model\":\"demo\xff\"}", InvalidJSON, 400, "invalid_json", "model", "UTF-8"},
		{"too deep", Chat, `{"model":"demo","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, InvalidJSON, 400, "invalid_json", "*", "nest"},
		{"missing model", Chat, `{"messages":[]}`, MissingModel, 400, "missing_required_parameter", "model", "model"},
		{"model not string", Chat, `{"model":["demo"]}`, MissingModel, 400, "invalid_type", "model", "must be a string"},
		{"unknown model", Chat, `{"model":"gpt-9","messages":[]}`, UnknownModel, 404, "model_not_found", "model", `The model "gpt-9" does not exist. Available models: demo, fake, nocount.`},
		{"no messages", Chat, `{"model":"demo"}`, InvalidMessages, 400, "missing_required_parameter", "messages", "messages"},
		{"messages not array", Chat, `{"model":"demo","messages":"hi"}`, InvalidMessages, 400, "invalid_type", "messages", "array"},
		{"empty messages", Chat, `{"model":"demo","messages":[]}`, InvalidMessages, 400, "invalid_value", "messages", "at least one"},
		{"message not object", Chat, `{"model":"demo","messages":["hi"]}`, InvalidMessages, 400, "invalid_type", "messages[0]", "object"},
		{"role not a string", Chat, `{"model":"demo","messages":[{"role":"user","content":"a"},{"role":7,"content":"b"}]}`, InvalidMessages, 400, "invalid_type", "messages[1].role", "must be a string, got number"},
		{"missing role", Chat, `{"model":"demo","messages":[{"content":"b"}]}`, InvalidMessages, 400, "missing_required_parameter", "messages[0].role", "required"},
		{"content number", Chat, `{"model":"demo","messages":[{"role":"user","content":7}]}`, InvalidMessages, 400, "invalid_type", "messages[0].content", "string"},
		{"user null content", Chat, `{"model":"demo","messages":[{"role":"user","content":null}]}`, InvalidMessages, 400, "missing_required_parameter", "messages[0].content", "required"},
		{"unknown part", Chat, `{"model":"demo","messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, InvalidMessages, 400, "invalid_value", "messages[0].content[0].type", "Supported types"},
		{"part without type", Chat, `{"model":"demo","messages":[{"role":"user","content":[{"text":"x"}]}]}`, InvalidMessages, 400, "missing_required_parameter", "messages[0].content[0].type", "Missing 'type'"},
		{"text part without text", Chat, `{"model":"demo","messages":[{"role":"user","content":[{"type":"text"}]}]}`, InvalidMessages, 400, "invalid_type", "messages[0].content[0].text", "string text"},
		{"tool_call_id not a string", Chat, `{"model":"demo","messages":[{"role":"tool","content":"42","tool_call_id":1}]}`, InvalidMessages, 400, "invalid_type", "messages[0].tool_call_id", "must be a string"},
		{"tool call without function", Chat, `{"model":"demo","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function"}]}]}`, InvalidMessages, 400, "missing_required_parameter", "messages[0].tool_calls[0].function", "function"},
		{"no prompt", Completions, `{"model":"demo"}`, InvalidPrompt, 400, "missing_required_parameter", "prompt", "prompt"},
		{"prompt object", Completions, `{"model":"demo","prompt":{}}`, InvalidPrompt, 400, "invalid_type", "prompt", "array of token ids"},
		{"empty prompt array", Completions, `{"model":"demo","prompt":[]}`, InvalidPrompt, 400, "invalid_value", "prompt", "empty"},
		{"mixed prompt array", Completions, `{"model":"demo","prompt":["a",1]}`, InvalidPrompt, 400, "invalid_type", "prompt[1]", "string"},
		{"negative token id", Completions, `{"model":"demo","prompt":[1,-2]}`, InvalidPrompt, 400, "invalid_value", "prompt[1]", "token id"},
		{"float token id", Completions, `{"model":"demo","prompt":[[1,2.5]]}`, InvalidPrompt, 400, "invalid_value", "prompt[0][1]", "token id"},
		{"max_tokens zero", Chat, `{"model":"demo","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, InvalidParam, 400, "invalid_value", "max_tokens", "at least 1, got 0"},
		{"max_tokens float", Chat, `{"model":"demo","messages":[{"role":"user","content":"x"}],"max_tokens":1.5}`, InvalidParam, 400, "invalid_type", "max_tokens", "integer"},
		{"max_completion_tokens string", Completions, `{"model":"demo","prompt":"x","max_completion_tokens":"9"}`, InvalidParam, 400, "invalid_type", "max_completion_tokens", "integer"},
		{"n zero", Chat, `{"model":"demo","messages":[{"role":"user","content":"x"}],"n":0}`, InvalidParam, 400, "invalid_value", "n", "at least 1"},
		{"stream string", Chat, `{"model":"demo","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, InvalidParam, 400, "invalid_type", "stream", "boolean"},
		{"template raises", Chat, `{"model":"fake","messages":[{"role":"user","content":"x"}]}`, TemplateError, 400, "invalid_chat_template_input", "messages", "Conversation roles must alternate"},
		{"prompt too long", Chat, `{"model":"demo","messages":[{"role":"user","content":"` + long + `"}]}`, ContextLength, 400, "context_length_exceeded", "messages", "This model's maximum context length is 64 tokens. However, your messages resulted in at least"},
		{"prompt plus output too long", Chat, `{"model":"demo","messages":[{"role":"user","content":"hello there"}],"max_tokens":60}`, ContextLength, 400, "context_length_exceeded", "messages", "However, you requested 70 tokens (10 in the messages, 60 in the completion). Please reduce the length of the messages or completion."},
		{"completion prompt too long", Completions, `{"model":"demo","prompt":"` + long + `","max_tokens":4}`, ContextLength, 400, "context_length_exceeded", "prompt", "in the prompt, 4 in the completion"},
		{"token ids too long", Completions, `{"model":"demo","prompt":[` + strings.Repeat("1,", 63) + `1],"max_tokens":1}`, ContextLength, 400, "context_length_exceeded", "prompt", "However, you requested 65 tokens (64 in the prompt, 1 in the completion)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dd := d
			if tt.reason == TemplateError {
				dd = newDoor(t, fakeCounter{err: &tokenize.TemplateError{Message: "Conversation roles must alternate user/assistant/user/assistant/..."}})
			}
			dec, rej := dd.Check(tt.ep, []byte(tt.body))
			if rej == nil {
				t.Fatalf("admitted: %+v", dec)
			}
			if tt.param == "*" {
				tt.param = rej.Param
			}
			if rej.Reason != tt.reason || rej.Status != tt.status || rej.Code != tt.code || rej.Param != tt.param {
				t.Errorf("got %s/%d/%s/%q, want %s/%d/%s/%q", rej.Reason, rej.Status, rej.Code, rej.Param, tt.reason, tt.status, tt.code, tt.param)
			}
			if !strings.Contains(rej.Message, tt.msg) {
				t.Errorf("message %q lacks %q", rej.Message, tt.msg)
			}
		})
	}
}

func TestDoorContextArithmetic(t *testing.T) {
	d := newDoor(t, nil)
	m := demoModel(t)
	body := func(maxTokens string) string {
		return `{"model":"demo","messages":[{"role":"user","content":"hello there"}]` + maxTokens + `}`
	}
	v, _ := ojson.Parse([]byte(body("")), 64)
	c, err := m.CountChat(v, 0)
	if err != nil || !c.Exact {
		t.Fatalf("count: %+v %v", c, err)
	}
	p := c.Tokens
	for _, mt := range []int{1, 64 - p - 1, 64 - p, 64 - p + 1, 64} {
		dec, rej := d.Check(Chat, []byte(body(fmt.Sprintf(`,"max_tokens":%d`, mt))))
		fits := p+mt <= 64
		if fits != (rej == nil) {
			t.Errorf("P=%d M=%d: fits=%v but rej=%v", p, mt, fits, rej)
			continue
		}
		if rej != nil {
			ci := rej.Context
			if ci == nil || ci.PromptTokens != p || !ci.PromptExact || ci.MaxTokens != mt || ci.MaxModelLen != 64 {
				t.Errorf("P=%d M=%d: context info %+v", p, mt, ci)
			}
			continue
		}
		if dec.PromptTokens != p || dec.Uncounted != Counted || dec.MaxTokens != mt {
			t.Errorf("decision %+v", dec)
		}
	}
}

func TestDoorClamp(t *testing.T) {
	d := NewDoor(catalog{"demo": {Name: "demo", Counter: demoModel(t), MaxModelLen: 64, Clamp: true}})
	in := `{"model":"demo", "max_tokens" : 500,"messages":[{"role":"user","content":"hello there"}],"max_completion_tokens":400, "x":1}`
	dec, rej := d.Check(Chat, []byte(in))
	if rej != nil {
		t.Fatal(rej)
	}
	want := 64 - dec.PromptTokens
	exp := fmt.Sprintf(`{"model":"demo", "max_tokens" : %d,"messages":[{"role":"user","content":"hello there"}],"max_completion_tokens":%d, "x":1}`, want, want)
	if string(dec.Body) != exp || dec.ClampedFrom != 400 || dec.MaxTokens != want {
		t.Errorf("clamped body %s (from %d to %d), want %s", dec.Body, dec.ClampedFrom, dec.MaxTokens, exp)
	}
	// A prompt that alone overflows cannot be clamped.
	long := `{"model":"demo","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}]}`
	if _, rej := d.Check(Chat, []byte(long)); rej == nil || rej.Reason != ContextLength {
		t.Errorf("over-long prompt: %v", rej)
	}
}

func TestDoorForwardsWhatItCannotCount(t *testing.T) {
	tests := []struct {
		name      string
		model     Model
		uncounted Uncounted
	}{
		{"no tokenizer", Model{Name: "m", MaxModelLen: 10}, NoTokenizer},
		{"not exact", Model{Name: "m", MaxModelLen: 10, Counter: fakeCounter{c: tokenize.Count{Reason: "multimodal part"}}}, NotExact},
		{"unknown context", Model{Name: "m", Counter: fakeCounter{c: tokenize.Count{Tokens: 5000, Exact: true}}}, NoContextLimit},
		{"counter fails internally", Model{Name: "m", MaxModelLen: 10, Counter: fakeCounter{err: fmt.Errorf("boom")}}, NotExact},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDoor(catalog{"m": tt.model})
			body := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":9}`
			dec, rej := d.Check(Chat, []byte(body))
			if rej != nil {
				t.Fatalf("rejected: %v", rej)
			}
			if dec.Uncounted != tt.uncounted || string(dec.Body) != body {
				t.Errorf("decision %+v", dec)
			}
		})
	}
}

func TestDoorAcceptsValidShapes(t *testing.T) {
	d := newDoor(t, nil)
	for _, body := range []string{
		`{"model":"nocount","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"stream":true,"n":2,"max_completion_tokens":5}`,
		`{"model":"nocount","messages":[{"role":"developer","content":"d"},{"role":"user","content":"u","name":"bob"}],"stream":null,"max_tokens":null}`,
		// pydantic's lax int: a float with no fractional part is that integer
		`{"model":"nocount","messages":[{"role":"user","content":"u"}],"max_tokens":16.0,"n":1e0,"max_completion_tokens":2.00}`,
		// content left out: vLLM's custom message param does not require it
		`{"model":"nocount","messages":[{"role":"system","content":"s"},{"role":"user"}]}`,
		// any role string (vLLM's custom message param): the template decides
		`{"model":"nocount","messages":[{"role":"user","content":"a"},{"role":"ipython","content":"b"},{"role":"document","content":"c"},{"role":"","content":"d"}]}`,
		// tool_call_id is optional on a tool message, and tool_calls on a
		// role other than assistant are ignored by vLLM's parser
		`{"model":"nocount","messages":[{"role":"tool","content":"42"},{"role":"user","content":"x","tool_calls":[]},{"role":"user","content":"y","tool_calls":"junk"}]}`,
	} {
		if _, rej := d.Check(Chat, []byte(body)); rej != nil {
			t.Errorf("%s: %v", body, rej)
		}
	}
	for _, body := range []string{
		`{"model":"nocount","prompt":"x"}`, `{"model":"nocount","prompt":["a","b"]}`,
		`{"model":"nocount","prompt":[1,2,3]}`, `{"model":"nocount","prompt":[[1],[2,3]]}`,
	} {
		if _, rej := d.Check(Completions, []byte(body)); rej != nil {
			t.Errorf("%s: %v", body, rej)
		}
	}
}

// The door with real tokenizers: the count it reports is the model's.
func TestDoorCountsWithFixtureModels(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1"} {
		t.Run(name, func(t *testing.T) {
			m, err := tokenize.LoadDir(fixtures.ModelDir(t, name), tokenize.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d := NewDoor(catalog{"m": {Name: "m", Counter: m, MaxModelLen: 4096}})
			body := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hello, world! 你好"}],"max_tokens":16}`
			dec, rej := d.Check(Chat, []byte(body))
			if rej != nil {
				t.Fatal(rej)
			}
			v, _ := ojson.Parse([]byte(body), 64)
			ids, err := m.TokenizeChat(v)
			if err != nil {
				t.Fatal(err)
			}
			if dec.PromptTokens != len(ids) || dec.Uncounted != Counted {
				t.Errorf("door counted %d (%s), tokenizer %d", dec.PromptTokens, dec.Uncounted, len(ids))
			}
		})
	}
}

func TestReasonLabelsAreStable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		s := r.String()
		if strings.HasPrefix(s, "Reason(") || seen[s] {
			t.Errorf("reason %d has label %q", int(r), s)
		}
		seen[s] = true
	}
}

// A list prompt is a batch: each prompt is checked against the context on
// its own (the first that does not fit is named), the decision carries
// the number of prompts and the sum of their counts, and a clamp fits the
// largest.
func TestDoorBatch(t *testing.T) {
	m := demoModel(t)
	count := func(p string) int {
		c, err := m.CountCompletion(mustParse(t, `{"prompt":"`+p+`"}`), 0)
		if err != nil || !c.Exact {
			t.Fatal(c, err)
		}
		return c.Tokens
	}
	d := NewDoor(catalog{"demo": {Name: "demo", Counter: m, MaxModelLen: 64}})
	words := strings.TrimSpace(strings.Repeat("word ", 40))
	dec, rej := d.Check(Completions, []byte(`{"model":"demo","max_tokens":4,"prompt":["hello there","hi"]}`))
	if rej != nil || dec.Prompts != 2 || dec.PromptTokens != count("hello there")+count("hi") {
		t.Errorf("batch that fits: %+v %v", dec, rej)
	}
	_, rej = d.Check(Completions, []byte(`{"model":"demo","max_tokens":30,"prompt":["hi","`+words+`","`+words+words+`"]}`))
	if rej == nil || rej.Context == nil || rej.Context.Index != 1 || rej.Context.Batch != 3 || rej.Context.PromptTokens != count(words) ||
		!rej.Context.PromptExact || !strings.Contains(rej.Message, "in prompt[1] of the batch of 3, 30 in the completion") {
		t.Errorf("batch with prompt[1] over: %+v %+v", rej, rej.Context)
	}
	if dec, rej := d.Check(Completions, []byte(`{"model":"demo","max_tokens":4,"prompt":[[1,2],[3],[4,5,6]]}`)); rej != nil || dec.Prompts != 3 || dec.PromptTokens != 6 {
		t.Errorf("id batch: %+v %v", dec, rej)
	}
	if dec, rej := d.Check(Completions, []byte(`{"model":"demo","max_tokens":4,"prompt":[1,2,3]}`)); rej != nil || dec.Prompts != 1 || dec.PromptTokens != 3 {
		t.Errorf("one id prompt: %+v %v", dec, rej)
	}
	dc := NewDoor(catalog{"demo": {Name: "demo", Counter: m, MaxModelLen: 64, Clamp: true}})
	dec, rej = dc.Check(Completions, []byte(`{"model":"demo","max_tokens":60,"prompt":["hi","`+words+`"]}`))
	if rej != nil || dec.MaxTokens != 64-count(words) {
		t.Errorf("clamped batch: %+v %v", dec, rej)
	}
}

func mustParse(t *testing.T, s string) *ojson.Value {
	t.Helper()
	v, err := ojson.Parse([]byte(s), ojson.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPlainMessageIsAccepted: the shortcut plainMessage takes only messages
// that checkMessage accepts, and takes the common ones.
func TestPlainMessageIsAccepted(t *testing.T) {
	tests := []struct {
		msg   string
		plain bool
	}{
		{`{"role":"user","content":"hi"}`, true},
		{`{"content":"hi","role":"assistant"}`, true},
		{`{"role":"system","content":""}`, true},
		{`{"role":"tool","content":"x"}`, true},
		{`{"role":"User","content":"x"}`, true},
		{`{"role":"ipython","content":"x"}`, true},
		{`{"role":"user","content":null}`, false},
		{`{"role":"user","content":[{"type":"text","text":"x"}]}`, false},
		{`{"role":"user","Content":"x"}`, false},
		{`{"role":"user","content":"x","name":"n"}`, false},
		{`{"role":1,"content":"x"}`, false},
		{`{"role":"user"}`, false},
		{`["role","content"]`, false},
	}
	for _, tt := range tests {
		v, err := ojson.Parse([]byte(tt.msg), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := plainMessage(v); got != tt.plain {
			t.Errorf("plainMessage(%s) = %v, want %v", tt.msg, got, tt.plain)
		}
		if plainMessage(v) && checkMessage(v, "messages[0]") != nil {
			t.Errorf("plainMessage(%s) but checkMessage rejects it", tt.msg)
		}
	}
}
