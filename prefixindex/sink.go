package prefixindex

import "github.com/maitred-dev/maitred/kvevents"

// Sink is the index's side of one backend's subscriptions (one per
// data-parallel rank, all into the same backend).
func (x *Index) Sink(name string) kvevents.Sink { return sink{x, name} }

type sink struct {
	x    *Index
	name string
}

func (s sink) Apply(_ int, b kvevents.Batch) { s.x.Apply(s.name, b) }

func (s sink) Clear(_ int, reason string) {
	s.x.Clear(s.name)
	s.x.mu.Lock()
	if b := s.x.backends[s.name]; b != nil {
		b.st.LastClear = reason
	}
	s.x.mu.Unlock()
}

func (s sink) State(rank int, live bool, reason string) { s.x.SetState(s.name, rank, live, reason) }

func (s sink) Noted(_ int, what kvevents.Noted) {
	switch what {
	case kvevents.Gap:
		s.x.Note(s.name, CountGap)
	case kvevents.Replayed:
		s.x.Note(s.name, CountReplay)
	case kvevents.DecodeError:
		s.x.Note(s.name, CountDecodeError)
	}
}
