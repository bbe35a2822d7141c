package fleet

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/memnet"
	"github.com/maitred-dev/maitred/sim"
)

// TestProbesOfARoundStartTogether: every backend's probe of a round
// starts at the same instant, one beat every health.interval, a backend
// that joins later (a reload adds it 300 ms in) included. The fleet's
// prober and a simulator run on an in-memory network inside a synctest
// bubble; each /health's instant is recorded. Before, each backend's
// ticker kept the phase of its start: the late one was probed at 1.3 s,
// 2.3 s, ...
func TestProbesOfARoundStartTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mn memnet.Network
		s := sim.New(sim.Config{Model: "m", MaxModelLen: 2048, OutputTokens: 2}, zap.NewNop())
		var mu sync.Mutex
		var runStart time.Time
		health := map[string][]time.Duration{} // by backend: /health instants since Run started
		var servers []*http.Server
		var wg sync.WaitGroup
		cfg := config.Default()
		mc := config.ModelConfig{Name: "m", TokenizerCheck: config.TokenizerOff}
		for i := range 4 {
			host := fmt.Sprintf("b%d:8000", i)
			ln, err := mn.Listen(host)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/health" {
					mu.Lock()
					if !runStart.IsZero() {
						health[host] = append(health[host], time.Since(runStart))
					}
					mu.Unlock()
				}
				s.Handler().ServeHTTP(w, r)
			})}
			servers = append(servers, srv)
			wg.Go(func() { srv.Serve(ln) })
			if i < 3 {
				mc.Backends = append(mc.Backends, config.BackendConfig{URL: "http://" + host})
			}
		}
		cfg.Models = []config.ModelConfig{mc}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		tr := NewTransport(5 * time.Second)
		tr.DialContext = mn.Dial
		f, err := New(cfg.Fleet(), &http.Client{Transport: tr}, zap.NewNop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		f.ProbeAll(t.Context())
		ctx, cancel := context.WithCancel(t.Context())
		mu.Lock()
		runStart = time.Now()
		mu.Unlock()
		wg.Go(func() { f.Run(ctx) })
		time.Sleep(300 * time.Millisecond)
		cfg.Models[0].Backends = append(cfg.Models[0].Backends, config.BackendConfig{URL: "http://b3:8000"})
		if err := f.Apply(cfg.Fleet(), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4*time.Second - 300*time.Millisecond + time.Millisecond)
		synctest.Wait()
		cancel()
		for _, srv := range servers {
			srv.Close()
		}
		tr.CloseIdleConnections()
		wg.Wait()
		s.Close()
		beats := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
		for i := range 4 {
			host := fmt.Sprintf("b%d:8000", i)
			got := health[host]
			if len(got) == 0 {
				t.Errorf("%s: never probed", host)
				continue
			}
			// The first is the probe a backend gets when its prober
			// starts; every later one falls on a beat.
			if !slices.Equal(got[1:], beats) {
				t.Errorf("%s probed at %v after the prober started; want its first, then %v (every backend at the same beats)", host, got, beats)
			}
		}
	})
}
