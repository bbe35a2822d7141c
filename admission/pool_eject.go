package admission

import "time"

// Result is how a granted request went on its backend, for outlier
// ejection.
type Result int

const (
	Succeeded     Result = iota
	ServerError          // the backend answered 5xx
	ConnectFailed        // the backend could not be reached
	Abandoned            // the client left or the gateway ended it: says nothing about the backend
)

// countLocked counts the ready backends and those of them ejected.
func (p *Pool) countLocked() (ready, ejected int) {
	for _, s := range p.slots {
		if s.cfg.Ready() {
			ready++
			if !s.ejectedUntil.IsZero() {
				ejected++
			}
		}
	}
	return ready, ejected
}

// reconcileLocked ends ejections whose time is up, and those that leave
// the model without a ready backend in rotation (the backends still in
// rotation may have turned unready since): ejection moves traffic to a
// backend's peers, and without peers there is nowhere to move it.
func (p *Pool) reconcileLocked(now time.Time) {
	if p.ejected == 0 {
		return // nothing to end: a grant stays O(1) in the slots
	}
	for _, s := range p.slots {
		if !s.ejectedUntil.IsZero() && !now.Before(s.ejectedUntil) {
			p.endEjectionLocked(s, "eject_for elapsed")
		}
	}
	if ready, ejected := p.countLocked(); ejected > 0 && ejected == ready {
		for _, s := range p.slots {
			if !s.ejectedUntil.IsZero() && s.cfg.Ready() {
				p.endEjectionLocked(s, "no other ready backend left in rotation")
			}
		}
	}
}

func (p *Pool) endEjectionLocked(s *Slot, why string) {
	s.ejectedUntil = time.Time{}
	p.ejected--
	p.emitLocked(Event{Kind: EjectionEnded, Slot: s.Name, Reason: why})
}

// mayEjectLocked applies the ejection bound to one more ejection.
func (p *Pool) mayEjectLocked() bool {
	ready, ejected := p.countLocked()
	allowed := max(1, p.cfg.MaxEjectionPercent*ready/100)
	allowed = min(allowed, ready-1)
	return ejected+1 <= allowed
}

// Ejected names the slots ejected as outliers right now, for work that
// bypasses the queue but should still avoid them. It follows the queue's
// rule: an ejection that would leave no ready backend in rotation has
// ended.
func (p *Pool) Ejected() []string {
	p.mu.Lock()
	defer p.unlock()
	p.reconcileLocked(p.now())
	var out []string
	for _, s := range p.slots {
		if !s.ejectedUntil.IsZero() {
			out = append(out, s.Name)
		}
	}
	return out
}

// recordResultLocked counts how a request went against its slot: a success
// ends the run of failures; EjectAfter failures in a row eject the slot
// for EjectFor, or, past the ejection bound, report the ejection held back
// (once per run). A removed slot's answers say nothing any more.
func (p *Pool) recordResultLocked(s *Slot, r Result, now time.Time) {
	switch {
	case s.removed:
		// The backend left the pool: its answer says nothing any more.
	case r == Succeeded:
		s.fails, s.heldReported = 0, false
	case r == ServerError || r == ConnectFailed:
		s.fails++
		if p.cfg.EjectAfter > 0 && s.fails >= p.cfg.EjectAfter && s.ejectedUntil.IsZero() {
			p.reconcileLocked(now)
			switch {
			case p.mayEjectLocked():
				s.ejectedUntil = now.Add(p.cfg.EjectFor)
				p.ejected++
				s.ejections++
				p.emitLocked(Event{Kind: Ejected, Slot: s.Name, Failures: s.fails, Until: s.ejectedUntil})
				s.fails, s.heldReported = 0, false
				// Grant again when the cool-off ends, so that waiters do not
				// depend on another event to be served.
				time.AfterFunc(p.cfg.EjectFor, p.Kick)
			case !s.heldReported:
				s.heldReported = true
				p.emitLocked(Event{Kind: EjectionHeld, Slot: s.Name, Failures: s.fails})
			}
		}
	}
}
