package sim

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// TestDetokenizeFixtures: with a fixture model's tokenizer.json, the ids
// /tokenize gives for a text decode back to the text, through real HTTP.
func TestDetokenizeFixtures(t *testing.T) {
	texts := []string{
		"Hello world!",
		"  leading spaces, tabs\tand\nnewlines",
		"Ünïcödé — 日本語のテキスト 🙂 emoji",
		"code: fmt.Println(\"x\") // done",
	}
	for _, model := range []string{"qwen3", "llama2"} { // byte-level; SPM (Replace, ByteFallback, Fuse, Strip)
		t.Run(model, func(t *testing.T) {
			dec, err := LoadVocabDecoder(filepath.Join(fixtures.ModelDir(t, model), "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, Config{Model: model, MaxModelLen: 1 << 20, Tokenizer: ModelTokenizer(fixtureTokenizer(t, model)), Detokenizer: dec})
			for _, text := range texts {
				body := `{"prompt":` + string(marshal(text)) + `,"add_special_tokens":false}`
				code, _, tb := e.post("/tokenize", body)
				if code != 200 {
					t.Fatalf("tokenize %q: %d %s", text, code, tb)
				}
				ids := decode[tokenizeResponse](t, string(tb)).Tokens
				code, _, db := e.post("/detokenize", `{"model":"`+model+`","tokens":`+string(marshal(ids))+`}`)
				if got := decode[detokenizeResponse](t, string(db)).Prompt; code != 200 || got != text {
					t.Errorf("detokenize %v = %d %q, want %q", ids, code, got, text)
				}
			}
			// Special tokens are kept, as tokenizer.decode does by default.
			code, _, tb := e.post("/tokenize", `{"messages":[{"role":"user","content":"hi"}]}`)
			if code != 200 {
				t.Logf("no chat form: %s", tb)
				return
			}
			ids := decode[tokenizeResponse](t, string(tb)).Tokens
			_, _, db := e.post("/detokenize", `{"tokens":`+string(marshal(ids))+`}`)
			if got := decode[detokenizeResponse](t, string(db)).Prompt; !strings.Contains(got, "hi") || !strings.Contains(got, "<") {
				t.Errorf("chat detokenize = %q", got)
			}
		})
	}
}

func TestDetokenizeApproxAndErrors(t *testing.T) {
	e := newEnv(t, Config{APIKey: "k"}) // /detokenize is not under /v1: no key
	code, _, b := e.post("/detokenize", `{"tokens":[2,1234,4,144,3,99999]}`)
	if code != 200 || string(b) != `{"prompt":"<|im_start|><|piece_1234|>\n,<|im_end|>"}` {
		t.Errorf("approx = %d %s", code, b)
	}
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"missing", `{}`, 400,
			`{"error":{"message":"[{'type': 'missing', 'loc': ('body', 'tokens'), 'msg': 'Field required'}]","type":"Bad Request","param":"body.tokens","code":400}}`},
		{"not a list", `{"tokens":"1 2"}`, 400,
			`{"error":{"message":"[{'type': 'list_type', 'loc': ('body', 'tokens'), 'msg': 'Input should be a valid list'}]","type":"Bad Request","param":"body.tokens","code":400}}`},
		{"not ints", `{"tokens":[1,"x"]}`, 400,
			`{"error":{"message":"[{'type': 'int_type', 'loc': ('body', 'tokens', 1), 'msg': 'Input should be a valid integer'}]","type":"Bad Request","param":"body.tokens.1","code":400}}`},
		{"negative", `{"tokens":[1,-5]}`, 400,
			`{"error":{"message":"out of range integral type conversion attempted","type":"BadRequestError","param":null,"code":400}}`},
		{"unknown model", `{"model":"x","tokens":[1]}`, 404,
			"{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.post("/detokenize", tc.body)
			if code != tc.status || string(body) != tc.want {
				t.Errorf("got %d %s\nwant %d %s", code, body, tc.status, tc.want)
			}
		})
	}
	e.sim.Update(func(c *Config) { c.Tokenizer = countOnly{n: 1} })
	if code, _, b := e.post("/detokenize", `{"tokens":[1]}`); code != 501 || !strings.Contains(string(b), `"type":"NotImplementedError"`) {
		t.Errorf("no decoder = %d %s", code, b)
	}
	got := e.sim.Received()
	if len(got) == 0 || got[len(got)-1].Path != "/detokenize" {
		t.Errorf("received = %v", fmt.Sprint(len(got)))
	}
}
