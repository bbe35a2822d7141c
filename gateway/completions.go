package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/maitred-dev/maitred/admission"
)

// completions handles POST /v1/chat/completions and /v1/completions: read
// the body once, put it through the door (admission.Door: shape, model,
// template, context), pick a ready backend and forward the bytes the door
// approved, which are the client's own unless max_tokens was clamped.
func (g *Gateway) completions(ep admission.Endpoint) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		if e := checkContentType(r.Header.Get("Content-Type")); e != nil {
			return g.rejected(x, e)
		}
		body, err := g.readBody(w, r, x)
		x.bytesIn = len(body)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Status == http.StatusRequestEntityTooLarge {
				return g.rejected(x, e)
			}
			return err
		}
		x.readDone = time.Now()
		dec, rej := g.door.Check(ep, body)
		x.doorDone = time.Now()
		if rej != nil {
			if rej.Model != "" {
				x.rt = g.models[rej.Ref]
			}
			if ci := rej.Context; ci != nil {
				x.promptTokens, x.maxTokens, x.maxModelLen = ci.PromptTokens, ci.MaxTokens, ci.MaxModelLen
			}
			return g.rejected(x, rejection(rej))
		}
		rt := g.models[dec.Ref]
		x.rt, x.stream, x.promptTokens, x.maxTokens = rt, dec.Stream, dec.PromptTokens, dec.MaxTokens
		if dec.Uncounted != admission.Counted {
			x.uncounted = dec.Uncounted.String()
			rt.metrics.uncounted.WithLabelValues(x.uncounted).Inc()
		}
		if dec.ClampedFrom > 0 {
			w.Header().Set("X-Maitred-Max-Tokens-Clamped", strconv.Itoa(dec.MaxTokens))
		}
		rt.metrics.inFlight.Inc()
		defer rt.metrics.inFlight.Dec()
		class, className := g.class(r)
		t := ticket(rt, dec, len(body), class)
		if rt.affinity > 0 {
			t.Affinity = prefixHash(rt, ep, dec.Request)
		}
		err = g.dispatch(w, r, x, t, className, dec.Body)
		if err == nil && dec.Uncounted == admission.Counted {
			g.checker.maybeCheck(rt, x.att.backend, ep, dec)
		}
		return err
	}
}

// rejected counts a door rejection in maitred_rejections_total under its
// outcome (an admission.Reason) and returns it for serve to render: the
// metric, the access log and triage name it alike.
func (g *Gateway) rejected(x *exchange, e *Error) error {
	g.metricsOf(x).rejections.WithLabelValues(e.outcome()).Inc()
	return e
}
