package admission

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// SlotStats is a snapshot of a slot.
type SlotStats struct {
	Name           string
	InFlight       int
	Tokens, Budget int
	Gauges         Gauges
	Ejected        bool
	EjectedUntil   time.Time
	Ejections      int
	// Failures is the current run of consecutive failures.
	Failures int
	// GaugesState is how far its gauges can be trusted; ScrapeErrors
	// counts failed scrapes, LastScrapeError is the latest.
	GaugesState     GaugesState
	ScrapeErrors    int
	LastScrapeError string
}

// PoolStats is a snapshot for metrics.
type PoolStats struct {
	Depth     []int // per class
	Slots     []SlotStats
	Decisions map[string]int
	// PreciseFallbacks counts the requests scored for precise routing
	// that were routed as without it, by reason (PreciseFallbackReasons).
	PreciseFallbacks map[string]int
	// Fairness is the queue's policy; Flows its flows under Tokens, by
	// name (nil under FIFO).
	Fairness Fairness
	Flows    []FlowStats
}

// Stats returns a snapshot.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.unlock()
	st := PoolStats{Depth: make([]int, len(p.queue)), Decisions: map[string]int{}, PreciseFallbacks: map[string]int{}}
	for c, q := range p.queue {
		st.Depth[c] = len(q) + p.fair.n[c]
	}
	st.Fairness = p.cfg.Fairness
	if p.fair.on {
		st.Flows = p.flowStatsLocked()
	}
	now := p.now()
	p.reconcileLocked(now)
	for _, s := range p.slots {
		st.Slots = append(st.Slots, p.slotStatsLocked(s, now))
	}
	for k, v := range p.decisions {
		st.Decisions[k] = v
	}
	for k, v := range p.fallbacks {
		st.PreciseFallbacks[k] = v
	}
	return st
}

// Slot returns the snapshot of the slot named name, as Stats lists it,
// without building the others': a backend's scrape asks for its own slot
// only, so the work per scrape stays flat in the number of backends.
func (p *Pool) Slot(name string) (SlotStats, bool) {
	p.mu.Lock()
	defer p.unlock()
	now := p.now()
	p.reconcileLocked(now)
	s := p.slotLocked(name)
	if s == nil {
		return SlotStats{}, false
	}
	return p.slotStatsLocked(s, now), true
}

func (p *Pool) slotStatsLocked(s *Slot, now time.Time) SlotStats {
	return SlotStats{Name: s.Name, InFlight: s.inFlight, Tokens: s.tokens, Budget: s.budget(),
		Gauges: s.gauges, Ejected: !s.ejectedUntil.IsZero(), EjectedUntil: s.ejectedUntil, Ejections: s.ejections, Failures: s.fails,
		GaugesState: p.gaugesLocked(s, now), ScrapeErrors: s.scrapeErrors, LastScrapeError: s.lastScrapeErr}
}

// Blockage says why a model's backends take no more work: each backend
// counted once, by the first reason that holds it back.
type Blockage struct {
	Backends  int
	NotReady  int // not ready (loading, warming, unhealthy)
	Ejected   int // ejected after consecutive failures
	Saturated int // its scraped waiting queue or KV usage at the configured level
	Stale     int // its gauges were not scraped recently (counted as saturated)
	Busy      int // at max_in_flight or its token budget
	Elsewhere int // its room is held by other replicas (the shared store)
	Free      int // has room (the queue's head may still not fit)
}

// String reads like "of 2 backends: 1 ejected after consecutive failures,
// 1 busy (at max_in_flight or its token budget)".
func (b Blockage) String() string {
	if b.Ejected > 0 && b.Ejected == b.Backends {
		return fmt.Sprintf("all %d backends ejected after consecutive failures", b.Backends)
	}
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{b.NotReady, "not ready"},
		{b.Ejected, "ejected after consecutive failures"},
		{b.Saturated, "saturated (vLLM's waiting queue or KV cache usage at the configured level)"},
		{b.Stale, "with stale gauges (no recent /metrics scrape; counted as saturated)"},
		{b.Busy, "busy (at max_in_flight or its token budget)"},
		{b.Elsewhere, "busy with other replicas' requests (at max_in_flight or its token budget in the shared store)"},
		{b.Free, "with room for a smaller request"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	noun := "backends"
	if b.Backends == 1 {
		noun = "backend"
	}
	return fmt.Sprintf("of %d %s: %s", b.Backends, noun, strings.Join(parts, ", "))
}

// Blocked classifies the backends for a request like t that could not be
// placed, for the message of a queue timeout.
func (p *Pool) Blocked(t Ticket) Blockage {
	p.mu.Lock()
	defer p.unlock()
	now := p.now()
	p.reconcileLocked(now)
	b := Blockage{}
	for _, s := range p.slots {
		if t.Only != nil && !slices.Contains(t.Only, s.Name) {
			continue // not one of its backends at all
		}
		b.Backends++
		switch {
		case !s.cfg.Ready():
			b.NotReady++
		case !s.ejectedUntil.IsZero():
			b.Ejected++
		case p.gaugesLocked(s, now) == GaugesStale:
			b.Stale++
		case !p.eligibleLocked(s, now):
			b.Saturated++
		case s.elsewhere:
			b.Elsewhere++
		case !p.fitsLocked(s, t.Tokens):
			b.Busy++
		default:
			b.Free++
		}
	}
	return b
}
