package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/triage"
)

// The OpenAI Responses API. POST /v1/responses is a model API of the
// pipeline (responsesAPI: counted through the chat template, admitted,
// queued). GET /v1/responses/{id} and POST /v1/responses/{id}/cancel name
// no model: vLLM keeps a response in the memory of the server that made
// it, so they must reach that backend and no other.
//
// Who owns a response: when a create is answered with an id (a JSON
// answer's top-level "id", a stream's response.created event), before
// those bytes reach the client, the gateway records id -> (the key's
// name, the model as the client named it, the backend) in a bounded
// in-memory table and, with a shared store, in the store (store.ResponseTTL),
// so that every replica knows it.
//
// By id, with API keys: a recorded id whose key is the caller's, and
// whose model the key may still use, goes to its backend; anything else
// (an unknown id, another key's, a model outside the key's allow-list)
// gets the same 404 an unknown id gets (vLLM's words: "Response with id
// '…' not found.", type invalid_request_error, param response_id), and
// no backend is asked: an id without a record belongs to no key. A
// continuation (previous_response_id) is held to the same rule before it
// queues. A key may not choose the response's id (vLLM's request_id) and,
// when it has max_concurrent, may not start a background response
// (responsesScreen).
//
// Without API keys nothing is owned: a recorded id goes to its backend;
// an unrecorded one (made before a restart without a store, or evicted
// from the table) is looked for by asking every ready backend at once
// (GET, the backend's own key, a fresh request id, the model's first-byte
// timeout) and forwarded to the one that answers 200. When every backend
// says 404 the gateway answers the 404 above; when some could not be
// asked and none has it, 502 (it may be on one that did not answer).
//
// A recorded backend that is gone or not ready (an address change) is
// looked for among its model's ready backends only. A client cannot steer
// a request: no header or parameter of the client's chooses the backend.

// responseCacheSize bounds the in-memory table of response owners.
const responseCacheSize = 1 << 16

// maxResponseID bounds the ids the gateway records: longer ones (vLLM's
// are "resp_" and 32 hex digits) are not recorded, so not reachable by id
// through the gateway with API keys.
const maxResponseID = 256

// responseOwners remembers who made a response id: a bounded table, oldest
// entry evicted first.
type responseOwners struct {
	mu    sync.Mutex
	m     map[string]admission.ResponseOwner
	order []string // insertion order, a ring of responseCacheSize
	next  int
}

func (o *responseOwners) get(id string) (admission.ResponseOwner, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.m[id]
	return v, ok
}

func (o *responseOwners) put(id string, v admission.ResponseOwner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]admission.ResponseOwner)
		o.order = make([]string, responseCacheSize)
	}
	if _, ok := o.m[id]; ok {
		o.m[id] = v
		return
	}
	if old := o.order[o.next]; old != "" {
		delete(o.m, old)
	}
	o.order[o.next] = id
	o.next = (o.next + 1) % len(o.order)
	o.m[id] = v
}

// responseTarget is where a request by id goes: a model's runtime and the
// backend holding the response.
type responseTarget struct {
	rt *modelRuntime
	b  *fleet.Backend
}

// responseCreated is the recorder of a Responses create's id: called by
// the attempt's usage meter with the id the backend answered, before
// those bytes go to the client, it records the request's key, model and
// backend as the id's owner, here and in the shared store.
func (g *Gateway) responseCreated(x *exchange, model string) func(id string) {
	return func(id string) {
		if id == "" || len(id) > maxResponseID || x.att == nil || x.att.backend == nil {
			return
		}
		o := admission.ResponseOwner{Key: keyName(x), Model: model, Backend: x.att.backend.URL.String()}
		g.responses.put(id, o)
		if g.sharedResponses == nil {
			return
		}
		// Recorded even when the client has left: a background response
		// goes on without it.
		if err := g.sharedResponses.PutResponseOwner(context.WithoutCancel(x.clientCtx), id, o); err != nil {
			g.log.Warn("the owner of a stored response could not be written to the shared store; other replicas will not find it",
				zap.String("request_id", x.id), zap.Error(err))
		}
	}
}

// responseOwner is the recorded owner of id: this replica's table, else
// the shared store's. err: the store could not be asked.
func (g *Gateway) responseOwner(ctx context.Context, id string) (admission.ResponseOwner, bool, error) {
	if o, ok := g.responses.get(id); ok {
		return o, true, nil
	}
	if g.sharedResponses == nil {
		return admission.ResponseOwner{}, false, nil
	}
	o, ok, err := g.sharedResponses.ResponseOwner(ctx, id)
	if ok {
		g.responses.put(id, o)
	}
	return o, ok, err
}

// responseNotFound is the answer to an id the caller cannot use, whether
// it is unknown, another key's or on a model the key may not use: vLLM's
// own 404 for an unknown response id ({"error": {"message": "Response with
// id '…' not found.", "type": "invalid_request_error", "param":
// "response_id", "code": 404}}), the same bytes in every case.
// outcome tells which, in the log and metrics only.
func responseNotFound(id, outcome string) *Error {
	return &Error{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "response_id", StatusCode: true, Outcome: outcome,
		Layer: triage.LayerDoor, Message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

// The outcomes of a request by id the gateway answered 404 itself.
const (
	outcomeResponseNotFound = "response_not_found" // no record, and (without keys) no backend has it
	outcomeResponseNotOwned = "response_not_owned" // another key's, or a model the key may not use
)

// responseStoreDown is the answer when, with API keys, an id has no record
// here and the shared store that may hold it cannot be asked.
func responseStoreDown(err error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeStoreDown, Outcome: admission.StoreDown.String(),
		Layer: triage.LayerDoor, RetryAfter: time.Second, Cause: err,
		Message: "The shared store of this gateway's replicas cannot be reached: who owns this response cannot be checked. Retry later."}
}

// findResponse is where a request by id for raw id (path: the backend
// path, the id as the client escaped it) goes, or the gateway's answer
// (see the comment at the top of this file). found is false when no
// backend holds it (only without keys, where the caller decides).
func (g *Gateway) findResponse(ctx context.Context, x *exchange, path, id string) (responseTarget, error) {
	o, known, err := g.responseOwner(ctx, id)
	if known {
		if x.key != nil && (o.Key != x.key.name || !x.key.allows(o.Model)) {
			return responseTarget{}, responseNotFound(id, outcomeResponseNotOwned)
		}
		rt, _, ok := g.live().catalog.resolve(o.Model)
		if !ok {
			return responseTarget{}, responseNotFound(id, outcomeResponseNotFound)
		}
		for _, b := range rt.fm.Backends() {
			if b.URL.String() == o.Backend && b.Ready() {
				return responseTarget{rt, b}, nil
			}
		}
		// Its backend is gone or not ready: it may be one of its model's
		// backends under another address.
		return g.probeResponses(ctx, []*modelRuntime{rt}, path, id)
	}
	if x.key != nil {
		if err != nil {
			return responseTarget{}, responseStoreDown(err)
		}
		return responseTarget{}, responseNotFound(id, outcomeResponseNotFound)
	}
	if ctx.Err() != nil {
		return responseTarget{}, errClientGone
	}
	return g.probeResponses(ctx, g.live().models, path, id)
}

// responseByID serves GET /v1/responses/{id} and POST
// /v1/responses/{id}/cancel: it finds the backend holding the id and
// forwards the client's request to it, outside the queue (no KV is
// claimed; a cancel frees some).
func (g *Gateway) responseByID(w http.ResponseWriter, r *http.Request, x *exchange) error {
	// The id as the client's path spells it (escaped), so that the probe
	// asks for exactly what the forwarded request will.
	path := strings.TrimSuffix(r.URL.EscapedPath(), "/cancel")
	escaped := strings.TrimPrefix(path, "/v1/responses/")
	id, err := url.PathUnescape(escaped)
	if err != nil || strings.ContainsAny(id, "/\\?#") || id == "." || id == ".." {
		// No backend path can be reached through an id: refused as an
		// unknown URL before anything is sent.
		return &Error{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: codeUnknownURL, Layer: triage.LayerDoor,
			Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")"}
	}
	target, err := g.findResponse(r.Context(), x, path, id)
	if e, ok := err.(*Error); ok && e.Status == http.StatusNotFound {
		// Counted as a rejection, by key: another key's id is worth seeing.
		return g.rejected(x, e)
	}
	if err != nil {
		return err
	}
	x.rt, x.sse = target.rt, responsesStream
	target.b.Enter()
	defer target.b.Leave()
	return g.forward(w, r, x.newAttempt(target.b), nil).err
}

// probeResponses asks every ready backend of models, at once, whether it
// holds the response at path, and returns the one that answered 200
// (recorded, without a key, as the id's backend); when every one said 404,
// the 404 for an unknown id; when some could not be asked, 502.
func (g *Gateway) probeResponses(ctx context.Context, models []*modelRuntime, path, id string) (responseTarget, error) {
	var cands []responseTarget
	seen := map[string]bool{}
	for _, rt := range models {
		for _, b := range rt.fm.Backends() {
			if b.Ready() && !seen[b.URL.String()] {
				seen[b.URL.String()] = true
				cands = append(cands, responseTarget{rt, b})
			}
		}
	}
	if len(cands) == 0 {
		if len(models) > 0 {
			return responseTarget{}, g.notReady(models[0])
		}
		return responseTarget{}, &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelNotReady, Layer: triage.LayerUnready,
			Message: "No model is configured."}
	}
	type answer struct {
		i      int
		status int
		err    error
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(cands))
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, err := g.probeResponse(pctx, c, path)
			answers <- answer{i, status, err}
		}()
	}
	defer wg.Wait()
	hit, failed := -1, 0
	for range cands {
		a := <-answers
		switch {
		case a.err == nil && a.status == http.StatusOK:
			hit = a.i
			cancel() // the others need not finish
		case a.err == nil && a.status == http.StatusNotFound:
		default:
			failed++
		}
		if hit >= 0 {
			break
		}
	}
	if ctx.Err() != nil {
		return responseTarget{}, errClientGone
	}
	switch {
	case hit >= 0:
		c := cands[hit]
		g.responses.put(id, admission.ResponseOwner{Model: c.rt.name, Backend: c.b.URL.String()})
		return c, nil
	case failed > 0:
		return responseTarget{}, &Error{Status: http.StatusBadGateway, Type: typeServer, Code: codeBackendDown, Layer: triage.LayerConnect,
			Message: fmt.Sprintf("No backend answered that it holds response %q, and %d of %d could not be asked; it may be on one of those. Retry later.", id, failed, len(cands))}
	}
	return responseTarget{}, responseNotFound(id, outcomeResponseNotFound)
}

// responsesStream is a Responses stream: it ends at its completing event,
// and a broken one gets an error event, as OpenAI's other streams do, and
// an aborted response.
var responsesStream = &streamShape{end: responsesStreamEnd, breakEvents: (*Error).sseEvent, meter: meterResponsesEvent}

// responsesStreamEnd recognises the event that completes a Responses
// stream (vLLM sends no [DONE]): response.completed, response.incomplete,
// response.failed, or an error event.
func responsesStreamEnd(events []byte) bool {
	for len(events) > 0 {
		var line []byte
		line, events, _ = bytes.Cut(events, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || string(name) != "event" {
			continue
		}
		switch string(bytes.TrimSpace(value)) {
		case "response.completed", "response.incomplete", "response.failed", "error":
			return true
		}
	}
	return false
}

// probeResponse asks backend c.b whether it holds the response at path
// (GET, its own key, a fresh request id, the model's first-byte timeout)
// and returns its status.
func (g *Gateway) probeResponse(ctx context.Context, c responseTarget, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.rt.firstByte)
	defer cancel()
	u := *c.b.URL
	u.RawQuery = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(u.String(), "/")+path, nil)
	if err != nil {
		return 0, err
	}
	if c.b.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.b.Key)
	}
	req.Header.Set("X-Request-Id", newID())
	res, err := g.upstream.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20)) // reuse the connection
	return res.StatusCode, nil
}

// pinPreviousResponse confines a Responses request that continues another
// (previous_response_id) to the backend holding that response: vLLM reads
// the earlier conversation from its own memory and answers 404 anywhere
// else. The request still waits in its model's queue, for that backend
// only. With API keys, a previous response the key cannot use by id
// (findResponse's rule) gets the same 404 before the request queues;
// without, an id no backend holds, or one on another model's backend, is
// not pinned: the backend answers vLLM's 404.
func pinPreviousResponse(g *Gateway, r *http.Request, x *exchange, dec admission.Decision) ([]string, error) {
	prev := dec.Request.Get("previous_response_id")
	if prev == nil || prev.Kind != ojson.String || prev.Str == "" {
		return nil, nil
	}
	if strings.ContainsAny(prev.Str, "/\\?#") {
		if x.key != nil {
			return nil, responseNotFound(prev.Str, outcomeResponseNotFound)
		}
		return nil, nil
	}
	id := url.PathEscape(prev.Str)
	target, err := g.findResponse(r.Context(), x, "/v1/responses/"+id, prev.Str)
	if err != nil {
		var e *Error
		if x.key == nil && errors.As(err, &e) && e.Status == http.StatusNotFound {
			return nil, nil // no backend has it (without keys): vLLM answers
		}
		return nil, err
	}
	if target.rt != x.rt {
		return nil, nil
	}
	var exclude []string
	for _, b := range x.rt.fm.Backends() {
		if b != target.b {
			exclude = append(exclude, b.URL.Host)
		}
	}
	return exclude, nil
}

// responsesScreen refuses, for a request with an API key, what would
// escape the key's fences (before the key's limits are reserved):
//   - request_id: vLLM makes it the response's id, the handle a stored
//     response is owned by; a key that chose it could take over or
//     overwrite another key's response.
//   - background: true under max_concurrent: vLLM answers a background
//     request at once and runs it on its own, so the concurrency slot
//     would be free again while the work goes on (five background
//     requests under max_concurrent 1 would run at once).
func responsesScreen(g *Gateway, x *exchange, dec admission.Decision) error {
	k := x.key
	if k == nil {
		return nil
	}
	if v := dec.Request.Get("request_id"); !v.IsNull() {
		return badParamPolicy(codeRequestIDNotAllowed, "request_id",
			"request_id is not accepted with an API key: the response's id is the backend's to choose.")
	}
	if v := dec.Request.Get("background"); k.limits.MaxConcurrent > 0 && v != nil && v.Kind == ojson.Bool && v.Bool {
		return badParamPolicy(codeBackgroundNotAllowed, "background", fmt.Sprintf(
			"background responses are not accepted for this API key: it has max_concurrent %d, which a background response, answered at once and run after, would escape. Send the request without background (stream it to keep the connection short).",
			k.limits.MaxConcurrent))
	}
	return nil
}

// badParamPolicy is a 400 for a parameter the gateway's policy refuses:
// outcome invalid_param, a code naming the refusal.
func badParamPolicy(code, param, msg string) *Error {
	e := badRequest(code, param, "%s", msg)
	e.Outcome = admission.InvalidParam.String()
	return e
}
