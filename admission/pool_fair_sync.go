package admission

import (
	"context"
	"time"
)

// FlowSync shares the flows between the replicas of a gateway (package
// store keeps them in Redis or Valkey). SyncFlows adds deltas, the
// weighted token service each flow of model was charged on this replica
// since its last call, to the model's totals over every replica, puts
// claims in place of this replica's last ones, and returns every flow's
// total and the other live replicas' claims. A replica's claims vanish
// a short time after its last sync (a replica that died claims nothing).
type FlowSync interface {
	SyncFlows(ctx context.Context, model string, deltas map[string]float64, claims []FlowClaim) (FlowView, error)
}

// FlowClaim is one flow active on a replica: its counter there (on that
// replica's scale: lifts are each replica's own) and, Waiting, that a
// request of it waits in Class there. A flow waiting in several classes
// has a claim per class; a flow only in flight there has one with Waiting
// false, so that the others know its counter on that scale. Seen is the
// flow's service over every replica that Counter counts: its total at
// that replica's last sync and what the replica charged it since (0:
// unknown, the flow not synced there yet). A replica that knows of more
// (its own grants since, the others' pushes) adds the difference to
// Counter before it compares (unseenLocked): the claims then need no
// sync of the claiming replica to reflect a grant made elsewhere.
//
// Waited is how long the flow's first request waiting in Class there had
// waited at the claim (0: unknown, or none waits): a replica holds a
// grant of the same flow back for a request of it that has waited longer
// elsewhere, so that a flow's requests keep their order across replicas.
type FlowClaim struct {
	Flow    string
	Counter float64
	Class   int
	Waiting bool
	Seen    float64
	Waited  time.Duration
}

// FlowView is what SyncFlows answers: every flow's service over every
// replica (Totals) and the other live replicas' claims, by replica.
type FlowView struct {
	Totals map[string]float64
	Others map[string][]FlowClaim
}

// remoteFlows is another replica's claims as the last sync read them:
// its flows' counters, and those of them waiting.
type remoteFlows struct {
	counters map[string]float64
	seen     map[string]float64
	waiting  []FlowClaim
	at       time.Time // read (the Waited in waiting are as of then)
}

// SyncFlows shares the pool's flows with the other replicas under Tokens
// fairness. It pushes what this replica charged each flow since the last
// sync and adds to each flow's counter what the others charged it
// meanwhile (the total's growth beyond this replica's own push), over its
// weight; a flow's first sync only takes the total as its base: service
// from before this replica knew the flow is not charged again. The
// counters of two replicas then differ by at most the service the others
// charged in one interval (and a round trip).
//
// It also publishes this replica's active flows (claims) and reads the
// other replicas': from then on a grant to flow X is held back while
// another replica has a flow Y waiting in the same class whose counter is
// lower than X's there by more than the largest weighted prompt granted
// here (each with the service this replica knows of that the claim had
// not counted: unseenLocked), or a request of X that has waited longer
// there by flowOrderSlack (holdBackLocked), for at most hold from the
// first grant held back, so that the replica holding Y (or X's older
// request) takes the freed slot; then the grant goes ahead
// (work-conserving: a slot idles at most hold plus one sync interval
// when the other replica cannot use it). It grants again
// at its end (the claims changed, a hold may have run out). contended:
// a flow waits here or on another replica; the caller syncs more often
// then. Called by one goroutine at a time, every sync interval. When fs
// fails, the deltas stay for the next sync and the claims read before
// are dropped (each replica schedules on its own).
func (p *Pool) SyncFlows(ctx context.Context, fs FlowSync, hold time.Duration) (contended bool, err error) {
	p.mu.Lock()
	if !p.fair.on {
		p.fair.remote = nil
		p.unlock()
		return false, nil
	}
	p.fair.hold = hold
	var deltas map[string]float64
	for name, f := range p.fair.flows {
		p.counterLocked(f) // folds the output charged since
		if f.unpushed != 0 || !f.synced {
			if deltas == nil {
				deltas = make(map[string]float64, len(p.fair.flows))
			}
			deltas[name] = f.unpushed
			f.unpushed = 0
		}
	}
	claims := p.claimsLocked()
	p.unlock()
	view, err := fs.SyncFlows(ctx, p.name, deltas, claims)
	p.mu.Lock()
	defer p.unlock()
	if err != nil {
		for name, d := range deltas {
			p.fair.flows[name].unpushed += d
		}
		p.fair.remote = nil
		return p.depth > 0, err
	}
	for name, total := range view.Totals {
		f := p.fair.flows[name]
		if f == nil {
			continue // not active here yet: based at its first sync
		}
		if f.synced {
			if others := total - f.seen - deltas[name]; others != 0 {
				f.vtc += others / f.weight
			}
		}
		f.seen, f.synced = total, true
	}
	had := p.fair.remote != nil
	p.fair.remote = remoteOf(view.Others, p.now())
	waiting := false
	for _, r := range p.fair.remote {
		waiting = waiting || len(r.waiting) > 0
	}
	if (had || p.fair.remote != nil) && p.depth > 0 {
		p.grantWaitingLocked()
	}
	return p.depth > 0 || waiting, nil
}

// claimsLocked lists the pool's active flows (waiting or in flight) with
// their counters: what the other replicas weigh their grants against.
func (p *Pool) claimsLocked() []FlowClaim {
	var out []FlowClaim
	now := p.now()
	for name, f := range p.fair.flows {
		if f.waiting == 0 && f.inFlight == 0 {
			continue
		}
		confirming := func(class int) bool { return class < len(f.confirming) && f.confirming[class] > 0 }
		c, seen := p.counterLocked(f), 0.0
		if f.synced {
			seen = f.seen + f.unpushed
		}
		n := len(out)
		for class, q := range f.queues {
			if len(q) > 0 || confirming(class) {
				var waited time.Duration
				if len(q) > 0 {
					waited = max(since(now, q[0].sinceMs), 1) // 0: unknown
				}
				out = append(out, FlowClaim{Flow: name, Counter: c, Class: class, Waiting: true, Seen: seen, Waited: waited})
			}
		}
		if len(out) == n {
			out = append(out, FlowClaim{Flow: name, Counter: c, Seen: seen})
		}
	}
	return out
}

// remoteOf is the other replicas' claims as the pool looks them up (nil:
// none).
func remoteOf(others map[string][]FlowClaim, at time.Time) []remoteFlows {
	var out []remoteFlows
	for _, claims := range others {
		if len(claims) == 0 {
			continue
		}
		r := remoteFlows{counters: make(map[string]float64, len(claims)), seen: make(map[string]float64, len(claims)), at: at}
		for _, c := range claims {
			r.counters[c.Flow] = c.Counter
			r.seen[c.Flow] = c.Seen
			if c.Waiting {
				r.waiting = append(r.waiting, c)
			}
		}
		out = append(out, r)
	}
	return out
}

// holdBackLocked decides a grant l just picked for t (queued at sinceMs,
// msOf; 0: not queued) against the other replicas' claims: held back (the
// pick undone) while some replica has a flow waiting in t's class whose
// counter there is lower than t's flow's by more than the margin, or an
// older request of t's flow (remoteAheadLocked), and less than hold has
// passed since the first grant held back since the last grant (or the
// last grant pass that found no room: grantFairLocked). Without
// other replicas' claims (one replica, no store) it costs one comparison.
func (p *Pool) holdBackLocked(l *Lease, t *Ticket, sinceMs uint32) bool {
	if p.fair.remote == nil {
		return false
	}
	if !p.remoteAheadLocked(t, sinceMs) {
		p.fair.holdFrom = time.Time{}
		return false
	}
	now := p.now()
	if p.fair.holdFrom.IsZero() {
		p.fair.holdFrom = now
	}
	if now.Sub(p.fair.holdFrom) >= p.fair.hold {
		p.fair.holdFrom = time.Time{}
		return false
	}
	p.unleaseLocked(l)
	return true
}

// remoteAheadLocked: another replica has a flow waiting in t's class
// whose counter there is lower than t's flow's by more than the margin,
// each counter with the service this replica knows of that the claim had
// not counted (unseenLocked). A replica on which t's flow is not active
// (no counter there) is not weighed.
func (p *Pool) remoteAheadLocked(t *Ticket, sinceMs uint32) bool {
	now := p.now()
	var waited time.Duration // not queued: it waited nothing
	if sinceMs != 0 {
		waited = since(now, sinceMs)
	}
	for i := range p.fair.remote {
		r := &p.fair.remote[i]
		cx, ok := r.counters[t.Flow]
		if !ok {
			continue
		}
		cx += p.unseenLocked(t.Flow, r.seen[t.Flow])
		for _, y := range r.waiting {
			switch {
			case y.Class != t.Class:
			case y.Flow != t.Flow:
				if y.Counter+p.unseenLocked(y.Flow, y.Seen)+p.fair.margin < cx {
					return true
				}
			case y.Waited > 0 && y.Waited+now.Sub(r.at) > waited+flowOrderSlack:
				return true // an older request of the flow waits there
			}
		}
	}
	return false
}

// msOf is t in Unix milliseconds modulo 2^32 (0: the zero time; a time
// that falls on 0 is taken as 1).
func msOf(t time.Time) uint32 {
	if t.IsZero() {
		return 0
	}
	return max(uint32(t.UnixMilli()), 1)
}

// since is how long before now ms (msOf) was, modulo 2^32 ms.
func since(now time.Time, ms uint32) time.Duration {
	return time.Duration(uint32(now.UnixMilli())-ms) * time.Millisecond
}

// flowOrderSlack is how much longer a flow's request must have waited on
// another replica, by its claim, for a grant of the flow here to be held
// back for it: about what the claims' age and the replicas' clocks blur.
const flowOrderSlack = 50 * time.Millisecond

// unseenLocked is what flow name's counter on another replica lacks of
// the service this replica knows of (its total at the last sync and what
// it charged since), over the flow's weight, when that replica's claim
// counted seen (0: unknown; the difference is then not added, nor when
// negative: that replica knows of more).
func (p *Pool) unseenLocked(name string, seen float64) float64 {
	f := p.fair.flows[name]
	if f == nil || !f.synced || seen <= 0 {
		return 0
	}
	p.counterLocked(f)
	if d := f.seen + f.unpushed - seen; d > 0 {
		return d / f.weight
	}
	return 0
}

// liftTargetLocked is what f, becoming active here, is lifted to: least,
// the least counter of the flows waiting here, unless f waits on another
// replica with other flows: there it stands some lag below (or above) the
// least of theirs, and it is lifted to least less that lag (the largest
// over the replicas where it waits), so that a flow backlogged in the
// fleet keeps its place when its requests reach another replica, as VTC
// lifts only a flow that was idle. One comparison without other
// replicas' claims.
func (p *Pool) liftTargetLocked(f *flow, least float64) float64 {
	if p.fair.remote == nil {
		return least
	}
	lag, any := 0.0, false
	for i := range p.fair.remote {
		var cf, floor float64
		waits, others := false, false
		for _, y := range p.fair.remote[i].waiting {
			switch {
			case y.Flow == f.name:
				cf, waits = y.Counter, true
			case !others || y.Counter < floor:
				floor, others = y.Counter, true
			}
		}
		if d := floor - cf; waits && others && (!any || d > lag) {
			lag, any = d, true
		}
	}
	return least - lag
}
