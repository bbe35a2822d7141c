package main

import (
	"net/http"
	"sync"
	"time"
)

// pxSimTTFT records, at each simulator's HTTP boundary, the time from a
// chat request's arrival to the first bytes of its answer (the sim sends
// a stream's headers before admission and its first chunk with the first
// token): the simulators' own TTFT, which leaves out the client's and
// the router's CPU and any wait in a router's queue.
type pxSimTTFT struct {
	mu    sync.Mutex
	ttfts []float64 // simulated seconds
}

// wrap times h's chat completions.
func (p *pxSimTTFT) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			h.ServeHTTP(w, r)
			return
		}
		tw := &pxFirstWrite{ResponseWriter: w, start: time.Now()}
		h.ServeHTTP(tw, r)
		if !tw.first.IsZero() {
			p.mu.Lock()
			p.ttfts = append(p.ttfts, tw.first.Sub(tw.start).Seconds()**prefixScale)
			p.mu.Unlock()
		}
	})
}

// take returns the TTFTs recorded so far.
func (p *pxSimTTFT) take() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ttfts
}

// pxFirstWrite notes when the first body bytes are written.
type pxFirstWrite struct {
	http.ResponseWriter
	start, first time.Time
}

func (w *pxFirstWrite) Write(b []byte) (int, error) {
	if w.first.IsZero() && len(b) > 0 {
		w.first = time.Now()
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush through to the connection.
func (w *pxFirstWrite) Unwrap() http.ResponseWriter { return w.ResponseWriter }
