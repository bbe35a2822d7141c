package gateway

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// deadlineWriter is a ResponseWriter whose connection is a client that
// stops reading when stalled is set: a write then blocks until a write
// deadline in the past is set on it (as a connection's would). It counts
// the deadlines set on it.
type deadlineWriter struct {
	*httptest.ResponseRecorder
	stalled   bool
	mu        sync.Mutex
	deadlines int
	passed    chan struct{}
}

func (w *deadlineWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadlines++
	if !t.After(time.Now()) {
		close(w.passed)
	}
	return nil
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if w.stalled {
		<-w.passed
		return 0, os.ErrDeadlineExceeded
	}
	return w.ResponseRecorder.Write(p)
}

func (w *deadlineWriter) set() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadlines
}

// TestRecorderWriteIdle: with writeIdle set, a stream's events written
// and flushed to a client that reads set no write deadline at all (over
// HTTP/2 each would be a message to the connection's serve goroutine),
// nor does the time between them; a write to a client that stopped
// reading fails once it has waited writeIdle, with the deadline's error,
// counted as stall and kept as the request's write error. Any other
// answer's writes set their deadline.
func TestRecorderWriteIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 10 * time.Second
		w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder(), passed: make(chan struct{})}
		var stall time.Duration
		var werr error
		rec := &recorder{ResponseWriter: w, stall: &stall, werr: &werr, writeIdle: idle}
		var rw http.ResponseWriter = rec
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(http.StatusOK)
		flush(rw)
		for range 3 {
			rw.Write([]byte("data: {}\n\n"))
			flush(rw)
			time.Sleep(2 * idle) // the backend's next event is a while off
		}
		if n := w.set(); n != 0 {
			t.Fatalf("a client that reads: %d write deadlines set", n)
		}
		if werr != nil || stall != 0 {
			t.Fatalf("a client that reads: write error %v, stall %v", werr, stall)
		}
		w.stalled = true
		start := time.Now()
		_, err := rw.Write([]byte("data: {}\n\n"))
		if !errors.Is(err, os.ErrDeadlineExceeded) || werr != err {
			t.Fatalf("the stalled write returned %v (kept %v), want the deadline's error", err, werr)
		}
		if waited := time.Since(start); waited != idle || stall != idle {
			t.Errorf("the stalled write failed after %v (stall %v), want %v", waited, stall, idle)
		}

		w = &deadlineWriter{ResponseRecorder: httptest.NewRecorder(), passed: make(chan struct{})}
		rec = &recorder{ResponseWriter: w, stall: &stall, werr: &werr, writeIdle: idle}
		rw = rec
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusOK)
		rw.Write([]byte("{}"))
		flush(rw)
		if n := w.set(); n != 2 {
			t.Errorf("an answer's write and flush set %d write deadlines, want 2", n)
		}
	})
}
