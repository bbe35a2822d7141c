package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/tokenize"
)

// tinyTokenizerFolder writes a model folder with a byte-level BPE
// tokenizer.json of the 256 byte tokens and merges, followed by tail (JSON
// allows trailing whitespace: the same tokenizer in other bytes).
func tinyTokenizerFolder(t *testing.T, dir string, merges []string, tail string) {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	for i, m := range merges {
		vocab[strings.ReplaceAll(m, " ", "")] = 256 + i
	}
	tj, err := json.Marshal(map[string]any{
		"added_tokens":  []any{},
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	})
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dir, 0o755)
	cfg := `{"chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}`
	for name, data := range map[string]string{"tokenizer.json": string(tj) + tail, "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModelTokenizersShareAndReload: models naming one folder, or folders
// with the same files, get one tokenizer; a byte-different file its own.
// Loaded again (a reload), unchanged folders give the same models, a
// changed file a fresh tokenizer, and what the config no longer names is
// let go.
func TestModelTokenizersShareAndReload(t *testing.T) {
	root := t.TempDir()
	a, b, c := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")
	tinyTokenizerFolder(t, a, []string{"a b"}, "")
	tinyTokenizerFolder(t, b, []string{"a b"}, "")
	tinyTokenizerFolder(t, c, []string{"a b"}, "\n")
	cfgOf := func(dirs ...string) config.Config {
		var cfg config.Config
		for i, d := range dirs {
			cfg.Models = append(cfg.Models, config.ModelConfig{Name: fmt.Sprintf("m%d", i), Tokenizer: d})
		}
		return cfg
	}
	mt := newModelTokenizers()
	load := func(cfg config.Config) map[string]*tokenize.Model {
		t.Helper()
		toks, err := mt.load(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		mt.inForce(toks)
		return toks
	}
	first := load(cfgOf(a, a, b, c, "builtin:demo"))
	if first["m0"] != first["m1"] {
		t.Error("two models naming one folder: two models loaded")
	}
	if first["m0"].Encoder() != first["m2"].Encoder() {
		t.Error("two folders with the same files: two tokenizers")
	}
	if first["m3"].Encoder() == first["m0"].Encoder() {
		t.Error("a byte-different tokenizer.json: shared")
	}
	if st := mt.loader.Stats(); st.Parsed != 2 || st.Tokenizers != 2 {
		t.Errorf("loaded %+v, want two tokenizers parsed", st)
	}

	again := load(cfgOf(a, a, b, c, "builtin:demo"))
	for _, name := range []string{"m0", "m1", "m2", "m3"} {
		if again[name] != first[name] {
			t.Errorf("%s: reloaded unchanged, a new model", name)
		}
	}
	tinyTokenizerFolder(t, c, []string{"b c"}, "")
	changed := load(cfgOf(a, a, b, c))
	if changed["m3"].Encoder() == first["m3"].Encoder() || changed["m0"] != first["m0"] {
		t.Error("c's tokenizer.json changed: want c loaded fresh and the others kept")
	}
	if ids := changed["m3"].Encoder().Encode("bc", false); len(ids) != 1 {
		t.Errorf("the reloaded c encodes bc as %v, want its new merge", ids)
	}
	load(cfgOf(a))
	if st := mt.loader.Stats(); st.Tokenizers != 1 || st.Models != 1 || st.Parsed != 3 {
		t.Errorf("after a config naming only a: %+v", st)
	}
}
