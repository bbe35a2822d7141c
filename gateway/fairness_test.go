package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// arrivals records which tenant's requests reached the backend, in
// order: the tenant's name is the user message (tenantParams).
type arrivals struct {
	mu    sync.Mutex
	order []string
}

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		for _, who := range []string{"a", "b"} {
			if bytes.Contains(b, []byte(`"tenant `+who+`"`)) {
				a.mu.Lock()
				a.order = append(a.order, who)
				a.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	})
}

func tenantParams(who string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "m", MaxTokens: openai.Int(maxTokens),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tenant " + who)}}
}

// fairGateway is a gateway in front of one simulator that runs one
// request at a time (max_in_flight 1) and generates only while the test
// lets it (the token gate), with keys a and b; its access log is kept,
// and the order in which the tenants' requests reached the backend.
func fairGateway(t *testing.T, fairness string, gate chan struct{}) (*testGateway, *arrivals, *observer.ObservedLogs) {
	t.Helper()
	s := sim.New(sim.Config{Model: "m", OutputTokens: 8}, nil)
	arr := &arrivals{}
	srv := httptest.NewServer(arr.wrap(s.Handler()))
	t.Cleanup(func() { s.Close(); srv.Close() })
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, func(c *config.Config) {
		c.Models[0].Fairness = fairness
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Auth = &config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "a", SHA256: digestOf("sk-a"), Models: []string{"*"}},
			{Name: "b", SHA256: digestOf("sk-b"), Models: []string{"*"}},
		}}
	}, srv.URL)
	warmupDone(t, s)
	s.Update(func(c *sim.Config) { c.TokenGate = gate })
	return tg, arr, logs
}

// TestFairnessTokensOverHTTP: key a sends six requests at once, which
// queue behind one backend of room for one; then key b sends one. Under
// fifo b's reaches the backend last; under tokens right after the one
// running when it came (its counter is lifted to a's, and a's grows with each of
// its requests). The flows' output is settled to the answers' usage, the
// access lines name the flow, and /debug/fairness and the metrics show
// the shares.
func TestFairnessTokensOverHTTP(t *testing.T) {
	for _, tt := range []struct {
		fairness string
		want     int // b's place in the backend's arrivals
	}{{config.FairnessFIFO, 7}, {config.FairnessTokens, 2}} {
		t.Run(tt.fairness, func(t *testing.T) {
			gate := make(chan struct{})
			tg, arr, logs := fairGateway(t, tt.fairness, gate)
			pool := tg.live().byName["m"].pool
			var mu sync.Mutex
			var completion = map[string]int64{}
			var wg sync.WaitGroup
			send := func(key string) {
				wg.Go(func() {
					sdk := keyedSDK(tg, "sk-"+key)
					res, err := sdk.Chat.Completions.New(t.Context(), tenantParams(key, 8))
					if err != nil {
						t.Errorf("%s: %v", key, err)
						return
					}
					mu.Lock()
					completion[key] += res.Usage.CompletionTokens
					mu.Unlock()
				})
			}
			depth := func() int {
				n := 0
				for _, d := range pool.Stats().Depth {
					n += d
				}
				return n
			}
			for range 6 {
				send("a")
			}
			eventually(t, "five of a's requests to queue", func() bool { return depth() == 5 })
			send("b")
			eventually(t, "b's request to queue", func() bool { return depth() == 6 })
			close(gate)
			wg.Wait()
			if got := slices.Index(arr.order, "b") + 1; got != tt.want || len(arr.order) != 7 {
				t.Errorf("b reached the backend %dth (%v), want %dth", got, arr.order, tt.want)
			}
			tg.quiesce() // every access line written
			lines := logs.FilterMessage("request").All()
			flows := 0
			for _, l := range lines {
				if f, ok := l.ContextMap()["flow"]; ok {
					if f != l.ContextMap()["key"] {
						t.Errorf("access line flow %v, key %v", f, l.ContextMap()["key"])
					}
					flows++
				}
			}
			if tt.fairness == config.FairnessFIFO {
				if flows != 0 || pool.Flows() != nil {
					t.Errorf("fifo: %d access lines name a flow; flows %v", flows, pool.Flows())
				}
				return
			}
			if flows != 7 {
				t.Errorf("%d of %d access lines name their flow, want 7", flows, len(lines))
			}
			// The output charged as events (none here: not streamed) or at
			// the end is the usage the answers reported.
			got := map[string]int64{}
			for _, f := range tg.fairness()[0].Flows {
				got[f.Flow] = f.Output
				if f.Waiting != 0 || f.InFlight != 0 || f.Service <= 0 {
					t.Errorf("flow %+v after every request ended", f)
				}
			}
			if got["a"] != completion["a"] || got["b"] != completion["b"] {
				t.Errorf("settled output %v, answers' usage %v", got, completion)
			}
			text := tg.gathered(t)
			for _, want := range []string{`maitred_flow_queue_wait_seconds_count{flow="b",model="m"} 1`,
				`maitred_flow_queue_wait_seconds_count{flow="a",model="m"} 6`,
				`maitred_flow_service_tokens_total{flow="a",model="m"}`,
				`maitred_flow_tokens_total{flow="b",kind="output",model="m"} 8`,
				`maitred_flow_virtual_counter{flow="b",model="m"}`} {
				if !strings.Contains(text, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}

// TestFairnessStreamChargedAsGenerated: under tokens a stream's output is
// charged to its flow while it runs, event by event, before its end; at
// the end the charge is the usage the stream reported.
func TestFairnessStreamChargedAsGenerated(t *testing.T) {
	gate := make(chan struct{})
	tg, _, _ := fairGateway(t, config.FairnessTokens, gate)
	pool := tg.live().byName["m"].pool
	sdk := keyedSDK(tg, "sk-a")
	p := tenantParams("a", 8)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := sdk.Chat.Completions.NewStreaming(t.Context(), p)
	defer stream.Close()
	counter := func() float64 { return pool.Flows()[0].Counter }
	gate <- struct{}{}
	if !stream.Next() {
		t.Fatal(stream.Err())
	}
	before := counter()
	for range 3 {
		gate <- struct{}{}
		if !stream.Next() {
			t.Fatal(stream.Err())
		}
	}
	if during := counter(); during <= before {
		t.Errorf("counter %v after three more tokens streamed, %v before: output not charged while generated", during, before)
	}
	close(gate)
	var usage int64
	for stream.Next() {
		if u := stream.Current().Usage; u.TotalTokens > 0 {
			usage = u.CompletionTokens
		}
	}
	eventually(t, "the stream's lease to be released", func() bool { return pool.Flows()[0].InFlight == 0 })
	if f := pool.Flows()[0]; f.TokensOut != usage || usage != 8 {
		t.Errorf("settled output %d, the stream's usage %d (want 8)", f.TokensOut, usage)
	}
	var dbg struct {
		Models []modelFairness `json:"models"`
	}
	rec := httptest.NewRecorder()
	if err := tg.debugFairness(rec, httptest.NewRequest("GET", "/debug/fairness", nil), nil); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &dbg); err != nil || len(dbg.Models) != 1 || dbg.Models[0].Fairness != "tokens" ||
		len(dbg.Models[0].Flows) != 1 || dbg.Models[0].Flows[0].Flow != "a" || dbg.Models[0].Flows[0].Share != 1 || dbg.Models[0].OutputWeight != 2 {
		t.Errorf("/debug/fairness = %s (%v)", rec.Body, err)
	}
	rec = httptest.NewRecorder()
	if err := tg.statusPage(rec, httptest.NewRequest("GET", "/", nil), nil); err != nil {
		t.Fatal(err)
	}
	if page := rec.Body.String(); !strings.Contains(page, "fairness tokens") || !strings.Contains(page, "<tr><td>a</td><td>1</td><td>100.0%</td>") {
		t.Errorf("the status page lacks the model's fairness or flow a's share:\n%s", page)
	}
}
