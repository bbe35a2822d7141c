package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// watchShared wires the shared store: freed room wakes the pools holding
// requests for that backend, and its standing is exported as
// maitred_store_up and maitred_store_replicas.
func (g *Gateway) watchShared(reg prometheus.Registerer) {
	g.shared.Watch(g.sharedFreed)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "maitred_store_up",
			Help: "1 while the shared store of the replicas answers, 0 while it cannot be reached (on_store_error applies).",
		}, func() float64 {
			if g.shared.State().Up {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "maitred_store_replicas",
			Help: "Live replicas (heartbeats within store_lease) this replica last counted in the shared store.",
		}, func() float64 { return float64(g.shared.State().Replicas) }),
	)
}

// sharedFreed is the shared store's news of freed room: backend is a
// backend's host:port, or "" for all of them.
func (g *Gateway) sharedFreed(backend string) {
	for _, rt := range g.live().models {
		if backend == "" {
			rt.pool.SharedRecheck()
			continue
		}
		rt.pool.SharedFreed(backend) // slots are named by host:port
	}
}

// storeStatus is the shared store as /readyz, /debug/store and the status
// page show it.
type storeStatus struct {
	URL     string    `json:"url"`
	Up      bool      `json:"up"`
	OnError string    `json:"on_store_error"`
	Replica string    `json:"replica"`
	Live    int       `json:"replicas"`
	Since   time.Time `json:"since"`
	Error   string    `json:"error,omitempty"`
	// Detail says in words what the replica does now.
	Detail string `json:"detail"`
}

func (g *Gateway) storeStatus() *storeStatus {
	if g.shared == nil {
		return nil
	}
	st := g.shared.State()
	s := &storeStatus{URL: g.cfg.Store.URL, Up: st.Up, OnError: g.cfg.Store.OnError, Replica: st.Replica, Live: st.Replicas,
		Since: st.Since.UTC(), Error: st.Err}
	switch {
	case st.Up:
		s.Detail = "shared: backends' work is accounted with the other replicas"
	case g.cfg.Store.OnError == "reject":
		s.Detail = "store unavailable: requests that need it get 503 (on_store_error: reject)"
	default:
		s.Detail = "store unavailable: admitting on this replica's share of each backend's limits (on_store_error: local)"
	}
	return s
}

// debugStore answers GET /debug/store: the shared store's standing, or
// {"store": null} when none is configured.
func (g *Gateway) debugStore(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	writeJSON(w, http.StatusOK, struct {
		Store *storeStatus `json:"store"`
	}{g.storeStatus()})
	return nil
}
