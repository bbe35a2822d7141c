package tokenize

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// boundTexts are long pre-tokens built to make the bound as tight as it
// gets: runs of one character (ASCII, CJK, emoji, a combining mark, the
// SentencePiece space), runs of short repeated units, and random strings
// over small and large alphabets.
func boundTexts(rng *rand.Rand) []string {
	var out []string
	for _, unit := range []string{"a", "z", "0", "=", "-", "\n", " ", "é", "中", "😀", "\u0301", "▁", "ab", "abc", "a▁", "<0x41>", "aaaaaaab", "👍🏽"} {
		for _, n := range []int{97, 300, 1000, 4099} {
			out = append(out, strings.Repeat(unit, n/len(unit)+1))
		}
	}
	alphabets := []string{"ab", "aab=", "abcdefghijklmnopqrstuvwxyz", "0123456789", "中文字符测试", "😀🎉👍🏽", "ab▁ ", "aé中😀-\n"}
	for _, alpha := range alphabets {
		runes := []rune(alpha)
		for _, n := range []int{150, 700, 3000} {
			var b strings.Builder
			for b.Len() < n {
				b.WriteRune(runes[rng.IntN(len(runes))])
			}
			out = append(out, b.String())
		}
	}
	for range 20 { // random valid UTF-8 from all planes
		var b strings.Builder
		for b.Len() < 500 {
			r := rune(rng.IntN(0x1FFFF))
			if utf8.ValidRune(r) {
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestPieceBoundNeverExceedsCount: the byte bound of a piece is never more
// than the tokens the model really emits for it, on every fixture
// tokenizer and OpenAI's encodings. A bound above the count would refuse a
// prompt that fits: a false rejection.
func TestPieceBoundNeverExceedsCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 2))
	texts := boundTexts(rng)
	toks := map[string]*Tokenizer{}
	for _, name := range tokFixtureModels {
		toks[name] = loadTokFixture(t, name)
	}
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		tk, err := NewOpenAI(name)
		if err != nil {
			t.Fatal(err)
		}
		toks[name] = tk
	}
	for name, tk := range toks {
		t.Run(name, func(t *testing.T) {
			if tk.pieceBound("ab", math.MaxInt) < 0 {
				t.Fatal("no bound for this tokenizer")
			}
			var sc bpeScratch
			tight := 0.0
			for _, s := range texts {
				var ids []int
				if tk.bl != nil {
					ids = tk.bl.encode(nil, s, &sc)
				} else {
					ids = tk.spm.encode(nil, s, &sc)
				}
				b := tk.pieceBound(s, math.MaxInt)
				if b > len(ids) || b < 1 {
					t.Errorf("%.40q (%d bytes): bound %d, exact %d", s, len(s), b, len(ids))
				}
				tight = max(tight, float64(b)/float64(len(ids)))
			}
			t.Logf("%d pieces, tightest bound/exact %.2f", len(texts), tight)
		})
	}
}

// TestCountAgainstLimitStaysExact: counting against a limit through the
// whole pipeline (added tokens, normalizer, pre-tokenizer, model) gives
// the exact count whenever it is within the limit, and otherwise a lower
// bound above the limit: for limits just below, at and above the exact
// count, texts of long pre-tokens mixed with ordinary words.
func TestCountAgainstLimitStaysExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	long := boundTexts(rng)
	var texts []string
	for i := range 40 {
		a, b := long[rng.IntN(len(long))], long[rng.IntN(len(long))]
		texts = append(texts, fmt.Sprintf("Hello %d, %s world %s end", i, a, b), a+" "+b, a+b)
	}
	for _, name := range tokFixtureModels {
		tk := loadTokFixture(t, name)
		t.Run(name, func(t *testing.T) {
			for _, s := range texts {
				for _, special := range []bool{false, true} {
					exact := len(tk.Encode(s, special))
					for _, limit := range []int{1, exact / 3, exact - 1, exact, exact + 1, 2 * exact} {
						if limit <= 0 {
							continue
						}
						n, ok := tk.Count(s, special, limit)
						switch {
						case ok && n != exact:
							t.Fatalf("%.40q limit %d: exact count %d, want %d", s, limit, n, exact)
						case !ok && (n <= limit || n > exact):
							t.Fatalf("%.40q limit %d: lower bound %d, exact %d", s, limit, n, exact)
						case !ok && exact <= limit:
							t.Fatalf("%.40q limit %d: refused though the exact count %d fits", s, limit, exact)
						}
					}
				}
			}
		})
	}
}
