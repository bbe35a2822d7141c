package admission

import (
	"context"
	"errors"
)

// confirm asks the shared account for l's slot. retry: the slot is held
// elsewhere (or over this replica's share while the store is down), the
// local grant went back, and the request should try again.
func (p *Pool) confirm(ctx context.Context, l *Lease) (o Outcome, retry bool) {
	s := l.Slot
	h, err := p.cfg.Shared.Take(ctx, s.Name, l.maxIn, l.budget, l.tokens)
	giveBack := func() {
		if h != nil {
			h.Release()
		}
		l.release(Abandoned, false)
	}
	switch {
	case err == nil:
		p.mu.Lock()
		l.hold = h
		p.confirmedLocked(l)
		p.unlock()
		return Admitted, false
	case ctx.Err() != nil:
		giveBack()
		return ClientGone, false
	case errors.Is(err, ErrHeldElsewhere):
		p.mu.Lock()
		if s.wakes == l.wakes {
			s.elsewhere = true
		}
		p.unlock()
		giveBack()
		return Admitted, true
	case p.cfg.RejectWhenStoreDown:
		giveBack()
		return StoreDown, false
	}
	// The store is down: keep the grant if it is within this replica's
	// share of the slot's limits (grants from now on are picked on it).
	p.mu.Lock()
	st := p.cfg.Shared.State()
	maxIn, budget := l.maxIn, share(l.budget, st.Replicas)
	if maxIn > 0 {
		maxIn = downMaxIn(p.cfg.Shared, s.Name, maxIn, st)
	}
	ok := (l.maxIn == 0 || s.inFlight <= maxIn) && (budget == 0 || s.tokens <= budget || s.inFlight == 1)
	if ok {
		l.hold = h
		p.confirmedLocked(l)
	}
	p.unlock()
	if !ok {
		giveBack()
		return Admitted, true
	}
	return Admitted, false
}

// SharedFreed is told that the shared account freed room on the slot
// named name (another replica released a holding): the slot is picked
// again. A name that is not one of the pool's slots is ignored.
func (p *Pool) SharedFreed(name string) {
	p.mu.Lock()
	s := p.slotLocked(name)
	if s == nil {
		p.unlock()
		return
	}
	s.elsewhere = false
	s.wakes++
	p.grantWaitingLocked()
	p.unlock()
}

// SharedRecheck forgets every slot held elsewhere and grants the waiting
// requests again: the slow safety net under SharedFreed (a replica that
// died frees its holdings when its lease ends, which nobody announces),
// and what follows a change in the store's standing (up or down, the live
// replica count).
func (p *Pool) SharedRecheck() {
	p.mu.Lock()
	for _, s := range p.slots {
		s.elsewhere = false
		s.wakes++
	}
	p.grantWaitingLocked()
	p.unlock()
}
