package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestVersionSkipsBackendWithoutIt: the first model's backend does not
// serve GET /version (404: a proxy in front of vLLM, another server) while
// the second model's does: /version answers the second's version, not the
// first's 404.
func TestVersionSkipsBackendWithoutIt(t *testing.T) {
	noVersion := sim.New(sim.Config{Model: "m", OutputTokens: 2}, zap.NewNop())
	h := noVersion.Handler()
	nsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			http.Error(w, `{"detail":"Not Found"}`, http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { noVersion.Close(); nsrv.Close() })
	withVersion := sim.New(sim.Config{Model: "b", OutputTokens: 2, Version: "0.11.9-b"}, zap.NewNop())
	vsrv := httptest.NewServer(withVersion.Handler())
	t.Cleanup(func() { withVersion.Close(); vsrv.Close() })

	tg := startGateway(t, func(c *config.Config) {
		c.Models = append(c.Models, config.ModelConfig{Name: "b", Backends: []config.BackendConfig{{URL: vsrv.URL}}})
	}, nsrv.URL)
	for i := range 3 { // not a lucky pick: every time
		res, err := tg.client.Get(tg.URL + "/version")
		if err != nil {
			t.Fatal(err)
		}
		if body := readBodyT(t, res); res.StatusCode != 200 || body != `{"version":"0.11.9-b"}` {
			t.Fatalf("/version #%d: %d %q, want the second model's backend's version", i, res.StatusCode, body)
		}
	}
}
