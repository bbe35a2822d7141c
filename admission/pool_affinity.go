package admission

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
)

// buildRingLocked places the slots on the affinity ring: 64 virtual nodes
// each, in the slots' order, sorted by hash.
func (p *Pool) buildRingLocked() {
	p.ring = p.ring[:0]
	for _, s := range p.slots {
		for v := range 64 { // virtual nodes for the affinity ring
			h := fnv.New64a()
			fmt.Fprintf(h, "%s#%d", s.Name, v)
			p.ring = append(p.ring, ringPoint{h.Sum64(), s})
		}
	}
	sort.Slice(p.ring, func(a, b int) bool { return p.ring[a].hash < p.ring[b].hash })
}

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
