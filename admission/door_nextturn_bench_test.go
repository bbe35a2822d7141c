package admission

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// cacheCounter counts chats through a count cache (the gateway's
// cachedCounter, without the gateway).
type cacheCounter struct {
	*tokenize.Model
	cache *tokenize.CountCache
}

func (c cacheCounter) CountChat(body *ojson.Value, limit int) (tokenize.Count, error) {
	return c.cache.CountChat(c.Model, body, limit)
}

// benchMessages cuts the tokenizer benchmark's mix (code, prose in many
// scripts, JSON, logs) into n messages of at least size bytes each.
func benchMessages(b *testing.B, n, size int) []string {
	f, err := os.Open(filepath.Join(fixtures.Root(), "tokenize", "testdata", "tok", "benchmix.txt.gz"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		b.Fatal(err)
	}
	var docs []string
	for _, d := range strings.Split(string(raw), "\n\n") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	msgs := make([]string, n)
	k := 0
	for i := range msgs {
		var sb strings.Builder
		for sb.Len() < size {
			sb.WriteString(docs[k%len(docs)])
			sb.WriteString("\n\n")
			k++
		}
		msgs[i] = sb.String()
	}
	return msgs
}

func conversationBody(msgs []string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i, s := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i > 0 {
			b.WriteByte(',')
		}
		q, _ := json.Marshal(s)
		fmt.Fprintf(&b, `{"role":%q,"content":%s}`, role, q)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkDoorNextTurn is the door (Check) of the gateway's
// BenchmarkCountCacheNextTurnDoor without HTTP: the next turn of a 50-turn
// conversation of ~120k tokens (~400 kB body) whose previous turn was
// counted through a count cache (hit), and the parse alone of that body.
func BenchmarkDoorNextTurn(b *testing.B) {
	msgs := benchMessages(b, 101, 3700)
	prev := conversationBody(msgs[:99])
	next := conversationBody(msgs)
	for _, name := range []string{"qwen3", "llama3_1"} {
		b.Run(name+"/hit", func(b *testing.B) {
			m := loadModel(b, name)
			cc := tokenize.NewCountCache(64 << 20)
			if err := cc.Register(m); err != nil {
				b.Fatal(err)
			}
			d := NewDoor(catalog{"m": {Name: "m", Counter: cacheCounter{m, cc}, MaxModelLen: 1 << 18}})
			if _, rej := d.Check(Chat, prev); rej != nil {
				b.Fatal(rej)
			}
			// Each turn's answer and question are new, as in the
			// gateway's benchmark: the tail is tokenized every time.
			turn := append([]string(nil), msgs...)
			i := 0
			b.SetBytes(int64(len(next)))
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				i++
				turn[99] = fmt.Sprintf("%s (%d)", msgs[99], i)
				turn[100] = fmt.Sprintf("%s (%d)", msgs[100], i)
				body := conversationBody(turn)
				b.StartTimer()
				if _, rej := d.Check(Chat, body); rej != nil {
					b.Fatal(rej)
				}
			}
		})
	}
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		b.ReportAllocs()
		for b.Loop() {
			ojson.Parse(next, ojson.DefaultMaxDepth)
		}
	})
}
