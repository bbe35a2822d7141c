package tokenize

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// tiktoken-go is the oracle for the byte-level path: same ranks, its own
// regexp2 pre-tokenizer and (quadratic) BPE. Texts above maxOracleLen are
// skipped because its BPE is O(n²) per piece.
const maxOracleLen = 3000

var tiktokenOnce sync.Once

func tiktokenEncoding(tb testing.TB, name string) *tiktoken.Tiktoken {
	tb.Helper()
	tiktokenOnce.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	enc, err := tiktoken.GetEncoding(name)
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

// tiktokenFromHF builds a tiktoken-go encoder from a loaded HF byte-level
// tokenizer: ranks are ids, every added token is a special.
func tiktokenFromHF(tb testing.TB, tok *Tokenizer, pattern string) *tiktoken.Tiktoken {
	tb.Helper()
	ranks := tableRanks(tok.bl)
	// The tables hold every token of the vocabulary: each id the
	// decoder knows that is not an added token has its rank.
	known := 0
	for id, ok := range tok.idKnown {
		if ok {
			if _, added := tok.added[tok.tokenText(id)]; !added {
				known++
			}
		}
	}
	if len(ranks) != known {
		tb.Fatalf("the rank tables hold %d tokens, the vocabulary %d", len(ranks), known)
	}
	specials := make(map[string]int, len(tok.added))
	set := map[string]any{}
	for s, id := range tok.added {
		specials[s] = id
		set[s] = true
	}
	core, err := tiktoken.NewCoreBPE(ranks, specials, pattern)
	if err != nil {
		tb.Fatal(err)
	}
	return tiktoken.NewTiktoken(core, &tiktoken.Encoding{PatStr: pattern, MergeableRanks: ranks, SpecialTokens: specials}, set)
}

// tableRanks reads every token and its rank back out of b's lookup
// tables (the short table's packed keys hold byte i at bits 8i, the
// length in the top byte; the long table's keys are slices of one string):
// the oracle gets exactly the ranks the encoder looks up.
func tableRanks(b *rankBPE) map[string]int {
	ranks := map[string]int{}
	for _, sl := range b.short.slots {
		if sl.key == 0 {
			continue
		}
		n := int(sl.key >> 56)
		key := make([]byte, n)
		for i := range key {
			key[i] = byte(sl.key >> (8 * i))
		}
		ranks[string(key)] = int(sl.val)
	}
	for _, sl := range b.long.slots {
		if sl.n != 0 {
			ranks[b.long.keys[sl.off:sl.off+sl.n]] = int(sl.rank)
		}
	}
	return ranks
}

func diffCorpus(t *testing.T, name string, ours *Tokenizer, oracle *tiktoken.Tiktoken, skip func(string) bool) {
	entries := loadTokCorpus(t)
	compared, bad := 0, 0
	for i, e := range entries {
		if raceEnabled && i%8 != 0 {
			continue
		}
		if len(e.Text) > maxOracleLen || skip != nil && skip(e.Text) || hasGapRune(e.Text) {
			continue
		}
		compared++
		want := oracle.Encode(e.Text, []string{"all"}, nil)
		got := ours.Encode(e.Text, false)
		if !slices.Equal(got, want) {
			bad++
			if bad <= 5 {
				t.Errorf("%s line %d (%s): got %v\nwant %v", name, i, e.Cat, got, want)
			}
		}
	}
	t.Logf("%s: %d texts compared with tiktoken-go, %d differ", name, compared, bad)
}

// hasGapRune reports code points Go's tables do not know but this package
// classifies from encoder_unicode_gen.go; regexp2 (and so tiktoken-go)
// sees them as unassigned, so the oracles cannot judge such texts.
func hasGapRune(s string) bool {
	for _, r := range s {
		if _, ok := gapClass(r); ok {
			return true
		}
	}
	return false
}

func TestDiffTiktokenOpenAI(t *testing.T) {
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		t.Run(name, func(t *testing.T) {
			ours, err := NewOpenAI(name)
			if err != nil {
				t.Fatal(err)
			}
			diffCorpus(t, name, ours, tiktokenEncoding(t, name), nil)
		})
	}
}

func TestDiffTiktokenHF(t *testing.T) {
	for _, c := range []struct{ model, pattern string }{
		{"llama3_1", patCL100K},
		{"qwen3", patQwen},
		{"gptoss", patO200K},
	} {
		t.Run(c.model, func(t *testing.T) {
			tok := loadTokFixture(t, c.model)
			// tiktoken-go does not normalize: compare only texts NFC leaves
			// alone.
			skip := func(s string) bool { return tok.normalize != nil && tok.normalize.apply(s) != s }
			diffCorpus(t, c.model, tok, tiktokenFromHF(t, tok, c.pattern), skip)
		})
	}
}

func TestCountMatchesEncode(t *testing.T) {
	entries := loadTokCorpus(t)
	for _, model := range []string{"qwen3", "llama2"} {
		tok := loadTokFixture(t, model)
		step := 5
		if raceEnabled {
			step = 25
		}
		for i, e := range entries {
			if i%step != 0 {
				continue
			}
			for _, special := range []bool{false, true} {
				ids := tok.Encode(e.Text, special)
				n, exact := tok.Count(e.Text, special, 0)
				if n != len(ids) || !exact {
					t.Fatalf("%s line %d: Count %d %v, len(Encode) %d", model, i, n, exact, len(ids))
				}
				// Early stop: a limit below the count gives a lower bound
				// above the limit; a limit at or above it is exact.
				if len(ids) > 1 {
					lim := len(ids) / 2
					n, exact := tok.Count(e.Text, special, lim)
					if exact || n <= lim || n > len(ids) {
						t.Fatalf("%s line %d: Count(limit %d) = %d %v, full %d", model, i, lim, n, exact, len(ids))
					}
				}
				if n, exact := tok.Count(e.Text, special, len(ids)); n != len(ids) || !exact {
					t.Fatalf("%s line %d: Count(limit=len) = %d %v, want %d", model, i, n, exact, len(ids))
				}
			}
		}
	}
}

func TestCountAllocs(t *testing.T) {
	// Under the race detector sync.Pool drops a quarter of what is put
	// back, at random: a dropped scratch costs a few allocations on the
	// next call, so the mean varies by run; the bound is looser there.
	limit := 2.0
	if raceEnabled {
		limit = 8
	}
	tok := loadTokFixture(t, "qwen3")
	text := strings.Repeat("Hello, world! <|im_start|>user\n你好 12345\n", 50)
	tok.Count(text, true, 0)
	allocs := testing.AllocsPerRun(20, func() { tok.Count(text, true, 0) })
	if allocs > limit {
		t.Fatalf("Count allocates %.0f times per call (limit %.0f)", allocs, limit)
	}
}

func TestBOS(t *testing.T) {
	for _, c := range []struct {
		model, bos string
		id         int
		ok         bool
	}{
		{"llama3_1", "<|begin_of_text|>", 128000, true},
		{"llama2", "<s>", 1, true},
		{"gemma3", "<bos>", 2, true},
		{"qwen3", "", 0, false},
	} {
		tok := loadTokFixture(t, c.model)
		s, id, ok := tok.BOS()
		if s != c.bos || id != c.id || ok != c.ok {
			t.Errorf("%s: BOS() = %q %d %v, want %q %d %v", c.model, s, id, ok, c.bos, c.id, c.ok)
		}
		if ok {
			if got := tok.Encode("hi", true); got[0] != id {
				t.Errorf("%s: Encode(addSpecial) starts with %d, want BOS %d", c.model, got[0], id)
			}
		}
	}
	// DeepSeek V3's tokenizer.json has no BOS post-processor; transformers
	// adds it from tokenizer_config.json (add_bos_token), via WithSpecials.
	ds := loadTokFixture(t, "deepseek_v3")
	if _, _, ok := ds.BOS(); ok {
		t.Errorf("deepseek_v3: unexpected BOS from tokenizer.json")
	}
	withBOS, ok := ds.WithSpecials("<｜begin▁of▁sentence｜>", "")
	if !ok {
		t.Fatal("WithSpecials failed")
	}
	if got := withBOS.Encode("hi", true); got[0] != 0 || len(got) != len(ds.Encode("hi", false))+1 {
		t.Errorf("deepseek_v3 WithSpecials: %v", got)
	}
	if id, ok := ds.TokenID("<｜User｜>"); !ok || id != 128803 {
		t.Errorf("TokenID(<｜User｜>) = %d %v", id, ok)
	}
}

// slowLimit bounds the 1 MB worst cases: the target is 1.5 s, doubled for
// a shared machine, and scaled for the race detector.
var slowLimit = func() time.Duration {
	if raceEnabled {
		return 30 * time.Second
	}
	return 3 * time.Second
}()

// TestLongPiece: one 1 MB pre-token piece must stay O(n log n).
func TestLongPiece(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	tok := loadTokFixture(t, "qwen3")
	for _, unit := range []string{"a", "ab", "😀", "中文"} {
		text := strings.Repeat(unit, (1<<20)/len(unit))
		start := time.Now()
		n, _ := tok.Count(text, false, 0)
		d := time.Since(start)
		t.Logf("1 MB of %q: %d tokens in %v", unit, n, d)
		if d > slowLimit { // 1.5 s target, slack for a shared machine
			t.Errorf("1 MB single piece %q took %v", unit, d)
		}
	}
}

func TestHeapEqualsScan(t *testing.T) {
	tok := loadTokFixture(t, "llama3_1")
	var sc bpeScratch
	for i, e := range loadTokCorpus(t) {
		if i%3 != 0 {
			continue
		}
		tok.split.split(e.Text, func(p string) bool {
			if len(p) < 2 || len(p) > 400 {
				return true
			}
			a := tok.bl.scan(nil, p, &sc)
			b := tok.bl.heapMerge(nil, p, &sc)
			if !slices.Equal(a, b) {
				t.Fatalf("piece %q: scan %v heap %v", p, a, b)
			}
			return true
		})
	}
}

func TestNFCStreamSafe(t *testing.T) {
	// Rust's NFC has no 30-non-starter limit; neither has ours.
	s := "a" + strings.Repeat("\u0301", 40)
	if got := nfc(s); strings.ContainsRune(got, cgj) || got != "\u00e1"+strings.Repeat("\u0301", 39) {
		t.Fatalf("nfc: %q", got)
	}
	for _, s := range []string{"e\u0316\u0301", "\u1100\u1161\u11a8", "A\u030a", "\u00c5", strings.Repeat("o\u0308\u0323", 20)} {
		if got, want := nfcFull(s), nfc(s); got != want {
			t.Errorf("nfcFull(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestNFCReferenceData(t *testing.T) {
	// U+07FD is a starter for the reference: U+07F3 (ccc 230) stays first.
	if got := nfc("\u07d6\u07f3\u07fd"); got != "\u07d6\u07f3\u07fd" {
		t.Errorf("nfc NKo: %U", []rune(got))
	}
	// Without such marks nfc is plain NFC.
	if got := nfc("a\u0316\u0301"); got != "\u00e1\u0316" {
		t.Errorf("nfc: %U", []rune(got))
	}
	// A Unicode 16 letter (Garay) is a letter for the splitters.
	if c := runeClass(0x10D58); c&cL == 0 || c&cU == 0 {
		t.Errorf("U+10D58 class %b", c)
	}
}

func ExampleTokenizer_Count() {
	tok, err := NewOpenAI("cl100k_base")
	if err != nil {
		panic(err)
	}
	n, exact := tok.Count("Hello, world!", false, 0)
	fmt.Println(n, exact, tok.Encode("Hello, world!", false))
	// Output: 4 true [9906 11 1917 0]
}

// TestLongMarkRun: a megabyte of combining marks in alternating classes
// (every one reordered) must stay fast through the stream-safe fallback.
func TestLongMarkRun(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	tok := loadTokFixture(t, "qwen3")
	text := "a" + strings.Repeat("\u0301\u0316", 1<<18)
	start := time.Now()
	n, _ := tok.Count(text, false, 0)
	d := time.Since(start)
	t.Logf("qwen3, 1 MB of combining marks: %d tokens in %v", n, d)
	if d > slowLimit {
		t.Fatalf("1 MB of marks: %d tokens in %v", n, d)
	}
	sp := loadTokFixture(t, "llama2")
	start = time.Now()
	n, _ = sp.Count(strings.Repeat("a", 1<<20), false, 0)
	d = time.Since(start)
	t.Logf("llama2, 1 MB single word: %d tokens in %v", n, d)
	if d > slowLimit {
		t.Fatalf("llama2 1 MB word: %d tokens in %v", n, d)
	}
}

// scanByBytes is tiktoken's byte_pair_merge as written over the piece's
// bytes: each candidate is the concatenation of two adjacent parts, looked
// up by its bytes. The encoder merges by id pairs (idPairTable); this is
// the oracle that both agree.
func scanByBytes(b *rankBPE, piece string) []int {
	n := len(piece)
	pos := make([]int, n+1)
	for i := range pos {
		pos[i] = i
	}
	rankAt := func(i int) int32 { // parts i and i+1 merged
		if i+2 >= len(pos) {
			return noRank
		}
		return b.rank(piece[pos[i]:pos[i+2]])
	}
	for len(pos) > 2 {
		minR, minI := int32(noRank), -1
		for i := 0; i+2 < len(pos); i++ {
			if r := rankAt(i); r < minR {
				minR, minI = r, i
			}
		}
		if minI < 0 {
			break
		}
		pos = append(pos[:minI+1], pos[minI+2:]...)
	}
	var out []int
	for i := 0; i+1 < len(pos); i++ {
		out = append(out, int(b.rank(piece[pos[i]:pos[i+1]])))
	}
	return out
}

func TestIDPairMergeEqualsBytes(t *testing.T) {
	cl, err := NewOpenAI("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	toks := map[string]*Tokenizer{"cl100k_base": cl}
	for _, m := range []string{"qwen3", "llama3_1", "deepseek_v3", "gptoss"} {
		toks[m] = loadTokFixture(t, m)
	}
	corpus := loadTokCorpus(t)
	for name, tok := range toks {
		t.Run(name, func(t *testing.T) {
			var sc bpeScratch
			checked := 0
			for i, e := range corpus {
				if i%7 != 0 {
					continue
				}
				text := e.Text
				if tok.normalize != nil {
					text = tok.normalize.apply(text)
				}
				tok.split.split(text, func(p string) bool {
					if len(p) < 2 || len(p) > 300 {
						return true
					}
					want := scanByBytes(tok.bl, p)
					if got := tok.bl.scan(nil, p, &sc); !slices.Equal(got, want) {
						t.Fatalf("piece %q: scan %v, by bytes %v", p, got, want)
					}
					if got := tok.bl.heapMerge(nil, p, &sc); !slices.Equal(got, want) {
						t.Fatalf("piece %q: heap %v, by bytes %v", p, got, want)
					}
					checked++
					return true
				})
			}
			if checked < 1000 {
				t.Fatalf("only %d pieces checked", checked)
			}
		})
	}
}

// TestPieceCacheFillsThenKeeps fills a piece cache past every limit and
// checks that each stored piece returns exactly its ids (one id in the
// slot, several in the arena) after the caller's, that refused pieces
// miss, and that nothing stored is ever dropped.
func TestPieceCacheFillsThenKeeps(t *testing.T) {
	var c pieceCache
	idsOf := func(i int) []int {
		ids := make([]int, 1+i%5) // counts 1..5
		for k := range ids {
			ids[k] = (i*7 + k) & pairIDMask
		}
		return ids
	}
	pieceOf := func(i int) string { return fmt.Sprintf("p%0*d", 2+i%90, i) } // up to 91 bytes
	const offered = 2 * cacheMaxN
	stored := make([]bool, offered)
	nStored := 0
	for i := range offered {
		p := pieceOf(i)
		_, h, ok := c.get(nil, p)
		if ok {
			t.Fatalf("%q hit before it was put", p)
		}
		before := c.n
		c.put(p, h, idsOf(i))
		if c.n > before {
			stored[i] = true
			nStored++
		}
	}
	if nStored == offered || nStored < cacheMaxN/2 {
		t.Fatalf("stored %d of %d pieces: the limits were not reached", nStored, offered)
	}
	for i := range offered {
		got, _, ok := c.get([]int{-1}, pieceOf(i))
		if ok != stored[i] {
			t.Fatalf("piece %d: hit %v, stored %v", i, ok, stored[i])
		}
		if ok && !slices.Equal(got, append([]int{-1}, idsOf(i)...)) {
			t.Fatalf("piece %d: got %v, want %v after the caller's ids", i, got, idsOf(i))
		}
	}
}

// TestLetterRunMatchesClassRun checks the eight-bytes-at-a-time letter run
// against the rune loop for every byte value at every position of a word,
// after runs of every length.
func TestLetterRunMatchesClassRun(t *testing.T) {
	for run := 0; run <= 17; run++ {
		for c := 0; c < 256; c++ {
			b := []byte(strings.Repeat("aZ", 12))
			b[run] = byte(c)
			for _, s := range []string{string(b), string(b[:run+1]), string(b) + "é"} {
				for i := 0; i <= run && i < len(s); i++ {
					if got, want := letterRun(s, i), classRun(s, i, cL); got != want {
						t.Fatalf("%q from %d: letterRun %d, classRun %d", s, i, got, want)
					}
				}
			}
		}
	}
}
