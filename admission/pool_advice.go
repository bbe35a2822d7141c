package admission

import "time"

// Wait is the queue's advice to a rejected or waiting client.
type Wait struct {
	Depth int
	// Expected is the time the queue needs to drain Depth requests, never
	// over QueueTimeout (a request waits no longer than that anyway): at
	// the observed release rate while releases are recent, else from
	// capacity (the requests running and how long a request holds its
	// backend); QueueTimeout when neither is known yet.
	Expected time.Duration
	// RatePerSecond is the observed release rate.
	RatePerSecond float64
}

// Advice returns the queue's depth and expected wait, for Retry-After.
//
// The release rate is a mean of the gaps between releases, so it is
// current only while releases keep coming: after an idle spell the first
// burst would otherwise be advised from a gap of minutes. A rate whose last
// release is older than twice its mean gap is stale, and the wait comes
// from capacity instead: depth+1 requests, each holding a backend for the
// mean held time, drained by as many at once as run now (at least one).
func (p *Pool) Advice() Wait {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := Wait{Depth: p.depth, RatePerSecond: p.rate}
	rate := p.rate
	fresh := rate > 0 && !p.lastRel.IsZero() && p.now().Sub(p.lastRel).Seconds() <= 2/rate
	switch {
	case fresh:
		w.Expected = time.Duration(float64(p.depth+1) / rate * float64(time.Second))
	case p.meanHeld > 0:
		running := 0
		for _, s := range p.slots {
			running += s.inFlight
		}
		w.Expected = time.Duration(float64(p.depth+1) * float64(p.meanHeld) / float64(max(running, 1)))
	default:
		w.Expected = p.cfg.QueueTimeout
	}
	if p.cfg.QueueTimeout > 0 {
		w.Expected = min(w.Expected, p.cfg.QueueTimeout)
	}
	return w
}

// observeReleaseLocked updates the drain rate: an exponentially weighted mean of
// the gaps between releases, with a horizon of about 20 releases.
func (p *Pool) observeReleaseLocked(now time.Time) {
	if !p.lastRel.IsZero() {
		gap := now.Sub(p.lastRel).Seconds()
		if gap > 0 {
			inst := 1 / gap
			if p.rate == 0 {
				p.rate = inst
			} else {
				p.rate += (inst - p.rate) * 0.05
			}
		}
	}
	p.lastRel = now
}

// observeHeldLocked updates the mean time a lease is held, with a horizon of
// about 20 releases.
func (p *Pool) observeHeldLocked(d time.Duration) {
	if d <= 0 {
		return
	}
	if p.meanHeld == 0 {
		p.meanHeld = d
		return
	}
	p.meanHeld += time.Duration(float64(d-p.meanHeld) * 0.05)
}
