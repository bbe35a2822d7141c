package sim

import (
	"context"
	"sync"
)

// --- store ---------------------------------------------------------------

// responseStore holds the Responses API objects of one server, as vLLM's
// in-memory response_store and msg_store do (never evicted).
type responseStore struct {
	mu sync.Mutex
	m  map[string]*storedResponse
}

// storedResponse is one stored response. obj is replaced, never mutated,
// so a snapshot taken under the lock can be encoded outside it.
type storedResponse struct {
	obj    *responseObject
	msgs   []any                   // the chat messages its input became
	cancel context.CancelCauseFunc // background jobs only
	done   chan struct{}           // closed when a background job ends
	events *eventLog               // background streams only
}

func (st *responseStore) get(id string) (*storedResponse, *responseObject) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.m[id]
	if e == nil {
		return nil, nil
	}
	return e, e.obj
}

func (st *responseStore) put(id string, e *storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]*storedResponse{}
	}
	st.m[id] = e
}

func (st *responseStore) len() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.m)
}

// setObj replaces the object of e unless it was cancelled (vLLM keeps a
// cancelled response as it is).
func (st *responseStore) setObj(e *storedResponse, o *responseObject) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e.obj != nil && e.obj.Status == "cancelled" {
		return
	}
	e.obj = o
}

// HasResponse reports whether this server stores the Responses API object
// id (so GET /v1/responses/{id} answers it here).
func (s *Server) HasResponse(id string) bool {
	_, o := s.resp.get(id)
	return o != nil
}
