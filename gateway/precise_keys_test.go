package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/prefixindex"
)

// loraCatalog is the door's catalog of a model and one LoRA adapter on
// it, as the gateway's resolves them.
type loraCatalog struct{ m admission.Model }

func (c loraCatalog) Lookup(name string) (admission.Model, bool) {
	switch name {
	case c.m.Name:
		return c.m, true
	case "adapter-a":
		am := c.m
		am.Name, am.Only = name, []string{"b0"}
		return am, true
	}
	return admission.Model{}, false
}
func (c loraCatalog) Names() []string { return []string{c.m.Name} }

// TestPreciseTicketKeysFromCount: through the door of a precise model
// (its counter through the count cache), a chat's ticket carries the keys
// of its whole render tokenized at once (prefixindex.AppendKeys of
// AppendEncode), taken from the count without tokenizing the render
// again (the query's ids buffer unused): conversations growing past the
// cache's threshold, for the base model and a LoRA adapter (its own
// chain), with add_special_tokens either way; a salted chat gets none.
func TestPreciseTicketKeysFromCount(t *testing.T) {
	tok := loadTok(t, "qwen3")
	rt, cc := preciseRuntime(t, tok, 8<<20)
	door := admission.NewDoor(loraCatalog{admission.Model{Name: "m", Counter: newCachedCounter(rt, cc), MaxModelLen: 1 << 16, Ref: rt}})
	docs := fixtures.BenchDocs(t)
	enc := tok.Encoder()
	k := 0
	for _, tc := range []struct{ model, extra string }{
		{"m", ""}, {"adapter-a", ""}, {"m", `,"add_special_tokens":true`}, {"m", `,"add_special_tokens":false`},
	} {
		var msgs []string
		for turn := range 12 {
			msgs = append(msgs, fixtures.Message(docs, &k, 2500))
			body := strings.Replace(fixtures.Conversation(msgs, `,"max_tokens":4`+tc.extra), `"model":"m"`, `"model":"`+tc.model+`"`, 1)
			what := fmt.Sprintf("%s%s turn %d", tc.model, tc.extra, turn)
			dec, rej := door.Check(admission.Chat, []byte(body))
			if rej != nil {
				t.Fatalf("%s: %v", what, rej)
			}
			if dec.PromptKeys == nil {
				t.Fatalf("%s: the count computed no keys", what)
			}
			rendered := dec.Rendered
			var tk admission.Ticket
			q := preciseTicket(rt, admission.Chat, dec, &tk)
			if q == nil {
				t.Fatalf("%s: no prefix matcher", what)
			}
			if len(q.IDs) != 0 {
				t.Fatalf("%s: the render was tokenized again (%d ids)", what, len(q.IDs))
			}
			lora := ""
			if tc.model != "m" {
				lora = tc.model
			}
			ids := enc.AppendEncode(nil, rendered, tc.extra == `,"add_special_tokens":true`)
			want := prefixindex.AppendKeys(nil, lora, ids, rt.fm.Index().BlockSize())
			if tk.PromptTokens != len(ids) || fmt.Sprint(q.Keys) != fmt.Sprint(want) {
				t.Fatalf("%s: %d keys (%d tokens), the full tokenization gives %d (%d tokens)", what, len(q.Keys), tk.PromptTokens, len(want), len(ids))
			}
			releaseQuery(q)
		}
	}
	if st := cc.Stats(); st.Hits == 0 {
		t.Errorf("the count cache was not used: %+v", st)
	}
	salted := fixtures.Conversation([]string{"hello"}, `,"max_tokens":4,"cache_salt":"s"`)
	if dec, rej := door.Check(admission.Chat, []byte(salted)); rej != nil || dec.PromptKeys != nil {
		t.Fatalf("a salted chat: keys %v, rejection %v", dec.PromptKeys, rej)
	}
}
