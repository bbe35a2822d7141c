package admission

import (
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// evictionBytes is the memory BenchmarkDoorCold writes between two doors:
// twice this machine's 32 MB L3, so that nothing of the last door is left
// in any cache level when the next one starts.
const evictionBytes = 64 << 20

// BenchmarkDoorCold is the door (qwen3) for the harness's two chat sizes,
// hot (the same chat over and over: what BenchmarkDoorChat1k measures)
// and evicted (every cache written over before each door, its time not
// counted). At a fixed rate on a shared machine the door runs between the
// two: other work evicts much of its code and tables between requests,
// which is why `go run ./bench` reads a door several times its hot cost.
func BenchmarkDoorCold(b *testing.B) {
	m := loadModel(b, "qwen3")
	d := NewDoor(catalog{"m": {Name: "m", Counter: m, MaxModelLen: 32768}})
	// The 1k chat: varied messages of the tokenizer benchmark's mix,
	// added until the prompt holds 1,000 tokens (as BenchmarkProxy's).
	chat1k, _ := fixtures.ConversationOf(b, 1000, `,"max_tokens":8`, func(body string) int {
		dec, _ := d.Check(Chat, []byte(body))
		return dec.PromptTokens
	})
	chats := []struct{ name, body string }{
		{"short", `{"model":"m","max_tokens":8,"messages":[{"role":"system","content":"You are a helpful assistant. Ticket 1."},` +
			`{"role":"user","content":"Write a haiku about proxies and tokens."}]}`},
		{"1k", chat1k},
	}
	evict := make([]byte, evictionBytes)
	for _, c := range chats {
		body := []byte(c.body)
		dec, rej := d.Check(Chat, body)
		if rej != nil || dec.Uncounted != Counted {
			b.Fatalf("%s: %v %+v", c.name, rej, dec)
		}
		for _, evicted := range []bool{false, true} {
			name := c.name + "/hot"
			if evicted {
				name = c.name + "/evicted"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if evicted {
						b.StopTimer()
						for i := 0; i < len(evict); i += 64 {
							evict[i]++
						}
						b.StartTimer()
					}
					d.Check(Chat, body)
				}
				b.ReportMetric(float64(dec.PromptTokens), "prompt-tokens")
			})
		}
	}
}
