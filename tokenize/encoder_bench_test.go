package tokenize

import (
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// tokBenchDocs is the ~1 MB realistic mix (tools/tokcorpus), as the documents
// it was built from.
func tokBenchDocs(tb testing.TB) ([]string, int) {
	raw := fixtures.BenchMix(tb)
	return strings.Split(string(raw), "\n\n"), len(raw)
}

// BenchmarkEncode compares the owned path with tiktoken-go on the same
// ranks, in the same run. tiktoken-go gets its best case: its own regexp2
// pre-tokenizer with specials allowed.
func BenchmarkEncode(b *testing.B) {
	docs, size := tokBenchDocs(b)
	for _, c := range []struct{ model, pattern string }{{"qwen3", patQwen}, {"llama3_1", patCL100K}} {
		tok := loadTokFixture(b, c.model)
		b.Run(c.model+"/owned", func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				for _, d := range docs {
					n += len(tok.Encode(d, false))
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e6, "Mtok/s")
		})
		b.Run(c.model+"/count", func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range docs {
					tok.Count(d, false, 0)
				}
			}
		})
		b.Run(c.model+"/tiktoken", func(b *testing.B) {
			tk := tiktokenFromHF(b, tok, c.pattern)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range docs {
					if tok.normalize != nil {
						d = tok.normalize.apply(d) // tiktoken-go does not normalize
					}
					tk.Encode(d, []string{"all"}, nil)
				}
			}
		})
	}
}

// BenchmarkEncodeCold is BenchmarkEncode's owned path with every
// per-goroutine cache dropped before each pass over the mix: the cost of
// text whose pieces were never seen, where BenchmarkEncode, looping over
// the same 1 MB, also measures how well the piece cache keeps it.
func BenchmarkEncodeCold(b *testing.B) {
	docs, size := tokBenchDocs(b)
	for _, model := range []string{"qwen3", "llama3_1"} {
		tok := loadTokFixture(b, model)
		b.Run(model, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				tok.pool = sync.Pool{}
				for _, d := range docs {
					tok.Encode(d, false)
				}
			}
			tok.pool = sync.Pool{}
		})
	}
}

// BenchmarkPretokenize isolates the hand-written splitter and regexp2.
func BenchmarkPretokenize(b *testing.B) {
	docs, size := tokBenchDocs(b)
	rx, err := newRegexSplitter(patCL100K)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sp   splitter
	}{{"owned", clSplitter{k: 3}}, {"regexp2", rx}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, d := range docs {
					c.sp.split(d, func(string) bool { return true })
				}
			}
		})
	}
}

func BenchmarkSingleWord1MB(b *testing.B) {
	tok := loadTokFixture(b, "qwen3")
	text := strings.Repeat("ab", 1<<19)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Count(text, false, 0)
	}
}

// BenchmarkLoad loads Qwen3's 11 MB tokenizer.json and reports the live
// heap the loaded tokenizer keeps.
func BenchmarkLoad(b *testing.B) {
	path := filepath.Join(fixtures.ModelDir(b, "qwen3"), "tokenizer.json")
	var keep *Tokenizer
	for b.Loop() {
		t, err := LoadTokenizerJSON(path)
		if err != nil {
			b.Fatal(err)
		}
		keep = t
	}
	b.StopTimer()
	var before, after runtime.MemStats
	keep = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() { // sample the live heap while loading
		var m runtime.MemStats
		hi := uint64(0)
		for {
			select {
			case <-stop:
				peak <- hi
				return
			case <-time.After(2 * time.Millisecond):
				runtime.ReadMemStats(&m)
				hi = max(hi, m.HeapAlloc)
			}
		}
	}()
	keep, _ = LoadTokenizerJSON(path)
	close(stop)
	hi := <-peak
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(hi-before.HeapAlloc)/(1<<20), "peakMB")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heapMB")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "allocMB")
	runtime.KeepAlive(keep)
}

// BenchmarkCountModels is the count-only path for every fixture model on
// the same mix.
func BenchmarkCountModels(b *testing.B) {
	docs, size := tokBenchDocs(b)
	for _, model := range tokFixtureModels {
		tok := loadTokFixture(b, model)
		b.Run(model, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range docs {
					tok.Count(d, false, 0)
				}
			}
		})
	}
}

// BenchmarkChatPrompt counts a rendered 10-turn Qwen3 chat (~2.6 KB).
func BenchmarkChatPrompt(b *testing.B) {
	tok := loadTokFixture(b, "qwen3")
	docs, _ := tokBenchDocs(b)
	var sb strings.Builder
	sb.WriteString("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
	for i := 0; i < 10; i++ {
		role := []string{"user", "assistant"}[i%2]
		d := docs[i]
		if len(d) > 250 {
			d = d[:250]
		}
		sb.WriteString("<|im_start|>" + role + "\n" + strings.ToValidUTF8(d, "") + "<|im_end|>\n")
	}
	sb.WriteString("<|im_start|>assistant\n")
	text := sb.String()
	n, _ := tok.Count(text, false, 0)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Count(text, false, 0)
	}
	b.ReportMetric(float64(n), "tokens")
}
