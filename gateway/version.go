package gateway

import (
	"net/http"

	"github.com/maitred-dev/maitred/triage"
)

// version passes GET /version through to a ready backend, of the first
// configured model that has one, outside the queue (it holds no KV). The
// backend's answer passes through byte for byte. With no ready backend
// anywhere it answers 503 like a model with none.
func (g *Gateway) version(w http.ResponseWriter, r *http.Request, x *exchange) error {
	for _, rt := range g.live().models {
		b := rt.fm.PickExcept(rt.ejected())
		if b == nil {
			continue
		}
		x.rt = rt
		release := b.Acquire()
		defer release()
		return g.forward(w, r, x.newAttempt(b), nil).err
	}
	if len(g.live().models) > 0 {
		return g.notReady(g.live().models[0])
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelNotReady, Layer: triage.LayerUnready,
		Message: "No model is configured."}
}
