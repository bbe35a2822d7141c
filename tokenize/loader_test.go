package tokenize

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/ojson"
)

const loaderTemplate = `{%- for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}`

// loaderFolder writes a model folder under parent: a small byte-level BPE
// tokenizer.json (merges, plus tail appended to its bytes) and a
// tokenizer_config.json with config (its chat template, unless config
// sets one).
func loaderFolder(t *testing.T, parent, name string, merges [][2]string, tail, config string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	added := []tjAdded{{ID: 400, Content: "<s>", Special: true}}
	tj := append(byteLevelJSON(t, merges, nil, added, nil), tail...)
	if config == "" {
		config = `{"chat_template": ` + jsonString(loaderTemplate) + `}`
	}
	for file, data := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": []byte(config)} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// chatIDs is the model's token ids for a one-message chat.
func chatIDs(t *testing.T, m *Model, content string) []int {
	t.Helper()
	req, err := ojson.Parse([]byte(`{"messages":[{"role":"user","content":`+jsonString(content)+`}]}`), ojson.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := m.TokenizeChat(req)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

var abMerges = [][2]string{{"a", "b"}}

// TestLoaderSharesByContent: folders with identical tokenizer.json bytes
// share one *Tokenizer, and identical chat templates one *Template,
// whatever the folder; different bytes (a trailing space), or a
// tokenizer_config.json that rebuilds the post-processor, do not; the same
// folder loaded twice is one *Model. Each model counts as LoadDir's.
func TestLoaderSharesByContent(t *testing.T) {
	parent := t.TempDir()
	a := loaderFolder(t, parent, "a", abMerges, "", "")
	b := loaderFolder(t, parent, "b", abMerges, "", "")
	spaced := loaderFolder(t, parent, "spaced", abMerges, " ", "")
	other := loaderFolder(t, parent, "other", abMerges, "", `{"chat_template": "{{ messages[0]['content'] }}"}`)
	llama := loaderFolder(t, parent, "llama", abMerges, "", `{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "chat_template": `+jsonString(loaderTemplate)+`}`)

	l := NewLoader()
	p := l.Pass()
	load := func(dir string) *Model {
		t.Helper()
		m, err := p.LoadDir(dir, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, err := LoadDir(dir, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{"abab cab", "x"} {
			if got, want := chatIDs(t, m, text), chatIDs(t, want, text); !slices.Equal(got, want) {
				t.Fatalf("%s: %q -> %v, LoadDir's %v", dir, text, got, want)
			}
		}
		return m
	}
	ma, mb, ms, mo, ml := load(a), load(b), load(spaced), load(other), load(llama)
	if again := load(a); again != ma {
		t.Error("the same folder loaded twice: two models")
	}
	if ma == mb || ma.Name != "a" || mb.Name != "b" {
		t.Errorf("folders a and b: one model, or misnamed (%q, %q)", ma.Name, mb.Name)
	}
	if ma.Encoder() != mb.Encoder() || ma.ChatTemplate() != mb.ChatTemplate() {
		t.Error("identical files: the tokenizer or the template not shared")
	}
	if ms.Encoder() == ma.Encoder() {
		t.Error("tokenizer.json with a trailing space: shared with the original")
	}
	if ms.ChatTemplate() != ma.ChatTemplate() {
		t.Error("the same template in another folder: not shared")
	}
	if mo.Encoder() != ma.Encoder() || mo.ChatTemplate() == ma.ChatTemplate() {
		t.Error("same tokenizer.json, another template: want the tokenizer shared, the template not")
	}
	if ml.Encoder() == ma.Encoder() {
		t.Error("a config that adds <s>: shares the tokenizer that does not")
	}
	raw, err := l.LoadTokenizerJSON(filepath.Join(llama, "tokenizer.json"))
	if err != nil || raw != ma.Encoder() {
		t.Errorf("llama's tokenizer.json as parsed: %v, want a's tokenizer (the same bytes)", err)
	}
	// Two parses: the rebuilt tokenizer (llama's) derives from a's.
	if got, want := l.Stats(), (LoaderStats{Models: 5, Tokenizers: 3, Templates: 2, Parsed: 2}); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	// Keeping the rebuilt one keeps what it derives from: a model of the
	// same tokenizer.json with another template parses nothing.
	l.Keep(slices.Values([]*Model{ml}))
	if st := l.Stats(); st.Tokenizers != 2 || st.Models != 1 {
		t.Errorf("after keeping llama's model: %+v", st)
	}
	if m, err := l.LoadDir(other, LoadOptions{}); err != nil || m.Encoder() != ma.Encoder() || l.Stats().Parsed != 2 {
		t.Errorf("other after the keep: %v, %+v", err, l.Stats())
	}
}

// TestLoaderReload: a pass over unchanged files gives the same models
// and parses nothing; a changed tokenizer.json loads fresh, its folder's
// neighbours keep theirs; Keep drops what the models in force no longer
// use.
func TestLoaderReload(t *testing.T) {
	parent := t.TempDir()
	a := loaderFolder(t, parent, "a", abMerges, "", "")
	b := loaderFolder(t, parent, "b", [][2]string{{"c", "d"}}, "", "")
	l := NewLoader()
	pass := func() map[string]*Model {
		t.Helper()
		p := l.Pass()
		out := map[string]*Model{}
		for _, dir := range []string{a, b} {
			m, err := p.LoadDir(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(dir)] = m
		}
		l.Keep(maps.Values(out))
		return out
	}
	first := pass()
	second := pass()
	if first["a"] != second["a"] || first["b"] != second["b"] || l.Stats().Parsed != 2 {
		t.Fatalf("unchanged files: models %v then %v, %d parsed", first, second, l.Stats().Parsed)
	}

	loaderFolder(t, parent, "a", [][2]string{{"b", "c"}}, "", "") // a's tokenizer.json changes
	third := pass()
	if third["a"] == first["a"] || third["a"].Encoder() == first["a"].Encoder() {
		t.Fatal("a changed tokenizer.json: the old tokenizer kept")
	}
	if third["b"] != first["b"] {
		t.Error("b unchanged: loaded again")
	}
	if got := third["a"].Encoder().Encode("abc", false); !slices.Equal(got, []int{'a', 256}) {
		t.Errorf("the reloaded a encodes abc as %v, want the new merge b+c", got)
	}
	if st := l.Stats(); st.Parsed != 3 || st.Tokenizers != 2 || st.Models != 2 || st.Templates != 1 {
		t.Errorf("after the change: %+v, want the old tokenizer and model dropped", st)
	}

	l.Keep(maps.Values(map[string]*Model{"b": third["b"]})) // a leaves the config
	if st := l.Stats(); st.Tokenizers != 1 || st.Models != 1 || st.Templates != 1 {
		t.Errorf("after a left: %+v, want b's alone", st)
	}
	l.Keep(maps.Values(map[string]*Model{}))
	if st := l.Stats(); st.Tokenizers != 0 || st.Models != 0 || st.Templates != 0 {
		t.Errorf("after every model left: %+v", st)
	}
}

// TestLoaderConcurrent: loads of one folder at once, in one pass and in
// several, give one model and parse its tokenizer once.
func TestLoaderConcurrent(t *testing.T) {
	a := loaderFolder(t, t.TempDir(), "a", abMerges, "", "")
	l := NewLoader()
	shared := l.Pass()
	models := make([]*Model, 16)
	var wg sync.WaitGroup
	for i := range models {
		wg.Go(func() {
			p := shared
			if i%2 == 1 {
				p = l.Pass()
			}
			m, err := p.LoadDir(a, LoadOptions{})
			if err != nil {
				t.Error(err)
			}
			models[i] = m
		})
	}
	wg.Wait()
	for _, m := range models[1:] {
		if m != models[0] {
			t.Fatal("concurrent loads of one folder: more than one model")
		}
	}
	if n := l.Stats().Parsed; n != 1 {
		t.Errorf("tokenizer parsed %d times", n)
	}
}

// TestLoaderErrors: a folder that does not load fails as LoadDir fails
// (the same message), and no failed parse or model is kept; a load with
// Now is its own model.
func TestLoaderErrors(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "missing")
	os.Mkdir(missing, 0o755)
	broken := loaderFolder(t, parent, "broken", abMerges, "", `{"tokenizer_class": "LlamaTokenizer", "bos_token": "<nope>"}`)
	malformed := loaderFolder(t, parent, "malformed", abMerges, "", "")
	os.WriteFile(filepath.Join(malformed, "tokenizer.json"), []byte(`{"model": `), 0o644)
	l := NewLoader()
	for _, dir := range []string{missing, broken, malformed} {
		_, err := l.LoadDir(dir, LoadOptions{})
		_, want := LoadDir(dir, LoadOptions{})
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("%s: %v, LoadDir: %v", dir, err, want)
		}
	}
	// broken's tokenizer.json parsed: held until the next Keep.
	if st := l.Stats(); st.Tokenizers != 1 || st.Models != 0 {
		t.Errorf("failed loads kept: %+v", st)
	}
	l.Keep(slices.Values([]*Model{}))
	if st := l.Stats(); st.Tokenizers != 0 {
		t.Errorf("after Keep: %+v", st)
	}
	a := loaderFolder(t, parent, "a", abMerges, "", "")
	m1, err1 := l.LoadDir(a, LoadOptions{})
	m2, err2 := l.LoadDir(a, LoadOptions{Now: func() time.Time { return time.Unix(0, 0) }})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if m1 == m2 || m1.Encoder() != m2.Encoder() {
		t.Error("a load with its own clock: want its own model, the tokenizer shared")
	}
}
