package quota

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// model is the semantics written the slow way: every request and every
// settled usage kept as its own entry, every question answered by scanning
// them. The fuzz target runs a sequence of operations against Local and the
// model and requires the same answers.
type model struct {
	keys map[string]*modelKey
}

type modelKey struct {
	reqs []entry // one per request, n = 1
	toks []entry
	days []entry
	open []*modelRes
}

type entry struct{ exp, n int64 }

type modelRes struct {
	tokens int64
	day    bool
}

func (m *model) key(k string) *modelKey {
	if m.keys[k] == nil {
		m.keys[k] = &modelKey{}
	}
	return m.keys[k]
}

func live(es []entry, t int64) (sum int64) {
	for _, e := range es {
		if e.exp > t {
			sum += e.n
		}
	}
	return sum
}

func (k *modelKey) inflight(day bool) (n, tokens int64) {
	for _, r := range k.open {
		if !day || r.day {
			n++
			tokens += r.tokens
		}
	}
	return n, tokens
}

// retry answers when ask fits under limit: the first expiry after which it
// does, counting the tokens in flight; failing that (the requests in flight
// must end), a guess: the first expiry after which it would fit without
// them, and at least inFlightGuess.
func retry(es []entry, now, inflight, ask, limit int64) (time.Duration, bool) {
	exps := []int64{}
	for _, e := range es {
		if e.exp > now {
			exps = append(exps, e.exp)
		}
	}
	slices.Sort(exps)
	for _, t := range exps {
		if live(es, t)+inflight+ask <= limit {
			return time.Duration(t - now), false
		}
	}
	for _, t := range append([]int64{now}, exps...) {
		if live(es, t)+ask <= limit {
			return max(inFlightGuess, time.Duration(t-now)), true
		}
	}
	return inFlightGuess, true
}

func (k *modelKey) status(now int64, lim Limits) Status {
	var s Status
	if lim.RequestsPerMinute > 0 {
		s.LimitRequests = lim.RequestsPerMinute
		s.RemainingRequests = max(0, lim.RequestsPerMinute-live(k.reqs, now))
		for _, e := range k.reqs {
			s.ResetRequests = max(s.ResetRequests, time.Duration(e.exp-now))
		}
	}
	if lim.TokensPerMinute > 0 {
		_, tokens := k.inflight(false)
		s.LimitTokens = lim.TokensPerMinute
		s.RemainingTokens = max(0, lim.TokensPerMinute-live(k.toks, now)-tokens)
		for _, e := range k.toks {
			s.ResetTokens = max(s.ResetTokens, time.Duration(e.exp-now))
		}
		if tokens > 0 {
			s.ResetTokens = max(s.ResetTokens, time.Duration(expireAt(now, minuteSpan, minuteGran)-now))
		}
	}
	return s
}

// decide is the model's Reserve without taking anything: nil or the denial.
func (k *modelKey) decide(now int64, lim Limits, ask int64) *Denied {
	n, tokens := k.inflight(false)
	_, dayTokens := k.inflight(true)
	minute, day := live(k.toks, now)+tokens, live(k.days, now)+dayTokens
	st := k.status(now, lim)
	if lim.TokensPerMinute > 0 && ask > lim.TokensPerMinute {
		return &Denied{Kind: Tokens, Limit: lim.TokensPerMinute, InUse: minute, Asked: ask, Never: true, Status: st}
	}
	if lim.TokensPerDay > 0 && ask > lim.TokensPerDay {
		return &Denied{Kind: TokensPerDay, Limit: lim.TokensPerDay, InUse: day, Asked: ask, Never: true, Status: st}
	}
	var cands []Denied
	if lim.TokensPerMinute > 0 && minute+ask > lim.TokensPerMinute {
		ra, est := retry(k.toks, now, tokens, ask, lim.TokensPerMinute)
		cands = append(cands, Denied{Kind: Tokens, Limit: lim.TokensPerMinute, InUse: minute, Asked: ask, RetryAfter: ra, Estimated: est})
	}
	if r := live(k.reqs, now); lim.RequestsPerMinute > 0 && r+1 > lim.RequestsPerMinute {
		ra, est := retry(k.reqs, now, 0, 1, lim.RequestsPerMinute)
		cands = append(cands, Denied{Kind: Requests, Limit: lim.RequestsPerMinute, InUse: r, Asked: 1, RetryAfter: ra, Estimated: est})
	}
	if lim.TokensPerDay > 0 && day+ask > lim.TokensPerDay {
		ra, est := retry(k.days, now, dayTokens, ask, lim.TokensPerDay)
		cands = append(cands, Denied{Kind: TokensPerDay, Limit: lim.TokensPerDay, InUse: day, Asked: ask, RetryAfter: ra, Estimated: est})
	}
	if lim.MaxConcurrent > 0 && n >= lim.MaxConcurrent {
		cands = append(cands, Denied{Kind: Concurrent, Limit: lim.MaxConcurrent, InUse: n, Asked: 1, RetryAfter: inFlightGuess, Estimated: true})
	}
	if len(cands) == 0 {
		return nil
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if c.RetryAfter > best.RetryAfter {
			best = c
		}
	}
	best.Status = st
	return &best
}

// FuzzLocalMatchesModel reads ops from the input: reserve, settle, advance
// the clock, change the limits; after each, Local and the model must agree,
// admitted windows must be within their limits, and an exact RetryAfter must
// be honest (the model admits the same ask then, nothing else arriving).
func FuzzLocalMatchesModel(f *testing.F) {
	f.Add([]byte{0, 10, 0, 0, 20, 1, 1, 0, 5, 2, 30, 0, 0, 50})
	f.Add([]byte{3, 1, 2, 3, 0, 0, 200, 0, 0, 200, 0, 1, 200, 1, 0, 250, 2, 200, 0, 0, 100})
	f.Add([]byte{3, 3, 3, 3, 0, 0, 10, 0, 0, 10, 0, 0, 10, 0, 0, 10, 1, 2, 255, 2, 60, 0, 0, 10})
	f.Add([]byte{3, 0, 0, 1, 0, 0, 100, 1, 0, 100, 2, 250, 2, 250, 0, 0, 100, 2, 255, 0, 0, 150})
	f.Add([]byte{3, 2, 0, 0, 0, 1, 90, 2, 7, 0, 1, 90, 1, 0, 255, 2, 11, 0, 1, 30, 3, 1, 0, 0, 0, 1, 30})
	f.Fuzz(func(t *testing.T, ops []byte) {
		c := newClock()
		l := NewLocal(c.now)
		m := &model{keys: map[string]*modelKey{}}
		type held struct {
			r   Reservation
			m   *modelRes
			key string
		}
		var open []held
		lims := []Limits{
			{TokensPerMinute: 1000, RequestsPerMinute: 5, MaxConcurrent: 3},
			{TokensPerMinute: 500, TokensPerDay: 2000},
			{RequestsPerMinute: 2},
			{TokensPerMinute: 3000, TokensPerDay: 1500, RequestsPerMinute: 10, MaxConcurrent: 2},
			{},
		}
		lim := lims[0]
		next := func() int64 {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return int64(b)
		}
		for len(ops) > 0 {
			now := l.tick()
			switch next() % 4 {
			case 0: // reserve: key, tokens (×10)
				key := []string{"a", "b"}[next()%2]
				ask := next() * 10
				mk := m.key(key)
				want := mk.decide(now, lim, ask)
				r, err := l.Reserve(context.Background(), key, lim, ask)
				if want == nil {
					if err != nil {
						t.Fatalf("Reserve(%s, %d) under %+v: %v; the model admits", key, ask, lim, err)
					}
					mr := &modelRes{tokens: ask, day: lim.TokensPerDay > 0}
					mk.open = append(mk.open, mr)
					mk.reqs = append(mk.reqs, entry{expireAt(now, minuteSpan, minuteGran), 1})
					open = append(open, held{r, mr, key})
					if got, want := r.Status(), mk.status(now, lim); got != want {
						t.Fatalf("reservation status\n got %+v\nwant %+v", got, want)
					}
					if s := r.Status(); s.LimitTokens > 0 && s.RemainingTokens < 0 {
						t.Fatalf("admitted past the limit: %+v", s)
					}
					break
				}
				var d *Denied
				if !errors.As(err, &d) {
					t.Fatalf("Reserve(%s, %d) under %+v: %v; the model refuses: %+v", key, ask, lim, err, want)
				}
				if *d != *want {
					t.Fatalf("denial\n got %+v\nwant %+v", *d, *want)
				}
				if d.Never != (d.RetryAfter == 0) {
					t.Fatalf("denial %+v: RetryAfter is 0 exactly when it can never fit", d)
				}
				if !d.Never && !d.Estimated {
					if w := mk.decide(now+int64(d.RetryAfter), lim, ask); w != nil && !w.Estimated {
						t.Fatalf("denied with RetryAfter %v, but then still: %+v", d.RetryAfter, w)
					}
				}
			case 1: // settle: which, used (×10; 255 unknown)
				if len(open) == 0 {
					break
				}
				i := int(next()) % len(open)
				h := open[i]
				used := next()
				if used == 255 {
					used = -1
				} else {
					used *= 10
				}
				h.r.Settle(used)
				h.r.Settle(used + 7) // idempotent
				mk := m.key(h.key)
				mk.open = slices.DeleteFunc(mk.open, func(r *modelRes) bool { return r == h.m })
				if used < 0 {
					used = h.m.tokens
				}
				if used == 0 { // nothing to count
					open = slices.Delete(open, i, i+1)
					break
				}
				mk.toks = append(mk.toks, entry{expireAt(now, minuteSpan, minuteGran), used})
				if h.m.day {
					mk.days = append(mk.days, entry{expireAt(now, daySpan, dayGran), used})
				}
				open = slices.Delete(open, i, i+1)
			case 2: // advance: 0.1 s × n, or minutes past 200
				n := next()
				if n > 200 {
					c.advance(time.Duration(n-200) * time.Minute)
				} else {
					c.advance(time.Duration(n) * 100 * time.Millisecond)
				}
			case 3: // limits
				lim = lims[next()%int64(len(lims))]
			}
			now = l.tick()
			for _, key := range []string{"a", "b"} {
				if got, want := l.Status(key, lim), m.key(key).status(now, lim); got != want {
					mk := m.key(key)
					var opens []modelRes
					for _, r := range mk.open {
						opens = append(opens, *r)
					}
					t.Logf("model %+v open %+v; local %+v", *mk, opens, l.shard(key).keys[key])
					t.Fatalf("status of %s\n got %+v\nwant %+v", key, got, want)
				}
			}
		}
	})
}
