package gateway

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/sim"
)

// TestGrafanaDashboardUsesRealMetrics: every maitred_* series the dashboard
// queries is one the gateway exports, so a renamed metric cannot leave a
// panel silently empty.
func TestGrafanaDashboardUsesRealMetrics(t *testing.T) {
	data, err := os.ReadFile("../deploy/grafana/maitred.json")
	if err != nil {
		t.Fatal(err)
	}
	e := startE2E(t, sim.Config{OutputTokens: 2}, nil)
	// Traffic of every kind, so that labelled series exist.
	readBodyT(t, e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	readBodyT(t, e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":7,"content":"hi"}]}`))
	e.sim.Update(func(c *sim.Config) { c.CutAfterChunks = 1 })
	readCutBody(t, e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	e.gw.scrapeOnce(t)
	e.gw.quiesce() // series recorded after the last byte reached the client
	exported := e.gw.gathered(t)
	names := regexp.MustCompile(`maitred_[a-z_]+`).FindAllString(string(data), -1)
	if len(names) < 10 {
		t.Fatalf("dashboard queries only %d metrics", len(names))
	}
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSuffix(n, "_bucket")
		if seen[n] {
			continue
		}
		seen[n] = true
		if !strings.Contains(exported, "# TYPE "+n+" ") {
			t.Errorf("the dashboard queries %s, which the gateway does not export", n)
		}
	}
}
