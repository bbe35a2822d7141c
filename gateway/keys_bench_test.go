package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/quota"
)

// BenchmarkKeyCheckAndLimits measures what API keys add to a request in
// process: the key check (the Authorization header's digest looked up
// among 1,000 keys, the key's metrics), the x-ratelimit-* headers of its
// status, a reservation of its tokens and its settlement. The target is
// at most 5 µs a request.
func BenchmarkKeyCheckAndLimits(b *testing.B) {
	cfg := config.Default()
	var keys []config.KeyConfig
	for i := range 1000 {
		keys = append(keys, config.KeyConfig{Name: fmt.Sprintf("team-%d", i), SHA256: digestOf(fmt.Sprintf("sk-%d", i)), Models: []string{"*"},
			Limits: config.KeyLimits{RequestsPerMinute: 1 << 40, TokensPerMinute: 1 << 50, MaxConcurrent: 1 << 20}})
	}
	cfg.Auth = &config.AuthConfig{Keys: keys}
	g := &Gateway{cfg: cfg, log: zap.NewNop(), metrics: newMetrics(prometheus.NewRegistry()), quota: quota.NewLocal(time.Now)}
	g.state.Store(&liveState{cfg: &cfg}) // the config in force (conf)
	if err := g.initKeys(); err != nil {
		b.Fatal(err)
	}
	// What a keyed model request runs, as the pipeline does: the key's
	// check (keyIn), its reservation and settlement, and keyOut.
	h := func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		if err := g.keyIn(w, r, x, g.keys.Load(), false, true); err != nil {
			return err
		}
		defer keyOut(x, true)
		res, err := g.quota.Reserve(r.Context(), x.key.name, x.key.limits, 120)
		if err != nil {
			return err
		}
		rateHeaders(w.Header(), res.Status())
		res.Settle(100)
		return nil
	}
	request := func(i int) (*http.Request, *httptest.ResponseRecorder) {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", fmt.Sprintf("Bearer sk-%d", i))
		return r, httptest.NewRecorder()
	}
	once := func(r *http.Request, w *httptest.ResponseRecorder) {
		clear(w.Header())
		if err := h(w, r, &exchange{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		r, w := request(7)
		b.ReportAllocs()
		for b.Loop() {
			once(r, w)
		}
	})
	// Many goroutines on many keys: the limits' shards, no global lock.
	b.Run("parallel", func(b *testing.B) {
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r, w := request(int(next.Add(1)) % 1000)
			for pb.Next() {
				once(r, w)
			}
		})
	})
}
