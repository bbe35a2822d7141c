package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

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
// How a response is found: the gateway asks every ready backend of every
// model, concurrently, with GET /v1/responses/{id} (the backend's own
// key, a fresh request id, the model's first-byte timeout), and forwards
// the client's request to the one that answers 200. It remembers the
// answer (id -> backend) in a bounded in-memory table as a fast path. No
// state is shared between replicas or kept across restarts: any replica
// finds any response by asking. A client cannot steer the request: the
// backend is the one that holds the id, among the configured ready ones;
// no header or parameter of the client's chooses it. When every backend
// answered 404 the request goes to one of them, which answers vLLM's own
// 404; when some could not be asked and none has it, 502 (it may be on a
// backend that did not answer).

// responseCacheSize bounds the id -> backend table.
const responseCacheSize = 4096

// responseOwners remembers which backend holds a response id: a bounded
// table, oldest entry evicted first.
type responseOwners struct {
	mu    sync.Mutex
	m     map[string]responseOwner
	order []string // insertion order, a ring of responseCacheSize
	next  int
}

type responseOwner struct {
	rt *modelRuntime
	b  *fleet.Backend
}

func (o *responseOwners) get(id string) (responseOwner, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.m[id]
	return v, ok
}

func (o *responseOwners) put(id string, v responseOwner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]responseOwner, responseCacheSize)
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

func (o *responseOwners) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, id) // its ring slot is reused in turn
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

// responseByID serves GET /v1/responses/{id} and POST
// /v1/responses/{id}/cancel: it finds the backend holding the id and
// forwards the client's request to it, outside the queue (no KV is
// claimed; a cancel frees some).
func (g *Gateway) responseByID(w http.ResponseWriter, r *http.Request, x *exchange) error {
	// The id as the client's path spells it (escaped), so that the probe
	// asks for exactly what the forwarded request will.
	path := strings.TrimSuffix(r.URL.EscapedPath(), "/cancel")
	id := strings.TrimPrefix(path, "/v1/responses/")
	if raw, err := url.PathUnescape(id); err != nil || strings.ContainsAny(raw, "/\\?#") || raw == "." || raw == ".." {
		// No backend path can be reached through an id: refused as an
		// unknown URL before anything is sent.
		return &Error{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: codeUnknownURL, Layer: triage.LayerDoor,
			Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")"}
	}
	owner, _, err := g.locateResponse(r.Context(), path, id)
	if err != nil {
		return err
	}
	x.rt, x.sse = owner.rt, responsesStream
	release := owner.b.Acquire()
	defer release()
	return g.forward(w, r, x.newAttempt(owner.b), nil).err
}

// locateResponse finds the backend that holds response id: the table's
// entry when its backend is ready, else the answer of asking them all.
// When every ready backend says 404, found is false and the owner is one
// of them, to let it answer in vLLM's words.
func (g *Gateway) locateResponse(ctx context.Context, path, id string) (_ responseOwner, found bool, _ error) {
	owners := &g.responses
	if o, ok := owners.get(id); ok {
		if o.b.Ready() {
			return o, true, nil
		}
		owners.forget(id)
	}
	var cands []responseOwner
	seen := map[string]bool{}
	for _, rt := range g.live().models {
		for _, b := range rt.fm.Backends() {
			if b.Ready() && !seen[b.URL.String()] {
				seen[b.URL.String()] = true
				cands = append(cands, responseOwner{rt, b})
			}
		}
	}
	if len(cands) == 0 {
		if len(g.live().models) > 0 {
			return responseOwner{}, false, g.notReady(g.live().models[0])
		}
		return responseOwner{}, false, &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelNotReady, Layer: triage.LayerUnready,
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
		return responseOwner{}, false, errClientGone
	}
	switch {
	case hit >= 0:
		owners.put(id, cands[hit])
		return cands[hit], true, nil
	case failed > 0:
		return responseOwner{}, false, &Error{Status: http.StatusBadGateway, Type: typeServer, Code: codeBackendDown, Layer: triage.LayerConnect,
			Message: fmt.Sprintf("No backend answered that it holds response %q, and %d of %d could not be asked; it may be on one of those. Retry later.", id, failed, len(cands))}
	}
	// Every backend said 404: let one of them say it in vLLM's words.
	return cands[0], false, nil
}

// probeResponse asks backend c.b whether it holds the response at path
// (GET, its own key, a fresh request id, the model's first-byte timeout)
// and returns its status.
func (g *Gateway) probeResponse(ctx context.Context, c responseOwner, path string) (int, error) {
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
// only. An id no backend holds, or one on another model's backend, is not
// pinned: the backend answers vLLM's 404.
func pinPreviousResponse(g *Gateway, r *http.Request, x *exchange, dec admission.Decision) ([]string, error) {
	prev := dec.Request.Get("previous_response_id")
	if prev == nil || prev.Kind != ojson.String || prev.Str == "" || strings.ContainsAny(prev.Str, "/\\?#") {
		return nil, nil
	}
	id := url.PathEscape(prev.Str)
	owner, found, err := g.locateResponse(r.Context(), "/v1/responses/"+id, id)
	if err != nil || !found || owner.rt != x.rt {
		return nil, err
	}
	var exclude []string
	for _, b := range x.rt.fm.Backends() {
		if b != owner.b {
			exclude = append(exclude, b.URL.Host)
		}
	}
	return exclude, nil
}
