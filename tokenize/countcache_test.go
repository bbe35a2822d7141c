package tokenize

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
)

// newTestCache is a cache that takes every text and keeps every boundary,
// so that short goldens run through it.
func newTestCache(maxBytes int64) *CountCache {
	c := NewCountCache(maxBytes)
	c.minBytes, c.minOffset = 0, 0
	return c
}

// chatModels are the fixture models with chat goldens.
var chatModels = []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"}

// sameCount fails unless the cached result is the uncached one.
func sameCount(t testing.TB, what string, got Count, gotErr error, want Count, wantErr error) {
	t.Helper()
	if errString(gotErr) != errString(wantErr) {
		t.Fatalf("%s: cached error %v, uncached %v", what, gotErr, wantErr)
	}
	if got.Truncated != want.Truncated || got.Exact != want.Exact || got.Reason != want.Reason || got.Rendered != want.Rendered {
		t.Fatalf("%s: cached %+v, uncached %+v", what, got, want)
	}
	// A truncated count is a lower bound over the limit on both paths;
	// an untruncated one is the count.
	if !got.Truncated && got.Tokens != want.Tokens {
		t.Fatalf("%s: cached %d tokens, uncached %d", what, got.Tokens, want.Tokens)
	}
}

// rawAddedTokens lists t's added tokens matched on the raw text.
func rawAddedTokens(t *Tokenizer) []string {
	var out []string
	for s := range t.added {
		if n, _ := t.raw.longest(s, 0); n == len(s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// TestCountCacheRegister: every fixture tokenizer is cacheable; a model
// whose encoder is not a Tokenizer (the built-in demo), and a tokenizer
// without raw added tokens, are not, and are then counted without the
// cache.
func TestCountCacheRegister(t *testing.T) {
	c := newTestCache(1 << 20)
	for _, name := range tokFixtureModels {
		m, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, name), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Register(m); err != nil {
			t.Errorf("%s: not cacheable: %v", name, err)
		}
	}
	demo, err := Builtin("demo")
	if err != nil {
		t.Fatal(err)
	}
	// The demo model's encoder adds ChatML tokens around o200k_base
	// (builtin.go): not a Tokenizer, so not cacheable.
	if err := c.Register(demo); err == nil {
		t.Error("demo: a model whose encoder is not a *Tokenizer was accepted")
	}

	// Not a Tokenizer: refused, and counted as m.CountChat counts.
	qwen := loadTokFixture(t, "qwen3")
	other, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), LoadOptions{Encoder: wrappedEncoder{qwen}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(other); err == nil {
		t.Error("a model whose encoder is not a *Tokenizer was accepted")
	}
	body := mustParse(t, `{"messages":[{"role":"user","content":"Hello there, how are you?"}]}`)
	before := c.Stats()
	got, gerr := c.CountChat(other, body, 0)
	want, werr := other.CountChat(body, 0)
	sameCount(t, "unregistered", got, gerr, want, werr)
	if after := c.Stats(); after.Hits+after.Misses+after.Fallbacks != before.Hits+before.Misses+before.Fallbacks || after.Entries != before.Entries {
		t.Errorf("a model counted without the cache touched it: %+v -> %+v", before, after)
	}

	// No added tokens on the raw text: nothing to cut at.
	bare := &Tokenizer{name: "bare", norm: qwen.norm, added: qwen.added, special: qwen.special,
		normalize: qwen.normalize, split: qwen.split, bl: qwen.bl}
	if err := bare.splitsAtAddedTokens(); err == nil {
		t.Error("a tokenizer without raw added tokens passed")
	}
}

type wrappedEncoder struct{ t *Tokenizer }

func (w wrappedEncoder) Encode(text string, addSpecial bool) []int {
	return w.t.Encode(text, addSpecial)
}
func (w wrappedEncoder) AppendEncode(dst []int, text string, addSpecial bool) []int {
	return append(dst, w.t.Encode(text, addSpecial)...)
}
func (w wrappedEncoder) Count(text string, addSpecial bool, limit int) (int, bool) {
	return w.t.Count(text, addSpecial, limit)
}

func mustParse(t testing.TB, s string) *ojson.Value {
	t.Helper()
	v, err := ojson.Parse([]byte(s), ojson.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCountCacheIdentityCorpus checks the identity the cache relies on,
// count(a+T+b) = count(a+T) + count(b) at every raw added token T, on the
// tokenizer corpus (every category: edge bytes, scripts, code, numbers,
// whitespace runs) cut by added tokens, for every fixture tokenizer.
func TestCountCacheIdentityCorpus(t *testing.T) {
	corpus := loadTokCorpus(t)
	for _, name := range tokFixtureModels {
		t.Run(name, func(t *testing.T) {
			tok := loadTokFixture(t, name)
			added := rawAddedTokens(tok)
			if len(added) == 0 {
				t.Fatal("no raw added tokens")
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			n := 400
			if testing.Short() || raceEnabled {
				n = 60
			}
			for k := 0; k < n; k++ {
				var b strings.Builder
				for range 1 + rng.IntN(5) {
					b.WriteString(corpus[rng.IntN(len(corpus))].Text)
					b.WriteString(added[rng.IntN(len(added))])
				}
				b.WriteString(corpus[rng.IntN(len(corpus))].Text)
				text := b.String()
				whole, _ := tok.Count(text, false, 0)
				// Sum over the segments between raw boundaries.
				sum, start, pos := 0, 0, 0
				tok.raw.split(text, func(seg string, id int) bool {
					pos += len(seg)
					if id >= 0 {
						n, _ := tok.Count(text[start:pos], false, 0)
						sum += n
						start = pos
					}
					return true
				})
				if start < len(text) {
					n, _ := tok.Count(text[start:], false, 0)
					sum += n
				}
				if sum != whole || pos != len(text) {
					t.Fatalf("text %q: whole %d, sum of segments %d", text, whole, sum)
				}
			}
		})
	}
}

// TestCountCacheChatGoldens runs the chat parity goldens through the cache:
// each golden conversation is counted turn by turn, growing, and every
// count must be the uncached one; whole conversations must also match the
// golden (HF) count. A second pass, all from the cache, must agree too.
func TestCountCacheChatGoldens(t *testing.T) {
	for _, model := range chatModels {
		t.Run(model, func(t *testing.T) {
			m := fixtureModel(t, model)
			c := newTestCache(1 << 20)
			if err := c.Register(m); err != nil {
				t.Fatal(err)
			}
			gs := readChatGoldens(t, model)
			for pass := range 2 {
				for _, g := range gs {
					var body map[string]any
					if err := json.Unmarshal([]byte(g.Body), &body); err != nil {
						t.Fatal(err)
					}
					msgs, _ := body["messages"].([]any)
					for k := 1; k <= len(msgs); k++ {
						body["messages"] = msgs[:k]
						b, _ := json.Marshal(body)
						v := mustParse(t, string(b))
						got, gerr := c.CountChat(m, v, 0)
						want, werr := m.CountChat(v, 0)
						sameCount(t, fmt.Sprintf("pass %d %s turn %d", pass, g.ID, k), got, gerr, want, werr)
					}
					if g.Tokens != nil && g.ErrorType == "" {
						got, err := c.CountChat(m, mustParse(t, g.Body), 0)
						if err != nil || got.Tokens != *g.Tokens {
							t.Errorf("%s: cached count %d (%v), golden %d", g.ID, got.Tokens, err, *g.Tokens)
						}
					}
				}
			}
			st := c.Stats()
			t.Logf("%s: %+v", model, st)
			if st.Hits == 0 || st.Misses == 0 {
				t.Errorf("the goldens did not exercise the cache: %+v", st)
			}
		})
	}
}

// conversationCheck grows a conversation through one cache and compares
// every count with the uncached one: new turns, edits of earlier turns
// (a word changed, an added token typed into the text), retries, limits.
// ops drives the choices.
func conversationCheck(t testing.TB, m *Model, c *CountCache, docs []string, ops []byte, salt string) {
	t.Helper()
	special := rawAddedTokens(m.enc.(*Tokenizer))
	next := func(i int) byte {
		if len(ops) == 0 {
			return 0
		}
		return ops[i%len(ops)]
	}
	var msgs []string
	for i := 0; i < len(ops) && i < 40; i++ {
		op := next(i)
		arg := int(next(i+1)) | int(next(i+2))<<8
		switch op % 8 {
		case 0, 1, 2, 3: // a new turn
			d := docs[arg%len(docs)]
			msgs = append(msgs, d[:min(len(d), 64+arg%1500)])
		case 4: // edit an earlier turn
			if len(msgs) > 0 {
				k := arg % len(msgs)
				p := (arg >> 4) % (len(msgs[k]) + 1)
				msgs[k] = msgs[k][:p] + "edited" + msgs[k][p:]
			}
		case 5: // an added token typed into a turn
			if len(msgs) > 0 {
				k := arg % len(msgs)
				p := (arg >> 4) % (len(msgs[k]) + 1)
				msgs[k] = msgs[k][:p] + special[arg%len(special)] + msgs[k][p:]
			}
		case 6: // drop the last turn (a regenerated answer)
			if len(msgs) > 1 {
				msgs = msgs[:len(msgs)-1]
			}
		}
		if len(msgs) == 0 {
			continue
		}
		extra := salt
		limit := 0
		if op%8 == 7 {
			limit = 1 + arg%4000 // some counts stop at a limit
		}
		v := mustParse(t, fixtures.Conversation(msgs, extra))
		got, gerr := c.CountChat(m, v, limit)
		want, werr := m.CountChat(v, limit)
		sameCount(t, fmt.Sprintf("step %d (op %d, %d turns, limit %d)", i, op%8, len(msgs), limit), got, gerr, want, werr)
	}
}

// TestCountCacheConversations grows random conversations with edits,
// through a cache small enough to evict, on every chat fixture model.
func TestCountCacheConversations(t *testing.T) {
	docs := fixtures.BenchDocs(t)
	for _, model := range chatModels {
		t.Run(model, func(t *testing.T) {
			m := fixtureModel(t, model)
			c := newTestCache(64 * NodeBytes)
			if err := c.Register(m); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 7))
			runs := 12
			if testing.Short() || raceEnabled {
				runs = 3
			}
			for range runs {
				ops := make([]byte, 60)
				for i := range ops {
					ops[i] = byte(rng.IntN(256))
				}
				conversationCheck(t, m, c, docs, ops, "")
			}
			st := c.Stats()
			if st.Entries > 64 || st.Bytes > st.MaxBytes {
				t.Errorf("over budget: %+v", st)
			}
			if st.Hits == 0 || st.Fallbacks == 0 {
				t.Errorf("no hits or no fallbacks: %+v", st)
			}
		})
	}
}

// TestCountCacheConcurrent counts conversations sharing a system prompt
// from several goroutines through one small cache (run with -race).
func TestCountCacheConcurrent(t *testing.T) {
	docs := fixtures.BenchDocs(t)
	m := fixtureModel(t, "qwen3")
	c := newTestCache(48 * NodeBytes)
	if err := c.Register(m); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			msgs := []string{docs[0][:min(len(docs[0]), 800)]} // shared first message
			for turn := range 8 {
				d := docs[rng.IntN(len(docs))]
				msgs = append(msgs, d[:min(len(d), 600)])
				if turn == 5 { // an earlier turn edited
					msgs[1] = "changed " + msgs[1]
				}
				v, err := ojson.Parse([]byte(fixtures.Conversation(msgs, "")), ojson.DefaultMaxDepth)
				if err != nil {
					errs <- err
					return
				}
				got, _ := c.CountChat(m, v, 0)
				want, _ := m.CountChat(v, 0)
				if got.Tokens != want.Tokens || got.Exact != want.Exact {
					errs <- fmt.Errorf("goroutine %d turn %d: cached %d, uncached %d", g, turn, got.Tokens, want.Tokens)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := c.Stats(); st.Entries > 48 {
		t.Errorf("over budget: %+v", st)
	}
}

// TestCountCacheSalt: the same conversation under two cache_salt values
// shares no node, and both count exactly.
func TestCountCacheSalt(t *testing.T) {
	m := fixtureModel(t, "qwen3")
	c := newTestCache(1 << 20)
	if err := c.Register(m); err != nil {
		t.Fatal(err)
	}
	msgs := []string{"Tell me about tides.", "They follow the moon.", "And the sun?"}
	count := func(extra string, n int) Count {
		v := mustParse(t, fixtures.Conversation(msgs[:n], extra))
		got, gerr := c.CountChat(m, v, 0)
		want, werr := m.CountChat(v, 0)
		sameCount(t, extra, got, gerr, want, werr)
		return got
	}
	count(`,"cache_salt":"a"`, 1)
	count(`,"cache_salt":"a"`, 3)
	if st := c.Stats(); st.Misses != 1 || st.Hits != 1 {
		t.Fatalf("salt a: %+v, want 1 miss then 1 hit", st)
	}
	count(`,"cache_salt":"b"`, 3)
	if st := c.Stats(); st.Misses != 2 {
		t.Fatalf("salt b found salt a's nodes: %+v", st)
	}
}

// TestCountCacheEviction: the least recently used nodes go first, and the
// budget holds.
func TestCountCacheEviction(t *testing.T) {
	m := fixtureModel(t, "qwen3")
	c := newTestCache(6 * NodeBytes)      // two boundaries per conversation: 3 of them
	c.minOffset = len("<|im_start|>") + 1 // not the header every conversation shares
	if err := c.Register(m); err != nil {
		t.Fatal(err)
	}
	count := func(msgs ...string) {
		v := mustParse(t, fixtures.Conversation(msgs, ""))
		got, gerr := c.CountChat(m, v, 0)
		want, werr := m.CountChat(v, 0)
		sameCount(t, strings.Join(msgs, "|"), got, gerr, want, werr)
	}
	count("first conversation")
	count("second conversation")
	count("third conversation") // evicts the first's nodes
	if st := c.Stats(); st.Entries != 6 || st.Bytes != 6*NodeBytes || st.Misses != 3 {
		t.Fatalf("%+v", st)
	}
	count("second conversation", "answer", "more") // still held: a hit
	if st := c.Stats(); st.Hits != 1 {
		t.Fatalf("the second conversation was evicted: %+v", st)
	}
	count("first conversation", "answer", "more") // evicted: a miss
	if st := c.Stats(); st.Misses != 4 {
		t.Fatalf("the first conversation was not evicted: %+v", st)
	}
}

// TestCountCacheNil: a nil cache counts as the model does.
func TestCountCacheNil(t *testing.T) {
	var c *CountCache
	if NewCountCache(0) != nil {
		t.Fatal("a zero budget made a cache")
	}
	m := fixtureModel(t, "qwen3")
	if err := c.Register(m); err == nil {
		t.Error("a nil cache registered a model")
	}
	v := mustParse(t, fixtures.Conversation([]string{"hi"}, ""))
	got, gerr := c.CountChat(m, v, 0)
	want, werr := m.CountChat(v, 0)
	sameCount(t, "nil", got, gerr, want, werr)
	if c.Stats() != (CacheStats{}) {
		t.Error("nil stats")
	}
}

// FuzzCountCache grows random conversations with random edits of earlier
// turns through a small cache: every count must be the uncached one.
func FuzzCountCache(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 3, 4, 4, 0, 9, 1, 0, 2})
	f.Add([]byte{1, 200, 3, 5, 40, 2, 0, 0, 0, 6, 1, 1, 0, 7, 9, 9})
	f.Add([]byte{3, 0, 0, 0, 0, 5, 7, 1, 0, 4, 3, 2, 0, 0, 1})
	docs := fixtures.BenchDocs(f)
	models := make([]*Model, len(chatModels))
	caches := make([]*CountCache, len(chatModels))
	for i, name := range chatModels {
		models[i] = fixtureModel(f, name)
		caches[i] = newTestCache(40 * NodeBytes)
		if err := caches[i].Register(models[i]); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 2 {
			return
		}
		i := int(ops[0]) % len(models)
		conversationCheck(t, models[i], caches[i], docs, ops[1:], "")
	})
}

// docsText joins docs from *k on (each followed by a blank line, *k
// advanced past them) until the text holds at least n bytes.
func docsText(docs []string, k *int, n int) string {
	var b strings.Builder
	for ; b.Len() < n; *k++ {
		b.WriteString(docs[*k%len(docs)])
		b.WriteString("\n\n")
	}
	return b.String()
}

// longConversation is a 50-turn conversation (100 messages, user first) of
// about 120k qwen3 tokens, from the benchmark mix's documents in order
// (code, prose in many scripts, JSON, logs), and a next user message.
func longConversation(tb testing.TB) ([]string, string) {
	docs := fixtures.BenchDocs(tb)
	const perMessage = 3700 // bytes: ~1,200 tokens of this mix
	msgs := make([]string, 0, 100)
	k := 0
	for len(msgs) < 101 {
		msgs = append(msgs, docsText(docs, &k, perMessage))
	}
	return msgs[:100], msgs[100]
}

// BenchmarkCountCacheNextTurn: the next turn of a 50-turn, ~120k-token
// conversation whose previous turn was counted (hit: only the last answer
// and the new question are tokenized), against the same request with its
// first message changed (miss: everything is tokenized). CountChat
// renders and counts; each iteration's answer and question (or first
// message) are new, so that no iteration finds its own text. Target: hit
// >= 5x faster than miss.
func BenchmarkCountCacheNextTurn(b *testing.B) {
	msgs, question := longConversation(b)
	for _, model := range []string{"qwen3", "llama3_1"} {
		m := fixtureModel(b, model)
		for _, variant := range []string{"hit", "first-changed", "uncached"} {
			b.Run(model+"/"+variant, func(b *testing.B) {
				c := NewCountCache(64 << 20)
				if err := c.Register(m); err != nil {
					b.Fatal(err)
				}
				// The previous turn: the conversation up to the last
				// question, whose answer is msgs[99].
				if _, err := c.CountChat(m, mustParse(b, fixtures.Conversation(msgs[:99], "")), 0); err != nil {
					b.Fatal(err)
				}
				body := mustParse(b, fixtures.Conversation(append(msgs[:100:100], question), ""))
				items := body.Get("messages").Items
				first, answer, last := items[0].Get("content"), items[99].Get("content"), items[100].Get("content")
				tokens := 0
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					switch variant {
					case "hit":
						answer.Str = fmt.Sprintf("%s (%d)", msgs[99], i)
						last.Str = fmt.Sprintf("%s (%d)", question, i)
					default:
						first.Str = fmt.Sprintf("(%d) %s", i, msgs[0])
					}
					var cnt Count
					var err error
					if variant == "uncached" {
						cnt, err = m.CountChat(body, 0)
					} else {
						cnt, err = c.CountChat(m, body, 0)
					}
					if err != nil || !cnt.Exact {
						b.Fatal(err, cnt.Reason)
					}
					tokens = cnt.Tokens
				}
				b.ReportMetric(float64(tokens), "prompt_tokens")
				st := c.Stats()
				switch {
				case variant == "hit" && st.Hits < uint64(i):
					b.Fatalf("not all hits: %+v", st)
				case variant == "first-changed" && st.Misses < uint64(i):
					b.Fatalf("not all misses: %+v", st)
				}
			})
		}
	}
}

// TestCountCacheLongConversations: many conversations of varied text
// (messages of 0.5–4 kB joined from the benchmark mix), through a cache
// with the production thresholds, on qwen3 and llama3_1. Every turn is
// counted through the cache and in full and must agree; so must the same
// turn with its first message changed, with a message in the middle
// edited (a word, or an added token typed into it), and with the
// conversation continuing from the edited one. The conversations share
// the cache, which evicts.
func TestCountCacheLongConversations(t *testing.T) {
	docs := fixtures.BenchDocs(t)
	for _, model := range []string{"qwen3", "llama3_1"} {
		t.Run(model, func(t *testing.T) {
			m := fixtureModel(t, model)
			c := NewCountCache(200 * NodeBytes) // small enough to evict
			if err := c.Register(m); err != nil {
				t.Fatal(err)
			}
			special := rawAddedTokens(m.enc.(*Tokenizer))
			rng := rand.New(rand.NewPCG(17, uint64(len(model))))
			convs, turns := 16, 16
			if testing.Short() || raceEnabled {
				convs, turns = 6, 12
			}
			k := rng.IntN(len(docs))
			message := func() string { return docsText(docs, &k, 500+rng.IntN(3500)) }
			check := func(what string, msgs []string) {
				t.Helper()
				v := mustParse(t, fixtures.Conversation(msgs, ""))
				got, gerr := c.CountChat(m, v, 0)
				want, werr := m.CountChat(v, 0)
				sameCount(t, what, got, gerr, want, werr)
				if !got.Exact || got.Truncated {
					t.Fatalf("%s: not an exact count: %+v", what, got)
				}
			}
			for conv := range convs {
				var msgs []string
				for turn := range turns {
					msgs = append(msgs, message())
					what := fmt.Sprintf("conversation %d turn %d", conv, turn)
					check(what, msgs)
					if turn < 2 {
						continue
					}
					// The first message changed: a new conversation,
					// never seen before.
					first := slices.Clone(msgs)
					first[0] = fmt.Sprintf("Changed (%d, %d). %s", conv, turn, first[0])
					check(what+", first message changed", first)
					// A message in the middle edited: a word, or an
					// added token typed into it.
					mid := slices.Clone(msgs)
					j := 1 + rng.IntN(len(mid)-2)
					p := rng.IntN(len(mid[j]) + 1)
					ins := " edited "
					if rng.IntN(2) == 0 {
						ins = special[rng.IntN(len(special))]
					}
					mid[j] = mid[j][:p] + ins + mid[j][p:]
					check(fmt.Sprintf("%s, message %d edited at %d", what, j, p), mid)
					// The client goes on from the edited conversation
					// now and then.
					if rng.IntN(4) == 0 {
						msgs = mid
					}
				}
			}
			st := c.Stats()
			t.Logf("%s: %+v", model, st)
			if st.Hits == 0 || st.Fallbacks == 0 || st.Misses == 0 || st.Bytes > st.MaxBytes {
				t.Errorf("hits, fallbacks and misses expected, within the budget: %+v", st)
			}
		})
	}
}
