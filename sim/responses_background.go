package sim

import (
	"context"
	"net/http"
	"sync"
)

// --- background ---------------------------------------------------------------

// responsesBackground stores the response as "queued" and runs it detached
// from the client: a background request survives its client and ends only
// when it completes, is cancelled, or the server stops. Without stream it
// answers the queued object at once; with stream it relays the job's events
// (which GET /v1/responses/{id}?stream=true can replay).
func (s *Server) responsesBackground(w http.ResponseWriter, r *http.Request, j *job, req *responsesRequest, base *responseObject, msgs []any) {
	queued := *base
	queued.Status = "queued"
	bctx, cancel := context.WithCancelCause(context.Background())
	e := &storedResponse{obj: &queued, msgs: msgs, cancel: cancel, done: make(chan struct{})}
	if req.stream {
		e.events = &eventLog{changed: make(chan struct{})}
	}
	s.resp.put(base.ID, e)
	go s.runBackground(bctx, cancel, j, e, base)
	if !req.stream {
		writeJSON(w, http.StatusOK, &queued)
		return
	}
	s.replayEvents(w, r, e.events, 0)
}

func (s *Server) runBackground(ctx context.Context, cancel context.CancelCauseFunc, j *job, e *storedResponse, base *responseObject) {
	defer close(e.done)
	defer cancel(nil)
	var err error
	var final *responseObject
	if e.events != nil {
		defer e.events.close()
		ev := &respEvents{emit: e.events.append}
		if err = ev.run(ctx, j, base); err == nil {
			final = finalResponse(base, j)
			s.resp.setObj(e, final)
			_ = ev.completed(final)
		}
	} else if err = j.run(ctx, nil); err == nil {
		final = finalResponse(base, j)
		s.resp.setObj(e, final)
	}
	if err == nil {
		j.done()
		return
	}
	if err == errStopped {
		s.resp.mu.Lock()
		if st := e.obj.Status; st != "completed" && st != "cancelled" {
			failed := *e.obj
			failed.Status = "failed"
			e.obj = &failed
		}
		s.resp.mu.Unlock()
	}
}

// eventLog is the event history of a background stream.
type eventLog struct {
	mu      sync.Mutex
	frames  []sseFrame
	closed  bool
	changed chan struct{} // closed and replaced on every change
}

type sseFrame struct {
	name string
	data []byte
}

func (l *eventLog) append(name string, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frames = append(l.frames, sseFrame{name, data})
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	close(l.changed)
	l.changed = make(chan struct{})
}

// since returns the frames from index i on, whether the log is closed, and
// a channel closed at the next change.
func (l *eventLog) since(i int) ([]sseFrame, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sseFrame
	if i < len(l.frames) {
		out = append(out, l.frames[i:]...)
	}
	return out, l.closed, l.changed
}

// replayEvents streams a background response's events from index start
// until response.completed or the end of the job. Unlike vLLM, whose replay
// waits forever when a background stream is cancelled, the stream ends
// when the job does.
func (s *Server) replayEvents(w http.ResponseWriter, r *http.Request, l *eventLog, start int) {
	sw, err := startSSE(w)
	if err != nil {
		return
	}
	for i := start; ; {
		frames, closed, changed := l.since(i)
		for _, f := range frames {
			if err := sw.frame(f.name, f.data); err != nil {
				return
			}
			if f.name == "response.completed" {
				return
			}
		}
		i += len(frames)
		if closed && len(frames) == 0 {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
	}
}
