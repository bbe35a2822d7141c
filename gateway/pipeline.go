package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/maitred-dev/maitred/admission"
)

// api is how the request pipeline (pipeline) runs one model API; it is part
// of the endpoint's spec (endpoint, endpoints.go). The pipeline is the
// same for every API; what differs is declared here:
//   - read: how the body is read (readJSON: the whole JSON body within
//     max_body_bytes; readUpload: a multipart upload read whole into a
//     spool on disk under a limit of its own, its form read strictly,
//     handed to the pipeline as x.upload, its form checked by the door's
//     CheckForm);
//   - door: the door's spec of the API (admission.Endpoint): how the door
//     finds the model, checks and counts the input and reads the
//     requested output. The door's decision names the spec it checked the
//     request as (Decision.Endpoint), and the later stages (the key's
//     reservation, the queue's ticket, affinity, the tokenizer check) read
//     that one's properties;
//   - affinity, tokenizeCheck: whether prefix affinity and the sampled
//     tokenizer check apply (they read a chat or completions prompt);
//   - stream: how the API's SSE stream ends and how the gateway ends
//     one that broke (nil: OpenAI's, [DONE]; a broken one gets an error
//     event and an aborted response).
//
// Whether a request streams is the door's reading of its body
// (Decision.Stream); an API that never streams never sets it.
type api struct {
	read          bodyReader
	door          admission.Endpoint
	affinity      bool
	tokenizeCheck bool
	stream        *streamShape
	// pin, when set, may confine the request to some of its model's
	// backends: it returns the slots to exclude (a Responses continuation
	// must reach the backend holding the previous response).
	pin func(g *Gateway, r *http.Request, x *exchange, dec admission.Decision) ([]string, error)
	// screen, when set, may refuse a request the door passed, before its
	// key's limits are reserved (Responses: what would escape the key's
	// fences).
	screen func(g *Gateway, x *exchange, dec admission.Decision) error
	// recordsID: the answer's id names a stored response, recorded with
	// its key, model and backend (responses.go) before the client sees it.
	recordsID bool
}

// bodyReader reads a request's body for the door. A failure it returns is
// rendered as the request's answer; a rejection (a body the door never
// sees: wrong media type, too large) is counted by the reader itself.
type bodyReader func(g *Gateway, w http.ResponseWriter, r *http.Request, x *exchange) ([]byte, error)

// readJSON reads a JSON API's body: Content-Type application/json, the
// whole body within max_body_bytes (readBody).
func readJSON(g *Gateway, w http.ResponseWriter, r *http.Request, x *exchange) ([]byte, error) {
	body, err := g.readJSONBody(w, r, x)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && (e.Code == codeUnsupportedMedia || e.Code == codeRequestTooLarge) {
			return nil, g.rejected(x, e)
		}
		return nil, err
	}
	return body, nil
}

// pipeline runs a request of every model API: read the body once, put it
// through the door (admission.Door: shape, model, input, count, context),
// wait in the model's queue for a ready backend with room, and forward the
// bytes the door approved, which are the client's own unless max_tokens
// was clamped. The answer passes through byte for byte.
func (g *Gateway) pipeline(a *api) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		x.sse = a.stream
		if k := x.key; k != nil && k.perMinute {
			// An answer given before the request reserved (a door
			// rejection, a body refused) carries the key's status too;
			// serve renders it after this returns.
			defer func() {
				if !x.rateSet {
					rateHeaders(w.Header(), g.quota.Status(k.name, k.limits))
				}
			}()
		}
		body, err := a.read(g, w, r, x)
		if err != nil {
			return err
		}
		x.readDone = time.Now()
		dec, rej, kc := g.checkAside(a.door, body, x)
		x.doorDone = time.Now()
		if rej != nil {
			if ci := rej.Context; ci != nil {
				x.promptTokens, x.maxTokens, x.maxModelLen = ci.PromptTokens, ci.MaxTokens, ci.MaxModelLen
			}
			return g.rejected(x, notAllowed(kc, g.refused(x, rej)))
		}
		rt := g.decided(x, dec)
		ep := dec.Endpoint // the API the body was checked as
		x.stream, x.promptTokens, x.maxTokens = dec.Stream, dec.PromptTokens, dec.MaxTokens
		if a.screen != nil {
			if err := a.screen(g, x, dec); err != nil {
				if e, ok := err.(*Error); ok {
					return g.rejected(x, e)
				}
				return err
			}
		}
		var exclude []string
		if a.pin != nil {
			if exclude, err = a.pin(g, r, x, dec); err != nil {
				if e, ok := err.(*Error); ok && e.Status == http.StatusNotFound {
					return g.rejected(x, e)
				}
				return err
			}
		}
		if a.recordsID {
			x.onResponseID = g.responseCreated(x, dec.Model)
		}
		if x.key != nil {
			// The key's limits, after the door's count and before the
			// queue; the hold is settled when the request ends.
			if err := g.reserve(w, x, ep, dec, len(body)); err != nil {
				if e, ok := err.(*Error); ok {
					return g.rejected(x, e)
				}
				return err // the client left while the store answered
			}
			defer g.settle(x)
		}
		if dec.Uncounted != admission.Counted {
			x.uncounted = dec.Uncounted.String()
			rt.metrics.uncounted.WithLabelValues(x.uncounted).Inc()
		}
		if dec.ClampedFrom > 0 {
			w.Header().Set("X-Maitred-Max-Tokens-Clamped", strconv.Itoa(dec.MaxTokens))
		}
		rt.metrics.inFlight.Inc()
		defer rt.metrics.inFlight.Dec()
		class, className := g.class(r, x.key)
		t := ticket(rt, ep, dec, len(body), class)
		if rt.fair {
			x.flowed = true // the access line names its flow
			if x.key != nil {
				t.Flow, t.Weight = x.key.name, x.key.weight
			}
		}
		if a.affinity && rt.affinity > 0 {
			t.Affinity = prefixHash(rt, ep, dec)
		}
		if a.affinity {
			defer releaseQuery(preciseTicket(rt, ep, dec, &t)) // routing: precise (prefix.go)
		}
		t.Exclude = exclude
		// While the answer streams, the request holds neither its body
		// (x.body, dropped once the answer's headers came) nor its parse:
		// only a request sampled for the tokenizer check keeps its
		// decision for after it.
		var checked admission.Decision
		check := a.tokenizeCheck && dec.Uncounted == admission.Counted && g.checker.sampled(rt)
		if check {
			checked = dec
		}
		x.body = dec.Body
		dec = admission.Decision{}
		err = g.queueAndForward(w, r, x, t, className)
		if err == nil && check {
			g.checker.maybeStart(rt, x.att.backend, ep, checked)
		}
		return err
	}
}

// check puts a request through the door (the one its key sees: kc, nil
// for the gateway's): its JSON body, or the form read from a streamed
// upload (x.upload).
func (g *Gateway) check(ep admission.Endpoint, body []byte, x *exchange) (admission.Decision, *admission.Rejection, *keyCatalog) {
	door, kc := g.doorFor(x)
	if x.upload != nil {
		dec, rej := door.CheckForm(ep, x.upload.form)
		return dec, rej, kc
	}
	dec, rej := door.Check(ep, body)
	return dec, rej, kc
}

// rejected counts a door rejection in maitred_rejections_total under its
// outcome (an admission.Reason) and returns it for serve to render: the
// metric, the access log and triage name it alike.
func (g *Gateway) rejected(x *exchange, e *Error) error {
	g.metricsOf(x).rejections.WithLabelValues(e.outcome()).Inc()
	if x.key != nil {
		x.key.metrics().rejections.WithLabelValues(e.outcome()).Inc()
	}
	if x.tr.on() {
		x.tr.rejection = e.outcome()
	}
	return e
}
