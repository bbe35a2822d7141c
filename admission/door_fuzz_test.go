package admission

import (
	"strings"
	"testing"
)

var seedBodies = []string{
	`{"model":"demo","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"demo","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"max_tokens":5,"stream":true}`,
	`{"model":"demo","prompt":"once upon a time","max_tokens":3}`,
	`{"model":"demo","prompt":[[1,2],[3]],"max_completion_tokens":2,"n":2}`,
	`{"model":"demo","messages":[{"role":"user","content":"` + strings.Repeat("long ", 100) + `"}]}`,
	`{"model":"demo","MODEL":"x"}`,
	`{"model":"demo","messages":[{"role":"wizard"}]}`,
	`{"model":"demo","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`,
	`{"model":"demo","messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}}`,
	`{"model":"demo","messages":[{"role":"assistant","content":"x"}],"continue_final_message":true,"add_generation_prompt":false}`,
	`[1,2]`, `{"model":`, `nope`, `{"model":"nocount","prompt":[1,2,3]}`, `{}`,
	`{"model":"nocount","prompt":["a","b"],"max_tokens":100}`, `{"model":"demo","prompt":"x","max_tokens":9223372036854775808}`,
	`{"model":"demo","prompt":["a","` + strings.Repeat("b ", 70) + `"],"max_tokens":4}`,
	// The pooling endpoints' forms (every body also goes through them).
	`{"model":"demo","input":"hello","encoding_format":"base64"}`,
	`{"model":"demo","input":["a",[1,2],"` + strings.Repeat("b ", 70) + `"]}`,
	`{"model":"demo","input":[[1,2],[3]],"truncate_prompt_tokens":-1}`,
	`{"model":"demo","messages":[[{"role":"user","content":"x"}],[{"role":"user","content":"y"}]]}`,
	`{"model":"demo","input":[{"role":"user","content":"x"}],"add_generation_prompt":true}`,
	`{"model":"nocount","input":"x","dimensions":8}`,
	`{"model":"demo","input":5}`, `{"model":"demo","input":[]}`, `{"model":"demo","Input":"x"}`,
	`{"model":"demo","text_1":"a","text_2":["b","c"]}`, `{"model":"demo","queries":["a"],"documents":["b"]}`,
	`{"model":"demo","data_1":{"content":[]},"data_2":"x"}`,
	`{"model":"demo","query":"a","documents":["b",{"type":"image_url"}],"top_n":1}`, `{"model":"demo","query":[1]}`,
	`{"model":"demo","input":"x","task":"classify","truncate_prompt_tokens":"x"}`,
}

// FuzzDoor runs the whole door on arbitrary bodies: it never panics, and
// every outcome is either a forward decision or a well-formed 4xx.
func FuzzDoor(f *testing.F) {
	for _, s := range seedBodies {
		f.Add(s, true)
		f.Add(s, false)
	}
	d := newDoor(f, nil)
	clampDoor := NewDoor(catalog{"demo": {Name: "demo", Counter: demoModel(f), MaxModelLen: 64, Clamp: true}})
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		ep := Completions
		if chat {
			ep = Chat
		}
		for _, door := range []*Door{d, clampDoor} {
			for _, ep := range []Endpoint{ep, Embeddings, Pooling, Classify, Score, Rerank} {
				checkOne(t, door, ep, body)
			}
		}
	})
}

// checkOne runs one body through one endpoint of the door: a forward
// decision or a well-formed 4xx.
func checkOne(t *testing.T, door *Door, ep Endpoint, body string) {
	t.Helper()
	dec, rej := door.Check(ep, []byte(body))
	if rej != nil {
		if rej.Status < 400 || rej.Status > 499 || rej.Message == "" || rej.Code == "" || strings.HasPrefix(rej.Reason.String(), "Reason(") {
			t.Fatalf("%s: malformed rejection %+v", ep, rej)
		}
		if rej.Reason == ContextLength && rej.Context == nil {
			t.Fatalf("%s: context rejection without numbers: %+v", ep, rej)
		}
		return
	}
	if dec.ClampedFrom == 0 && string(dec.Body) != body {
		t.Fatalf("%s: forwarded body changed without clamping", ep)
	}
	if dec.Model == "" || dec.N < 1 || dec.Prompts < 1 {
		t.Fatalf("%s: decision %+v", ep, dec)
	}
	if !ep.Generates() && (dec.MaxTokens != 0 || dec.Stream) {
		t.Fatalf("%s: a pooling decision asks for output: %+v", ep, dec)
	}
}
