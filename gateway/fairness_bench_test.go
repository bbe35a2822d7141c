package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/tokenize"
)

// BenchmarkProxyFairness is BenchmarkProxy's short chat through maitred
// with two API keys taking turns, under fairness fifo and tokens side by
// side: the difference is what the flows cost a request (its flow found,
// lifted, charged at the grant and settled to the answer's usage at the
// end). Both report allocations: tokens must add none per request.
func BenchmarkProxyFairness(b *testing.B) {
	backend := newFakeBackend(b, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, benchAnswer)
	})
	tok, err := tokenize.LoadDir(fixtures.ModelDir(b, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	keys := []string{"sk-bench-a", "sk-bench-b"}
	for _, fairness := range []string{config.FairnessFIFO, config.FairnessTokens} {
		cfg := config.Default()
		cfg.Models = []config.ModelConfig{{Name: "m", Fairness: fairness, Backends: []config.BackendConfig{{URL: backend.URL}}}}
		cfg.Auth = &config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "a", SHA256: digestOf(keys[0]), Models: []string{"*"}},
			{Name: "b", SHA256: digestOf(keys[1]), Models: []string{"*"}},
		}}
		log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
		gtr := NewTransport(cfg)
		fl, _ := fleet.New(cfg.Fleet(), &http.Client{Transport: gtr}, log, nil)
		g, err := New(Options{Config: cfg, Fleet: fl, Logger: log, Registry: prometheus.NewRegistry(), Transport: gtr,
			Tokenizers: map[string]*tokenize.Model{"m": tok}})
		if err != nil {
			b.Fatal(err)
		}
		fl.ProbeAll(context.Background())
		g.SetPhase(Serving)
		gw := httptest.NewServer(g.Handler())
		b.Run(fairness, func(b *testing.B) {
			ctr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer ctr.CloseIdleConnections()
			c := &http.Client{Transport: ctr}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(benchChat))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+keys[i%2])
				i++
				res, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				msg, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatalf("status %d: %.300s", res.StatusCode, msg)
				}
			}
		})
		gw.Close()
		g.Close()
		gtr.CloseIdleConnections()
	}
}
