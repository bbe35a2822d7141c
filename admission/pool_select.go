package admission

import "time"

// budget is the slot's token budget: scraped capacity, else config, else 0.
func (s *Slot) budget() int {
	if s.gauges.KVCapacity > 0 {
		return s.gauges.KVCapacity
	}
	return s.cfg.KVTokens
}

// eligibleLocked: ready, not ejected, not saturated by its own gauges.
func (p *Pool) eligibleLocked(s *Slot, now time.Time) bool {
	if !s.cfg.Ready() || !s.ejectedUntil.IsZero() {
		return false
	}
	if s.scraped && p.gaugesLocked(s, now) != GaugesUnavailable {
		if p.staleLocked(s, now) {
			return false // stale gauges: assume the worst for new work
		}
		if p.cfg.SaturatedWaiting > 0 && s.gauges.Waiting >= p.cfg.SaturatedWaiting {
			return false
		}
		if p.cfg.SaturatedKV > 0 && s.gauges.KVUsage >= p.cfg.SaturatedKV {
			return false
		}
	}
	return true
}

// fitsLocked: s has room for tokens more, in requests in flight and in its
// token budget (this replica's allowance of them while the shared account
// cannot count the others), and the shared account did not refuse it.
func (p *Pool) fitsLocked(s *Slot, tokens int) bool {
	maxIn, b := s.cfg.MaxInFlight, s.budget()
	if p.cfg.Shared != nil {
		if s.elsewhere {
			return false
		}
		if st := p.cfg.Shared.State(); !st.Up || st.Settling {
			// The store cannot count the other replicas' work now:
			// keep to this replica's allowance.
			if maxIn > 0 && s.inFlight >= downMaxIn(p.cfg.Shared, s.Name, maxIn, st) {
				return false
			}
			b = share(b, st.Replicas)
		}
	}
	if maxIn > 0 && s.inFlight >= maxIn {
		return false
	}
	if b > 0 && s.tokens+tokens > b && s.inFlight > 0 {
		// An idle backend takes even a request over its budget estimate:
		// an exact request over the whole budget was refused already.
		return false
	}
	return true
}

// load is a slot's outstanding tokens relative to its budget, so that
// backends of different sizes compare fairly.
func (s *Slot) load() float64 {
	if b := s.budget(); b > 0 {
		return float64(s.tokens) / float64(b)
	}
	return float64(s.tokens) / 1e6
}

// grantLocked picks a slot for t or returns nil: by prefix affinity when the
// ticket has one and its backend is within the load bound, else the less
// loaded of two random candidates with room.
func (p *Pool) grantLocked(t *Ticket) *Lease {
	now := p.now()
	p.reconcileLocked(now)
	if t.Prefix == nil && t.Affinity == 0 {
		if a, b := p.sampleTwoLocked(t, now); b != nil {
			pick := a
			if b.load() < a.load() {
				pick = b
			}
			return p.leaseLocked(pick, t, "p2c", 0)
		}
	}
	cands := p.cands[:0]
	for _, s := range p.slots {
		if t.allows(s) && p.eligibleLocked(s, now) && p.fitsLocked(s, t.Tokens) {
			cands = append(cands, s)
		}
	}
	p.cands = cands[:0]
	if len(cands) == 0 {
		return nil
	}
	var pick *Slot
	policy, cached := "only", 0
	if t.Prefix != nil {
		var why string
		if pick, cached, why = p.preciseLocked(t, cands); pick != nil && len(cands) > 1 {
			policy = "precise"
		} else if pick == nil {
			p.fallbacks[why]++
		}
	}
	if pick == nil && t.Affinity != 0 && len(cands) > 1 {
		pick = p.affinityLocked(t.Affinity, t.Tokens, cands)
		policy = "affinity"
	}
	if pick == nil && len(cands) > 1 {
		a := cands[p.rnd.IntN(len(cands))]
		b := cands[p.rnd.IntN(len(cands)-1)]
		if b == a {
			b = cands[len(cands)-1]
		}
		pick, policy = a, "p2c"
		if b.load() < a.load() {
			pick = b
		}
	}
	if pick == nil {
		pick = cands[0]
	}
	clear(cands) // the scratch holds no slot past the grant
	return p.leaseLocked(pick, t, policy, cached)
}

func (p *Pool) leaseLocked(pick *Slot, t *Ticket, policy string, cached int) *Lease {
	pick.inFlight++
	pick.tokens += t.Tokens
	p.decisions[policy]++
	return &Lease{Slot: pick, Policy: policy, Cached: cached, pool: p, tokens: t.Tokens, maxIn: pick.cfg.MaxInFlight, budget: pick.budget(), wakes: pick.wakes, at: p.now()}
}

// unleaseLocked undoes leaseLocked for a lease never handed out (a grant
// held back: holdBackLocked).
func (p *Pool) unleaseLocked(l *Lease) {
	l.Slot.inFlight--
	l.Slot.tokens -= l.tokens
	p.decisions[l.Policy]--
}

// sampleMin is the number of slots from which a p2c grant samples its two
// candidates instead of listing every slot that could take the request;
// sampleTries bounds the draws before it lists them after all.
const (
	sampleMin   = 16
	sampleTries = 8
)

// sampleTwoLocked draws slots at random until two distinct ones can take
// t (power of two choices without listing the candidates: a grant's cost
// stays flat in the number of backends). It gives up (b nil) below
// sampleMin slots, where listing is as cheap and keeps the choice among
// all candidates, and after sampleTries draws (most slots full, ejected
// or not allowed): the caller lists the candidates then.
func (p *Pool) sampleTwoLocked(t *Ticket, now time.Time) (a, b *Slot) {
	n := len(p.slots)
	if n < sampleMin {
		return nil, nil
	}
	for range sampleTries {
		s := p.slots[p.rnd.IntN(n)]
		if s == a || !t.allows(s) || !p.eligibleLocked(s, now) || !p.fitsLocked(s, t.Tokens) {
			continue
		}
		if a == nil {
			a = s
			continue
		}
		return a, s
	}
	return nil, nil
}
