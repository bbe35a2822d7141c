package tokenize

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// TestVocabSize: the vocabulary size is the tokenizer's length (its
// largest id, added tokens included, plus one), or the model's
// config.json vocab_size when that is larger (Qwen3 pads its embedding
// table), as vLLM bounds prompt ids by the larger of the two. A
// config.json this package cannot read leaves the tokenizer's.
func TestVocabSize(t *testing.T) {
	src := fixtures.ModelDir(t, "qwen3")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func(config string) int {
		t.Helper()
		os.Remove(filepath.Join(dir, "config.json"))
		if config != "" {
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m, err := fixtureLoader.LoadDir(dir, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return m.VocabSize()
	}
	tok := loadTokFixture(t, "qwen3")
	largest := 0
	for _, a := range tok.AddedTokens() {
		id, _ := tok.TokenID(a)
		largest = max(largest, id)
	}
	if tok.Size() != largest+1 || tok.Size() != 151669 {
		t.Fatalf("qwen3 tokenizer size %d, largest added id %d", tok.Size(), largest)
	}
	for _, c := range []struct {
		config string
		want   int
	}{
		{"", 151669},
		{`{"vocab_size": 151936}`, 151936},
		{`{"text_config": {"vocab_size": 152064}}`, 152064},
		{`{"vocab_size": 1000}`, 151669}, // smaller than the tokenizer: the tokenizer's
		{`{"vocab_size": NaN}`, 151669},
	} {
		if got := load(c.config); got != c.want {
			t.Errorf("config.json %q: VocabSize %d, want %d", c.config, got, c.want)
		}
	}
}
