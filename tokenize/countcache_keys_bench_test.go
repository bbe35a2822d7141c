package tokenize

import (
	"fmt"
	"testing"
)

// BenchmarkCountChatKeysCold: a new conversation of about 1k and 30k
// qwen3 tokens (coldBase: the gateway's BenchmarkDoorPrecise shape),
// nothing of it counted before (each iteration's first message differs),
// counted through the cache plain (CountChat, a model routed without
// events) and keyed (CountChatKeys, a precise model's count with block
// size 16): the difference is what keying a cold prompt adds, without the
// door around it.
func BenchmarkCountChatKeysCold(b *testing.B) {
	m := fixtureModel(b, "qwen3")
	for _, size := range []int{1000, 30000} {
		base, at := coldBase(b, m, size)
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
					v := mustParse(b, coldBody(base, at, k))
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
