package sim

import (
	"context"
	"slices"
)

// ticket is one request's place in the scheduler.
type ticket struct {
	tokens   int           // KV tokens held while running
	seqs     int           // running slots it takes (a pooling batch: one per prompt)
	admitted chan struct{} // closed on admission
	running  bool
	released bool
	prefix   *prefixReq // the prefix cache's view (nil: not looked up)
}

// cachedTokens is the prompt tokens the prefix cache had for an admitted
// ticket.
func (t *ticket) cachedTokens() int {
	if t == nil || t.prefix == nil {
		return 0
	}
	return t.prefix.hit
}

// admit queues a request needing tokens of KV space and blocks until it
// runs (FIFO, like vLLM's FCFS scheduler) or ctx / shutdown ends the wait.
func (s *Server) admit(ctx context.Context, tokens int) (*ticket, error) {
	return s.admitSeqs(ctx, tokens, 1)
}

// admitSeqs is admit for a request that vLLM schedules as seqs engine
// requests at once (a pooling batch): it takes seqs running slots.
func (s *Server) admitSeqs(ctx context.Context, tokens, seqs int) (*ticket, error) {
	return s.admitPrefix(ctx, tokens, seqs, nil)
}

// admitPrefix is admitSeqs for a request whose prompts the prefix cache
// looks up when it is admitted.
func (s *Server) admitPrefix(ctx context.Context, tokens, seqs int, prefix *prefixReq) (*ticket, error) {
	t := &ticket{tokens: tokens, seqs: max(seqs, 1), admitted: make(chan struct{}), prefix: prefix}
	s.mu.Lock()
	s.queue = append(s.queue, t)
	s.scheduleLocked()
	s.mu.Unlock()

	var err error
	select {
	case <-t.admitted:
		return t, nil
	case <-ctx.Done():
		err = errClientGone
	case <-s.stop:
		err = errStopped
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.running { // admitted while we were giving up
		s.releaseLocked(t)
	} else if i := slices.Index(s.queue, t); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		s.scheduleLocked() // the head may have changed
	}
	return nil, err
}

// scheduleLocked admits waiting requests from the head of the queue while
// slots and the KV space for the prompt are free. A request is always
// admitted when nothing runs, so an oversized prompt cannot wedge the queue.
func (s *Server) scheduleLocked() {
	for len(s.queue) > 0 {
		t := s.queue[0]
		if s.running > 0 && (s.running+t.seqs > s.cfg.MaxNumSeqs || s.kvUsed+t.tokens > s.cfg.KVTokens) {
			return
		}
		s.queue = slices.Delete(s.queue, 0, 1)
		t.running = true
		s.running += t.seqs
		s.counts.PeakRunning = max(s.counts.PeakRunning, s.running)
		s.kvUsed += t.tokens
		s.publishLocked(s.admitPrefixLocked(t))
		close(t.admitted)
	}
}

// grow adds n generated tokens to a running request's KV footprint.
func (s *Server) grow(t *ticket, n int) {
	s.mu.Lock()
	if t.running && !t.released {
		t.tokens += n
		s.kvUsed += n
		if s.cache != nil {
			s.publishLocked(s.evictLocked(0, nil))
		}
	}
	s.mu.Unlock()
}

// release frees a running request's slot and KV space (idempotent).
func (s *Server) release(t *ticket) {
	s.mu.Lock()
	s.releaseLocked(t)
	s.mu.Unlock()
}

func (s *Server) releaseLocked(t *ticket) {
	if t == nil || !t.running || t.released {
		return
	}
	t.released = true
	s.running -= t.seqs
	s.kvUsed -= t.tokens
	s.releasePrefixLocked(t)
	s.scheduleLocked()
}

func (s *Server) kvUsageLocked() float64 {
	if s.cfg.KVTokens <= 0 {
		return 0
	}
	u := float64(s.kvUsed) / float64(s.cfg.KVTokens)
	return min(max(u, s.cfg.KVUsageFloor), 1)
}
