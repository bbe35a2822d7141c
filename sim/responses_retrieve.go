package sim

import (
	"net/http"
	"strconv"
)

// --- GET /v1/responses/{id} and cancel -------------------------------------------

func (s *Server) responsesRetrieve(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	stream := false
	if v := q.Get("stream"); v != "" {
		b, ok := pyBool(v)
		if !ok {
			writeAPIError(w, requestValidationError("bool_parsing", []any{"query", "stream"},
				"Input should be a valid boolean, unable to interpret input", strp("query.stream")))
			return
		}
		stream = b
	}
	start := 0
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeAPIError(w, requestValidationError("int_parsing", []any{"query", "starting_after"},
				"Input should be a valid integer, unable to parse string as an integer", strp("query.starting_after")))
			return
		}
		start = n + 1
	}
	e, o := s.resp.get(id)
	if o == nil {
		writeAPIError(w, responseNotFound(id))
		return
	}
	if !stream {
		writeJSON(w, http.StatusOK, o)
		return
	}
	if e.events == nil {
		writeAPIError(w, validationError("Unknown response_id: "+id, "response_id", id))
		return
	}
	s.replayEvents(w, r, e.events, max(start, 0))
}

func (s *Server) responsesCancel(w http.ResponseWriter, id string) {
	s.resp.mu.Lock()
	e := s.resp.m[id]
	if e == nil || e.obj == nil {
		s.resp.mu.Unlock()
		writeAPIError(w, responseNotFound(id))
		return
	}
	if st := e.obj.Status; st != "queued" && st != "in_progress" {
		s.resp.mu.Unlock()
		writeAPIError(w, invalidRequest(http.StatusBadRequest, "Cannot cancel a synchronous response.", "response_id"))
		return
	}
	cancelled := *e.obj
	cancelled.Status = "cancelled"
	e.obj = &cancelled
	s.resp.mu.Unlock()
	if e.cancel != nil {
		e.cancel(errCancelled)
		<-e.done // vLLM awaits the cancelled task before answering
	}
	writeJSON(w, http.StatusOK, &cancelled)
}
