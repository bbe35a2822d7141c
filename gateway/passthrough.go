package gateway

import (
	"net/http"
	"slices"
)

// forwardOutsideQueue sends a request that holds no KV (tokenizer work) to
// a ready backend of the model at once: it should not wait behind
// generations. It avoids a backend ejected as an outlier, by the queue's
// own rule (ejection never takes the last ready backend out of rotation).
func (g *Gateway) forwardOutsideQueue(w http.ResponseWriter, r *http.Request, x *exchange, rt *modelRuntime, body []byte) error {
	avoid := rt.ejected()
	for _, b := range rt.fm.Backends() {
		if x.only != nil && !slices.Contains(x.only, b.URL.Host) {
			avoid = append(avoid, b) // a LoRA adapter it has not loaded
		}
	}
	b := rt.fm.PickExcept(avoid)
	if b == nil {
		return g.notReady(rt)
	}
	b.Enter()
	defer b.Leave()
	return g.forward(w, r, x.newAttempt(b), body).err
}
