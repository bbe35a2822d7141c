package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
)

// TestObserveScrapeFlatInBackends: a scrape's result costs the same
// allocations with 512 backends in its model as with one. ObserveScrape
// runs for every scrape of every backend (2,048 a second for 512 backends
// at the default scrape_interval); when its triage sample built the whole
// pool's slot table to read one slot, the scrapes cost O(n) each and
// O(n^2) a second (issue 30's profile: a third of the idle CPU).
func TestObserveScrapeFlatInBackends(t *testing.T) {
	allocs := map[int]float64{}
	for _, n := range []int{1, 512} {
		cfg := config.Default()
		mc := config.ModelConfig{Name: "m"}
		for i := range n {
			// Never dialled: the fleet is not run.
			mc.Backends = append(mc.Backends, config.BackendConfig{URL: fmt.Sprintf("http://10.0.%d.%d:8000", i/250, 1+i%250)})
		}
		cfg.Models = []config.ModelConfig{mc}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		fl, err := fleet.New(cfg.Fleet(), &http.Client{}, zap.NewNop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(Options{Config: cfg, Fleet: fl, Logger: zap.NewNop(), Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := fl.Model("m")
		b := m.Backends()[n/2]
		gs := fleet.Gauges{Running: 1, Waiting: 2, KVUsage: 0.5, At: time.Now()}
		g.ObserveScrape(m, b, gs, nil) // the first sample of a backend sets up its state
		allocs[n] = testing.AllocsPerRun(50, func() { g.ObserveScrape(m, b, gs, nil) })
		g.Close()
	}
	if allocs[512] > allocs[1] {
		t.Errorf("ObserveScrape allocates %.0f times with 512 backends, %.0f with one: its work grows with the model's backends", allocs[512], allocs[1])
	}
}
