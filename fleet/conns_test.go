package fleet

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestIdleConnsKeptFor600Backends: with the fleet's transport, rounds of
// probes and scrapes of 600 backends (one simulator on 600 ports) reuse
// the connections of the first round: no backend accepts a new
// connection in the next. Each backend's scrape is held until its probe's
// /health arrives, so that both are in flight at once, as when its
// prober and scraper run: two connections a backend, 1,200 in all. A
// transport capped at 1,024 idle connections in all
// (gateway.NewTransport's, which the prober used) or at 100 (net/http's
// default) closes some and dials again every round.
func TestIdleConnsKeptFor600Backends(t *testing.T) {
	const n = 600
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 2048, OutputTokens: 2, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	defer s.Close()
	var accepted atomic.Int64
	cfg := config.Default()
	mc := config.ModelConfig{Name: "m", TokenizerCheck: config.TokenizerOff}
	for range n {
		health := make(chan struct{}, 1)
		h := s.Handler()
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/health":
				select {
				case health <- struct{}{}:
				default:
				}
			case "/metrics":
				select {
				case <-health:
				case <-time.After(10 * time.Second): // never taken unless the probe failed
				}
			}
			h.ServeHTTP(w, r)
		}))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				accepted.Add(1)
			}
		}
		srv.Start()
		defer srv.Close()
		mc.Backends = append(mc.Backends, config.BackendConfig{URL: srv.URL})
	}
	cfg.Models = []config.ModelConfig{mc}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(5 * time.Second)
	defer tr.CloseIdleConnections()
	f, err := New(cfg.Fleet(), &http.Client{Transport: tr}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := f.Models()[0]
	for _, b := range m.Backends() {
		// Ready as after a warm-up: a probe is then /health and the
		// adapters' /v1/models listing, as every second in production.
		b.mu.Lock()
		b.setLocked(f.now(), Ready, "")
		b.mu.Unlock()
	}
	round := func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32) // backends at a time
		for _, b := range m.Backends() {
			sem <- struct{}{}
			var pair sync.WaitGroup
			pair.Go(func() { f.probe(t.Context(), m, b) })
			pair.Go(func() {
				if _, err := f.Scrape(t.Context(), b); err != nil {
					t.Errorf("%s: %v", b.URL.Host, err)
				}
			})
			wg.Go(func() { pair.Wait(); <-sem })
		}
		wg.Wait()
	}
	round() // the first connections: two a backend
	if ready := m.ReadyCount(); ready != n {
		t.Fatalf("%d of %d backends ready after a round of probes", ready, n)
	}
	before := accepted.Load()
	round()
	// The margin is from when the fleet's transport was net/http's, which
	// puts a connection back in the idle pool from its read loop, after
	// the body's last read returned: a probe's next request could find
	// none idle yet and dial, very rarely (about one in a few thousand
	// requests here); internal/upstream puts it back within that last
	// read. What is guarded against is a dial every round: hundreds.
	if d := accepted.Load() - before; d > n/100 {
		t.Errorf("a round of probes and scrapes of %d backends (1,800 requests) opened %d new connections; want about none (the idle ones kept)", n, d)
	}
}
