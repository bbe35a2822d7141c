package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/gateway"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// quotaRun: clients concurrent clients on one API key with
// tokens_per_minute limit, closed loop (a 429 waits its Retry-After), for
// d on the real clock. The simulator's own accounting (sim.Config.
// OnProcessed) timestamps every token it processes; the result is the
// most tokens it processed in any 60 s, against the limit.
func quotaRun(clients int, limit int64, d time.Duration) error {
	tok, err := tokenize.Builtin("demo")
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var at []time.Time
	var n []int
	backend := sim.New(sim.Config{Model: "demo", Tokenizer: sim.ModelTokenizer(tok), OutputTokens: 40, ITL: 5 * time.Millisecond,
		OnProcessed: func(t time.Time, k int) { mu.Lock(); at, n = append(at, t), append(n, k); mu.Unlock() }}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return err
	}
	defer stopSim()
	const key = "sk-bench"
	digest := sha256.Sum256([]byte(key))
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "demo", Backends: []config.BackendConfig{{URL: simURL}}}}
	cfg.Auth = &config.AuthConfig{Keys: []config.KeyConfig{{Name: "bench", SHA256: hex.EncodeToString(digest[:]), Models: []string{"*"},
		Limits: config.KeyLimits{TokensPerMinute: limit}}}}
	toks := map[string]*tokenize.Model{"demo": tok}
	fl, err := fleet.New(cfg.Fleet(), &http.Client{Transport: poolTransport()}, zap.NewNop(), gateway.PromptCounters(toks))
	if err != nil {
		return err
	}
	tr := gateway.NewTransport(cfg)
	gw, err := gateway.New(gateway.Options{Config: cfg, Fleet: fl, Logger: zap.NewNop(), Registry: prometheus.NewRegistry(), Transport: tr, Tokenizers: toks})
	if err != nil {
		return err
	}
	fl.ProbeAll(context.Background())
	gw.SetPhase(gateway.Serving)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := gw.Server()
	go srv.Serve(gw.Listener(ln))
	defer func() { srv.Close(); tr.CloseIdleConnections(); gw.Close() }()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"

	fmt.Printf("quota: %d clients on one key, tokens_per_minute %d, for %s (max_tokens 40, half streaming)\n", clients, limit, d)
	client := &http.Client{Transport: poolTransport()}
	var ok, limited atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			body := `{"model":"demo","max_tokens":40,"messages":[{"role":"user","content":"Hello there!"}]}`
			if c%2 == 1 {
				body = strings.Replace(body, "{", `{"stream":true,`, 1)
			}
			for time.Now().Before(end) {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					errc <- err
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
					ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
					time.Sleep(time.Duration(max(ra, 1)) * time.Second)
				default:
					errc <- fmt.Errorf("status %d", res.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	most, total := mostInAMinute(at, n)
	fmt.Printf("%d requests served, %d answered 429; the simulator processed %d tokens; at most %d in any 60 s: %.1f%% of tokens_per_minute %d\n",
		ok.Load(), limited.Load(), total, most, 100*float64(most)/float64(limit), limit)
	if int64(most) > limit+40+32 {
		return fmt.Errorf("the limit did not hold: %d > %d", most, limit)
	}
	return nil
}

// mostInAMinute is the most tokens processed in any 60 s (n[i] tokens at
// at[i]), and the total.
func mostInAMinute(at []time.Time, n []int) (most, total int) {
	idx := make([]int, len(at))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return at[a].Compare(at[b]) })
	sum, lo := 0, 0
	for _, i := range idx {
		sum += n[i]
		total += n[i]
		for !at[idx[lo]].After(at[i].Add(-time.Minute)) {
			sum -= n[idx[lo]]
			lo++
		}
		most = max(most, sum)
	}
	return most, total
}
