package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

// deadlineWriter is a ResponseWriter that notes each write deadline set
// on it and whose writes take writeTakes (the bubble's clock).
type deadlineWriter struct {
	*httptest.ResponseRecorder
	deadlines  []time.Time
	writeTakes time.Duration
}

func (w *deadlineWriter) SetWriteDeadline(t time.Time) error {
	w.deadlines = append(w.deadlines, t)
	return nil
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	time.Sleep(w.writeTakes)
	return w.ResponseRecorder.Write(p)
}

// TestRecorderOneDeadlinePerEvent: the proxy's write of an event and its
// flush set one write deadline (over HTTP/2 each is a message to the
// connection's serve goroutine), unless the write waited on the client:
// then the flush gets a deadline of its own, and so does a flush with no
// write before it.
func TestRecorderOneDeadlinePerEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 10 * time.Second
		w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder()}
		var stall time.Duration
		var werr error
		rec := &recorder{ResponseWriter: w, stall: &stall, werr: &werr, writeIdle: idle}
		var rw http.ResponseWriter = rec
		rw.WriteHeader(http.StatusOK)
		flush(rw) // the headers
		if len(w.deadlines) != 1 {
			t.Fatalf("flushing the headers set %d deadlines, want 1", len(w.deadlines))
		}
		for i := range 3 {
			rw.Write([]byte("data: {}\n\n"))
			flush(rw)
			if want := 2 + i; len(w.deadlines) != want {
				t.Fatalf("after event %d: %d deadlines, want %d", i+1, len(w.deadlines), want)
			}
		}
		w.writeTakes = time.Second // a client that makes the write wait
		start := time.Now()
		rw.Write([]byte("data: {}\n\n"))
		flush(rw)
		if len(w.deadlines) != 6 {
			t.Fatalf("a write that waited and its flush set %d deadlines in all, want 6", len(w.deadlines))
		}
		if got, want := w.deadlines[5], start.Add(time.Second+idle); !got.Equal(want) {
			t.Errorf("the flush after a write that waited has its deadline at %v, want %v", got, want)
		}
		if stall != time.Second {
			t.Errorf("stall %v, want 1s", stall)
		}
	})
}
