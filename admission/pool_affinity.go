package admission

import (
	"slices"
	"sort"
)

type ringPoint struct {
	hash uint64
	slot *Slot
}

// affinityLocked walks the hash ring from h to the first candidate that
// stays within the load bound with this request added: AffinityLoad times
// the average outstanding tokens (consistent hashing with bounded loads), so
// a conversation's turns find the backend holding their KV prefix unless it
// is overloaded.
func (p *Pool) affinityLocked(h uint64, tokens int, cands []*Slot) *Slot {
	sum := tokens
	for _, s := range cands {
		sum += s.tokens
	}
	bound := p.cfg.AffinityLoad * float64(sum) / float64(len(cands))
	i := sort.Search(len(p.ring), func(i int) bool { return p.ring[i].hash >= h })
	for k := range p.ring {
		pt := p.ring[(i+k)%len(p.ring)]
		s := pt.slot
		if !slices.Contains(cands, s) {
			continue
		}
		// An idle backend always qualifies (the bound is a ceiling over
		// whole requests, as in the bounded-loads scheme).
		if s.tokens == 0 || float64(s.tokens+tokens) <= bound {
			return s
		}
	}
	return nil
}
