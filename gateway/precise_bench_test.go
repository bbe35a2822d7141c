package gateway

import (
	"fmt"
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
// (the count cache on, as by default, its conversation counted before),
// with precise routing off (the door alone) and on (the door, the prompt's
// ids from its render, its block keys and the index's match against four
// backends, one holding the whole prompt): the difference is what
// routing: precise adds. Targets: <= 10 us at 1k, <= 150 us at 30k added.
func BenchmarkDoorPrecise(b *testing.B) {
	tok, err := tokenize.LoadDir(fixtures.ModelDir(b, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cc := tokenize.NewCountCache(64 << 20)
	if err := cc.Register(tok); err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Routing: config.RoutingPrecise, Backends: []config.BackendConfig{{URL: "http://127.0.0.1:1"}}}}
	fl, err := fleet.New(cfg.Fleet(), nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	fm, _ := fl.Model("m")
	idx := fm.Index()
	names := []string{"b0", "b1", "b2", "b3"}
	for _, n := range names {
		idx.Add(n, 0, 1)
		idx.SetState(n, 0, true, "")
	}
	rt := &modelRuntime{name: "m", fm: fm, tok: tok}
	door := admission.NewDoor(benchCatalog{admission.Model{Name: "m", Counter: &cachedCounter{Model: tok, cache: cc}, MaxModelLen: 1 << 16, Ref: rt}})
	count := func(body string) int {
		dec, rej := door.Check(admission.Chat, []byte(body))
		if rej != nil {
			b.Fatal(rej)
		}
		return dec.PromptTokens
	}
	for _, size := range []int{1000, 30000} {
		s, n := fixtures.ConversationOf(b, size, `,"max_tokens":16`, count)
		body := []byte(s)
		// b0 holds every block of the prompt.
		v, _ := ojson.Parse(body, ojson.DefaultMaxDepth)
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
			hashes[i] = kvevents.Hash(i + 1)
		}
		idx.Apply("b0", kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockStored, BlockHashes: hashes, TokenIDs: stored, BlockSize: 16}}})
		cached := make([]int, len(names))
		b.Run(fmt.Sprintf("%dk/off", size/1000), func(b *testing.B) {
			b.ReportMetric(float64(n), "prompt_tokens")
			b.ReportAllocs()
			for b.Loop() {
				if _, rej := door.Check(admission.Chat, body); rej != nil {
					b.Fatal(rej)
				}
			}
		})
		b.Run(fmt.Sprintf("%dk/on", size/1000), func(b *testing.B) {
			b.ReportMetric(float64(n), "prompt_tokens")
			b.ReportAllocs()
			for b.Loop() {
				dec, rej := door.Check(admission.Chat, body)
				if rej != nil {
					b.Fatal(rej)
				}
				var t admission.Ticket
				q := preciseTicket(rt, admission.Chat, dec, &t)
				if q == nil || !q.Match(names, cached) || cached[0] != full {
					b.Fatalf("cached = %v, want %d on b0", cached, full)
				}
				releaseQuery(q)
			}
		})
	}
}
