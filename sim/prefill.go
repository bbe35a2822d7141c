package sim

import (
	"context"
	"sync"
	"time"
)

// prefillEngine is a server's prefill compute under PrefillContention:
// one engine serves the prefill work (uncached prompt tokens ×
// PrefillPerToken) of every request on the server, first come first
// served, as vLLM's scheduler packs prefill chunks into each step's token
// budget (max_num_batched_tokens) in the order of its running list, so a
// request's prefill waits for the prefills scheduled before it. It is a
// reservation timeline: free is when the work reserved so far is done.
type prefillEngine struct {
	mu   sync.Mutex
	free time.Time
}

// prefillSlot is one request's reservation on the prefill engine.
type prefillSlot struct {
	e          *prefillEngine
	start, end time.Time
}

// reserve books work on the engine from now on and returns the slot; its
// end is when the work is done.
func (e *prefillEngine) reserve(now time.Time, work time.Duration) prefillSlot {
	e.mu.Lock()
	defer e.mu.Unlock()
	start := now
	if e.free.After(start) {
		start = e.free
	}
	end := start.Add(work)
	e.free = end
	return prefillSlot{e: e, start: start, end: end}
}

// cancel gives back what the slot had not used at now when nothing was
// booked after it (vLLM drops an aborted request's remaining chunks; the
// work booked behind it keeps its place, a gap the simulator does not
// close).
func (p prefillSlot) cancel(now time.Time) {
	if p.e == nil {
		return
	}
	p.e.mu.Lock()
	defer p.e.mu.Unlock()
	if !p.e.free.Equal(p.end) {
		return
	}
	p.e.free = p.start
	if now.After(p.start) {
		p.e.free = now
	}
}

// prefill waits for a request's first token: the fixed TTFT plus the
// prefill of its uncached prompt tokens, which under PrefillContention
// also waits for the prefills booked on this server before it (cached
// tokens book nothing), and then for the TokenGate. It fails as wait does.
func (s *Server) prefill(ctx context.Context, cfg *Config, uncached int) error {
	work := time.Duration(max(uncached, 0)) * cfg.PrefillPerToken
	if !cfg.PrefillContention || work <= 0 {
		return s.wait(ctx, cfg.prefillTime(uncached), cfg.TokenGate)
	}
	now := time.Now()
	slot := s.prefillEng.reserve(now, work)
	err := s.wait(ctx, cfg.TTFT+slot.end.Sub(now), cfg.TokenGate)
	if err != nil {
		slot.cancel(time.Now())
	}
	return err
}
