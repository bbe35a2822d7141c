package admission

import (
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/ojson"
)

func ids(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = "7"
	}
	return "[" + strings.Join(s, ",") + "]"
}

// TestPooledDecisions: the pooling endpoints' inputs are counted each on
// its own, reserve no output, and are forwarded uncounted where the door
// cannot count them (truncation, no tokenizer, score pairs).
func TestPooledDecisions(t *testing.T) {
	d := newDoor(t, nil)
	demo := demoModel(t)
	countText := func(s string) int {
		body, _ := ojson.Parse([]byte(`{"prompt":"`+s+`"}`), 64)
		c, err := demo.CountCompletion(body, 0)
		if err != nil {
			t.Fatal(err)
		}
		return c.Tokens
	}
	cases := []struct {
		ep        Endpoint
		body      string
		uncounted Uncounted
		prompts   int
		tokens    int // -1: not checked
	}{
		{Embeddings, `{"model":"demo","input":"hello world"}`, Counted, 1, countText("hello world")},
		{Embeddings, `{"model":"demo","input":["hello","world",[1,2,3]]}`, Counted, 3, countText("hello") + countText("world") + 3},
		{Embeddings, `{"model":"demo","input":` + ids(64) + `}`, Counted, 1, 64}, // P == L fits: nothing is generated
		{Embeddings, `{"model":"demo","input":[` + ids(64) + `,[1]]}`, Counted, 2, 65},
		{Embeddings, `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`, Counted, 1, -1},
		{Embeddings, `{"model":"demo","messages":[[{"role":"user","content":"hi"}],[{"role":"user","content":"yo"}]]}`, Counted, 2, -1},
		{Embeddings, `{"model":"demo","input":` + ids(100) + `,"truncate_prompt_tokens":10}`, Truncating, 1, 0},
		{Embeddings, `{"model":"nocount","input":"x"}`, NoTokenizer, 1, 0},
		{Classify, `{"model":"demo","input":["good","bad"]}`, Counted, 2, countText("good") + countText("bad")},
		{Pooling, `{"model":"demo","input":"x","task":"token_embed"}`, Counted, 1, countText("x")},
		{Score, `{"model":"demo","text_1":"q","text_2":["a","b","c"]}`, NotCounted, 3, 0},
		{Rerank, `{"model":"demo","query":"q","documents":["a","b"]}`, NotCounted, 2, 0},
	}
	for _, tc := range cases {
		dec, rej := d.Check(tc.ep, []byte(tc.body))
		if rej != nil {
			t.Errorf("%s %s: rejected: %v", tc.ep, tc.body, rej)
			continue
		}
		if dec.Uncounted != tc.uncounted || dec.Prompts != tc.prompts || (tc.tokens >= 0 && dec.PromptTokens != tc.tokens) ||
			dec.MaxTokens != 0 || dec.Stream || string(dec.Body) != tc.body {
			t.Errorf("%s %s: decision %s prompts=%d tokens=%d max_tokens=%d (want %s, %d, %d)", tc.ep, tc.body,
				dec.Uncounted, dec.Prompts, dec.PromptTokens, dec.MaxTokens, tc.uncounted, tc.prompts, tc.tokens)
		}
	}
	// The chat form renders without the generation prompt, as vLLM's
	// pooling requests default.
	conv := `[{"role":"user","content":"hi"}]`
	a, _ := d.Check(Embeddings, []byte(`{"model":"demo","messages":`+conv+`}`))
	b, _ := d.Check(Embeddings, []byte(`{"model":"demo","messages":`+conv+`,"add_generation_prompt":true}`))
	if a.PromptTokens == 0 || b.PromptTokens <= a.PromptTokens {
		t.Errorf("chat form counts %d without and %d with the generation prompt", a.PromptTokens, b.PromptTokens)
	}
}

func TestPooledContextRejection(t *testing.T) {
	d := newDoor(t, nil)
	_, rej := d.Check(Embeddings, []byte(`{"model":"demo","input":["ok",`+ids(65)+`]}`))
	if rej == nil || rej.Reason != ContextLength || rej.Status != 400 || rej.Param != "input[1]" || rej.Context == nil ||
		rej.Context.PromptTokens != 65 || !rej.Context.PromptExact || rej.Context.MaxModelLen != 64 || rej.Context.MaxTokens != 0 {
		t.Fatalf("rejection %+v %+v", rej, rej.Context)
	}
	want := "This model's maximum context length is 64 tokens. However, you requested 65 tokens in input[1] of the batch of 2 for embedding generation. Please reduce the length of the input."
	if rej.Message != want {
		t.Errorf("message %q", rej.Message)
	}
	_, rej = d.Check(Classify, []byte(`{"model":"demo","input":"`+strings.Repeat("word ", 100)+`"}`))
	if rej == nil || rej.Reason != ContextLength || rej.Context.PromptExact || rej.Param != "input" ||
		!strings.Contains(rej.Message, "you requested at least 65 tokens in the input for classification.") {
		t.Fatalf("rejection %+v", rej)
	}
}
