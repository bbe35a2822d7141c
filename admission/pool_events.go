package admission

import (
	"fmt"
	"time"
)

// EventKind is what happened to a backend in the pool.
type EventKind int

const (
	// Ejected: EjectAfter failures in a row; no requests until Until.
	Ejected EventKind = iota
	// EjectionEnded: back in rotation (Reason says why: eject_for elapsed,
	// or no other ready backend was left in rotation).
	EjectionEnded
	// EjectionHeld: EjectAfter failures in a row, but ejecting it would
	// exceed MaxEjectionPercent or leave no ready backend in rotation; it
	// keeps its traffic. Reported once per run of failures.
	EjectionHeld
	// GaugesChanged: the backend's gauges state changed (Gauges, Reason).
	GaugesChanged
)

var eventNames = [...]string{"ejected", "ejection_ended", "ejection_held", "gauges_changed"}

func (k EventKind) String() string {
	if k >= 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is a change in a backend's standing in the pool.
type Event struct {
	Kind EventKind
	// Slot is the backend's name (SlotConfig.Name).
	Slot string
	// Failures is the run of consecutive failures (Ejected, EjectionHeld).
	Failures int
	// Until is the end of an ejection (Ejected).
	Until time.Time
	// Ejected and Ready count the model's ejected and ready backends after
	// the event.
	Ejected, Ready int
	// Gauges is the new gauges state (GaugesChanged).
	Gauges GaugesState
	// Reason explains EjectionEnded and GaugesChanged.
	Reason string
}

// unlock releases the lock, then delivers the events raised under it.
func (p *Pool) unlock() {
	ev := p.pending
	p.pending = nil
	p.mu.Unlock()
	if p.cfg.OnEvent != nil {
		for _, e := range ev {
			p.cfg.OnEvent(e)
		}
	}
}

func (p *Pool) emitLocked(e Event) {
	if p.cfg.OnEvent == nil {
		return
	}
	e.Ready, e.Ejected = p.countLocked()
	p.pending = append(p.pending, e)
}
