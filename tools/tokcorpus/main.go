// Command tokcorpus writes the tokenizer test corpus and the benchmark mix
// used by package tokenize:
//
//	tokenize/testdata/tok/corpus.jsonl.gz   adversarial + realistic texts, one JSON object a line
//	tokenize/testdata/tok/benchmix.txt.gz   ~1 MB realistic mix for throughput benchmarks
//
// The output is deterministic: a fixed PCG seed, and source texts taken only
// from module versions pinned below (read from the Go module cache after
// `go mod download`), plus the samples written into this program. Running it
// twice gives byte-identical files, so a regenerated corpus only changes when
// this program changes.
//
// Usage (from the repository root):
//
//	go run ./tools/tokcorpus
//	(cd tools/tokgolden && npm ci && node tokgolden.js)
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Entry is one corpus text. Cat names the generator that produced it so a
// failing parity case can be traced back; the Go tests and the Node golden
// writer key everything by the line index.
type Entry struct {
	Cat  string `json:"cat"`
	Text string `json:"text"`
}

// Pinned sources. Changing a version changes the corpus: regenerate the
// goldens afterwards.
var sourceModules = []string{
	"golang.org/x/text@v0.44.0",
	"github.com/go-chi/chi/v5@v5.5.0",
	"go.uber.org/zap@v1.28.0",
	"github.com/openai/openai-go/v3@v3.102.0",
	"github.com/dlclark/regexp2@v1.11.5",
	"github.com/pkoukk/tiktoken-go@v0.1.8",
	"github.com/prometheus/client_golang@v1.25.0",
}

type gen struct {
	r       *rand.Rand
	dirs    map[string]string
	entries []Entry
}

func main() {
	out := flag.String("out", "tokenize/testdata/tok", "output directory")
	flag.Parse()
	g := &gen{r: rand.New(rand.NewPCG(20260101, 7)), dirs: map[string]string{}}
	for _, m := range sourceModules {
		g.dirs[m[:strings.Index(m, "@")]] = moduleDir(m)
	}
	g.all()
	for i, e := range g.entries {
		if !utf8.ValidString(e.Text) {
			fail("entry %d (%s) is not valid UTF-8", i, e.Cat)
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail("%v", err)
	}
	var buf bytes.Buffer
	for _, e := range g.entries {
		b, err := json.Marshal(e)
		if err != nil {
			fail("%v", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	writeGz(filepath.Join(*out, "corpus.jsonl.gz"), buf.Bytes())
	mix := g.benchMix()
	writeGz(filepath.Join(*out, "benchmix.txt.gz"), []byte(mix))
	total := 0
	cats := map[string]int{}
	for _, e := range g.entries {
		total += len(e.Text)
		cats[e.Cat]++
	}
	keys := make([]string, 0, len(cats))
	for k := range cats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%-14s %5d\n", k, cats[k])
	}
	fmt.Printf("corpus: %d texts, %d bytes; benchmix: %d bytes\n", len(g.entries), total, len(mix))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "tokcorpus: "+format+"\n", args...)
	os.Exit(1)
}

func writeGz(path string, data []byte) {
	var buf bytes.Buffer
	// Fixed header fields (no name, zero mtime) keep the file reproducible.
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(data); err != nil {
		fail("%v", err)
	}
	if err := zw.Close(); err != nil {
		fail("%v", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		fail("%v", err)
	}
}

func moduleDir(modVer string) string {
	cmd := exec.Command("go", "mod", "download", "-json", modVer)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fail("go mod download %s: %v", modVer, err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		fail("go mod download %s: no Dir in %s", modVer, out)
	}
	return info.Dir
}

func (g *gen) read(mod, rel string) string {
	b, err := os.ReadFile(filepath.Join(g.dirs[mod], rel))
	if err != nil {
		fail("%v", err)
	}
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	// Gutenberg-derived files start with a provenance header; keep the text.
	if i := strings.Index(s, "--------\n"); i >= 0 && i < 200 {
		s = s[i+9:]
	}
	return s
}

func (g *gen) add(cat, text string) { g.entries = append(g.entries, Entry{cat, text}) }

func (g *gen) intn(n int) int { return g.r.IntN(n) }

func (g *gen) pick(xs []string) string { return xs[g.intn(len(xs))] }

// chunk returns a random slice of s of about n bytes, cut at rune
// boundaries, preferring line starts so markdown structure survives.
func (g *gen) chunk(s string, n int) string {
	if n >= len(s) {
		return s
	}
	start := g.intn(len(s) - n)
	if j := strings.LastIndexByte(s[:start], '\n'); j >= 0 && start-j < 200 {
		start = j + 1
	}
	end := start + n
	if end > len(s) {
		end = len(s)
	}
	for start < end && !utf8.RuneStart(s[start]) {
		start++
	}
	for end < len(s) && !utf8.RuneStart(s[end]) {
		end++
	}
	return s[start:end]
}

func (g *gen) lenBetween(lo, hi int) int { return lo + g.intn(hi-lo+1) }

// sizes favours short texts (most chat messages are short) but keeps some
// long ones so whole-document behaviour is covered.
func (g *gen) size() int {
	switch g.intn(10) {
	case 0, 1, 2:
		return g.lenBetween(5, 80)
	case 3, 4, 5, 6:
		return g.lenBetween(80, 600)
	case 7, 8:
		return g.lenBetween(600, 2500)
	default:
		return g.lenBetween(2500, 8000)
	}
}

func (g *gen) all() {
	g.edge()
	g.prose()
	g.markdown()
	g.code()
	g.cjk()
	g.scripts()
	g.emoji()
	g.numbers()
	g.whitespace()
	g.repeats()
	g.contractions()
	g.combining()
	g.randomUnicode()
	g.punctFuzz()
	g.jsonTools()
	g.specials()
	g.chats()
	g.mixed()
}

func (g *gen) edge() {
	g.add("edge", "")
	for c := 0; c < 128; c++ {
		g.add("edge", string(rune(c)))
	}
	for _, s := range []string{" ", "  ", "\n", "\n\n", "\r\n", " \n", "\t", "a", "A", " a", "a ", "'", "''", "'s", " 's", "123", "1234", " 1", "-1", "1.5", "hello", "Hello", " Hello", "HELLO", "hello world", "Hello, World!", "\u00a0", "\u3000", "\ufeff", "\u200b", "\u200d", "\u00e9", "e\u0301", "\u0301", "\u0301a", "\U0001F600", "\u4e2d", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u001c", "\u001f", "\u180e", "\ufffd", "\uffff", "\U0010FFFF", "\U000E0001", "\U000F0000", "<", ">", "<|", "|>", "<s", "</s", "▁", "▁▁", "▁a", "<0x41>", "\x7f", "\u0080", "\u00ad", "\u034f", "\u0338"} {
		g.add("edge", s)
	}
}

func (g *gen) prose() {
	fr := g.read("golang.org/x/text", "encoding/testdata/candide-utf-8.txt")
	en := g.englishProse()
	for i := 0; i < 250; i++ {
		g.add("prose", g.chunk(en, g.size()))
	}
	for i := 0; i < 120; i++ {
		g.add("prose-fr", g.chunk(fr, g.size()))
	}
}

// englishProse collects English running text: markdown documents with code
// fences removed, so the prose generator gives sentences, not code.
func (g *gen) englishProse() string {
	var b strings.Builder
	for _, p := range [][2]string{
		{"github.com/openai/openai-go/v3", "docs/architecture/security-model.md"},
		{"github.com/openai/openai-go/v3", "tasks/plan.md"},
		{"github.com/openai/openai-go/v3", "CONTRIBUTING.md"},
		{"github.com/go-chi/chi/v5", "README.md"},
		{"github.com/dlclark/regexp2", "README.md"},
		{"golang.org/x/text", "README.md"},
	} {
		inFence := false
		for _, line := range strings.Split(g.read(p[0], p[1]), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			if !inFence {
				b.WriteString(line)
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

func (g *gen) markdownSources() []string {
	return []string{
		g.read("github.com/openai/openai-go/v3", "README.md"),
		g.read("github.com/openai/openai-go/v3", "api.md")[:120000],
		g.read("github.com/openai/openai-go/v3", "CHANGELOG.md")[:60000],
		g.read("github.com/go-chi/chi/v5", "README.md"),
		g.read("go.uber.org/zap", "CHANGELOG.md"),
		g.read("github.com/prometheus/client_golang", "CHANGELOG.md"),
		g.read("github.com/pkoukk/tiktoken-go", "README.md"),
		g.read("github.com/pkoukk/tiktoken-go", "README_zh-hans.md"),
	}
}

func (g *gen) markdown() {
	srcs := g.markdownSources()
	for i := 0; i < 400; i++ {
		g.add("markdown", g.chunk(g.pick(srcs), g.size()))
	}
}

func (g *gen) goSources() []string {
	var out []string
	for _, p := range [][2]string{
		{"github.com/go-chi/chi/v5", "mux.go"},
		{"github.com/go-chi/chi/v5", "tree.go"},
		{"go.uber.org/zap", "logger.go"},
		{"go.uber.org/zap", "field.go"},
		{"github.com/dlclark/regexp2", "regexp.go"},
		{"github.com/dlclark/regexp2", "runner.go"},
		{"github.com/pkoukk/tiktoken-go", "core_bpe.go"},
		{"golang.org/x/text", "unicode/norm/normalize.go"},
		{"golang.org/x/text", "language/language.go"},
		{"github.com/prometheus/client_golang", "prometheus/histogram.go"},
	} {
		out = append(out, g.read(p[0], p[1]))
	}
	return out
}

func (g *gen) code() {
	gos := g.goSources()
	for i := 0; i < 300; i++ {
		g.add("code-go", g.chunk(g.pick(gos), g.size()))
	}
	for i := 0; i < 200; i++ {
		s := g.pick(codeSnippets)
		if g.intn(3) == 0 {
			s = strings.ReplaceAll(s, "    ", "\t")
		}
		if g.intn(4) == 0 {
			s = s + "\n\n" + g.pick(codeSnippets)
		}
		g.add("code", s)
	}
}

func (g *gen) cjkSources() []string {
	return []string{
		g.read("golang.org/x/text", "encoding/testdata/sunzi-bingfa-simplified-utf-8.txt"),
		g.read("golang.org/x/text", "encoding/testdata/sunzi-bingfa-traditional-utf-8.txt"),
		g.read("golang.org/x/text", "encoding/testdata/rashomon-utf-8.txt"),
		g.read("golang.org/x/text", "encoding/testdata/unsu-joh-eun-nal-utf-8.txt"),
		g.read("github.com/pkoukk/tiktoken-go", "README_zh-hans.md"),
	}
}

func (g *gen) cjk() {
	srcs := g.cjkSources()
	for i := 0; i < 400; i++ {
		s := g.chunk(g.pick(srcs), g.size())
		if g.intn(5) == 0 {
			// CJK mixed with Latin words, digits and fullwidth forms, as in
			// real chat messages.
			s = s + " " + g.pick(uiStrings) + " 2024年3月15日 ＡＢＣ１２３ " + g.chunk(g.pick(srcs), 60)
		}
		g.add("cjk", s)
	}
}

func (g *gen) scripts() {
	for i := 0; i < 250; i++ {
		n := g.lenBetween(1, 12)
		parts := make([]string, n)
		for j := range parts {
			parts[j] = g.pick(uiStrings)
		}
		sep := g.pick([]string{" ", "\n", " | ", ", ", "\n\n", " — "})
		g.add("scripts", strings.Join(parts, sep))
	}
	// Pseudo-words from many script blocks: covers letters, marks and
	// digits of scripts the samples above do not.
	for i := 0; i < 200; i++ {
		var b strings.Builder
		blk := scriptBlocks[g.intn(len(scriptBlocks))]
		for w := g.lenBetween(1, 40); w > 0; w-- {
			for c := g.lenBetween(1, 10); c > 0; c-- {
				r := rune(blk[0] + g.intn(blk[1]-blk[0]+1))
				if unicode.IsGraphic(r) {
					b.WriteRune(r)
				}
			}
			b.WriteString(g.pick([]string{" ", " ", " ", ". ", ", ", "\n", "  "}))
			if g.intn(8) == 0 {
				blk = scriptBlocks[g.intn(len(scriptBlocks))]
			}
		}
		g.add("scripts-gen", b.String())
	}
}

func (g *gen) emoji() {
	for i := 0; i < 300; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 30); k > 0; k-- {
			switch g.intn(6) {
			case 0:
				b.WriteString(g.pick(emojiSeqs))
			case 1:
				b.WriteString(g.pick(emojiSeqs))
				b.WriteString(g.pick(emojiSeqs))
			case 2:
				b.WriteString(" ")
				b.WriteString(g.pick(emojiSeqs))
			case 3:
				b.WriteString(g.pick([]string{"hello", "ok", "Great", "you", "tests pass", "ship it", "😀😀"}))
			case 4:
				b.WriteString(g.pick([]string{" ", "\n", "!", "?!", ". ", "  "}))
			default:
				// Keycaps, flags and tags built programmatically.
				switch g.intn(3) {
				case 0:
					b.WriteString(string(rune('0'+g.intn(10))) + "\ufe0f\u20e3")
				case 1:
					b.WriteRune(rune(0x1F1E6 + g.intn(26)))
					b.WriteRune(rune(0x1F1E6 + g.intn(26)))
				default:
					b.WriteString("\U0001F3F4")
					for _, c := range g.pick([]string{"gbeng", "gbsct", "gbwls", "usca"}) {
						b.WriteRune(0xE0000 + c)
					}
					b.WriteRune(0xE007F)
				}
			}
		}
		g.add("emoji", b.String())
	}
}

func (g *gen) digits(n int, zero rune) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteRune(zero + rune(g.intn(10)))
	}
	return b.String()
}

func (g *gen) numbers() {
	zeros := []rune{'0', '0', '0', 0x660, 0x6F0, 0x966, 0x9E6, 0xE50, 0xFF10, 0x1040, 0x17E0, 0x1D7CE, 0x0BE6}
	for i := 0; i < 320; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 15); k > 0; k-- {
			switch g.intn(10) {
			case 0:
				b.WriteString(g.digits(g.lenBetween(1, 200), g.pick2(zeros)))
			case 1:
				fmt.Fprintf(&b, "%d.%d", g.intn(100000), g.intn(1000000))
			case 2:
				fmt.Fprintf(&b, "%04d-%02d-%02dT%02d:%02d:%02dZ", 1900+g.intn(200), 1+g.intn(12), 1+g.intn(28), g.intn(24), g.intn(60), g.intn(60))
			case 3:
				fmt.Fprintf(&b, "0x%x", g.r.Uint64())
			case 4:
				fmt.Fprintf(&b, "%e", g.r.Float64()*1e10)
			case 5:
				b.WriteString(g.pick([]string{"½", "¼", "¾", "²", "³", "¹", "Ⅻ", "ⅷ", "①", "⑳", "㊿", "𝟙𝟚", "٣٫١٤", "1,000,000", "$1,234.56", "€5", "−42", "+1 (555) 010-9999", "3×10⁸", "10^-9", "v1.2.3-rc.4"}))
			case 6:
				fmt.Fprintf(&b, "%d", g.r.Int64())
			case 7:
				b.WriteString(g.digits(g.lenBetween(1, 9), '0'))
				b.WriteString(g.pick([]string{"px", "ms", "%", "kg", " tokens", "GB", "th", "k"}))
			default:
				b.WriteString(g.digits(g.lenBetween(1, 7), '0'))
			}
			b.WriteString(g.pick([]string{" ", " ", ", ", "\n", "", "-", ":", " and "}))
		}
		g.add("numbers", b.String())
	}
}

func (g *gen) pick2(rs []rune) rune { return rs[g.intn(len(rs))] }

// spaceKinds are the whitespace and near-whitespace characters whose
// classification differs between regex engines and Unicode versions.
var spaceKinds = []string{" ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u1680", "\u2000", "\u2003", "\u2007", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff", "\u001c", "\u001d", "\u001e", "\u001f"}

func (g *gen) whitespace() {
	words := []string{"a", "word", "Hello", "x=1", "中文", "—", "!", "def", "12", "é", "\u0301", "'s", "<|im_end|>"}
	for i := 0; i < 420; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 8); k > 0; k-- {
			if g.intn(3) > 0 {
				b.WriteString(g.pick(words))
			}
			n := g.lenBetween(1, 12)
			if g.intn(6) == 0 {
				n = g.lenBetween(12, 1000)
			}
			if g.intn(2) == 0 {
				b.WriteString(strings.Repeat(g.pick(spaceKinds), n))
			} else {
				for ; n > 0; n-- {
					b.WriteString(g.pick(spaceKinds))
				}
			}
		}
		g.add("whitespace", b.String())
	}
}

func (g *gen) repeats() {
	units := []string{"a", "A", "ab", " ", "\n", "\t", "!", "-", "=", "*", "0", "1", "12", "😀", "👍🏽", "中", "あ", "한", "é", "e\u0301", "\u0301", "ق", "ก", "'", "'s", " a", "a ", "\r\n", ". ", "▁", "<", "|", "<|im_start|>", "\u3000", "\u00a0", "ab1", "the "}
	counts := []int{2, 3, 10, 31, 100, 257, 1000, 4097, 20000}
	for _, u := range units {
		for _, n := range counts {
			if n > 4097 && g.intn(2) == 0 && len(u) > 1 {
				continue
			}
			g.add("repeat", strings.Repeat(u, n))
		}
	}
	for i := 0; i < 60; i++ {
		g.add("repeat", g.pick([]string{"x", "Hello ", "a"})+strings.Repeat(g.pick(units), g.lenBetween(2, 5000))+g.pick([]string{"", " end", "\n", "1"}))
	}
}

func (g *gen) contractions() {
	apos := []string{"'", "'", "'", "’", "ʼ", "′", "`", "´", "‘"}
	suf := []string{"s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "Re", "rE", "VE", "vE", "M", "LL", "lL", "D", "ſ", "K", "K", "x", "", "st", "lls", "dd"}
	stems := []string{"it", "don", "we", "they", "I", "you", "she", "IT", "DON", "O", "rock n", "", " ", "1", "中", "é", "e\u0301", "\n", "'", "Ⅻ", "ǅ", "ᾈ"}
	for i := 0; i < 320; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 10); k > 0; k-- {
			b.WriteString(g.pick(stems))
			b.WriteString(g.pick(apos))
			b.WriteString(g.pick(suf))
			b.WriteString(g.pick([]string{" ", "", "\n", ".", "abc", " x", "1", "'"}))
		}
		g.add("contractions", b.String())
	}
}

func (g *gen) combining() {
	marks := []rune{0x0300, 0x0301, 0x0302, 0x0303, 0x0308, 0x030A, 0x0316, 0x0323, 0x0327, 0x0328, 0x031B, 0x0345, 0x05B0, 0x064B, 0x0651, 0x093C, 0x094D, 0x0E48, 0x302A, 0x1DC0, 0x20D0, 0xFE20, 0x1D167, 0x0F71, 0x0F72, 0x0F74}
	bases := []string{"a", "e", "o", "u", "A", "O", "n", "c", "s", "i", "ω", "α", "и", "ק", "ب", "क", "ก", "x", "1", " ", "\n", "", "😀", "ᄀ", "가", "<|im_start|>", ">"}
	src := g.read("golang.org/x/text", "encoding/testdata/candide-utf-8.txt")
	for i := 0; i < 80; i++ {
		s := g.chunk(src, g.size())
		switch g.intn(3) {
		case 0:
			s = norm.NFD.String(s)
		case 1:
			s = norm.NFKD.String(s + " ﬁ ㎏ Ⅻ ½ ｶﾞ ｱ ﹏")
		default:
			s = norm.NFKC.String(s)
		}
		g.add("nfd", s)
	}
	// Hangul jamo that NFC composes into syllables.
	for i := 0; i < 30; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 40); k > 0; k-- {
			b.WriteRune(rune(0x1100 + g.intn(19)))
			b.WriteRune(rune(0x1161 + g.intn(21)))
			if g.intn(2) == 0 {
				b.WriteRune(rune(0x11A8 + g.intn(27)))
			}
			if g.intn(5) == 0 {
				b.WriteString(" ")
			}
		}
		g.add("hangul-jamo", b.String())
	}
	// Runs of combining marks: short ones (Zalgo) and long ones across the
	// 30-non-starter stream-safe limit, with mixed combining classes so
	// canonical reordering matters.
	lengths := []int{1, 2, 5, 29, 30, 31, 32, 45, 60, 61, 100, 250, 1000, 20000}
	for i := 0; i < 150; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 4); k > 0; k-- {
			b.WriteString(g.pick(bases))
			n := lengths[g.intn(len(lengths))]
			if n == 20000 && g.intn(3) != 0 {
				n = 300
			}
			switch g.intn(3) {
			case 0:
				m := marks[g.intn(len(marks))]
				b.WriteString(strings.Repeat(string(m), n))
			case 1:
				for ; n > 0; n-- {
					b.WriteRune(marks[g.intn(len(marks))])
				}
			default:
				for ; n > 0; n-- {
					b.WriteRune(marks[g.intn(4)])
					if g.intn(4) == 0 {
						b.WriteRune(0x0316)
					}
				}
			}
			b.WriteString(g.pick([]string{"", " ", "b", "\n", "é"}))
		}
		g.add("combining", b.String())
	}
	for _, n := range []int{31, 100, 1000, 20000} {
		g.add("combining", "a"+strings.Repeat("\u0301", n))
		g.add("combining", strings.Repeat("\u0301", n))
		g.add("combining", "e"+strings.Repeat("\u0316\u0301", n/2)+"x")
		g.add("combining", "\u00e9"+strings.Repeat("\u0301", n)+" ok")
		g.add("combining", "\u1100"+strings.Repeat("\u0301", n)+"\u1161")
	}
}

// randomUnicode draws code points from every plane, weighted towards the
// BMP, including controls, private use and unassigned code points, but never
// surrogates (they cannot occur in valid UTF-8).
func (g *gen) randomUnicode() {
	for i := 0; i < 820; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 120); k > 0; k-- {
			var r rune
			switch g.intn(10) {
			case 0, 1:
				r = rune(g.intn(0x80))
			case 2, 3:
				r = rune(0x80 + g.intn(0x800-0x80))
			case 4, 5, 6:
				r = rune(0x800 + g.intn(0x10000-0x800))
			case 7, 8:
				r = rune(0x10000 + g.intn(0x20000))
			default:
				r = rune(0x30000 + g.intn(0x110000-0x30000))
			}
			if r >= 0xD800 && r <= 0xDFFF {
				r = 0xFFFD
			}
			b.WriteRune(r)
		}
		g.add("random-unicode", b.String())
	}
}

func (g *gen) punctFuzz() {
	const alphabet = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \n\t\r0123456789aZ"
	for i := 0; i < 600; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 200); k > 0; k-- {
			if g.intn(4) == 0 {
				b.WriteByte(alphabet[g.intn(len(alphabet))])
			} else {
				b.WriteByte(alphabet[g.intn(32)])
			}
		}
		g.add("punct-fuzz", b.String())
	}
}

func (g *gen) jsonTools() {
	for i := 0; i < 220; i++ {
		args := map[string]any{
			"location": g.pick([]string{"Paris, France", "東京", "São Paulo", "New York"}),
			"unit":     g.pick([]string{"celsius", "fahrenheit"}),
			"days":     g.intn(14),
			"query":    g.pick(uiStrings),
			"ratio":    g.r.Float64(),
			"tags":     []string{"a", g.pick(emojiSeqs), "x y"},
		}
		a, _ := json.Marshal(args)
		call := map[string]any{
			"id":       fmt.Sprintf("call_%x", g.r.Uint64()),
			"type":     "function",
			"function": map[string]any{"name": g.pick([]string{"get_weather", "search", "run_code", "lookup_user"}), "arguments": string(a)},
		}
		var out []byte
		if g.intn(2) == 0 {
			out, _ = json.MarshalIndent([]any{call}, "", g.pick([]string{"  ", "    ", "\t"}))
		} else {
			out, _ = json.Marshal(call)
		}
		s := string(out)
		switch g.intn(4) {
		case 0:
			s = "<tool_call>\n" + s + "\n</tool_call>"
		case 1:
			s = "<|python_tag|>" + s + "<|eom_id|>"
		}
		g.add("json", s)
	}
}

func (g *gen) specials() {
	for i := 0; i < 320; i++ {
		var b strings.Builder
		for k := g.lenBetween(1, 8); k > 0; k-- {
			b.WriteString(g.pick([]string{"", "text", " ", "\n", "Hello", "中文", "é", "\u0338", "\u0301", "<", "|", ">", "<<", "'s"}))
			tok := g.pick(specialStrings)
			switch g.intn(8) {
			case 0:
				// Broken prefix, cut back to a rune boundary so the
				// text stays valid UTF-8.
				cut := len(tok) / 2
				for cut > 0 && !utf8.RuneStart(tok[cut]) {
					cut--
				}
				tok = tok[:cut]
			case 1:
				tok = strings.ToUpper(tok)
			case 2:
				tok = " " + tok + " "
			}
			b.WriteString(tok)
		}
		g.add("specials", b.String())
	}
}

func (g *gen) chats() {
	for i := 0; i < 120; i++ {
		var b strings.Builder
		style := g.intn(4)
		for turn := g.lenBetween(1, 10); turn > 0; turn-- {
			role := g.pick([]string{"system", "user", "assistant", "tool"})
			content := g.pick(uiStrings)
			if g.intn(2) == 0 {
				content = g.chunk(g.englishProseCached(), g.lenBetween(20, 800))
			}
			switch style {
			case 0:
				fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", role, content)
			case 1:
				fmt.Fprintf(&b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", role, content)
			case 2:
				fmt.Fprintf(&b, "<start_of_turn>%s\n%s<end_of_turn>\n", role, content)
			default:
				fmt.Fprintf(&b, "<|start|>%s<|message|>%s<|end|>", role, content)
			}
		}
		g.add("chat", b.String())
	}
}

var proseCache string

func (g *gen) englishProseCached() string {
	if proseCache == "" {
		proseCache = g.englishProse()
	}
	return proseCache
}

// mixed concatenates pieces of the other categories, because boundaries
// between scripts, digits and whitespace are where splitters go wrong.
func (g *gen) mixed() {
	n := len(g.entries)
	for i := 0; i < 400; i++ {
		var b strings.Builder
		for k := g.lenBetween(2, 6); k > 0; k-- {
			e := g.entries[g.intn(n)]
			t := e.Text
			if len(t) > 300 {
				t = g.chunk(t, 300)
			}
			b.WriteString(t)
		}
		g.add("mixed", b.String())
	}
}

// benchMix builds the ~1 MB throughput corpus: about 50 % prose/markdown,
// 25 % code, 15 % CJK and 10 % other scripts and JSON, as documents of
// realistic chat-message size.
func (g *gen) benchMix() string {
	r := rand.New(rand.NewPCG(99, 1))
	pickR := func(xs []string) string { return xs[r.IntN(len(xs))] }
	chunkR := func(s string, n int) string {
		if n >= len(s) {
			return s
		}
		start := r.IntN(len(s) - n)
		for start > 0 && !utf8.RuneStart(s[start]) {
			start--
		}
		end := start + n
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		return s[start:end]
	}
	prose := append([]string{g.englishProseCached()}, g.markdownSources()...)
	code := append(g.goSources(), strings.Join(codeSnippets, "\n\n"))
	cjk := g.cjkSources()
	other := []string{g.read("golang.org/x/text", "encoding/testdata/candide-utf-8.txt"), strings.Join(uiStrings, "\n")}
	const total = 1 << 20
	shares := []struct {
		srcs  []string
		bytes int
	}{{prose, total * 50 / 100}, {code, total * 25 / 100}, {cjk, total * 15 / 100}, {other, total * 10 / 100}}
	var docs []string
	for si, sh := range shares {
		for got := 0; got < sh.bytes; {
			n := 200 + r.IntN(1800)
			var d string
			if si == 3 && r.IntN(3) == 0 {
				b, _ := json.Marshal(map[string]any{"name": "search", "arguments": map[string]any{"q": pickR(uiStrings), "n": r.IntN(50)}})
				d = string(b)
			} else {
				d = chunkR(pickR(sh.srcs), n)
			}
			docs = append(docs, d)
			got += len(d)
		}
	}
	r.Shuffle(len(docs), func(i, j int) { docs[i], docs[j] = docs[j], docs[i] })
	return strings.Join(docs, "\n\n")
}
