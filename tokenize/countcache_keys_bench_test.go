package tokenize

import (
	"fmt"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// BenchmarkCountChatKeysCold: a new conversation of about 1k and 30k
// qwen3 tokens (the gateway's BenchmarkDoorPrecise shape: ~100-byte
// messages), nothing of it counted before (each iteration's first message
// differs), counted through the cache plain (CountChat, a model routed
// without events) and keyed (CountChatKeys, a precise model's count with
// block size 16): the difference is what keying a cold prompt adds.
func BenchmarkCountChatKeysCold(b *testing.B) {
	m := fixtureModel(b, "qwen3")
	for _, size := range []int{1000, 30000} {
		base, _ := fixtures.ConversationOf(b, size, "", func(body string) int {
			cnt, err := m.CountChat(mustParse(b, body), 0)
			if err != nil {
				b.Fatal(err)
			}
			return cnt.Tokens
		})
		i := strings.Index(base, `"content":"`) + len(`"content":"`)
		for _, keyed := range []bool{false, true} {
			name := fmt.Sprintf("%dk/plain", size/1000)
			if keyed {
				name = fmt.Sprintf("%dk/keyed", size/1000)
			}
			b.Run(name, func(b *testing.B) {
				c := NewCountCache(64 << 20)
				if err := c.Register(m); err != nil {
					b.Fatal(err)
				}
				kr := &indexKeyer{16}
				k := 0
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					k++
					v := mustParse(b, base[:i]+fmt.Sprintf("Conversation %d. ", k)+base[i:])
					b.StartTimer()
					var cnt Count
					var err error
					if keyed {
						pk := NewPromptKeys()
						cnt, err = c.CountChatKeys(m, v, 0, kr, "", pk)
						if cnt.Keys == nil {
							b.Fatal("no keys")
						}
						pk.Release()
					} else {
						cnt, err = c.CountChat(m, v, 0)
					}
					if err != nil || !cnt.Exact {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
