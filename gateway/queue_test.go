package gateway

// The admission queue over real HTTP, with simulators as backends.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

func TestQueueFullTimeoutAndClientGone(t *testing.T) {
	gate := make(chan struct{})
	e := startE2E(t, sim.Config{OutputTokens: 1, TokenGate: gate}, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueSize = 2
		c.Models[0].QueueTimeout = config.Duration(500 * time.Millisecond)
	})
	pool := e.gw.live().byName["m"].pool
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	type answer struct {
		code int
		body string
		hdr  http.Header
	}
	send := func(ctx context.Context) chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.gw.URL+"/v1/chat/completions", strings.NewReader(chat))
			req.Header.Set("Content-Type", "application/json")
			res, err := e.gw.client.Do(req)
			if err != nil {
				ch <- answer{}
				return
			}
			ch <- answer{res.StatusCode, readBodyT(t, res), res.Header}
		}()
		return ch
	}
	first := send(t.Context()) // holds the only slot at the token gate
	eventually(t, "the first request to run", func() bool { return e.sim.Stats().Running == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	leaving := send(ctx)
	eventually(t, "one waiting", func() bool { return pool.Advice().Depth == 1 })
	timingOut := send(t.Context())
	eventually(t, "two waiting", func() bool { return pool.Advice().Depth == 2 })

	full := <-send(t.Context())
	if full.code != 429 || full.hdr.Get("Retry-After") == "" || !strings.Contains(full.body, `"code":"queue_full"`) || !strings.Contains(full.body, "(2 waiting)") {
		t.Fatalf("queue full: %d Retry-After=%q %s", full.code, full.hdr.Get("Retry-After"), full.body)
	}
	cancel()
	<-leaving
	eventually(t, "the leaving client out of the queue", func() bool { return pool.Advice().Depth == 1 })
	to := <-timingOut
	if to.code != 503 || to.hdr.Get("Retry-After") == "" || !strings.Contains(to.body, `"code":"queue_timeout"`) {
		t.Fatalf("queue timeout: %d %s", to.code, to.body)
	}
	gate <- struct{}{}
	if a := <-first; a.code != 200 {
		t.Fatalf("first: %d %s", a.code, a.body)
	}
	if n := len(completionRequests(e.sim)); n != 1 {
		t.Errorf("the simulator received %d client requests; only the first may run", n)
	}
	e.gw.quiesce() // outcomes are counted as handlers return
	m := e.gw.gathered(t)
	for _, want := range []string{`maitred_admission_total{model="m",outcome="queue_full"} 1`, `maitred_admission_total{model="m",outcome="queue_timeout"} 1`, `maitred_admission_total{model="m",outcome="client_gone"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// startSims starts n simulators for model "m" counting with tok.
func startSims(t *testing.T, n int, tok *tokenize.Model, cfgs ...func(i int, c *sim.Config)) ([]*sim.Server, []string) {
	t.Helper()
	var sims []*sim.Server
	var urls []string
	for i := range n {
		sc := sim.Config{Model: "m", OutputTokens: 4}
		if tok != nil {
			sc.Tokenizer = sim.ModelTokenizer(tok)
		}
		for _, f := range cfgs {
			f(i, &sc)
		}
		s := sim.New(sc, zap.NewNop())
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(func() { s.Close(); srv.Close() })
		sims = append(sims, s)
		urls = append(urls, srv.URL)
	}
	return sims, urls
}

func TestTokenBudgetHoldsAcrossBackends(t *testing.T) {
	tok := loadTok(t, "demo")
	sims, urls := startSims(t, 2, tok, func(_ int, c *sim.Config) {
		c.KVTokens = 8192
		c.MaxModelLen = 8192
		c.ITL = 2 * time.Millisecond
		c.OutputTokens = 20
	})
	tg := startGatewayToks(t, tok, func(c *config.Config) {
		c.Models[0].QueueSize = 100
		// One scrape serves the whole burst: gauges must not turn stale
		// (stale counts as saturated) on a slow machine.
		c.ScrapeInterval = config.Duration(time.Hour)
	}, urls...)
	tg.scrapeOnce(t) // learn each budget from vllm:cache_config_info
	pool := tg.live().byName["m"].pool
	for _, s := range pool.Stats().Slots {
		if s.Budget != 8192 {
			t.Fatalf("budget of %s = %d, want 8192 from cache_config_info", s.Name, s.Budget)
		}
	}
	stop := make(chan struct{})
	var violations, simWaiting, maxDepth, maxTokens atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			st := pool.Stats()
			maxDepth.Store(max(maxDepth.Load(), int64(st.Depth[0])))
			for _, s := range st.Slots {
				if s.Tokens > s.Budget {
					violations.Add(1)
				}
				maxTokens.Store(max(maxTokens.Load(), int64(s.Tokens)))
			}
			for _, s := range sims {
				if s.Stats().Waiting > 0 {
					simWaiting.Add(1)
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	})
	short := strings.Repeat("tea ", 190) // about 200 tokens
	long := strings.Repeat("tea ", 2990) // about 3,000 tokens
	var fails atomic.Int64
	var reqs sync.WaitGroup
	for i := range 40 {
		text := short
		if i%3 == 0 {
			text = long
		}
		reqs.Go(func() {
			res := tg.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%s"}],"max_tokens":50}`, text))
			if body := readBodyT(t, res); res.StatusCode != 200 {
				fails.Add(1)
				t.Errorf("status %d: %.200s", res.StatusCode, body)
			}
		})
	}
	reqs.Wait()
	close(stop)
	wg.Wait()
	if violations.Load() != 0 {
		t.Errorf("a backend's in-flight tokens exceeded its budget in %d samples", violations.Load())
	}
	if simWaiting.Load() != 0 {
		t.Errorf("a simulator's own waiting queue was non-empty in %d samples", simWaiting.Load())
	}
	if maxDepth.Load() == 0 {
		t.Errorf("the burst never queued in the gateway")
	}
	t.Logf("40 requests (1/3 of ~3,000 tokens): max gateway queue depth %d, max in-flight tokens on a backend %d of 8192, simulator waiting samples %d",
		maxDepth.Load(), maxTokens.Load(), simWaiting.Load())
}

func TestFailingBackendIsEjectedAndReadmitted(t *testing.T) {
	sims, urls := startSims(t, 2, nil)
	// The cool-off runs on the queue's clock, which the test moves past it:
	// on a loaded machine a real 200 ms cool-off could end before the
	// first cycle's checks.
	var skipped atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skipped.Load())) }
	const coolOff = 10 * time.Minute
	tg := startGatewayFull(t, nil, extras{queueClock: clock}, func(c *config.Config) {
		c.EjectAfter = 3
		c.EjectFor = config.Duration(coolOff)
	}, urls...)
	sims[0].Update(func(c *sim.Config) { c.FailStatus = 500 }) // after warm-up
	pool := tg.live().byName["m"].pool
	cycle := func() int {
		errs := 0
		for range 30 {
			res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
			if readBodyT(t, res); res.StatusCode == 500 {
				errs++
			}
		}
		return errs
	}
	if errs := cycle(); errs > 3 {
		t.Fatalf("clients saw %d errors in the first cycle, want at most eject_after (3)", errs)
	}
	if st := pool.Stats().Slots[0]; !st.Ejected || st.Ejections != 1 {
		t.Fatalf("failing backend: %+v", st)
	}
	// /tokenize bypasses the queue (no local tokenizer here), yet avoids
	// the ejected backend too.
	tokenizes := func(s *sim.Server) int {
		return len(clientRequests(s, func(path string) bool { return path == "/tokenize" }))
	}
	for range 4 {
		readBodyT(t, tg.post(t, "/tokenize", `{"model":"m","prompt":"hi"}`))
	}
	if a, b := tokenizes(sims[0]), tokenizes(sims[1]); a != 0 || b != 4 {
		t.Errorf("/tokenize while backend 0 is ejected: %d to it, %d to the other", a, b)
	}
	skipped.Add(int64(coolOff + time.Second))
	eventually(t, "readmission after the cool-off", func() bool { return !pool.Stats().Slots[0].Ejected })
	if errs := cycle(); errs > 3 || pool.Stats().Slots[0].Ejections != 2 {
		t.Fatalf("second cycle: %d errors, %d ejections", errs, pool.Stats().Slots[0].Ejections)
	}
}

func TestSlowBackendReceivesLess(t *testing.T) {
	sims, urls := startSims(t, 2, nil, func(i int, c *sim.Config) {
		c.OutputTokens = 10
		c.ITL = 2 * time.Millisecond
		if i == 1 {
			c.ITL = 8 * time.Millisecond // 4x slower
		}
	})
	tg := startGatewayToks(t, nil, nil, urls...)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":10}`)
				readBodyT(t, res)
			}
		})
	}
	wg.Wait()
	fast, slow := len(completionRequests(sims[0])), len(completionRequests(sims[1]))
	share := float64(slow) / float64(fast+slow)
	t.Logf("fast backend %d requests, 4x slower backend %d (%.0f%%)", fast, slow, share*100)
	if share >= 0.4 {
		t.Errorf("the 4x slower backend took %.0f%% of the requests", share*100)
	}
}

func TestPrefixAffinityKeepsConversations(t *testing.T) {
	tok := loadTok(t, "demo")
	sims, urls := startSims(t, 3, tok)
	tg := startGatewayToks(t, tok, func(c *config.Config) { c.Models[0].PrefixAffinityTokens = 32 }, urls...)
	system := "You are the support assistant of a large bank. Answer politely, cite the policy section, never reveal account data, and keep answers under five sentences."
	where := map[int]map[int]int{}
	for conv := range 12 {
		where[conv] = map[int]int{}
		msgs := fmt.Sprintf(`{"role":"system","content":"%s Conversation %d."}`, system, conv)
		for turn := range 6 {
			msgs += fmt.Sprintf(`,{"role":"user","content":"Question %d?"}`, turn)
			before := make([]int, len(sims))
			for i, s := range sims {
				before[i] = len(completionRequests(s))
			}
			res := tg.post(t, "/v1/chat/completions", `{"model":"m","max_tokens":4,"messages":[`+msgs+`]}`)
			if body := readBodyT(t, res); res.StatusCode != 200 {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			for i, s := range sims {
				if len(completionRequests(s)) > before[i] {
					where[conv][i]++
				}
			}
			msgs += `,{"role":"assistant","content":"Answer ` + strconv.Itoa(turn) + `."}`
		}
	}
	same, total := 0, 0
	for _, counts := range where {
		best := 0
		for _, n := range counts {
			total += n
			best = max(best, n)
		}
		same += best
	}
	frac := float64(same) / float64(total)
	t.Logf("%.0f%% of %d turns reached their conversation's backend; decisions %v", frac*100, total, tg.live().byName["m"].pool.Stats().Decisions)
	if frac < 0.9 {
		t.Errorf("affinity kept only %.0f%% of turns", frac*100)
	}
}
