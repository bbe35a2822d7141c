package gateway

// Tests that the gateway tells the truth about its fleet: ejections, broken
// /metrics pages, tokenizer mismatches and backend rejections, each through
// real HTTP with a misbehaving backend.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/triage"
)

// TestBackendRejectionIsNotADoorRejection: vLLM's own 400, forwarded as is,
// is the backend's layer (backend, reason backend_rejected), not the door's,
// and does not count toward ejection; a door rejection carries the same name
// (its admission.Reason) in the access log, maitred_rejections_total and
// triage.
func TestBackendRejectionIsNotADoorRejection(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"object":"error","message":"vLLM refuses this","type":"BadRequestError","param":null,"code":400}`)
	})
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, nil, fb.URL)
	for range 6 {
		res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
		if body := readBodyT(t, res); res.StatusCode != 400 || !strings.Contains(body, "vLLM refuses this") {
			t.Fatalf("backend 400 not forwarded: %d %s", res.StatusCode, body)
		}
	}
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":7,"content":"hi"}]}`)
	if body := readBodyT(t, res); res.StatusCode != 400 {
		t.Fatalf("door rejection: %d %s", res.StatusCode, body)
	}
	rep := report(t, tg)
	tg.quiesce()

	if st := tg.live().byName["m"].pool.Stats().Slots[0]; st.Ejected || st.Ejections != 0 {
		t.Errorf("the backend's own 400s ejected it: %+v", st)
	}
	m := tg.gathered(t)
	for _, want := range []string{
		`maitred_failures_total{layer="backend",model="m"} 6`,
		`maitred_failures_total{layer="door",model="m"} 1`,
		`maitred_rejections_total{model="m",reason="invalid_messages"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	byLayer, _ := rep.Evidence["failures_by_layer"].(map[string]any)
	if byLayer["door"] != float64(1) || byLayer["backend"] != float64(6) {
		t.Errorf("triage failures_by_layer = %v, want door 1 and backend 6", byLayer)
	}
	if rbr, _ := rep.Evidence["rejections_by_reason"].(map[string]any); len(rbr) != 1 || rbr["invalid_messages"] != float64(1) {
		t.Errorf("triage rejections_by_reason = %v, want only invalid_messages 1", rbr)
	}
	if fbr, _ := rep.Evidence["failures_by_reason"].(map[string]any); fbr["backend_rejected"] != float64(6) {
		t.Errorf("triage failures_by_reason = %v, want backend_rejected 6", fbr)
	}
	if rep.Verdict != triage.VerdictBoundary {
		t.Errorf("verdict %s, want boundary (requests the backend refuses): %v", rep.Verdict, rep.Evidence)
	}
	var door, backend int
	for _, e := range logs.FilterMessage("request").All() {
		f := e.ContextMap()
		switch {
		case f["endpoint"] == "/v1/chat/completions":
			door++
			if f["outcome"] != "invalid_messages" || f["layer"] != "door" {
				t.Errorf("door rejection logged as outcome %v layer %v, want invalid_messages, door", f["outcome"], f["layer"])
			}
		case f["endpoint"] == "/v1/completions":
			backend++
			if f["layer"] != "backend" || f["outcome"] != "backend_rejected" {
				t.Errorf("backend 400 logged as outcome %v layer %v, want backend_rejected, backend", f["outcome"], f["layer"])
			}
		}
	}
	if door != 1 || backend != 6 {
		t.Errorf("access lines: %d door, %d backend", door, backend)
	}
}

// TestLastBackendIsNeverEjected: five fast 5xx from a model's only backend
// used to eject it for eject_for, so that every request then waited
// queue_timeout and got 503 while /readyz said 200 and nothing was logged.
// Now the ejection is held back (and logged once), and the backend keeps
// serving as soon as it answers again.
func TestLastBackendIsNeverEjected(t *testing.T) {
	sims, urls := startSims(t, 1, nil)
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, func(c *config.Config) {
		c.EjectAfter = 5
		c.EjectFor = config.Duration(time.Hour)
		c.Models[0].QueueTimeout = config.Duration(300 * time.Millisecond)
	}, urls...)
	sims[0].Update(func(c *sim.Config) { c.FailStatus = 500 }) // after warm-up
	for i := range 8 {
		res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
		if body := readBodyT(t, res); res.StatusCode != 500 {
			t.Fatalf("request %d while the backend fails: %d %s (want its own 500, not a queue answer)", i, res.StatusCode, body)
		}
	}
	sims[0].Update(func(c *sim.Config) { c.FailStatus = 0 })
	res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("the recovered backend is not served: %d %s", res.StatusCode, body)
	}
	if st := tg.live().byName["m"].pool.Stats().Slots[0]; st.Ejected || st.Ejections != 0 {
		t.Errorf("the only backend was ejected: %+v", st)
	}
	if n := logs.FilterMessageSnippet("not ejected").Len(); n != 1 {
		t.Errorf("%d log lines about the held ejection, want 1 per run of failures", n)
	}
}

// TestEjectionIsLoggedAndShown: with two failing backends one is ejected
// (logged, and shown in /readyz, /debug/backends and triage as
// backend_unavailable with reason ejected); the other is held back by the
// bound and keeps serving, so nothing waits for queue_timeout.
func TestEjectionIsLoggedAndShown(t *testing.T) {
	sims, urls := startSims(t, 2, nil)
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, func(c *config.Config) {
		c.EjectAfter = 3
		c.EjectFor = config.Duration(time.Hour)
		c.Models[0].QueueTimeout = config.Duration(300 * time.Millisecond)
	}, urls...)
	for _, s := range sims {
		s.Update(func(c *sim.Config) { c.FailStatus = 500 })
	}
	for i := range 20 {
		res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
		if body := readBodyT(t, res); res.StatusCode != 500 {
			t.Fatalf("request %d: %d %s (want the backend's own 500)", i, res.StatusCode, body)
		}
	}
	st := tg.live().byName["m"].pool.Stats()
	ejected := -1
	for i, sl := range st.Slots {
		if sl.Ejected {
			if ejected >= 0 {
				t.Fatalf("both backends ejected: %+v", st.Slots)
			}
			ejected = i
		}
	}
	if ejected < 0 {
		t.Fatalf("no backend ejected: %+v", st.Slots)
	}
	host := tg.Fleet.Models()[0].Backends()[ejected].URL.Host
	if e := logs.FilterMessageSnippet("backend ejected").All(); len(e) != 1 || e[0].ContextMap()["backend"] != host {
		t.Errorf("ejection log lines: %v", e)
	}
	if n := logs.FilterMessageSnippet("not ejected").Len(); n != 1 {
		t.Errorf("%d log lines about the held ejection of the other backend, want 1", n)
	}

	res, err := tg.client.Get(tg.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rz struct {
		Models []struct {
			Ejected  int `json:"ejected_backends"`
			Backends []struct {
				URL          string     `json:"url"`
				Ejected      bool       `json:"ejected"`
				EjectedUntil *time.Time `json:"ejected_until"`
			} `json:"backends"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(readBodyT(t, res)), &rz); err != nil {
		t.Fatal(err)
	}
	if m := rz.Models[0]; m.Ejected != 1 || !m.Backends[ejected].Ejected || m.Backends[ejected].EjectedUntil == nil || m.Backends[1-ejected].Ejected {
		t.Errorf("/readyz does not show the ejection: %+v", rz)
	}
	res, err = tg.client.Get(tg.URL + "/debug/backends")
	if err != nil {
		t.Fatal(err)
	}
	var recs []backendRecord
	if err := json.Unmarshal([]byte(readBodyT(t, res)), &recs); err != nil {
		t.Fatal(err)
	}
	if r := recs[ejected]; !r.Ejected || r.EjectedUntil == nil || r.Ejections != 1 {
		t.Errorf("/debug/backends: %+v", r)
	}
	rep := report(t, tg)
	if rep.Verdict != triage.VerdictUnavailable {
		t.Fatalf("triage verdict %s, want backend_unavailable: %v", rep.Verdict, rep.Evidence)
	}
	down, _ := rep.Evidence["unavailable_backends"].([]any)
	found := false
	for _, d := range down {
		if d, _ := d.(map[string]any); d["reason"] == "ejected" && strings.HasSuffix(d["backend"].(string), host) {
			found = true
		}
	}
	if !found {
		t.Errorf("triage does not name the ejected backend with reason ejected: %v", down)
	}
}

// TestQueueTimeoutNamesTheCause: a request that waited queue_timeout is
// told what held the backends back.
func TestQueueTimeoutNamesTheCause(t *testing.T) {
	gate := make(chan struct{})
	e := startE2E(t, sim.Config{OutputTokens: 1, TokenGate: gate}, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueTimeout = config.Duration(200 * time.Millisecond)
	})
	first := make(chan int, 1)
	go func() {
		res, err := e.gw.client.Post(e.gw.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":1}`))
		if err != nil {
			first <- 0
			return
		}
		res.Body.Close()
		first <- res.StatusCode
	}()
	eventually(t, "the first request to run", func() bool { return e.sim.Stats().Running == 1 })
	res := e.gw.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
	body := readBodyT(t, res)
	if res.StatusCode != 503 || !strings.Contains(body, "of 1 backend: 1 busy (at max_in_flight or its token budget)") {
		t.Errorf("queue timeout: %d %s", res.StatusCode, body)
	}
	gate <- struct{}{}
	if c := <-first; c != 200 {
		t.Errorf("first: %d", c)
	}
}

// metricsBackend is a vLLM stand-in whose /metrics page can break while
// /health and generation keep working.
type metricsBackend struct {
	*httptest.Server
	mode   atomic.Value // "ok", "404", "garbage"
	broken atomic.Int64 // /metrics answers given while broken
}

func newMetricsBackend(t *testing.T) *metricsBackend {
	mb := &metricsBackend{}
	mb.mode.Store("ok")
	mb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","created":1700000000,"owned_by":"vllm","max_model_len":2048}]}`)
		case "/metrics":
			switch mb.mode.Load() {
			case "ok":
				io.WriteString(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n"+
					"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0\n")
			case "404":
				mb.broken.Add(1)
				http.NotFound(w, r)
			default:
				mb.broken.Add(1)
				io.WriteString(w, "<html><body>metrics moved</body></html>\n")
			}
		case "/v1/completions":
			io.WriteString(w, `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(mb.Close)
	return mb
}

// TestBrokenMetricsDoNotStopRouting: a backend whose /metrics breaks
// (404, or a page that is not vLLM's) while it serves generations used to
// be held back for ever (stale gauges count as saturated): every request
// waited queue_timeout and got 503. Its gauges now turn unavailable after
// three unreadable answers, and it is served on its in-flight and
// token-budget limits alone, saying so in a metric, a log line,
// /debug/backends and triage.
func TestBrokenMetricsDoNotStopRouting(t *testing.T) {
	for _, mode := range []string{"404", "garbage"} {
		t.Run(mode, func(t *testing.T) {
			mb := newMetricsBackend(t)
			core, logs := observer.New(zap.InfoLevel)
			tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, func(c *config.Config) {
				c.ScrapeInterval = config.Duration(5 * time.Millisecond)
				c.Models[0].QueueTimeout = config.Duration(2 * time.Second)
			}, mb.URL)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { tg.Fleet.RunScraper(ctx, 5*time.Millisecond, tg.ObserveScrape); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			pool := tg.live().byName["m"].pool
			eventually(t, "a first scrape", func() bool { return pool.Stats().Slots[0].Gauges.At != (time.Time{}) })
			mb.mode.Store(mode)
			// Ten broken scrapes at 5 ms intervals: at least 45 ms since the
			// last good one, past the 20 ms after which gauges are stale.
			// Awaited as the pool records them: the backend counts a broken
			// answer before the scraper has read it.
			eventually(t, "ten broken scrapes", func() bool { return pool.Stats().Slots[0].ScrapeErrors >= 10 })
			res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
			if body := readBodyT(t, res); res.StatusCode != 200 {
				t.Fatalf("with /metrics broken: %d %s", res.StatusCode, body)
			}
			cancel()
			<-done
			if st := pool.Stats().Slots[0]; st.GaugesState != admission.GaugesUnavailable || st.ScrapeErrors < 10 {
				t.Errorf("slot %+v", st)
			}
			m := tg.gathered(t)
			for _, want := range []string{`maitred_backend_gauges_state{backend="` + hostOf(mb.URL) + `",model="m",state="unavailable"} 1`, `maitred_backend_scrape_errors_total{backend="` + hostOf(mb.URL) + `",model="m"}`} {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			if n := logs.FilterMessage("backend gauges unavailable").Len(); n != 1 {
				t.Errorf("%d log lines on the transition to unavailable, want 1", n)
			}
			res, err := tg.client.Get(tg.URL + "/debug/backends")
			if err != nil {
				t.Fatal(err)
			}
			var recs []backendRecord
			if err := json.Unmarshal([]byte(readBodyT(t, res)), &recs); err != nil {
				t.Fatal(err)
			}
			if r := recs[0]; r.GaugesState != "unavailable" || r.LastScrapeError == "" {
				t.Errorf("/debug/backends: %+v", r)
			}
			rep := report(t, tg)
			if b := rep.Models[0].Backends; len(b) != 1 || b[0].Gauges != "unavailable" {
				t.Errorf("triage backends: %+v", b)
			}
			// Readable again: fresh, and logged.
			mb.mode.Store("ok")
			g, err := tg.Fleet.Scrape(t.Context(), tg.Fleet.Models()[0].Backends()[0])
			tg.ObserveScrape(tg.Fleet.Models()[0], tg.Fleet.Models()[0].Backends()[0], g, err)
			if st := pool.Stats().Slots[0]; st.GaugesState != admission.GaugesFresh {
				t.Errorf("after a good scrape: %s", st.GaugesState)
			}
			if n := logs.FilterMessage("backend gauges fresh").Len(); n != 1 {
				t.Errorf("%d log lines on the recovery, want 1", n)
			}
		})
	}
}

func hostOf(u string) string { return strings.TrimPrefix(u, "http://") }

// mismatchBackend is a vLLM stand-in whose /tokenize counts every prompt as
// 999 tokens: another tokenizer than the gateway's.
func mismatchBackend(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","created":1700000000,"owned_by":"vllm","max_model_len":2048}]}`)
		case "/tokenize":
			io.WriteString(w, `{"count":999,"max_model_len":2048,"tokens":[]}`)
		case "/v1/chat/completions", "/v1/completions":
			io.WriteString(w, `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestTokenizerMismatchIsCompatibility: a backend held back by a tokenizer
// mismatch is triage's compatibility (the ingredients layer), with both
// counts and what to check, not backend_unavailable with advice about
// /health and OOM kills; with tokenizer_check: warn it serves, and the
// mismatch shows in a metric and /debug/backends.
func TestTokenizerMismatchIsCompatibility(t *testing.T) {
	tok := loadTok(t, "demo")
	t.Run("enforce", func(t *testing.T) {
		tg := startGatewayToks(t, tok, nil, mismatchBackend(t).URL)
		res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
		if body := readBodyT(t, res); res.StatusCode != 503 {
			t.Fatalf("a mismatching backend served: %d %s", res.StatusCode, body)
		}
		rep := report(t, tg)
		if rep.Verdict != triage.VerdictCompat {
			t.Fatalf("verdict %s, want compatibility: %v", rep.Verdict, rep.Evidence)
		}
		bad, _ := rep.Evidence["incompatible_backends"].([]any)
		if len(bad) != 1 {
			t.Fatalf("incompatible_backends %v", rep.Evidence["incompatible_backends"])
		}
		d := bad[0].(map[string]any)
		if d["check"] != "tokenizer" || d["backend_value"] != float64(999) || d["gateway"] == nil || d["gateway"] == float64(999) {
			t.Errorf("evidence %v", d)
		}
		if !strings.Contains(strings.Join(rep.Next, "\n"), "tokenizer_check: warn") {
			t.Errorf("next steps %v", rep.Next)
		}
		if b := rep.Models[0].Backends[0]; b.Compatibility == nil || b.Compatibility.Backend != 999 || b.Matches[0] != triage.VerdictCompat {
			t.Errorf("backend report %+v", b)
		}
	})
	t.Run("warn", func(t *testing.T) {
		tg := startGatewayToks(t, tok, func(c *config.Config) { c.Models[0].TokenizerCheck = config.TokenizerWarn }, mismatchBackend(t).URL)
		res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
		if body := readBodyT(t, res); res.StatusCode != 200 {
			t.Fatalf("tokenizer_check warn: %d %s", res.StatusCode, body)
		}
		if m := tg.gathered(t); !strings.Contains(m, `maitred_backend_mismatch{accepted="true",backend="`) {
			t.Errorf("no maitred_backend_mismatch in the metrics")
		}
		res, err := tg.client.Get(tg.URL + "/debug/backends")
		if err != nil {
			t.Fatal(err)
		}
		var recs []backendRecord
		if err := json.Unmarshal([]byte(readBodyT(t, res)), &recs); err != nil {
			t.Fatal(err)
		}
		if mm := recs[0].Mismatch; mm == nil || !mm.Accepted || mm.Backend != 999 {
			t.Errorf("/debug/backends mismatch %+v", recs[0].Mismatch)
		}
		if rep := report(t, tg); rep.Verdict == triage.VerdictCompat {
			t.Errorf("an accepted mismatch is the verdict: %v", rep.Evidence)
		}
	})
}
