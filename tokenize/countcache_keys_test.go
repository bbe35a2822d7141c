package tokenize

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/prefixindex"
)

// indexKeyer is prefixindex's chain with a block size, as the gateway
// keys a precise model's prompts.
type indexKeyer struct{ size int }

func (k *indexKeyer) BlockSize() int           { return k.size }
func (k *indexKeyer) Root(scope string) uint64 { return uint64(prefixindex.Root(scope)) }
func (k *indexKeyer) Next(parent uint64, ids []int) uint64 {
	return uint64(prefixindex.Next(prefixindex.Key(parent), ids))
}

// keysCase is one request of a keyed-count differential run.
type keysCase struct {
	msgs       []any // message objects
	scope      string
	salt       string
	addSpecial string // "", "true" or "false": the body's add_special_tokens
	limit      int
	kr         *indexKeyer
}

func (kc keysCase) body() string {
	var b strings.Builder
	b.WriteString(`{"model":"m"`)
	if kc.salt != "" {
		fmt.Fprintf(&b, `,"cache_salt":%q`, kc.salt)
	}
	if kc.addSpecial != "" {
		b.WriteString(`,"add_special_tokens":` + kc.addSpecial)
	}
	msgs, _ := json.Marshal(kc.msgs)
	b.WriteString(`,"messages":`)
	b.Write(msgs)
	b.WriteString(`}`)
	return b.String()
}

// checkKeys counts kc through c with keys and fails unless the count is
// the uncached one and the keys are those of the whole render tokenized
// at once (prefixindex.AppendKeys of AppendEncode).
func checkKeys(t testing.TB, m *Model, c *CountCache, what string, kc keysCase) *PromptKeys {
	t.Helper()
	v := mustParse(t, kc.body())
	pk := NewPromptKeys()
	got, gerr := c.CountChatKeys(m, v, kc.limit, kc.kr, kc.scope, pk)
	want, werr := m.CountChat(v, kc.limit)
	sameCount(t, what, got, gerr, want, werr)
	if werr != nil || !want.Exact || want.Truncated || kc.salt != "" {
		if got.Keys != nil {
			t.Fatalf("%s: keys for a count that is not exact, over its limit or salted: %+v", what, want)
		}
		return nil
	}
	if got.Keys != pk {
		t.Fatalf("%s: no keys for an exact count", what)
	}
	_, addSpecial, err := m.renderChat(v)
	if err != nil {
		t.Fatal(err)
	}
	ids := m.enc.(*Tokenizer).AppendEncode(nil, want.Rendered, addSpecial)
	wantKeys := prefixindex.AppendKeys(nil, kc.scope, ids, kc.kr.size)
	if pk.Tokens != len(ids) || pk.Tokens != want.Tokens || pk.Scope != kc.scope {
		t.Fatalf("%s: keyed %d tokens (scope %q), the prompt has %d ids (count %d, scope %q)", what, pk.Tokens, pk.Scope, len(ids), want.Tokens, kc.scope)
	}
	if len(pk.Keys) != len(wantKeys) {
		t.Fatalf("%s: %d keys, full tokenization gives %d", what, len(pk.Keys), len(wantKeys))
	}
	for i := range wantKeys {
		if pk.Keys[i] != uint64(wantKeys[i]) {
			t.Fatalf("%s: key %d of %d differs from full tokenization's", what, i, len(wantKeys))
		}
	}
	return pk
}

// TestCountChatKeysDifferential grows conversations through one small
// cache (it evicts) with keyed counts, and holds every count to the
// uncached one and every prompt's keys to those of its whole render
// tokenized at once: new turns, edits of earlier turns (a word, an added
// token typed in), regenerated answers, limits, a LoRA scope, cache_salt,
// add_special_tokens both ways, two block sizes, and Qwen3's template,
// which drops the reasoning of earlier assistant turns.
func TestCountChatKeysDifferential(t *testing.T) {
	docs := fixtures.BenchDocs(t)
	k16, k7 := &indexKeyer{16}, &indexKeyer{7}
	for _, model := range []string{"qwen3", "llama3_1"} {
		t.Run(model, func(t *testing.T) {
			m := fixtureModel(t, model)
			c := newTestCache(400 * NodeBytes)
			if err := c.Register(m); err != nil {
				t.Fatal(err)
			}
			special := rawAddedTokens(m.enc.(*Tokenizer))
			rng := rand.New(rand.NewPCG(29, uint64(len(model))))
			convs, steps := 8, 24
			if testing.Short() || raceEnabled {
				convs, steps = 4, 16
			}
			k := rng.IntN(len(docs))
			text := func() string { return docsText(docs, &k, 40+rng.IntN(900)) }
			// A system prompt shared by every conversation.
			system := map[string]any{"role": "system", "content": text()}
			for conv := range convs {
				kc := keysCase{kr: k16, msgs: []any{system}}
				switch conv % 4 {
				case 1:
					kc.scope = "adapter-a" // a LoRA adapter's own chain
				case 2:
					kc.addSpecial = "true"
				case 3:
					kc.kr = k7
				}
				var last *PromptKeys
				for step := range steps {
					kc.limit, kc.salt = 0, ""
					switch op := rng.IntN(10); {
					case op < 5: // a new turn
						role := "user"
						if len(kc.msgs)%2 == 0 {
							role = "assistant"
						}
						content := text()
						if role == "assistant" && rng.IntN(2) == 0 {
							content = "<think>\n" + text() + "</think>\n\n" + content // Qwen3 drops it from later renders
						}
						kc.msgs = append(kc.msgs, map[string]any{"role": role, "content": content})
					case op == 5: // an earlier turn edited
						j := 1 + rng.IntN(len(kc.msgs))
						if j < len(kc.msgs) {
							msg := kc.msgs[j].(map[string]any)
							s := msg["content"].(string)
							p := rng.IntN(len(s) + 1)
							ins := " edited "
							if rng.IntN(2) == 0 {
								ins = special[rng.IntN(len(special))]
							}
							kc.msgs = slices.Clone(kc.msgs)
							kc.msgs[j] = map[string]any{"role": msg["role"], "content": s[:p] + ins + s[p:]}
						}
					case op == 6: // a regenerated answer
						if len(kc.msgs) > 2 {
							kc.msgs = kc.msgs[:len(kc.msgs)-1]
						}
					case op == 7:
						kc.limit = 1 + rng.IntN(3000)
					case op == 8:
						kc.salt = fmt.Sprint("salt-", rng.IntN(2))
					}
					pk := checkKeys(t, m, c, fmt.Sprintf("conversation %d step %d (%d messages, scope %q, limit %d)", conv, step, len(kc.msgs), kc.scope, kc.limit), kc)
					last.Release()
					last = pk
				}
				last.Release()
			}
			st := c.Stats()
			t.Logf("%s: %+v", model, st)
			if st.Hits == 0 || st.Fallbacks == 0 || st.Misses == 0 || st.Bytes > st.MaxBytes {
				t.Errorf("hits, fallbacks and misses expected, within the budget: %+v", st)
			}
		})
	}
}

// TestCountChatKeysLong: keyed counts at the cache's own thresholds (long
// conversations, boundaries past the fixed header), through deep chains
// of chunks (past maxChunkDepth: one turn added at a time), equal the
// keys of the whole render; a model without keys keeps no links.
func TestCountChatKeysLong(t *testing.T) {
	docs := fixtures.BenchDocs(t)
	m := fixtureModel(t, "qwen3")
	c := NewCountCache(1 << 20)
	if err := c.Register(m); err != nil {
		t.Fatal(err)
	}
	k := 0
	var msgs []any
	for turn := range 2*maxChunkDepth + 16 {
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": fixtures.Message(docs, &k, 1500)})
		checkKeys(t, m, c, fmt.Sprintf("turn %d", turn), keysCase{msgs: msgs, kr: &indexKeyer{16}}).Release()
	}
	st := c.Stats()
	if st.Hits <= maxChunkDepth || st.Bytes <= int64(st.Entries)*NodeBytes {
		t.Errorf("expected hits past the chunk depth and links: %+v", st)
	}
	c.mu.Lock()
	flat := map[*keyChunk]bool{} // the first turn's chunk, and the flattened ones
	for _, l := range c.links {
		if l.chunk.depth > maxChunkDepth {
			t.Errorf("a chain %d chunks deep", l.chunk.depth)
		}
		if l.chunk.prev == nil && l.chunk.start == 0 {
			flat[l.chunk] = true
		}
	}
	c.mu.Unlock()
	if len(flat) < 2 {
		t.Error("no chain was flattened")
	}
	// Plain counts of the same conversation keep no links.
	p := NewCountCache(1 << 20)
	if err := p.Register(m); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CountChat(m, mustParse(t, fixtures.Conversation([]string{fixtures.Message(docs, &k, 20000), "ok", "go on"}, "")), 0); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Entries == 0 || st.Bytes != int64(st.Entries)*NodeBytes || p.links != nil {
		t.Errorf("a plain count kept links: %+v", st)
	}
}

// TestCountChatKeysConcurrent: conversations sharing a system prompt,
// keyed from several goroutines through one small cache (run with
// -race), each prompt's keys those of its whole render.
func TestCountChatKeysConcurrent(t *testing.T) {
	docs := fixtures.BenchDocs(t)
	m := fixtureModel(t, "qwen3")
	c := newTestCache(64 * NodeBytes)
	if err := c.Register(m); err != nil {
		t.Fatal(err)
	}
	kr := &indexKeyer{16}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			msgs := []string{docs[0][:min(len(docs[0]), 800)]} // shared first message
			for turn := range 8 {
				d := docs[rng.IntN(len(docs))]
				msgs = append(msgs, d[:min(len(d), 600)])
				if turn == 5 { // an earlier turn edited
					msgs[1] = "changed " + msgs[1]
				}
				v := mustParse(t, fixtures.Conversation(msgs, ""))
				pk := NewPromptKeys()
				got, _ := c.CountChatKeys(m, v, 0, kr, "", pk)
				want, _ := m.CountChat(v, 0)
				ids := m.enc.(*Tokenizer).AppendEncode(nil, want.Rendered, false)
				wantKeys := prefixindex.AppendKeys(nil, "", ids, 16)
				if got.Tokens != want.Tokens || got.Keys == nil || fmt.Sprint(pk.Keys) != fmt.Sprint(wantKeys) {
					errs <- fmt.Errorf("goroutine %d turn %d: %d tokens and %d keys, the full tokenization %d and %d", g, turn, got.Tokens, len(pk.Keys), want.Tokens, len(wantKeys))
					return
				}
				pk.Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := c.Stats(); st.Bytes > st.MaxBytes {
		t.Errorf("over budget: %+v", st)
	}
}

// coldBase is a conversation of about tokens qwen3 tokens of ~100-byte
// messages (BenchmarkDoorPrecise's shape: a boundary every few dozen
// tokens) and where in it its first message's text starts.
func coldBase(tb testing.TB, m *Model, tokens int) (string, int) {
	tb.Helper()
	base, _ := fixtures.ConversationOf(tb, tokens, "", func(body string) int {
		cnt, err := m.CountChat(mustParse(tb, body), 0)
		if err != nil {
			tb.Fatal(err)
		}
		return cnt.Tokens
	})
	return base, strings.Index(base, `"content":"`) + len(`"content":"`)
}

// coldBody is base with its first message changed by k (at from
// coldBase): a conversation no other k continues.
func coldBody(base string, at, k int) string {
	return base[:at] + fmt.Sprintf("Conversation %d. ", k) + base[at:]
}

// coldConversations are n+1 coldBody bodies of a coldBase conversation.
func coldConversations(tb testing.TB, m *Model, tokens, n int) []string {
	tb.Helper()
	base, at := coldBase(tb, m, tokens)
	out := make([]string, n+1)
	for k := range out {
		out[k] = coldBody(base, at, k)
	}
	return out
}

// TestCountChatKeysKeepsFewNodes: a keyed count of a new long prompt of
// short messages keeps nodes only keyedStride bytes apart and at its last
// keyedTips boundaries (far fewer than its boundaries, which a plain
// count keeps), and the next turn still continues from its end (a hit)
// with the keys of its whole render.
func TestCountChatKeysKeepsFewNodes(t *testing.T) {
	m := fixtureModel(t, "qwen3")
	raw := coldConversations(t, m, 8000, 0)[0]
	body := mustParse(t, raw)
	text, _, err := m.renderChat(body)
	if err != nil {
		t.Fatal(err)
	}
	plain, keyed := NewCountCache(64<<20), NewCountCache(64<<20)
	for _, c := range []*CountCache{plain, keyed} {
		if err := c.Register(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := plain.CountChat(m, body, 0); err != nil {
		t.Fatal(err)
	}
	kr := &indexKeyer{16}
	pk := NewPromptKeys()
	if cnt, err := keyed.CountChatKeys(m, body, 0, kr, "", pk); err != nil || cnt.Keys == nil {
		t.Fatal("no keys", err)
	}
	pk.Release()
	bounds, kept := plain.Stats().Entries, keyed.Stats().Entries
	if most := len(text)/keyedStride + keyedTips; kept > most || bounds < 4*most {
		t.Fatalf("a keyed count kept %d nodes (at most %d expected) of %d boundaries", kept, most, bounds)
	}
	// The next turn: an answer and a question.
	var req struct{ Messages []any }
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		t.Fatal(err)
	}
	msgs := req.Messages
	msgs = append(msgs, map[string]any{"role": "assistant", "content": "An answer."}, map[string]any{"role": "user", "content": "And then?"})
	hits := keyed.Stats().Hits
	checkKeys(t, m, keyed, "next turn", keysCase{msgs: msgs, kr: kr}).Release()
	if st := keyed.Stats(); st.Hits != hits+1 {
		t.Fatalf("the next turn did not continue from the last one's end: %+v", st)
	}
}

// TestCountChatKeysColdAllocs: a keyed count of a new prompt allocates
// what rendering it and encoding it into a reused buffer do (the ids
// themselves) and a fixed few more (the kept boundaries' links, their
// trailing ids, the chunk and its keys, the chain's header), whatever the
// prompt's length: nothing a boundary or a block.
func TestCountChatKeysColdAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m := fixtureModel(t, "qwen3")
	tok := m.enc.(*Tokenizer)
	kr := &indexKeyer{16}
	const runs = 10
	extra := map[int]float64{}
	for _, tokens := range []int{8000, 30000} {
		var bodies []*ojson.Value
		for _, raw := range coldConversations(t, m, tokens, 2*runs+1) {
			bodies = append(bodies, mustParse(t, raw))
		}
		var ids []int
		k := 0
		encoded := testing.AllocsPerRun(runs, func() {
			text, addSpecial, err := m.renderChat(bodies[k%len(bodies)])
			if err != nil {
				t.Fatal(err)
			}
			k++
			ids = tok.AppendEncode(ids[:0], text, addSpecial)
		})
		// A cache full and evicting, as it runs: its own growth is not
		// the count's.
		c := NewCountCache(64 << 10)
		if err := c.Register(m); err != nil {
			t.Fatal(err)
		}
		count := func(v *ojson.Value) {
			pk := NewPromptKeys()
			if cnt, err := c.CountChatKeys(m, v, 0, kr, "", pk); err != nil || cnt.Keys == nil {
				t.Fatal("no keys", err)
			}
			pk.Release()
		}
		for _, v := range bodies[runs+1:] {
			count(v)
		}
		k = 0
		keyed := testing.AllocsPerRun(runs, func() {
			count(bodies[k])
			k++
		})
		extra[tokens] = keyed - encoded
		t.Logf("%d tokens: rendered and encoded %.0f, keyed count %.0f allocations", tokens, encoded, keyed)
		if keyed > encoded+6 {
			t.Errorf("%d tokens: a keyed count allocates %.0f times, rendering and encoding the prompt %.0f", tokens, keyed, encoded)
		}
	}
	if extra[30000] > extra[8000]+1 {
		t.Errorf("a keyed count's allocations grow with the prompt: %.0f more than its encoding at 8k tokens, %.0f at 30k", extra[8000], extra[30000])
	}
}
