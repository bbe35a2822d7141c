package tokenize

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// TestDecodeRoundTrip: decode(encode(text)) is the text again for every
// corpus line on every fixture model, except where Hugging Face's own
// decode does not round-trip either (listed by cause and counted).
func TestDecodeRoundTrip(t *testing.T) {
	entries := loadTokCorpus(t)
	for _, model := range tokFixtureModels {
		t.Run(model, func(t *testing.T) {
			tok := loadTokFixture(t, model)
			if tok.decoder == nil {
				t.Fatal("no decoder")
			}
			spm := tok.spm != nil
			prepends := model == "llama2" // normalizer Prepend("▁"), per segment
			added := tok.AddedTokens()
			checked, skipped := 0, map[string]int{}
			for i, e := range entries {
				text := e.Text
				switch {
				case tok.bl != nil && tok.normalize.apply(text) != text:
					skipped["normalizer changes the text (Qwen: NFC)"]++
					continue
				case spm && strings.Contains(text, "▁"):
					skipped["literal ▁ decodes to a space"]++
					continue
				case prepends && containsAny(text, added):
					skipped["added token inside text (each segment gets its own ▁)"]++
					continue
				}
				got, unknown, ok := tok.Decode(tok.Encode(text, false))
				if !ok || unknown != 0 {
					t.Fatalf("line %d: ok=%v unknown=%d", i, ok, unknown)
				}
				want := text
				checked++
				if got != want {
					t.Errorf("line %d (%s): decode(encode(%q)) = %q", i, e.Cat, short(text), short(got))
				}
			}
			t.Logf("%s: %d texts round-tripped, skipped %v", model, checked, skipped)
			if checked < len(entries)*8/10 {
				t.Errorf("only %d of %d texts checked", checked, len(entries))
			}
		})
	}
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

func short(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// TestDecodeSpecials: special tokens are kept, ids outside the vocabulary
// are dropped and counted, a BOS from Llama 2's post-processor decodes as
// HF decodes it ("<s> Hello": Strip takes only the fused text's first
// space).
func TestDecodeSpecials(t *testing.T) {
	qwen := loadTokFixture(t, "qwen3")
	start, _ := qwen.TokenID("<|im_start|>")
	ids := append([]int{start}, qwen.Encode("user\nHi", false)...)
	ids = append(ids, 1<<30, -1)
	got, unknown, ok := qwen.Decode(ids)
	if !ok || unknown != 2 || got != "<|im_start|>user\nHi" {
		t.Errorf("qwen3: %q unknown=%d ok=%v", got, unknown, ok)
	}
	m, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "llama2"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err = m.Detokenize(m.Encoder().Encode("Hello world", true))
	if err != nil || got != "<s> Hello world" {
		t.Errorf("llama2: %q, %v", got, err)
	}
	// Bytes split across tokens: an incomplete UTF-8 sequence is one U+FFFD
	// per maximal subpart.
	ids = qwen.Encode("€", false) // three bytes
	if len(ids) >= 2 {
		got, _, _ = qwen.Decode(ids[:1])
		if !strings.Contains(got, "\uFFFD") {
			t.Errorf("partial: %q", got)
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe2\x82", "\uFFFD"},                 // one truncated sequence
		{"\xff\xfe", "\uFFFD\uFFFD"},           // two bad bytes
		{"a\xe2\x82b", "a\uFFFDb"},             // truncated in the middle
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate: ED then two strays
		{"\xf0\x9f\x98", "\uFFFD"},             // truncated 4-byte
		{"\xc0\xaf", "\uFFFD\uFFFD"},           // overlong
	} {
		if got := lossyUTF8([]byte(c.in)); got != c.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestDetokenizeCleanUp: transformers' clean_up_tokenization runs when the
// config says so (Llama 3.1), not otherwise (Qwen 3), and an unset flag
// with a text it would change is not exact.
func TestDetokenizeCleanUp(t *testing.T) {
	for _, c := range []struct {
		model, want string
	}{{"llama3_1", "Hello. Isn't it?"}, {"qwen3", "Hello . Is n't it ?"}} {
		m, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, c.model), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Detokenize(m.Encoder().Encode("Hello . Is n't it ?", false))
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.model, got, err, c.want)
		}
		m.cleanUp = nil
		_, err = m.Detokenize(m.Encoder().Encode("Hello . Is n't it ?", false))
		var ne *NotExactError
		if !errors.As(err, &ne) {
			t.Errorf("%s without the flag: %v, want not exact", c.model, err)
		}
	}
	_ = filepath.Join
}
