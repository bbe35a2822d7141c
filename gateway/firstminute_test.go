package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/memnet"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/triage"
)

// bubble is the whole stack as cmd/maitred wires it (the fleet's prober and
// scraper, the gateway's Serve) in front of a simulator, both real HTTP
// servers on an in-memory network inside a synctest bubble: minutes of
// traffic run in virtual time, exactly.
type bubble struct {
	sim    *sim.Server
	gw     *Gateway
	fleet  *fleet.Fleet
	client *http.Client
	stop   func()
}

// startBubble must be called inside synctest.Test.
func startBubble(t *testing.T, sc sim.Config, mutate func(*config.Config)) *bubble {
	t.Helper()
	var mn memnet.Network
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	s := sim.New(sc, log)
	simLn, err := mn.Listen("sim:8000")
	if err != nil {
		t.Fatal(err)
	}
	simSrv := &http.Server{Handler: s.Handler()}

	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: sc.Model, Backends: []config.BackendConfig{{URL: "http://sim:8000"}}}}
	cfg.DrainDelay = 0
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(cfg)
	tr.DialContext = mn.Dial
	fl, err := fleet.New(cfg.Fleet(), &http.Client{Transport: tr}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Config: cfg, Fleet: fl, Logger: log, Registry: prometheus.NewRegistry(), Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	gwLn, err := mn.Listen("gateway:80")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg, simWG sync.WaitGroup
	simWG.Go(func() { simSrv.Serve(simLn) })
	fl.ProbeAll(ctx)
	g.SetPhase(Serving)
	wg.Go(func() { fl.Run(ctx) })
	wg.Go(func() { fl.RunScraper(ctx, cfg.ScrapeInterval.D(), g.ObserveScrape) })
	wg.Go(func() {
		if err := g.Serve(ctx, gwLn); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ctr := &http.Transport{DialContext: mn.Dial}
	b := &bubble{sim: s, gw: g, fleet: fl, client: &http.Client{Transport: ctr}}
	b.stop = func() {
		cancel()
		ctr.CloseIdleConnections()
		wg.Wait() // Serve drained, the prober and scraper stopped
		simSrv.Close()
		simWG.Wait()
		s.Close()
		tr.CloseIdleConnections()
		g.Close()
		synctest.Wait()
	}
	return b
}

// stream sends one short streamed chat request and reads it to the end.
func (b *bubble) stream(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "http://gateway:80/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := b.client.Do(req)
	if err != nil {
		t.Errorf("request: %v", err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
		t.Errorf("answer %d: %s", res.StatusCode, body)
	}
}

func (b *bubble) triage(t *testing.T) triage.Report {
	t.Helper()
	res, err := b.client.Get("http://gateway:80/debug/triage")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var rep triage.Report
	if err := json.NewDecoder(res.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// load sends rate requests a second for d, each in its own goroutine, and
// returns a wait for the ones still running.
func (b *bubble) load(t *testing.T, perSecond int, d time.Duration, wg *sync.WaitGroup) {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		wg.Go(func() { b.stream(t) })
		<-tick.C
	}
}

// TestTriageDecodePressureFromTheFirstMinute is issue 16's scenario: a
// steady 5 requests a second of short streams at an inter-token latency of
// 20 ms; 20 s after the start the backend's ITL goes to 200 ms at the same
// load. With no moving baseline yet (it needs 2 minutes of traffic that
// has left the window), triage must judge TPOT against the warm-up's own
// TPOT measurement and name decode_pressure within 20 s of the change.
func TestTriageDecodePressureFromTheFirstMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, sim.Config{Model: "m", TTFT: 10 * time.Millisecond, ITL: 20 * time.Millisecond, OutputTokens: 16}, nil)
		defer b.stop()
		st := b.fleet.Models()[0].Backends()[0].Status()
		if st.State != fleet.Ready || st.WarmupTPOT != 20*time.Millisecond {
			t.Fatalf("after warm-up: state %s, warm-up TPOT %v (want the simulator's ITL, 20ms)", st.State, st.WarmupTPOT)
		}

		var reqs sync.WaitGroup
		b.load(t, 5, 20*time.Second, &reqs)
		synctest.Wait()
		if rep := b.triage(t); rep.Verdict != triage.VerdictHealthy {
			t.Fatalf("before the change: verdict %s: %v", rep.Verdict, rep.Said)
		}
		changed := time.Now()
		b.sim.Update(func(c *sim.Config) { c.ITL = 200 * time.Millisecond })

		var named time.Duration
		var rep triage.Report
		for named == 0 && time.Since(changed) < 40*time.Second {
			b.load(t, 5, time.Second, &reqs)
			if rep = b.triage(t); rep.Verdict == triage.VerdictDecode {
				named = time.Since(changed)
			}
		}
		reqs.Wait()
		if named == 0 || named > 20*time.Second {
			t.Fatalf("decode_pressure not named within 20s of the change (named after %v); last verdict %s: %v", named, rep.Verdict, rep.Said)
		}
		t.Logf("decode_pressure named %v after the ITL went from 20ms to 200ms: %s", named, strings.Join(rep.Said, "; "))
		be := rep.Models[0].Backends[0]
		if be.Evidence["tpot_baseline_source"] != "warmup" || !strings.Contains(strings.Join(rep.Said, " "), "warm-up TPOT, 20.0 ms, measured idle") {
			t.Errorf("the evidence should say the warm-up TPOT was the baseline: %v; %v", be.Evidence["tpot_baseline_words"], rep.Said)
		}
		if r := num(t, rep.Evidence, "tpot_ratio"); r < 5 {
			t.Errorf("tpot_ratio %.1f, want about 10 (200ms against 20ms)", r)
		}
	})
}

// TestTriageSlowFromTheFirstRequest: a backend whose warm-up streamed at
// 20 ms a token but that serves every request at 200 ms a token has no
// faster past to compare with and no peer; it is judged against its own
// warm-up, from its first requests and for as long as it stays slow (the
// moving baseline that absorbs the slowness is not used while the warm-up
// is lower).
func TestTriageSlowFromTheFirstRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, sim.Config{Model: "m", TTFT: 10 * time.Millisecond, ITL: 20 * time.Millisecond, OutputTokens: 8}, nil)
		defer b.stop()
		b.sim.Update(func(c *sim.Config) { c.ITL = 200 * time.Millisecond })
		var reqs sync.WaitGroup
		b.load(t, 2, 20*time.Second, &reqs)
		if rep := b.triage(t); rep.Verdict != triage.VerdictDecode {
			t.Fatalf("after 20s of slow requests: verdict %s: %v", rep.Verdict, rep.Said)
		}
		// Eight minutes on: the window has moved on and the moving
		// baseline covers three minutes of the same slowness.
		b.load(t, 2, 8*time.Minute, &reqs)
		reqs.Wait()
		rep := b.triage(t)
		if rep.Verdict != triage.VerdictDecode {
			t.Fatalf("after 8m of slow requests: verdict %s: %v", rep.Verdict, rep.Said)
		}
		ev := rep.Models[0].Backends[0].Evidence
		if ev["tpot_baseline_source"] != "warmup" || num(t, ev, "tpot_moving_baseline_coverage_s") < 120 {
			t.Errorf("baseline %v: %v", ev["tpot_baseline_source"], ev["tpot_baseline_words"])
		}
		t.Logf("%s", strings.Join(rep.Said, "; "))
	})
}
