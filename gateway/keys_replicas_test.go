package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/redistest"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/store"
)

// storeQuotas is one replica's view of the shared store (its Run loop
// included), with the quota minute scaled to minute.
func storeQuotas(t *testing.T, srv *redistest.Server, name string, minute time.Duration, onError string) *store.Quotas {
	t.Helper()
	cfg := config.Default().Store
	cfg.URL, cfg.Timeout, cfg.OnError = srv.URL(), config.Duration(2*time.Second), onError
	st, err := store.New(store.Options{Config: cfg, Replica: name, QuotaMinute: minute, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { st.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); st.Close() })
	return st.Quotas()
}

// TestKeysTokensPerMinuteHoldAcrossReplicas: three gateways, each with
// its own connection to one redis-server, in front of two simulators; one
// key with tokens_per_minute T (the store's minute scaled to 2 s); 30
// clients spread over the three replicas, closed loop, honouring
// Retry-After. The tokens the simulators processed in any (scaled) minute
// stay within T plus one request's settlement error, as for one replica:
// the replicas share one window.
func TestKeysTokensPerMinuteHoldAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	const minute = 2 * time.Second
	const T = 3000
	var processed tokenLog
	tok := qwen3Plain(t)
	var backends []string
	for range 2 {
		s := sim.New(sim.Config{Model: "m", Tokenizer: sim.ModelTokenizer(tok), OutputTokens: 40, ITL: time.Millisecond, OnProcessed: processed.add},
			zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		backend := httptest.NewServer(s.Handler())
		t.Cleanup(func() { s.Close(); backend.Close() })
		backends = append(backends, backend.URL)
	}
	key := config.KeyConfig{Name: "shared", SHA256: digestOf("sk-shared"), Models: []string{"*"}, Limits: config.KeyLimits{TokensPerMinute: T}}
	var gws []*testGateway
	for _, name := range []string{"a", "b", "c"} {
		gws = append(gws, startGatewayFull(t, tok, extras{quota: storeQuotas(t, srv, name, minute, config.StoreErrorLocal)}, withKeys(key), backends...))
	}
	body := `{"model":"m","max_tokens":40,"messages":[{"role":"user","content":"Hello!"}]}`
	until := time.Now().Add(3 * minute)
	var wg sync.WaitGroup
	served := make([]int, len(gws))
	for i, tg := range gws {
		wg.Go(func() { served[i] = hammer(t, tg, "sk-shared", body, 10, time.Now, until, 1) })
	}
	wg.Wait()
	most, total := processed.maxWindow(minute)
	t.Logf("requests served by the replicas %v; the simulator processed %d tokens, at most %d in any scaled minute (tokens_per_minute %d)", served, total, most, T)
	const oneRequest = 9 + 40 // its exact prompt + max_tokens
	if most > T+oneRequest {
		t.Errorf("the simulator processed %d tokens in one scaled minute through 3 replicas, over tokens_per_minute %d + %d", most, T, oneRequest)
	}
	for i, n := range served {
		if n == 0 {
			t.Errorf("replica %d served nothing", i)
		}
	}
	if total < T {
		t.Errorf("only %d tokens processed in 3 scaled minutes: the key was starved", total)
	}
}

// TestKeysStoreDownReject: with on_store_error reject and the store
// stopped, a keyed request whose limits cannot be checked gets 503
// store_unavailable with Retry-After, and nothing reaches the backend.
func TestKeysStoreDownReject(t *testing.T) {
	srv := redistest.Start(t)
	tok := qwen3Plain(t)
	s := sim.New(sim.Config{Model: "m", Tokenizer: sim.ModelTokenizer(tok), OutputTokens: 2}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	backend := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); backend.Close() })
	key := config.KeyConfig{Name: "strict", SHA256: digestOf("sk-strict"), Models: []string{"*"}, Limits: config.KeyLimits{RequestsPerMinute: 100}}
	tg := startGatewayFull(t, tok, extras{quota: storeQuotas(t, srv, "a", time.Minute, config.StoreErrorReject)}, withKeys(key), backend.URL)
	body := `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"Hello!"}]}`
	res := tg.post(t, "/v1/chat/completions", body, "Authorization", "Bearer sk-strict")
	if b := readBodyT(t, res); res.StatusCode != http.StatusOK {
		t.Fatalf("with the store up: %d %s", res.StatusCode, b)
	}
	before := len(clientRequests(s, func(string) bool { return true }))
	srv.Stop()
	res = tg.post(t, "/v1/chat/completions", body, "Authorization", "Bearer sk-strict")
	b := readBodyT(t, res)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(b, `"code":"store_unavailable"`) || res.Header.Get("Retry-After") == "" {
		t.Fatalf("with the store down (reject): %d %v %s", res.StatusCode, res.Header, b)
	}
	if after := len(clientRequests(s, func(string) bool { return true })); after != before {
		t.Fatalf("a request whose limits could not be checked reached the backend")
	}
}
