package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/prefixindex"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// preciseFleet is n simulators with a prefix cache publishing KV events
// (vLLM's wire format over ZeroMQ; the simulator's own block hashes, seeded
// per server), and a gateway routing model "m" by them (routing:
// precise), its fleet following the events. events, when set, replaces
// backend i's kv_events (nil: none).
type preciseFleet struct {
	sims []*sim.Server
	tg   *testGateway
	sdk  openai.Client
	tok  *tokenize.Model
}

func startPreciseFleet(t *testing.T, n int, events func(i int, kc *config.KVEventsConfig) *config.KVEventsConfig) *preciseFleet {
	t.Helper()
	tok := loadTok(t, "qwen3")
	pf := &preciseFleet{tok: tok}
	var backends []config.BackendConfig
	for i := range n {
		enc := [...]string{"map", "array"}[i%2] // both encodings
		s := sim.New(sim.Config{Model: "m", OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 1 << 15,
			KVTokens: 1 << 16, PrefixCaching: true, PromptTokensDetails: true,
			KVEvents: &sim.KVEventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv", Encoding: enc}},
			zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		if err := s.StartKVEvents(); err != nil {
			t.Fatal(err)
		}
		pub, replay := s.KVEventsEndpoints()
		kc := &config.KVEventsConfig{Endpoint: pub, ReplayEndpoint: replay, Topic: "kv"}
		if events != nil {
			kc = events(i, kc)
		}
		backends = append(backends, config.BackendConfig{URL: httptestServer(t, s), KVEvents: kc})
		pf.sims = append(pf.sims, s)
	}
	pf.tg = startGatewayToks(t, tok, func(c *config.Config) {
		c.Models[0].Backends = backends
		c.Models[0].MaxModelLen = 1 << 15
		c.Models[0].Routing = config.RoutingPrecise
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { pf.tg.Fleet.RunEvents(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, s := range pf.sims {
		warmupDone(t, s)
	}
	pf.sdk = openai.NewClient(option.WithBaseURL(pf.tg.URL+"/v1/"), option.WithAPIKey("client-secret"),
		option.WithHTTPClient(pf.tg.client), option.WithMaxRetries(0))
	return pf
}

func (pf *preciseFleet) index(t *testing.T) *prefixindex.Index {
	m, _ := pf.tg.Fleet.Model("m")
	if m.Index() == nil {
		t.Fatal("the model has no index")
	}
	return m.Index()
}

// served is the simulator that answered the most recent request, found by
// the requests each has received (before: their counts before it).
func (pf *preciseFleet) served(t *testing.T, before []int) int {
	t.Helper()
	who := -1
	for i, s := range pf.sims {
		if len(completionRequests(s)) > before[i] {
			if who >= 0 {
				t.Fatalf("two simulators got the request")
			}
			who = i
		}
	}
	if who < 0 {
		t.Fatal("no simulator got the request")
	}
	return who
}

func (pf *preciseFleet) counts() []int {
	out := make([]int, len(pf.sims))
	for i, s := range pf.sims {
		out[i] = len(completionRequests(s))
	}
	return out
}

func chatTurn(system string, turns []string) openai.ChatCompletionNewParams {
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system)}
	for i, s := range turns {
		if i%2 == 0 {
			msgs = append(msgs, openai.UserMessage(s))
		} else {
			msgs = append(msgs, openai.AssistantMessage(s))
		}
	}
	return openai.ChatCompletionNewParams{Model: "m", Messages: msgs, MaxTokens: openai.Int(1)}
}

// TestPreciseRoutingSecondTurn: six conversations, each with its own long
// system prompt; the second turn of each goes to the simulator that
// served its first (6 in a row by chance: 1 in 3^6), which reports most of
// the prompt as cached, and the access log, the metrics and /debug say so.
func TestPreciseRoutingSecondTurn(t *testing.T) {
	pf := startPreciseFleet(t, 3, nil)
	docs := fixtures.BenchDocs(t)
	idx := pf.index(t)
	for c := range 6 {
		system := fmt.Sprintf("Conversation %d. ", c) + strings.Join(docs[c*5:c*5+5], "\n")
		turns := []string{"Summarize the above."}
		before := pf.counts()
		first, err := pf.sdk.Chat.Completions.New(t.Context(), chatTurn(system, turns))
		if err != nil {
			t.Fatal(err)
		}
		home := pf.served(t, before)
		host := pf.tg.Fleet.Models()[0].Backends()[home].URL.Host
		// The simulator's events reach the index: its blocks of this
		// conversation are indexed (awaited, not timed).
		keys := pf.keysOf(t, system, turns)
		eventually(t, "the first turn's blocks in the index", func() bool {
			out := make([]int, 1)
			return idx.Match(keys, []string{host}, out) && out[0] >= len(keys)*9/10
		})
		turns = append(turns, "Here is a summary.", "And now in one line?")
		before = pf.counts()
		second, err := pf.sdk.Chat.Completions.New(t.Context(), chatTurn(system, turns))
		if err != nil {
			t.Fatal(err)
		}
		if got := pf.served(t, before); got != home {
			t.Fatalf("conversation %d: the second turn went to simulator %d, its prefix is on %d", c, got, home)
		}
		cached := second.Usage.PromptTokensDetails.CachedTokens
		if cached < first.Usage.PromptTokens*9/10 {
			t.Fatalf("conversation %d: %d of %d prompt tokens cached at the second turn (the first had %d)", c, cached, second.Usage.PromptTokens, first.Usage.PromptTokens)
		}
	}
	text := pf.tg.gathered(t)
	if v := metricValue(t, text, `maitred_routing_decisions_total{model="m",policy="precise"}`); v < 6 {
		t.Fatalf("precise decisions = %v, want at least 6", v)
	}
	hit := metricValue(t, text, `maitred_prefix_hit_tokens_total{model="m"}`)
	prompt := metricValue(t, text, `maitred_prefix_prompt_tokens_total{model="m"}`)
	if hit <= 0 || prompt <= hit {
		t.Fatalf("expected hit tokens %v of %v prompt tokens", hit, prompt)
	}
	for _, rec := range pf.debugBackends(t) {
		if rec.KVIndex == nil || rec.KVIndex.State != "live" {
			t.Fatalf("/debug/backends: %+v", rec.KVIndex)
		}
	}
}

// keysOf is the index keys of a chat's prompt, as the door computes them.
func (pf *preciseFleet) keysOf(t *testing.T, system string, turns []string) []prefixindex.Key {
	t.Helper()
	p := chatTurn(system, turns)
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pf.tok.TokenizeChat(v)
	if err != nil {
		t.Fatal(err)
	}
	return prefixindex.AppendKeys(nil, "", ids, 16)
}

func (pf *preciseFleet) debugBackends(t *testing.T) []backendRecord {
	t.Helper()
	rec := httptest.NewRecorder()
	if err := pf.tg.debugBackends(rec, httptest.NewRequest(http.MethodGet, "/debug/backends", nil), nil); err != nil {
		t.Fatal(err)
	}
	var out []backendRecord
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPreciseRoutingFallsBack: one backend's events endpoint is
// unreachable (a port nobody listens on): every request still succeeds,
// routed as without events (no precise decision), and /debug/backends and
// the metrics say why.
func TestPreciseRoutingFallsBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "tcp://" + ln.Addr().String()
	ln.Close()
	pf := startPreciseFleet(t, 2, func(i int, kc *config.KVEventsConfig) *config.KVEventsConfig {
		if i == 1 {
			return &config.KVEventsConfig{Endpoint: dead, Topic: "kv"}
		}
		return kc
	})
	idx := pf.index(t)
	host := pf.tg.Fleet.Models()[0].Backends()[1].URL.Host
	eventually(t, "the unreachable endpoint to be reported", func() bool {
		st, ok := idx.Status(host)
		return ok && st.State == prefixindex.Stale
	})
	docs := fixtures.BenchDocs(t)
	system := strings.Join(docs[:5], "\n")
	for i := range 2 {
		turns := []string{fmt.Sprintf("Question %d?", i)}
		if _, err := pf.sdk.Chat.Completions.New(t.Context(), chatTurn(system, turns)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	text := pf.tg.gathered(t)
	if v := metricValue(t, text, `maitred_routing_decisions_total{model="m",policy="precise"}`); v > 0 {
		t.Fatalf("precise decisions = %v with a backend's events unreachable", v)
	}
	if v := metricValue(t, text, `maitred_precise_fallbacks_total{model="m",reason="not_live"}`); v != 2 {
		t.Fatalf("precise fallbacks (not_live) = %v, want the 2 requests", v)
	}
	if v := metricValue(t, text, fmt.Sprintf(`maitred_kv_index_live{backend=%q,model="m"}`, host)); v != 0 {
		t.Fatalf("maitred_kv_index_live = %v for the unreachable backend", v)
	}
	recs := pf.debugBackends(t)
	var found bool
	for _, r := range recs {
		if r.BackendStatus.URL == "http://"+host {
			found = true
			if r.KVIndex == nil || r.KVIndex.State != "stale" || !strings.Contains(r.KVIndex.Reason, "unreachable") {
				t.Fatalf("/debug/backends kv_index = %+v", r.KVIndex)
			}
		}
	}
	if !found {
		t.Fatalf("backend %s not in /debug/backends: %+v", host, recs)
	}
	rec := httptest.NewRecorder()
	if err := pf.tg.statusPage(rec, httptest.NewRequest(http.MethodGet, "/", nil), nil); err != nil {
		t.Fatal(err)
	}
	if page := rec.Body.String(); !strings.Contains(page, "kv index stale (0 blocks): events endpoint unreachable") || !strings.Contains(page, "kv index live") {
		t.Fatalf("the status page does not show the index states:\n%s", page)
	}
}

// TestPreciseIndexClearedWhenBackendStopsAnswering: a backend that leaves
// Ready (its /health fails: a crash, a restart) may come back as a new
// process with an empty cache whose events cannot be told from a gap, so
// the index forgets what it held of it.
func TestPreciseIndexClearedWhenBackendStopsAnswering(t *testing.T) {
	pf := startPreciseFleet(t, 1, nil)
	idx := pf.index(t)
	host := pf.tg.Fleet.Models()[0].Backends()[0].URL.Host
	// A conversation's blocks reach the index. Each try is a new
	// conversation: events published before the subscription took hold
	// (ZeroMQ drops them) or blocks forgotten while a busy machine failed
	// a probe are not sent again for a prompt already cached.
	deadline := time.Now().Add(30 * time.Second)
	for try := 0; ; try++ {
		system := fmt.Sprintf("Conversation %d. You answer briefly. ", try) + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
		if _, err := pf.sdk.Chat.Completions.New(t.Context(), chatTurn(system, []string{"Hi"})); err != nil {
			t.Fatal(err)
		}
		indexed := func() bool { st, _ := idx.Status(host); return st.Blocks > 0 }
		for wait := time.Now().Add(2 * time.Second); !indexed() && time.Now().Before(wait); {
			time.Sleep(5 * time.Millisecond)
		}
		if indexed() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no conversation's blocks in the index after %d tries", try+1)
		}
	}
	pf.sims[0].Update(func(c *sim.Config) { c.FailHealth = true })
	eventually(t, "the backend out of Ready and its blocks forgotten", func() bool {
		pf.tg.Fleet.ProbeAll(t.Context())
		st, _ := idx.Status(host)
		return pf.tg.Fleet.Models()[0].Backends()[0].Status().State != fleet.Ready && st.Blocks == 0
	})
}
