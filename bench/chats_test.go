package main

import (
	"bytes"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/tokenize"
)

// The proxy scenario's chats: about the sizes the report says, each
// request's body its own (no two share a rendered prefix the count cache
// could answer from), and the long one varied text, not a repeated word.
func TestChatSizes(t *testing.T) {
	m, err := tokenize.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size     string
		min, max int
	}{
		{"short", 10, 60},
		{"1k", 950, 1050},
	} {
		t.Run(tc.size, func(t *testing.T) {
			var sz chatSize
			for _, s := range chatSizes() {
				if s.name == tc.size {
					sz = s
				}
			}
			if sz.body == nil {
				t.Fatalf("no size %q", tc.size)
			}
			a, b := sz.body("qwen3", 1), sz.body("qwen3", 2)
			if bytes.Equal(a, b) {
				t.Errorf("requests 1 and 2 have the same body")
			}
			n, err := promptTokens(m, a)
			if err != nil {
				t.Fatal(err)
			}
			if n < tc.min || n > tc.max {
				t.Errorf("%d prompt tokens, want %d..%d", n, tc.min, tc.max)
			}
		})
	}
	words := map[string]bool{}
	for _, w := range bytes.Fields(longChat("qwen3", 1)) {
		words[string(w)] = true
	}
	if len(words) < 300 {
		t.Errorf("the long chat has %d distinct words, want varied text (>= 300)", len(words))
	}
}

func TestLoadTokenizerMissingFixture(t *testing.T) {
	_, err := loadTokenizer("qwen3", t.TempDir())
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("make fixtures")) {
		t.Errorf("err = %v, want one naming make fixtures", err)
	}
}
