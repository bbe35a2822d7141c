package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/sim"
)

// readyzStatus answers GET /readyz's status over HTTP.
func readyzStatus(t *testing.T, tg *testGateway) int {
	t.Helper()
	res, err := tg.client.Get(tg.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	readBodyT(t, res)
	return res.StatusCode
}

// TestWarmupReadyWhileBackendSaturated: a gateway (re)started while its
// only backend is saturated by other clients (one slot, three clients
// looping, as other replicas at peak) used to stay warming: its warm-up
// generation queued behind them and had to finish within warmup_timeout.
// The backend visibly serves (requests waiting, generation tokens rising),
// so it is warm: the gateway is ready while the first load request still
// runs, without waiting for its warm-up generation.
func TestWarmupReadyWhileBackendSaturated(t *testing.T) {
	tok := loadTok(t, "demo")
	sims, urls := startSims(t, 1, tok, func(_ int, c *sim.Config) {
		c.MaxNumSeqs = 1
		c.ITL = 20 * time.Millisecond
	})
	s := sims[0]
	loadCtx, stopLoad := context.WithCancel(context.Background())
	firstDone := make(chan struct{})
	loadOver := make(chan struct{}, 3)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr}
	for i := range 3 {
		go func() {
			defer func() { loadOver <- struct{}{} }()
			for n := 0; loadCtx.Err() == nil; n++ {
				// 2000 tokens at 20 ms: 40 s a request, far past the test.
				body := `{"model":"m","prompt":"load","max_tokens":2000,"ignore_eos":true}`
				req, _ := http.NewRequestWithContext(loadCtx, http.MethodPost, urls[0]+"/v1/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				res, err := cl.Do(req)
				if err == nil {
					readBodyT(t, res)
					if i == 0 && n == 0 {
						close(firstDone)
					}
				}
			}
		}()
	}
	t.Cleanup(func() {
		stopLoad()
		for range 3 {
			<-loadOver
		}
	})
	// Saturated: one running, two waiting.
	for st := s.Stats(); st.Running < 1 || st.Waiting < 2; st = s.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	tg := startGatewayToks(t, tok, func(c *config.Config) {
		// Longer than a probe could wait on the old code's generation and
		// shorter than the load lasts.
		c.Health.WarmupTimeout = config.Duration(20 * time.Second)
	}, urls...)
	b := tg.Fleet.Models()[0].Backends()[0]
	st := b.Status()
	if st.State != fleet.Ready {
		t.Fatalf("backend %s (%s) with the backend saturated, want ready", st.State, st.Reason)
	}
	select {
	case <-firstDone:
		t.Fatal("the first load request finished: the backend was not saturated throughout")
	default:
	}
	if !st.WarmupBusy || st.WarmupTTFT != 0 {
		t.Errorf("status %+v: want a busy warm-up, unmeasured", st)
	}
	if code := readyzStatus(t, tg); code != http.StatusOK {
		t.Errorf("/readyz %d while the backend is saturated", code)
	}
}

// TestWarmupSlowTokensThenTokenizerProbe: a backend producing a token
// every 400 ms takes longer than health.timeout (2 s) over the eight
// warm-up tokens. The tokenizer probe used to run under a deadline taken
// before the generation, so it always timed out and the backend stayed
// warming; each step now has its own deadline.
func TestWarmupSlowTokensThenTokenizerProbe(t *testing.T) {
	tok := loadTok(t, "demo")
	_, urls := startSims(t, 1, tok, func(_ int, c *sim.Config) {
		c.ITL = 400 * time.Millisecond
	})
	tg := startGatewayToks(t, tok, nil, urls...)
	st := tg.Fleet.Models()[0].Backends()[0].Status()
	if st.State != fleet.Ready {
		t.Fatalf("backend %s (%s), want ready", st.State, st.Reason)
	}
	if st.WarmupBusy || st.WarmupTPOT < 300*time.Millisecond {
		t.Errorf("status %+v: want a measured warm-up with TPOT about 400ms", st)
	}
	if code := readyzStatus(t, tg); code != http.StatusOK {
		t.Errorf("/readyz %d", code)
	}
}
