package admission

// Under Tokens fairness with a shared account, a grant is charged to its
// flow when the pool picks it, then confirmed in the store outside the
// lock (confirm). Until the store answers, the request is still waiting
// as far as the fleet is concerned: its flow's claims say so (the other
// replicas keep holding back for it), and the input charged for it does
// not count in the counter a flow becoming active is lifted to (a grant
// the store refuses is given back; a lift to it would leave the new flow
// above the one it lifted to once it is).

// confirmingLocked marks l, just granted in class, as being confirmed.
func (p *Pool) confirmingLocked(l *Lease, class int) {
	f := l.flow
	if f.confirming == nil {
		f.confirming = make([]int, len(p.queue))
	}
	f.confirming[class]++
	f.confirmingIn += float64(l.chargedIn) * p.fair.wIn
	l.confirm = int32(class) + 1
}

// confirmedLocked ends l's confirmation (the store answered, or the
// grant went back); a no-op for a lease not being confirmed.
func (p *Pool) confirmedLocked(l *Lease) {
	if l.confirm == 0 || l.flow == nil {
		return
	}
	f := l.flow
	f.confirming[l.confirm-1]--
	f.confirmingIn -= float64(l.chargedIn) * p.fair.wIn
	l.confirm = 0
	for _, n := range f.confirming {
		if n > 0 {
			return
		}
	}
	f.confirmingIn = 0 // exact again, whatever weights a reload changed
}
