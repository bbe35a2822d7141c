package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/kvevents"
	"github.com/maitred-dev/maitred/tokenize"
)

// benchCatalog is the door's catalog of one model, as the gateway's.
type benchCatalog struct{ m admission.Model }

func (c benchCatalog) Lookup(name string) (admission.Model, bool) { return c.m, name == c.m.Name }
func (c benchCatalog) Names() []string                            { return []string{c.m.Name} }

// BenchmarkDoorPrecise: the door's cost for a 1k- and a 30k-token chat
// (the count cache on, as by default), with precise routing off (the door
// of a model routed without events) and on (the door of a precise model,
// whose count keys the prompt's blocks, and the ticket's match against
// four backends, one holding the conversation's blocks): the difference
// is what routing: precise adds. Targets: <= 10 us at 1k, <= 150 us at
// 30k added. first: a conversation never seen (every iteration a new
// one, whose first message differs); next: the next turn of a counted
// conversation (an answer and a question added, new each iteration).
// paired: each iteration one request with it off and one with it on (in
// turn first), each one's thread CPU time taken (pairedCPU): on a busy
// machine the median of the paired differences (added-cpu-ns) is the
// figure to read.
func BenchmarkDoorPrecise(b *testing.B) {
	tok, err := tokenize.LoadDir(fixtures.ModelDir(b, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	rt, cc := preciseRuntime(b, tok, 64<<20)
	idx := rt.fm.Index()
	names := []string{"b0", "b1", "b2", "b3"}
	for _, n := range names {
		idx.Add(n, 0, 1)
		idx.SetState(n, 0, true, "")
	}
	doorOf := func(c admission.Counter) *admission.Door {
		return admission.NewDoor(benchCatalog{admission.Model{Name: "m", Counter: c, MaxModelLen: 1 << 16, Ref: rt}})
	}
	off := doorOf(&cachedCounter{Model: tok, cache: cc}) // a model routed without events
	on := doorOf(newCachedCounter(rt, cc))
	check := func(door *admission.Door, body string) admission.Decision {
		dec, rej := door.Check(admission.Chat, []byte(body))
		if rej != nil {
			b.Fatal(rej)
		}
		return dec
	}
	docs := fixtures.BenchDocs(b)
	for _, size := range []int{1000, 30000} {
		base, n := fixtures.ConversationOf(b, size, `,"max_tokens":16`, func(body string) int { return check(off, body).PromptTokens })
		check(on, base)
		// b0 holds every full block of the conversation.
		v, _ := ojson.Parse([]byte(base), ojson.DefaultMaxDepth)
		ids, err := tok.TokenizeChat(v)
		if err != nil {
			b.Fatal(err)
		}
		full := len(ids) / 16 * 16
		stored := make([]int32, full)
		hashes := make([]kvevents.Hash, full/16)
		for i := range stored {
			stored[i] = int32(ids[i])
		}
		for i := range hashes {
			hashes[i] = kvevents.Hash(size + i + 1)
		}
		idx.Apply("b0", kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockStored, BlockHashes: hashes, TokenIDs: stored, BlockSize: 16}}})
		k := size
		turn := func(first bool) string {
			k++
			if first { // a new conversation: its first message differs
				i := strings.Index(base, `"content":"`) + len(`"content":"`)
				return base[:i] + fmt.Sprintf("Conversation %d. ", k) + base[i:]
			}
			q1, _ := json.Marshal(fmt.Sprintf("Answer %d. %s", k, docs[k%len(docs)]))
			q2, _ := json.Marshal(fmt.Sprintf("Question %d. %s", k, docs[(k+1)%len(docs)]))
			return base[:len(base)-2] + `,{"role":"assistant","content":` + string(q1) + `},{"role":"user","content":` + string(q2) + `}]}`
		}
		// What b0 holds of a turn: the full blocks it shares with the
		// conversation (Qwen3's template rewrites a last assistant turn).
		held := func(body string) int {
			v, _ := ojson.Parse([]byte(body), ojson.DefaultMaxDepth)
			next, err := tok.TokenizeChat(v)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for n < len(ids) && n < len(next) && ids[n] == next[n] {
				n++
			}
			return n / 16 * 16
		}
		cached := make([]int, len(names))
		for _, kind := range []string{"first", "next"} {
			want := held(turn(kind == "first"))
			// measure runs door on a fresh turn each iteration, timing
			// (and taking the thread CPU of) the door alone.
			measure := func(name string, door func(body string)) {
				b.Run(fmt.Sprintf("%dk/%s/%s", size/1000, kind, name), func(b *testing.B) {
					b.ReportMetric(float64(n), "prompt_tokens")
					b.ReportAllocs()
					var cpu threadCPU
					for b.Loop() {
						b.StopTimer()
						body := turn(kind == "first")
						b.StartTimer()
						cpu.start()
						door(body)
						cpu.stop()
					}
					cpu.report(b)
				})
			}
			measure("off", func(body string) { check(off, body) })
			onCheck := func(body string) {
				dec := check(on, body)
				var t admission.Ticket
				q := preciseTicket(rt, admission.Chat, dec, &t)
				if q == nil || !q.Match(names, cached) || cached[0] != want {
					b.Fatalf("cached = %v, want %d on b0", cached, want)
				}
				releaseQuery(q)
			}
			measure("on", onCheck)
			b.Run(fmt.Sprintf("%dk/%s/paired", size/1000, kind), func(b *testing.B) {
				var p pairedCPU
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					offBody, onBody := turn(kind == "first"), turn(kind == "first")
					b.StartTimer()
					p.pair(i%2 == 0, func() { check(off, offBody) }, func() { onCheck(onBody) })
				}
				p.report(b)
			})
		}
	}
}

// preciseRuntime is model "m" routed precisely (its fleet model has an
// index; no backend answers) with tok, and a count cache of budget bytes
// that tok is registered with.
func preciseRuntime(tb testing.TB, tok *tokenize.Model, budget int64) (*modelRuntime, *tokenize.CountCache) {
	tb.Helper()
	cc := tokenize.NewCountCache(budget)
	if err := cc.Register(tok); err != nil {
		tb.Fatal(err)
	}
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Routing: config.RoutingPrecise, Backends: []config.BackendConfig{{URL: "http://127.0.0.1:1"}}}}
	fl, err := fleet.New(cfg.Fleet(), nil, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	fm, _ := fl.Model("m")
	return &modelRuntime{name: "m", fm: fm, tok: tok}, cc
}
