package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// conversation is a chat body over msgs, with max_tokens when > 0.
func conversation(msgs []string, maxTokens int) string {
	extra := ""
	if maxTokens > 0 {
		extra = fmt.Sprintf(`,"max_tokens":%d`, maxTokens)
	}
	return fixtures.Conversation(msgs, extra)
}

// metricValue reads one sample of the exposition text (-1: absent).
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCountCacheConversationOverHTTP grows a conversation turn by turn
// through the gateway, with the count cache on (the default), in front of
// the simulator counting with the same tokenizer and template uncached, as
// vLLM does. At every turn the door's count must be exactly the
// simulator's: a request with max_tokens filling the context to the last
// token is admitted, one more token is refused with the count in the
// error. Turns after the first are counted from the cache (hits), an
// edited first message falls back to a full count, and the metrics show
// it.
func TestCountCacheConversationOverHTTP(t *testing.T) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const maxLen = 1 << 16
	s := sim.New(sim.Config{Model: "m", OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: maxLen},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	tg := startGatewayToks(t, tok, func(c *config.Config) { c.Models[0].MaxModelLen = maxLen }, httptestServer(t, s))

	docs := fixtures.BenchDocs(t)
	// exact checks the door's count of msgs against the simulator's.
	exact := func(what string, msgs []string) {
		t.Helper()
		res := tg.post(t, "/v1/chat/completions", conversation(msgs, 0))
		body := readBodyT(t, res)
		var ok struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if res.StatusCode != 200 || json.Unmarshal([]byte(body), &ok) != nil || ok.Usage.PromptTokens == 0 {
			t.Fatalf("%s: %d %s", what, res.StatusCode, body)
		}
		n := ok.Usage.PromptTokens // the simulator's count
		res = tg.post(t, "/v1/chat/completions", conversation(msgs, maxLen-n+1))
		body = readBodyT(t, res)
		var env struct {
			Error struct {
				Code         string `json:"code"`
				PromptTokens int    `json:"prompt_tokens"`
				Exact        bool   `json:"prompt_tokens_exact"`
			} `json:"error"`
		}
		if res.StatusCode != 400 || json.Unmarshal([]byte(body), &env) != nil || env.Error.Code != "context_length_exceeded" ||
			env.Error.PromptTokens != n || !env.Error.Exact {
			t.Fatalf("%s: one token over the context: %d %s; want a refusal counting %d prompt tokens", what, res.StatusCode, body, n)
		}
		res = tg.post(t, "/v1/chat/completions", conversation(msgs, maxLen-n))
		if body := readBodyT(t, res); res.StatusCode != 200 {
			t.Fatalf("%s: the context filled to the last token: %d %s", what, res.StatusCode, body)
		}
	}

	var msgs []string
	k := 0
	for turn := range 6 {
		size := 3000
		if turn == 0 {
			size = 17000 // every turn is long enough for the cache
		}
		msgs = append(msgs, fixtures.Message(docs, &k, size))
		exact(fmt.Sprintf("turn %d", turn), msgs)
	}
	hits := metricValue(t, scrape(t, tg), `maitred_count_cache_lookups_total{result="hit"}`)
	if hits < 5 {
		t.Errorf("hits = %v, want the turns after the first counted from the cache", hits)
	}
	msgs[0] = "Changed: " + msgs[0]
	exact("first message changed", msgs)
	msgs[3] = "Changed too: " + msgs[3]
	exact("fourth message changed", msgs)

	m := scrape(t, tg)
	misses := metricValue(t, m, `maitred_count_cache_lookups_total{result="miss"}`)
	fallbacks := metricValue(t, m, `maitred_count_cache_lookups_total{result="fallback"}`)
	entries := metricValue(t, m, "maitred_count_cache_entries")
	bytes := metricValue(t, m, "maitred_count_cache_bytes")
	if misses < 2 || fallbacks < 1 || entries <= 0 || bytes != entries*tokenize.NodeBytes {
		t.Errorf("misses %v fallbacks %v entries %v bytes %v\n%s", misses, fallbacks, entries, bytes, m)
	}
}

// TestCountCacheOff: count_cache_bytes 0 turns the cache off (no metrics),
// and counts stay exact.
func TestCountCacheOff(t *testing.T) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 1 << 16},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	tg := startGatewayToks(t, tok, func(c *config.Config) {
		c.Models[0].MaxModelLen = 1 << 16
		c.CountCacheBytes = 0
	}, httptestServer(t, s))
	docs := fixtures.BenchDocs(t)
	k := 0
	msgs := []string{fixtures.Message(docs, &k, 9000), fixtures.Message(docs, &k, 9000)} // long enough for the cache, were it on
	res := tg.post(t, "/v1/chat/completions", conversation(msgs, 0))
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	if m := scrape(t, tg); strings.Contains(m, "maitred_count_cache") {
		t.Errorf("count cache metrics with the cache off:\n%s", m)
	}
}

// BenchmarkCountCacheNextTurnDoor (issue 17, target 3): the door's own time,
// as Server-Timing reports it ("door": parse, validate, render, count), for
// the next turn of a 50-turn conversation of ~120k tokens (100 messages of
// ~3.7 kB from the tokenizer benchmark's mix, in order: code, prose in many
// scripts, JSON, logs) whose previous turn went through the gateway, side
// by side with the same request with its first message changed. Requests
// alternate in one loop; each iteration's answer and question (or first
// message) are new, so that no request finds its own text counted. It
// reports the mean door time of each (door-ms-next-turn,
// door-ms-first-changed), their ratio (x-faster; target >= 5) and the
// prompt's tokens.
func BenchmarkCountCacheNextTurnDoor(b *testing.B) {
	docs := fixtures.BenchDocs(b)
	k := 0
	msgs := make([]string, 100)
	for i := range msgs {
		msgs[i] = fixtures.Message(docs, &k, 3700)
	}
	question := fixtures.Message(docs, &k, 3700)
	for _, model := range []string{"qwen3", "llama3_1"} {
		b.Run(model, func(b *testing.B) {
			tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(b, model), tokenize.LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			const maxLen = 1 << 18
			s := sim.New(sim.Config{Model: "m", MaxModelLen: maxLen, OutputTokens: 1}, zap.NewNop())
			srv := httptest.NewServer(s.Handler())
			defer func() { s.Close(); srv.Close() }()
			cfg := config.Default()
			cfg.Models = []config.ModelConfig{{Name: "m", MaxModelLen: maxLen, Backends: []config.BackendConfig{{URL: srv.URL}}}}
			gtr := NewTransport(cfg)
			defer gtr.CloseIdleConnections()
			toks := map[string]*tokenize.Model{"m": tok}
			// No warm-up tokenizer probe: the simulator counts with its
			// approximate tokenizer (a real one would add the backend's
			// tokenizing of 120k tokens to every iteration; the door's
			// time is what is measured).
			fl, err := fleet.New(cfg.Fleet(), &http.Client{Transport: gtr}, zap.NewNop(), nil)
			if err != nil {
				b.Fatal(err)
			}
			g, err := New(Options{Config: cfg, Fleet: fl, Logger: zap.NewNop(), Registry: prometheus.NewRegistry(), Transport: gtr, Tokenizers: toks})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			fl.ProbeAll(context.Background())
			g.SetPhase(Serving)
			gw := httptest.NewServer(g.Handler())
			defer gw.Close()
			ctr := &http.Transport{}
			defer ctr.CloseIdleConnections()
			client := &http.Client{Transport: ctr}
			// door posts body and returns the door's time (ms).
			door := func(body string) float64 {
				res, err := client.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				got, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatalf("%d %.300s", res.StatusCode, got)
				}
				ms, err := serverTiming(res.Header.Get("Server-Timing"), "door")
				if err != nil {
					b.Fatalf("Server-Timing %q: %v", res.Header.Get("Server-Timing"), err)
				}
				return ms
			}
			next := append(msgs[:100:100], question)
			v, err := ojson.Parse([]byte(conversation(next, 0)), ojson.DefaultMaxDepth)
			if err != nil {
				b.Fatal(err)
			}
			cnt, err := tok.CountChat(v, 0)
			if err != nil || !cnt.Exact {
				b.Fatal(err, cnt.Reason)
			}
			cc, ok := g.live().models[0].counter.(*cachedCounter)
			if !ok {
				b.Fatalf("%s: not counted through the count cache", model)
			}
			door(conversation(msgs[:99], 0)) // the previous turn
			before := cc.cache.Stats()
			var hit, miss float64
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				next[99] = fmt.Sprintf("%s (%d)", msgs[99], i)
				next[100] = fmt.Sprintf("%s (%d)", question, i)
				hit += door(conversation(next, 0))
				next[99], next[100] = msgs[99], question
				next[0] = fmt.Sprintf("(%d) %s", i, msgs[0])
				miss += door(conversation(next, 0))
				next[0] = msgs[0]
			}
			st := cc.cache.Stats()
			if st.Hits-before.Hits != uint64(i) || st.Misses-before.Misses != uint64(i) {
				b.Fatalf("%d iterations: %+v -> %+v, want as many hits and misses", i, before, st)
			}
			b.ReportMetric(float64(cnt.Tokens), "prompt_tokens")
			b.ReportMetric(hit/float64(i), "door-ms-next-turn")
			b.ReportMetric(miss/float64(i), "door-ms-first-changed")
			b.ReportMetric(miss/hit, "x-faster")
		})
	}
}

// TestCountCacheAcrossReload: a reload keeps the count cache (its size,
// count_cache_bytes, needs a restart and is reported as not applied), and
// the reloaded model's counts still go through it: a conversation counted
// before the reload is found after it.
func TestCountCacheAcrossReload(t *testing.T) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", OutputTokens: 1, Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 1 << 16},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	var cfg config.Config
	tg := startGatewayToks(t, tok, func(c *config.Config) {
		c.Models[0].MaxModelLen = 1 << 16
		cfg = *c
	}, httptestServer(t, s))
	docs := fixtures.BenchDocs(t)
	k := 0
	msgs := []string{fixtures.Message(docs, &k, 9000), fixtures.Message(docs, &k, 9000)}
	post := func(n int) {
		t.Helper()
		res := tg.post(t, "/v1/chat/completions", conversation(msgs[:n], 0))
		if body := readBodyT(t, res); res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	}
	post(2)
	hit := `maitred_count_cache_lookups_total{result="hit"}`
	before := metricValue(t, scrape(t, tg), hit)

	next := cfg
	next.CountCacheBytes = 0
	res, err := tg.Reload(next, map[string]*tokenize.Model{"m": tok})
	if err != nil || !slices.Contains(res.NotApplied, "count_cache_bytes") {
		t.Fatalf("reload: %+v %v; want count_cache_bytes not applied", res, err)
	}
	post(2)
	if after := metricValue(t, scrape(t, tg), hit); after != before+1 {
		t.Errorf("hits %v -> %v across the reload, want one more", before, after)
	}
}
