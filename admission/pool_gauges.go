package admission

import (
	"fmt"
	"time"
)

// GaugesState is how far a backend's scraped gauges can be trusted.
type GaugesState int

const (
	GaugesUnknown     GaugesState = iota // not scraped yet: not checked
	GaugesFresh                          // checked against the saturation levels
	GaugesStale                          // older than StaleAfter: counted as saturated
	GaugesUnavailable                    // cannot be read (see GaugesUnavailableAfter): not checked
	numGaugesStates
)

// GaugesStates lists every GaugesState, for metric labels.
func GaugesStates() []GaugesState {
	return []GaugesState{GaugesUnknown, GaugesFresh, GaugesStale, GaugesUnavailable}
}

var gaugesStateNames = [...]string{"unknown", "fresh", "stale", "unavailable"}

func (g GaugesState) String() string {
	if g >= 0 && g < numGaugesStates {
		return gaugesStateNames[g]
	}
	return fmt.Sprintf("GaugesState(%d)", int(g))
}

// UnreadableScrapes answers in a row that cannot be read (an error status,
// not vLLM's exposition, too large) make a backend's gauges unavailable at
// once: waiting does not mend them.
const UnreadableScrapes = 3

// Gauges are a backend's scraped vLLM gauges.
type Gauges struct {
	Waiting, Running, KVUsage float64
	// KVCapacity is num_gpu_blocks x block_size from cache_config_info.
	KVCapacity int
	At         time.Time
	// Every is the interval the backend is being scraped at, when longer
	// than PoolConfig.ScrapeInterval (a large fleet's, past its scrape
	// budget): StaleAfter and GaugesUnavailableAfter grow by the same
	// factor for this backend. 0: ScrapeInterval.
	Every time.Duration
}

// gaugesLocked is the slot's gauges state:
//
//	unavailable  scrapes are failing and none ever succeeded, or the last
//	             UnreadableScrapes were answered with an unreadable page, or
//	             they have failed for GaugesUnavailableAfter
//	unknown      never scraped
//	stale        the last success is older than StaleAfter
//	fresh        otherwise
func (p *Pool) gaugesLocked(s *Slot, now time.Time) GaugesState {
	switch {
	case s.scrapeFails > 0 && (!s.scraped || s.unreadable >= UnreadableScrapes ||
		(p.cfg.GaugesUnavailableAfter > 0 && now.Sub(s.failingSince) >= p.stretched(s, p.cfg.GaugesUnavailableAfter))):
		return GaugesUnavailable
	case !s.scraped:
		return GaugesUnknown
	case p.staleLocked(s, now):
		return GaugesStale
	}
	return GaugesFresh
}

// noteGaugesLocked reports a slot entering or leaving GaugesUnavailable.
func (p *Pool) noteGaugesLocked(s *Slot, now time.Time, reason string) {
	st := p.gaugesLocked(s, now)
	was := s.gstate
	s.gstate = st
	if (st == GaugesUnavailable) != (was == GaugesUnavailable) {
		p.emitLocked(Event{Kind: GaugesChanged, Slot: s.Name, Gauges: st, Reason: reason})
	}
}

// staleLocked: the slot's gauges are too old to trust (see eligibleLocked).
func (p *Pool) staleLocked(s *Slot, now time.Time) bool {
	return s.scraped && p.cfg.StaleAfter > 0 && now.Sub(s.gauges.At) > p.stretched(s, p.cfg.StaleAfter)
}

// stretched is d (a limit set for ScrapeInterval) grown as s's scrape
// interval was, per its last gauges' Every.
func (p *Pool) stretched(s *Slot, d time.Duration) time.Duration {
	if every, base := s.gauges.Every, p.cfg.ScrapeInterval; base > 0 && every > base {
		return time.Duration(float64(d) * (float64(every) / float64(base)))
	}
	return d
}

// SetGauges records a backend's scraped gauges and grants the waiting
// requests again. A name that is not one of the pool's slots is ignored.
func (p *Pool) SetGauges(name string, g Gauges) {
	p.mu.Lock()
	s := p.slotLocked(name)
	if s == nil {
		p.unlock()
		return
	}
	s.gauges, s.scraped = g, true
	s.scrapeFails, s.unreadable, s.failingSince = 0, 0, time.Time{}
	p.noteGaugesLocked(s, p.now(), "scraped again")
	p.grantWaitingLocked()
	p.unlock()
}

// ScrapeFailed records a failed scrape of a backend's /metrics. answered:
// the backend answered with a page that cannot be read (an error status,
// not vLLM's exposition, too large), as opposed to no answer in time;
// reason is the error, for the log. Gauges that turn unavailable free the
// backend for work the queue was holding back.
func (p *Pool) ScrapeFailed(name string, answered bool, reason string) {
	p.mu.Lock()
	s := p.slotLocked(name)
	if s == nil {
		p.unlock()
		return
	}
	now := p.now()
	if s.scrapeFails == 0 {
		s.failingSince = now
	}
	s.scrapeFails++
	s.scrapeErrors++
	s.lastScrapeErr = reason
	if answered {
		s.unreadable++
	} else {
		s.unreadable = 0
	}
	p.noteGaugesLocked(s, now, reason)
	p.grantWaitingLocked()
	p.unlock()
}
