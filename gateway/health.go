package gateway

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/maitred-dev/maitred/fleet"
)

// livez answers 200 while the process can serve HTTP. It never looks at
// backends: a slow model load must not get the gateway's pod restarted.
func (g *Gateway) livez(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
	return nil
}

type readyModel struct {
	Name     string `json:"name"`
	Ready    bool   `json:"ready"`
	MinReady int    `json:"min_ready"`
	NReady   int    `json:"ready_backends"`
	// NEjected counts the ready backends ejected as outliers right now:
	// ready, yet given no requests until their ejection ends.
	NEjected int            `json:"ejected_backends"`
	Backends []readyBackend `json:"backends"`
}

// readyBackend is a backend's state with its standing in the queue.
type readyBackend struct {
	fleet.BackendStatus
	Ejected      bool       `json:"ejected,omitempty"`
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`
}

type readyBody struct {
	Status string       `json:"status"` // "ready" or "not_ready"
	Phase  string       `json:"phase"`
	Models []readyModel `json:"models,omitempty"`
	// Store is the shared store, when configured; its being down does
	// not make the gateway unready (on_store_error says what it does).
	Store *storeStatus `json:"store,omitempty"`
}

// readyz answers 200 when every model has at least min_ready ready backends
// and the gateway is serving (not starting, not draining), else 503. With
// detail (where the admin pages are served) the body says which model and
// backend and why, and since when, and the shared store's standing;
// without, only the verdict and the phase: the models, backend URLs and
// store are operators' knowledge, not a tenant's.
func (g *Gateway) readyz(detail bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		body, ok := g.readiness()
		status := http.StatusOK
		if !ok {
			status = http.StatusServiceUnavailable
		}
		if !detail {
			body.Models, body.Store = nil, nil
		}
		writeJSON(w, status, body)
		return nil
	}
}

// health answers GET /health as vLLM does (200 or 503, empty body), for
// load balancers and scripts written for vLLM. A vLLM server listens only
// once its model is loaded, so its /health means "can serve": here that
// is readiness, as /readyz judges it.
func (g *Gateway) health(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	status := http.StatusOK
	if _, ok := g.readiness(); !ok {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(status)
	return nil
}

// readiness is /readyz's verdict and its detail.
func (g *Gateway) readiness() (readyBody, bool) {
	body := readyBody{Phase: g.Phase().String(), Store: g.storeStatus()}
	ok := g.Phase() == Serving
	for _, rt := range g.live().models {
		m := rt.fm
		rm := readyModel{Name: m.Name, MinReady: m.MinReady()}
		slots := rt.slotStats()
		for _, b := range m.Backends() {
			rb := readyBackend{BackendStatus: b.Status()}
			if b.Ready() {
				rm.NReady++
			}
			if sl := slots[b.URL.Host]; sl.Ejected {
				until := sl.EjectedUntil.UTC()
				rb.Ejected, rb.EjectedUntil = true, &until
				rm.NEjected++
			}
			rm.Backends = append(rm.Backends, rb)
		}
		rm.Ready = rm.NReady >= m.MinReady()
		ok = ok && rm.Ready
		body.Models = append(body.Models, rm)
	}
	body.Status = "ready"
	if !ok {
		body.Status = "not_ready"
	}
	return body, ok
}

type modelEntry struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
	// Root and Parent are set for a LoRA adapter, as vLLM lists one: its
	// path on the backends, and the configured model it adapts.
	Root   string  `json:"root,omitempty"`
	Parent *string `json:"parent,omitempty"`
}

// listModels answers GET /v1/models from the config merged with what the
// backends report, without a backend round trip: the configured models,
// then the LoRA adapters loaded on at least one ready backend, each once,
// under the model a request naming it resolves to (catalog.resolve: a
// configured name wins, then the first model in config order); with
// auth, only what the request's key may use.
func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request, x *exchange) error {
	list := struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{Object: "list", Data: []modelEntry{}}
	for _, m := range g.fleet.Models() {
		if x.key != nil && !x.key.allows(m.Name) {
			continue // a key sees its own models only
		}
		list.Data = append(list.Data, modelEntry{ID: m.Name, Object: "model", Created: m.Created(), OwnedBy: "maitred", MaxModelLen: m.MaxModelLen()})
	}
	seen := map[string]bool{}
	for _, m := range g.fleet.Models() {
		for _, b := range m.Backends() {
			if !b.Ready() {
				continue
			}
			for _, a := range b.Adapters() {
				if _, configured := g.live().byName[a.Name]; configured || seen[a.Name] || (x.key != nil && !x.key.allows(a.Name)) {
					continue
				}
				seen[a.Name] = true
				list.Data = append(list.Data, modelEntry{ID: a.Name, Object: "model", Created: m.Created(), OwnedBy: "maitred",
					MaxModelLen: m.MaxModelLen(), Root: a.Root, Parent: &m.Name})
			}
		}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
