package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// Differential tests: the gateway's render and pooling-input parsing
// (gateway/render.go, admission/pooled.go) against the simulator's, which
// is written from vLLM's behaviour and shares no code with them (sim
// imports neither package: TestSimulatorImportsNoGatewayLogic). Over a
// table and a fuzz seed corpus of inputs they must agree on what they
// accept and refuse, and on the result. The gateway may forward what it
// cannot reproduce (vLLM then judges it); it must never refuse what the
// simulator accepts.

// renderDiffCases are render requests: the gateway either answers them
// itself (then byte for byte the simulator's answer, request_id aside),
// refuses them (then the simulator refuses them too), or forwards them.
var renderDiffCases = []struct{ path, body, disputed string }{
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"x < y & z"}],"temperature":1e-06,"top_p":0.3,"top_k":5,"min_p":0.2}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"temperature":2,"top_k":-1,"seed":-3,"repetition_penalty":1e16}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"repetition_penalty":2500000,"temperature":0.0001}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"stop":[],"stop_token_ids":[],"ignore_eos":false,"min_tokens":0}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"stop":["é","<|im_end|>"],"stop_token_ids":[7],"ignore_eos":true,"min_tokens":2,"max_tokens":9}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":16,"max_tokens":3}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"continuous_usage_stats":true}}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":false,"stream_options":{}}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"cache_salt":"","priority":1}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"stop":"END"}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"temperature":0,"n":2}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":5000}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"n":0}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user"}]}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user"}]}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":"Hi"}`, ""},
	{"/v1/chat/completions/render", `{"model":"other","messages":[{"role":"user","content":"Hi"}]}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"Once upon a time"}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":["a","b c","ü"],"max_tokens":4,"presence_penalty":-2,"frequency_penalty":0.25}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":[[1,2,3],[4]],"add_special_tokens":false}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":[9,8,7],"stream":true}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":[9.0,8,7e0],"max_tokens":4.0,"n":1.0}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":[9,8.5]}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":16.0,"top_k":5.0,"seed":3e0}`, ""},
	{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":16.5}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"x","max_tokens":null,"seed":12345678901}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"","add_special_tokens":false}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":[]}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":5}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"x","max_tokens":4090}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"x","min_tokens":20}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"x","temperature":-1}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"x","use_beam_search":true}`, ""},
	{"/v1/completions/render", `{"model":"m","prompt":"x","max_tokens":"7"}`, ""},
}

type renderDiff struct {
	t     *testing.T
	e     tokE2E
	local int // answered by the gateway itself
	refused,
	forwarded int
}

// check posts one render request to the gateway and to the simulator and
// compares the outcomes.
func (d *renderDiff) check(path, body, disputed string) {
	t := d.t
	before := gatewayForwarded(d.e.e2e)
	gst, gb := postJSONTo(t, d.e.gw.URL, path, body)
	forwarded := gatewayForwarded(d.e.e2e) > before
	sst, sb := postJSONTo(t, d.e.simURL, path, body)
	g, s := requestIDField.ReplaceAllString(gb, `"request_id":"X"`), requestIDField.ReplaceAllString(sb, `"request_id":"X"`)
	switch {
	case forwarded:
		d.forwarded++ // vLLM (here the simulator) judged it
	case disputed != "":
		// A known disagreement, asserted so that it is revisited when
		// either side changes.
		if gst < 400 || sst != 200 {
			t.Errorf("%s %s: disputed (%s), but the gateway answers %d and the simulator %d", path, body, disputed, gst, sst)
		}
	case gst >= 400 && gst < 500:
		d.refused++
		if sst < 400 {
			t.Errorf("%s %s: the gateway refuses (%d %s) what the simulator renders (%d %s)", path, body, gst, gb, sst, sb)
		}
	case gst == 200:
		d.local++
		if sst != 200 || g != s {
			t.Errorf("%s %s:\ngateway %d %s\nsim     %d %s", path, body, gst, g, sst, s)
		}
	default:
		t.Errorf("%s %s: gateway answered %d %s", path, body, gst, gb)
	}
}

// TestRenderDifferential: over renderDiffCases, every request the gateway
// renders itself is answered byte for byte as the simulator answers it,
// and every request it refuses the simulator refuses too.
func TestRenderDifferential(t *testing.T) {
	d := &renderDiff{t: t, e: startTokenizing(t, "qwen3", 4096)}
	for _, c := range renderDiffCases {
		d.check(c.path, c.body, c.disputed)
	}
	t.Logf("%d rendered locally and equal, %d refused by both, %d forwarded", d.local, d.refused, d.forwarded)
	if d.local < 12 || d.refused < 6 {
		t.Errorf("%d local, %d refused: the table no longer exercises both sides", d.local, d.refused)
	}
}

// FuzzRenderDifferential runs the comparison on arbitrary bodies: the
// gateway never refuses what the simulator renders, and what it renders
// itself equals the simulator's. Its seed corpus is every fourth
// undisputed case of the table (each input starts its own gateway and
// simulator; TestRenderDifferential runs the whole table on one pair).
func FuzzRenderDifferential(f *testing.F) {
	for i, c := range renderDiffCases {
		if i%4 == 0 && c.disputed == "" {
			f.Add(strings.HasPrefix(c.path, "/v1/chat"), c.body)
		}
	}
	f.Fuzz(func(t *testing.T, chat bool, body string) {
		d := &renderDiff{t: t, e: startTokenizing(t, "qwen3", 4096)}
		path := "/v1/completions/render"
		if chat {
			path = "/v1/chat/completions/render"
		}
		d.check(path, body, "")
	})
}

// poolDiffCases are pooling requests for the door and the simulator.
var poolDiffCases = []struct {
	ep   admission.Endpoint
	path string
	body string
	// lenient names why the door forwards a request vLLM refuses (the
	// door need not judge everything; it must not refuse what vLLM takes).
	lenient string
	// disputed names a known disagreement where the door refuses what
	// the simulator accepts, asserted so it is revisited when either side
	// changes.
	disputed string
}{
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"hello world"}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":["hello","wide world ü"]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[1,2,3]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[[1,2],[3]]}`, "", ""},
	// pydantic's lax int takes 1.0 as the id 1: so does the door
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[1.0,2]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[1.5,2]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a b","add_special_tokens":false}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a","encoding_format":"base64"}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":[[{"role":"user","content":"hi"}],[{"role":"system","content":"s"},{"role":"user","content":"a b"}]]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[{"role":"user","content":"hi"}]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[[{"role":"user","content":"x"}],[{"role":"user","content":"y"}]]}`, "", ""},
	{admission.Classify, "/classify", `{"model":"m","input":["good","bad"]}`, "", ""},
	{admission.Pooling, "/pooling", `{"model":"m","input":"x","task":"embed"}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m"}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":5}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[[]]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[1,"x"]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[[1],{"a":1}]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":true}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":"hi"}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":[{"content":"x"}]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":[[{"role":"user","content":"x"}],[]]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":[[{"role":"user","content":"x"}],"y"]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a","truncate_prompt_tokens":-2}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a","truncate_prompt_tokens":"3"}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a","add_special_tokens":"yes"}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a","dimensions":1.5}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a","encoding_format":5}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":"a","encoding_format":"bytes"}`,
		"encoding_format's values are vLLM's to judge (newer versions add binary ones)", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":["a",[1,2]]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","messages":[[{"role":"user","content":"x"}],[{"content":"y"}]]}`, "", ""},
	{admission.Embeddings, "/v1/embeddings", `{"model":"m","input":[[{"role":"user","content":"x"}],"y"]}`, "", ""},
	{admission.Rerank, "/rerank", `{"model":"m","query":"q","documents":["a","b"]}`, "", ""},
	{admission.Rerank, "/rerank", `{"model":"m","query":"q","documents":["a"],"top_n":"2"}`, "", ""},
	{admission.Score, "/score", `{"model":"m","text_1":"q","text_2":["a","b"]}`, "", ""},
}

// poolAnswer is the part of a pooling answer compared.
type poolAnswer struct {
	Data  []json.RawMessage `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

// poolDiff compares the door's decision on a pooling body with the
// simulator's answer.
type poolDiff struct {
	door    *admission.Door
	simURL  string
	counted int
	refused int
}

// check returns whether the door refused the body, whether the simulator
// did, and reports any disagreement on the result.
func (d *poolDiff) check(t *testing.T, ep admission.Endpoint, path, body string) (doorRefused, simRefused bool) {
	dec, rej := d.door.Check(ep, []byte(body))
	st, sb := postJSONTo(t, d.simURL, path, body)
	simRefused = st >= 400 && st < 500
	if st != 200 && !simRefused {
		t.Errorf("%s %s: the simulator answered %d %s", path, body, st, sb)
	}
	if rej != nil {
		d.refused++
		return true, simRefused
	}
	if simRefused || dec.Uncounted != admission.Counted || ep == admission.Score || ep == admission.Rerank {
		return false, simRefused
	}
	var a poolAnswer
	if err := json.Unmarshal([]byte(sb), &a); err != nil {
		t.Fatalf("%s: %v in %s", body, err, sb)
	}
	d.counted++
	if a.Usage.PromptTokens != dec.PromptTokens || len(a.Data) != dec.Prompts {
		t.Errorf("%s %s: the door counts %d tokens in %d prompts, the simulator %d in %d",
			path, body, dec.PromptTokens, dec.Prompts, a.Usage.PromptTokens, len(a.Data))
	}
	return false, false
}

type oneModel struct{ m admission.Model }

func (c oneModel) Lookup(name string) (admission.Model, bool) { return c.m, name == c.m.Name }
func (c oneModel) Names() []string                            { return []string{c.m.Name} }

func startPoolDiff(t *testing.T, tok *tokenize.Model) *poolDiff {
	const maxLen = 4096
	s := sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, EmbeddingDim: 4, Tokenizer: sim.ModelTokenizer(tok)},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	door := admission.NewDoor(oneModel{admission.Model{Name: "m", Counter: tok, MaxModelLen: maxLen, Vocab: tok.VocabSize()}})
	return &poolDiff{door: door, simURL: srv.URL}
}

// TestPoolingDifferential: over poolDiffCases, the door and the simulator
// refuse the same bodies (but for the ones the door forwards for vLLM to
// judge, each with its reason), and where the door counts exactly its
// count of tokens and prompts is the simulator's usage.
func TestPoolingDifferential(t *testing.T) {
	d := startPoolDiff(t, loadTok(t, "llama3_1"))
	for _, c := range poolDiffCases {
		doorRefused, simRefused := d.check(t, c.ep, c.path, c.body)
		switch {
		case c.disputed != "":
			if !doorRefused || simRefused {
				t.Errorf("%s %s: disputed (%s), but door refused=%v, simulator refused=%v", c.path, c.body, c.disputed, doorRefused, simRefused)
			}
		case doorRefused && !simRefused:
			t.Errorf("%s %s: the door refuses what the simulator (vLLM) accepts", c.path, c.body)
		case !doorRefused && simRefused && c.lenient == "":
			t.Errorf("%s %s: the simulator refuses what the door accepts (add a lenient reason if the door forwards it on purpose)", c.path, c.body)
		case c.lenient != "" && (doorRefused || !simRefused):
			t.Errorf("%s %s: marked lenient, but door refused=%v, simulator refused=%v", c.path, c.body, doorRefused, simRefused)
		}
	}
	t.Logf("%d counted and equal, %d refused by both", d.counted, d.refused)
	if d.counted < 10 || d.refused < 10 {
		t.Errorf("%d counted, %d refused: the table no longer exercises both sides", d.counted, d.refused)
	}
}

// FuzzPoolingDifferential: on arbitrary bodies (the table is the seed
// corpus) the door never refuses what the simulator accepts, and counts
// what it counts as the simulator does.
func FuzzPoolingDifferential(f *testing.F) {
	eps := []struct {
		ep   admission.Endpoint
		path string
	}{{admission.Embeddings, "/v1/embeddings"}, {admission.Classify, "/classify"}, {admission.Pooling, "/pooling"},
		{admission.Rerank, "/rerank"}, {admission.Score, "/score"}}
	for _, c := range poolDiffCases {
		for i, e := range eps {
			if e.ep == c.ep && c.disputed == "" {
				f.Add(uint8(i), c.body)
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		d := startPoolDiff(t, loadTok(t, "llama3_1"))
		e := eps[int(which)%len(eps)]
		if doorRefused, simRefused := d.check(t, e.ep, e.path, body); doorRefused && !simRefused {
			t.Errorf("%s %s: the door refuses what the simulator (vLLM) accepts", e.path, body)
		}
	})
}
