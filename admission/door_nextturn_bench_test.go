package admission

import (
	"fmt"
	"syscall"
	"testing"
	"time"

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

// benchMessages are n messages of at least size bytes each, cut from the
// tokenizer benchmark's mix (code, prose in many scripts, JSON, logs).
func benchMessages(b *testing.B, n, size int) []string {
	docs := fixtures.BenchDocs(b)
	msgs := make([]string, n)
	k := 0
	for i := range msgs {
		msgs[i] = fixtures.Message(docs, &k, size)
	}
	return msgs
}

func conversationBody(msgs []string) []byte { return []byte(fixtures.Conversation(msgs, "")) }

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op, the process's CPU time per iteration since
// t0 (its GC included): steadier than ns/op on a machine shared with
// other work, for side-by-side comparisons.
func reportCPU(b *testing.B, t0 time.Duration, n int) {
	if n > 0 {
		b.ReportMetric(float64(cpuTime()-t0)/float64(n), "cpu-ns/op")
	}
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
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				i++
				turn[99] = fmt.Sprintf("%s (%d)", msgs[99], i)
				turn[100] = fmt.Sprintf("%s (%d)", msgs[100], i)
				body := conversationBody(turn)
				t0 := cpuTime()
				b.StartTimer()
				if _, rej := d.Check(Chat, body); rej != nil {
					b.Fatal(rej)
				}
				b.StopTimer()
				cpu += cpuTime() - t0
				b.StartTimer()
			}
			reportCPU(b, cpuTime()-cpu, i)
		})
	}
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		b.ReportAllocs()
		t0, n := cpuTime(), 0
		for b.Loop() {
			ojson.Parse(next, ojson.DefaultMaxDepth)
			n++
		}
		reportCPU(b, t0, n)
	})
}

// BenchmarkDoorChat1kCPU is BenchmarkDoorChat1k and BenchmarkParseOnly
// with cpu-ns/op, for side-by-side runs on a busy machine.
func BenchmarkDoorChat1kCPU(b *testing.B) {
	body := []byte(chat1k())
	for _, name := range []string{"qwen3", "llama3_1"} {
		b.Run(name, func(b *testing.B) {
			m := loadModel(b, name)
			d := NewDoor(catalog{"m": {Name: "m", Counter: m, MaxModelLen: 32768}})
			b.ReportAllocs()
			t0, n := cpuTime(), 0
			for b.Loop() {
				d.Check(Chat, body)
				n++
			}
			reportCPU(b, t0, n)
		})
	}
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		t0, n := cpuTime(), 0
		for b.Loop() {
			ojson.Parse(body, ojson.DefaultMaxDepth)
			n++
		}
		reportCPU(b, t0, n)
	})
}
