package admission

import (
	"fmt"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// chat1k is a ~1,000-token multi-turn chat.
func chat1k() string {
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":256,"messages":[{"role":"system","content":"You are a careful assistant who answers in detail."}`)
	turn := "Explain how a reverse proxy streams server-sent events to a client without buffering, and why flushing matters for latency. "
	for i := range 10 {
		fmt.Fprintf(&b, `,{"role":"user","content":"%s Question %d."}`, strings.Repeat(turn, 2), i)
		fmt.Fprintf(&b, `,{"role":"assistant","content":"%s"}`, turn)
	}
	b.WriteString(`,{"role":"user","content":"Summarise."}]}`)
	return b.String()
}

func loadModel(b *testing.B, name string) *tokenize.Model {
	m, err := tokenize.LoadDir(fixtures.ModelDir(b, name), tokenize.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkDoorChat1k: the whole door (parse, validate, render, count) for
// a 1,000-token chat. Target: <= 0.4 ms on one core.
func BenchmarkDoorChat1k(b *testing.B) {
	body := []byte(chat1k())
	for _, name := range []string{"qwen3", "llama3_1"} {
		b.Run(name, func(b *testing.B) {
			m := loadModel(b, name)
			d := NewDoor(catalog{"m": {Name: "m", Counter: m, MaxModelLen: 32768}})
			dec, rej := d.Check(Chat, body)
			if rej != nil || dec.Uncounted != Counted {
				b.Fatalf("%v %+v", rej, dec)
			}
			b.ReportMetric(float64(dec.PromptTokens), "prompt_tokens")
			b.ReportAllocs()
			for b.Loop() {
				d.Check(Chat, body)
			}
		})
	}
}

// BenchmarkDoorHugePrompt: a 10 MB prompt against a 4k context must be
// rejected after counting only as far as needed. Target: <= 50 ms.
func BenchmarkDoorHugePrompt(b *testing.B) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10<<20/45)
	bodies := map[Endpoint][]byte{
		Completions: []byte(`{"model":"m","max_tokens":100,"prompt":"` + text + `"}`),
		Chat:        []byte(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"` + text + `"}]}`),
	}
	m := loadModel(b, "qwen3")
	d := NewDoor(catalog{"m": {Name: "m", Counter: m, MaxModelLen: 4096}})
	for _, ep := range []Endpoint{Completions, Chat} {
		b.Run(ep.String(), func(b *testing.B) {
			body := bodies[ep]
			_, rej := d.Check(ep, body)
			if rej == nil || rej.Reason != ContextLength || rej.Context.PromptExact {
				b.Fatalf("want a lower-bound context rejection, got %+v", rej)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				d.Check(ep, body)
			}
		})
	}
}

// BenchmarkParseOnly isolates the JSON read of the 1k chat, for reference.
func BenchmarkParseOnly(b *testing.B) {
	body := []byte(chat1k())
	b.ReportAllocs()
	for b.Loop() {
		ojson.Parse(body, ojson.DefaultMaxDepth)
	}
}

// BenchmarkDoorLongPretoken: a 7 MB chat prompt that is one pre-token
// ("aaaa…", no whitespace), side by side with the same size of spaced text
// ("a a a …"), against a 32k and a 128k context. Both must be refused as
// over the context with a few tens of milliseconds of CPU, not seconds:
// the door's work is bounded by bytes as well as tokens.
func BenchmarkDoorLongPretoken(b *testing.B) {
	const size = 7 << 20
	texts := []struct{ name, text string }{
		{"pretoken", strings.Repeat("a", size)},
		{"spaced", strings.Repeat("a ", size/2)},
	}
	// llama2 has no chat template: its prompt goes to /v1/completions.
	for _, mc := range []struct {
		name string
		ep   Endpoint
	}{{"qwen3", Chat}, {"llama3_1", Chat}, {"gemma3", Chat}, {"llama2", Completions}} {
		m := loadModel(b, mc.name)
		for _, l := range []int{32768, 131072} {
			d := NewDoor(catalog{"m": {Name: "m", Counter: m, MaxModelLen: l}})
			for _, tx := range texts {
				body := []byte(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"` + tx.text + `"}]}`)
				if mc.ep == Completions {
					body = []byte(`{"model":"m","max_tokens":100,"prompt":"` + tx.text + `"}`)
				}
				b.Run(fmt.Sprintf("%s/ctx=%d/%s", mc.name, l, tx.name), func(b *testing.B) {
					_, rej := d.Check(mc.ep, body)
					if rej == nil || rej.Reason != ContextLength {
						b.Fatalf("want a context rejection, got %+v", rej)
					}
					b.SetBytes(int64(len(body)))
					b.ReportAllocs()
					for b.Loop() {
						d.Check(mc.ep, body)
					}
					b.ReportMetric(float64(rej.Context.PromptTokens), "prompt_tokens")
				})
			}
		}
	}
}
