package admission

// PrefixMatcher is a request's view of its model's prefix-cache index
// (routing: precise; package prefixindex builds it from the backends' KV
// events): how many leading tokens of the request's prompt each backend
// holds in its prefix cache.
type PrefixMatcher interface {
	// Match writes, for each slot named in names, the tokens of the
	// prompt's cached prefix it holds to cached[i] (len(cached) ==
	// len(names)). It returns false when the index cannot answer for one
	// of them (no events, or not live): the request then routes as
	// without. It is called under the pool's lock and must not call into
	// the pool.
	Match(names []string, cached []int) bool
}

// PrefixWeights weigh a backend's cached share of the prompt against its
// load in the precise pick (preciseLocked).
type PrefixWeights struct {
	Cache, Load float64
}

// Why a request scored for precise routing was routed as without it
// (PoolStats.PreciseFallbacks; the metric's reason label).
const (
	// FallbackNotLive: a candidate's index cannot answer (no events yet,
	// its event stream unreachable or out of sequence).
	FallbackNotLive = "not_live"
	// FallbackNothingCached: no candidate holds a block of the prompt.
	FallbackNothingCached = "nothing_cached"
)

// PreciseFallbackReasons lists the fallback reasons, for metrics.
func PreciseFallbackReasons() []string { return []string{FallbackNotLive, FallbackNothingCached} }

// preciseLocked picks among cands by the ticket's prefix matcher: the
// candidate maximizing
//
//	Cache x cached(b) / PromptTokens - Load x load(b)
//
// where cached(b) is its cached-prefix tokens and load(b) its outstanding
// tokens over its budget (Slot.load); ties go to the less loaded. It
// returns nil and why (a Fallback reason), and the caller routes as
// without, when the matcher cannot answer for every candidate or no
// candidate holds any of the prompt. The expected cached tokens of every
// candidate are left in p.cached.
func (p *Pool) preciseLocked(t *Ticket, cands []*Slot) (*Slot, int, string) {
	p.names, p.cached = p.names[:0], p.cached[:0]
	for _, s := range cands {
		p.names = append(p.names, s.Name)
		p.cached = append(p.cached, 0)
	}
	if t.PromptTokens <= 0 {
		return nil, 0, FallbackNothingCached
	}
	if !t.Prefix.Match(p.names, p.cached) {
		return nil, 0, FallbackNotLive
	}
	var pick *Slot
	best, bestCached, bestLoad := 0.0, 0, 0.0
	for i, s := range cands {
		c := min(p.cached[i], t.PromptTokens)
		l := s.load()
		score := t.PrefixWeights.Cache*float64(c)/float64(t.PromptTokens) - t.PrefixWeights.Load*l
		if pick == nil || score > best || (score == best && l < bestLoad) {
			pick, best, bestCached, bestLoad = s, score, c, l
		}
	}
	if slicesAllZero(p.cached) {
		return nil, 0, FallbackNothingCached // spread as without
	}
	return pick, bestCached, ""
}

func slicesAllZero(xs []int) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}
