package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/prefixindex"
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

// pipeline runs a request of every model API: check its API key (when the
// gateway has keys; xAPIKey: Anthropic's x-api-key too, as keyed does),
// read the body once, put it through the door (admission.Door: shape,
// model, input, count, context), wait in the model's queue for a ready
// backend with room, and forward the bytes the door approved, which are
// the client's own unless max_tokens was clamped. The answer passes
// through byte for byte.
//
// The steps before the queue run in admit, a call of their own, so that
// their locals (the door's decision, the ticket's making) are off the
// stack while the answer streams: what the queue and the attempts need
// afterwards is in the exchange (x.q), and the handler's frames stay
// shallow enough for the runtime to halve an open stream's stack.
func (g *Gateway) pipeline(a *api, xAPIKey bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		defer g.unqueue(x) // what admit and the key took, given back in reverse
		if t := g.keys.Load(); t != nil {
			if err := g.keyIn(w, r, x, t, xAPIKey, true); err != nil {
				return err
			}
		}
		x.sse = a.stream
		if err := g.admitAside(a, w, r, x); err != nil {
			return err
		}
		if err := g.waitTurn(r, x); err != nil {
			return err
		}
		return g.queueAndForward(w, r, x)
	}
}

// queued is what the pipeline keeps of an admitted request for its
// queue, its attempts and its end (x.q): its ticket and priority class,
// and what admit took that unqueue gives back.
type queued struct {
	t     admission.Ticket
	class string
	// lease is the first wait's grant (waitTurn, queue.go) until its
	// attempt takes it (acquire).
	lease *admission.Lease
	// checked is the door's decision of a request sampled for the
	// tokenizer check (with the API its body was checked as), kept for
	// after its answer; nil for the others.
	checked *admission.Decision
	// query is the precise-routing query to release; settle, inFlight:
	// the key's hold and the model's in-flight gauge were taken.
	query            *prefixindex.Query
	settle, inFlight bool
}

// unqueue ends what admit began: a first wait's lease no attempt took
// goes back; a request sampled for the tokenizer
// check whose answer came (its last attempt answered) starts it; then
// what admit took is given back, in reverse: the precise-routing query,
// the model's in-flight gauge, the key's hold. An answer given before the
// request reserved (a door rejection, a body refused) carries the key's
// x-ratelimit-* headers too (on x.rec, the answer's writer); serve renders
// it after this. Last, the key's request is counted out of flight
// (keyOut), as keyed does after its handler.
func (g *Gateway) unqueue(x *exchange) {
	q := &x.q
	if q.lease != nil { // granted to waitTurn, never taken by an attempt
		q.lease.Release(admission.Abandoned)
		q.lease = nil
	}
	if q.checked != nil && x.att != nil && x.att.res.err == nil {
		g.checker.maybeStart(x.rt, x.att.backend, q.checked.Endpoint, *q.checked)
	}
	if q.query != nil {
		releaseQuery(q.query)
		q.query = nil
	}
	if q.inFlight {
		x.rt.metrics.inFlight.Dec()
	}
	if q.settle {
		g.settle(x)
	}
	if k := x.key; k != nil {
		if k.perMinute && !x.rateSet {
			rateHeaders(x.rec.Header(), g.quota.Status(k.name, k.limits))
		}
		keyOut(x, true)
	}
}

// A request that will wait in a queue parks its handler goroutine there
// with whatever stack that goroutine has grown to, and the runtime halves
// a parked goroutine's stack only at a collection, and only while under a
// quarter of it is in use. The steps before the queue (admit) are the
// deepest a request takes: admit's own frame (1.2 KiB), the body's
// reading, and the door's render and count (the template evaluator, the
// tokenizer: 16-32 KiB of stack), and a traced request's trace's beginning
// (the sampler's calls: about 2 KiB, tracer in tracing.go). On the
// handler's own goroutine they grow its stack from 4 KiB (what net/http's
// conn.serve and the frames down to the queue need) to 8 or more, kept
// while it waits. So while requests are waiting for a backend (queued), a
// request's admit runs on a goroutine of its own (admitAside), whose stack
// goes when it returns, and a handler that then parks never grew past 4
// KiB, traced or not (TestWaitingHandlerParksOnSmallStack,
// TestTracedWaitingHandlerParksOnSmallStack). With nobody waiting it runs
// inline: a request that will not wait pays nothing (a handoff costs a
// goroutine and a channel, ~1-2 µs).

// admitAside is admit, run on a goroutine of its own while requests are
// queued (see above). A panic in it is raised again on the handler's
// goroutine, where serveIn recovers it (recovered) as from an inline one.
func (g *Gateway) admitAside(a *api, w http.ResponseWriter, r *http.Request, x *exchange) error {
	if g.queued.Load() <= 0 {
		return g.admit(a, w, r, x)
	}
	return g.admitOnGoroutine(a, w, r, x)
}

// admitOnGoroutine is admitAside's handoff, a function of its own: the
// result the goroutine writes lives on the heap, and an inline admit
// must not pay for that. The handler's goroutine waits for it and
// touches nothing meanwhile: the goroutine has the request, its writer
// and its exchange to itself until it returns.
func (g *Gateway) admitOnGoroutine(a *api, w http.ResponseWriter, r *http.Request, x *exchange) (err error) {
	var panicked any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		err = g.admit(a, w, r, x)
		// The context's done channel, made at its first Done, is made
		// here, not in the select the handler then parks in.
		r.Context().Done()
	}()
	<-done
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// admit runs a request up to the queue: its body read, the door's check,
// the API's screen and pin, the key's reservation; and makes its ticket
// (x.q). A returned error is the request's answer.
//
//go:noinline
func (g *Gateway) admit(a *api, w http.ResponseWriter, r *http.Request, x *exchange) error {
	if x.tr.on() {
		g.tr.begin(x) // aside with the rest while requests wait (tracer)
	}
	body, err := a.read(g, w, r, x)
	if err != nil {
		return err
	}
	x.readDone = time.Now()
	dec, rej, kc := g.check(a.door, body, x)
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
	q := &x.q
	if x.key != nil {
		// The key's limits, after the door's count and before the
		// queue; the hold is settled when the request ends.
		if err := g.reserve(w, x, ep, dec, len(body)); err != nil {
			if e, ok := err.(*Error); ok {
				return g.rejected(x, e)
			}
			return err // the client left while the store answered
		}
		q.settle = true
	}
	if dec.Uncounted != admission.Counted {
		x.uncounted = dec.Uncounted.String()
		rt.metrics.uncounted.WithLabelValues(x.uncounted).Inc()
	}
	if dec.ClampedFrom > 0 {
		w.Header().Set("X-Maitred-Max-Tokens-Clamped", strconv.Itoa(dec.MaxTokens))
	}
	rt.metrics.inFlight.Inc()
	q.inFlight = true
	class, className := g.class(r, x.key)
	q.t, q.class = ticket(rt, ep, dec, len(body), class), className
	t := &q.t
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
		q.query = preciseTicket(rt, ep, dec, t) // routing: precise (prefix.go)
	}
	t.Exclude = exclude
	// While the answer streams, the request holds neither its body
	// (x.body, dropped once the answer's headers came) nor its parse:
	// only a request sampled for the tokenizer check keeps its
	// decision for after it.
	if a.tokenizeCheck && dec.Uncounted == admission.Counted && g.checker.sampled(rt) {
		checked := dec
		q.checked = &checked
	}
	x.body = dec.Body
	return nil
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
