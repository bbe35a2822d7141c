package gateway

import (
	"net/http"

	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/triage"
)

// version passes GET /version through to a ready backend outside the
// queue (it holds no KV): first one, of any model in config order, that
// answered /version at its warm-up (its record's version), so that a
// backend that does not serve it (404: not vLLM, or a proxy in front of
// one) is not asked while another does; failing that, a ready backend of
// the first model that has one, whose answer the client then gets. The
// backend's answer passes through byte for byte. With no ready backend
// anywhere it answers 503 like a model with none.
func (g *Gateway) version(w http.ResponseWriter, r *http.Request, x *exchange) error {
	models := g.live().models
	for _, known := range []bool{true, false} {
		for _, rt := range models {
			skip := rt.ejected()
			if known {
				for _, b := range rt.fm.Backends() {
					if b.Ready() && b.Status().Version == "" {
						skip = append(skip, b)
					}
				}
			}
			if b := rt.fm.PickExcept(skip); b != nil {
				return g.forwardVersion(w, r, x, rt, b)
			}
		}
	}
	if len(models) > 0 {
		return g.notReady(models[0])
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelNotReady, Layer: triage.LayerUnready,
		Message: "No model is configured."}
}

func (g *Gateway) forwardVersion(w http.ResponseWriter, r *http.Request, x *exchange, rt *modelRuntime, b *fleet.Backend) error {
	x.rt = rt
	b.Enter()
	defer b.Leave()
	return g.forward(w, r, x.newAttempt(b), nil).err
}
