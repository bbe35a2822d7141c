package gateway

// Token ids (issue 26, item 7): every endpoint that takes token ids holds
// them to the model's vocabulary before any backend sees them.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestTokenIDsCheckedOnEveryEndpoint sends ids no sequence of the model
// can hold (negative, the vocabulary's size, far past it, past any
// integer) to each endpoint that takes ids, and an Anthropic text block
// without its text: each is a 400 in the endpoint's own envelope naming
// the offending field, and the backend receives nothing. The last id of
// the vocabulary still passes.
func TestTokenIDsCheckedOnEveryEndpoint(t *testing.T) {
	e := startTokenizing(t, "qwen3", 4096)
	vocab := loadTok(t, "qwen3").VocabSize()
	if vocab < 150000 {
		t.Fatalf("qwen3's vocabulary size is %d", vocab)
	}
	bodies := []struct {
		path, param string
		body        func(ids string) string
	}{
		{"/v1/completions", "prompt[0]", func(ids string) string { return `{"model":"m","max_tokens":1,"prompt":` + ids + `}` }},
		{"/v1/completions", "prompt[1][0]", func(ids string) string { return `{"model":"m","max_tokens":1,"prompt":[[1],` + ids + `]}` }},
		{"/v1/completions/render", "prompt[0]", func(ids string) string { return `{"model":"m","max_tokens":1,"prompt":` + ids + `}` }},
		{"/v1/embeddings", "input[0]", func(ids string) string { return `{"model":"m","input":` + ids + `}` }},
		{"/v1/embeddings", "input[1][0]", func(ids string) string { return `{"model":"m","input":["a",` + ids + `]}` }},
		{"/pooling", "input[0]", func(ids string) string { return `{"model":"m","input":` + ids + `}` }},
		{"/classify", "input[0]", func(ids string) string { return `{"model":"m","input":` + ids + `}` }},
		{"/detokenize", "tokens[0]", func(ids string) string { return `{"model":"m","tokens":` + ids + `}` }},
	}
	bad := []string{"-1", strconv.Itoa(vocab), "999999999", "99999999999999999999"}
	for _, b := range bodies {
		for _, id := range bad {
			name := fmt.Sprintf("%s %s %s", b.path, b.param, id)
			res := e.gw.post(t, b.path, b.body("["+id+"]"))
			raw := readBodyT(t, res)
			var env errorEnvelope
			if res.StatusCode != 400 || json.Unmarshal([]byte(raw), &env) != nil || env.Error.Type != "invalid_request_error" {
				t.Errorf("%s: %d %s, want 400 in OpenAI's envelope", name, res.StatusCode, raw)
				continue
			}
			if env.Error.Param != b.param || !strings.Contains(env.Error.Message, id) {
				t.Errorf("%s: param %q, message %q: want param %q and the id named", name, env.Error.Param, env.Error.Message, b.param)
			}
			if id != "-1" && !strings.Contains(env.Error.Message, "is out of vocabulary") {
				t.Errorf("%s: message %q: want vLLM's words (Token id N is out of vocabulary)", name, env.Error.Message)
			}
			if id == strconv.Itoa(vocab) && !strings.Contains(env.Error.Message, strconv.Itoa(vocab-1)) {
				t.Errorf("%s: message %q does not name the last id of the vocabulary, %d", name, env.Error.Message, vocab-1)
			}
		}
	}
	// Anthropic Messages: a text block without its text, in Anthropic's
	// envelope, on both Messages routes.
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		for _, block := range []string{`{"type":"text"}`, `{"type":"text","text":null}`} {
			res := e.gw.post(t, path, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[`+block+`]}]}`)
			raw := readBodyT(t, res)
			var env anthropicEnv
			if res.StatusCode != 400 || json.Unmarshal([]byte(raw), &env) != nil || env.Type != "error" || env.Error.Type != "invalid_request_error" ||
				!strings.Contains(env.Error.Message, "messages[0].content[0].text") {
				t.Errorf("%s %s: %d %s, want 400 in Anthropic's envelope naming messages[0].content[0].text", path, block, res.StatusCode, raw)
			}
		}
	}
	if got := clientRequests(e.sim, func(string) bool { return true }); len(got) != 0 {
		paths := make([]string, len(got))
		for i, r := range got {
			paths[i] = r.Path
		}
		t.Fatalf("the backend received %d requests (%v); every one was refused", len(got), paths)
	}
	// The last id of the vocabulary is an id: forwarded (completions) or
	// answered (detokenize).
	last := "[" + strconv.Itoa(vocab-1) + "]"
	if res := e.gw.post(t, "/v1/completions", `{"model":"m","max_tokens":1,"prompt":`+last+`}`); res.StatusCode != 200 {
		t.Errorf("prompt %s: %d %s", last, res.StatusCode, readBodyT(t, res))
	} else {
		res.Body.Close()
	}
	if res := e.gw.post(t, "/detokenize", `{"model":"m","tokens":`+last+`}`); res.StatusCode != 200 {
		t.Errorf("detokenize %s: %d %s", last, res.StatusCode, readBodyT(t, res))
	} else {
		res.Body.Close()
	}
	if got := clientRequests(e.sim, func(string) bool { return true }); len(got) != 1 || got[0].Path != "/v1/completions" {
		t.Errorf("the backend received %d requests, want the one completion (detokenize answered here)", len(got))
	}
}
