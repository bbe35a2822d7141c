package gateway

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/tokenize"
)

// TestPrefixAffinityRendersOncePerRequest: with prefix affinity on, a chat
// request (and a Messages request, hashed as its chat conversation) has
// its chat template rendered once, by the door; the affinity hash reuses
// that render.
func TestPrefixAffinityRendersOncePerRequest(t *testing.T) {
	tok, err := tokenize.Builtin("demo") // this test's own: its renders are this gateway's alone
	if err != nil {
		t.Fatal(err)
	}
	_, urls := startSims(t, 2, loadTok(t, "demo"))
	tg := startGatewayToks(t, tok, func(c *config.Config) { c.Models[0].PrefixAffinityTokens = 32 }, urls...)
	before := tok.ChatRenders() // warm-up's tokenizer probe rendered too
	const n = 10
	for i := range n {
		path, body := "/v1/chat/completions", fmt.Sprintf(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"Question %d?"}]}`, i)
		if i%2 == 1 {
			path = "/v1/messages"
		}
		res := tg.post(t, path, body)
		if b := readBodyT(t, res); res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, res.StatusCode, b)
		}
	}
	if got := tok.ChatRenders() - before; got != n {
		t.Fatalf("%d chat template renders for %d requests, want one each", got, n)
	}
	if d := tg.live().byName["m"].pool.Stats().Decisions; d["affinity"] == 0 {
		t.Fatalf("no request was placed by affinity: %v", d)
	}
}

// TestPrefixHashOfTheDoorsRender: the hash taken from the door's render
// is the hash of the prompt rendered afresh, so routing is unchanged.
func TestPrefixHashOfTheDoorsRender(t *testing.T) {
	tok := loadTok(t, "demo")
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", MaxModelLen: 4096, Backends: []config.BackendConfig{{URL: "http://127.0.0.1:1"}}}}
	fl, err := fleet.New(cfg.Fleet(), http.DefaultClient, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fm, _ := fl.Model("m")
	rt := &modelRuntime{name: "m", tok: tok, affinity: 32, fm: fm}
	door := admission.NewDoor(&catalog{byName: map[string]*modelRuntime{"m": rt}, names: []string{"m"}})
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"Hello!"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"Be brief, cite the policy section and never reveal account data."},{"role":"user","content":"Question 1?"},{"role":"assistant","content":"Answer."},{"role":"user","content":"Question 2?"}]}`,
	} {
		dec, rej := door.Check(admission.Chat, []byte(body))
		if rej != nil {
			t.Fatal(rej)
		}
		text, err := tok.RenderChat(dec.Request)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := prefixHash(rt, admission.Chat, dec), hashPrefix(tok, text, rt.affinity); got != want || got == 0 {
			t.Errorf("hash of the door's render %x, of a fresh render %x", got, want)
		}
	}
}
