package tokenize

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
)

var tokFuzzSeeds = []string{
	"", "Hello, world!", "it's  I'LL we'Re\n\n  x", "  \t\n\r\n  a", "1234567 ١٢٣٤ ½", "中文テキスト 한국어",
	"HELLOWorld CamelCase ǅungla", "e\u0301\u0301 \u0301a", "foo/bar\n/baz//\r\n", "😀👍🏽 ‍ 🏴", "a\u00a0b\u3000c\u2028",
	"<|im_start|>user\n", "x='s'T'Ve'ſ", "\x00\x01\x1c\x7f", "ab  \n  cd   ", " !!!\n\n", "٣٫١٤ ٣٤", "ﬁ ㎏ Ⅻ",
}

// FuzzPretokenize checks every hand-written splitter against regexp2 on the
// pattern it claims to implement.
func FuzzPretokenize(f *testing.F) {
	for _, s := range tokFuzzSeeds {
		f.Add(s)
	}
	type pair struct {
		name         string
		owned, regex splitter
	}
	var pairs []pair
	for name, pats := range map[string][]string{
		"cl100k":   {patCL100K},
		"qwen":     {patQwen},
		"o200k":    {patO200K},
		"deepseek": {patDigits3, patCJK, patDSMain},
	} {
		var own, rx seqSplitter
		for _, p := range pats {
			o, err := splitterFor(p)
			if err != nil {
				f.Fatal(err)
			}
			if _, isRegex := o.(*regexSplitter); isRegex {
				f.Fatalf("%s: no hand-written splitter for %q", name, p)
			}
			r, err := newRegexSplitter(p)
			if err != nil {
				f.Fatal(err)
			}
			own, rx = append(own, o), append(rx, r)
		}
		pairs = append(pairs, pair{name, own, rx})
	}
	collect := func(sp splitter, s string) []string {
		var out []string
		sp.split(s, func(p string) bool { out = append(out, p); return true })
		return out
	}
	f.Fuzz(func(t *testing.T, s string) {
		// regexp2 has no Unicode case folding: (?i:'s) misses "'ſ", which
		// Oniguruma (the reference) and the owned splitters match.
		// Likewise regexp2 uses Go's Unicode 15 tables, the owned splitters
		// the reference's newer data (hasGapRune).
		if !utf8.ValidString(s) || len(s) > 512 || strings.ContainsRune(s, 'ſ') || hasGapRune(s) {
			return
		}
		for _, p := range pairs {
			var got, want []string
			done := make(chan struct{})
			go func() { got, want = collect(p.owned, s), collect(p.regex, s); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s %q: no answer in 5 s", p.name, s)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s %q:\n owned   %q\n regexp2 %q", p.name, s, got, want)
			}
			if strings.Join(got, "") != s {
				t.Fatalf("%s %q: pieces do not cover the text", p.name, s)
			}
		}
	})
}

var (
	fuzzBPEOnce sync.Once
	fuzzCL      *Tokenizer
	fuzzTK      *tiktoken.Tiktoken
)

// FuzzBPE checks the owned pre-tokenizer + BPE against tiktoken-go on
// cl100k_base, the scan BPE against the heap BPE, and the byte bound
// against the exact count.
func FuzzBPE(f *testing.F) {
	for _, s := range tokFuzzSeeds {
		f.Add(s)
	}
	f.Add(strings.Repeat("ab", 100) + strings.Repeat("😀", 40))
	fuzzBPEOnce.Do(func() {
		var err error
		if fuzzCL, err = NewOpenAI("cl100k_base"); err != nil {
			f.Fatal(err)
		}
		fuzzTK = tiktokenEncoding(f, "cl100k_base")
	})
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 2048 || strings.Contains(s, "<|") || hasGapRune(s) {
			return
		}
		// tiktoken-go works on runes: invalid UTF-8 becomes U+FFFD there.
		s = strings.ToValidUTF8(s, "\uFFFD")
		want := fuzzTK.EncodeOrdinary(s)
		got := fuzzCL.Encode(s, false)
		if !slices.Equal(got, want) {
			t.Fatalf("%q:\n owned    %v\n tiktoken %v", s, got, want)
		}
		if n, exact := fuzzCL.Count(s, false, 0); n != len(got) || !exact {
			t.Fatalf("%q: Count %d, Encode %d", s, n, len(got))
		}
		var sc bpeScratch
		if len(s) >= 2 {
			a := fuzzCL.bl.scan(nil, s, &sc)
			b := fuzzCL.bl.heapMerge(nil, s, &sc)
			if !slices.Equal(a, b) {
				t.Fatalf("%q: scan %v heap %v", s, a, b)
			}
			if lb := fuzzCL.pieceBound(s, math.MaxInt); lb > len(b) {
				t.Fatalf("%q: byte bound %d above the exact count %d", s, lb, len(b))
			}
		}
	})
}
