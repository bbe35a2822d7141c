package admission

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"
)

// Fairness is how a pool shares its backends between flows (API keys)
// within a priority class.
type Fairness uint8

const (
	// FIFO grants a class's requests in their order of arrival.
	FIFO Fairness = iota
	// Tokens grants, among the flows with a waiting request that fits a
	// backend, the one with the least virtual token counter: its weighted
	// token service (input x InputWeight + output x OutputWeight) divided
	// by its weight, a flow that becomes active lifted to the least
	// counter of the active flows (VTC, Sheng et al., OSDI 2024).
	Tokens
)

func (f Fairness) String() string {
	if f == Tokens {
		return "tokens"
	}
	return "fifo"
}

// flow is one tenant's share of a pool under Tokens: its counter, its
// waiting requests (FIFO per class) and its service. Guarded by the
// pool's lock, except pendingOut (Lease.Charge adds to it without the
// lock; the pool folds it into the counter when it reads it).
type flow struct {
	name   string
	weight float64
	// vtc is the virtual token counter: weighted service / weight, lifts
	// included. It only grows.
	vtc float64
	// pendingOut: output tokens charged by leases since the last fold.
	pendingOut atomic.Int64
	// queues holds the flow's waiting requests per class, in arrival
	// order; waiting counts them over all classes.
	queues  [][]*waiter
	waiting int
	// blocked: the grant pass in which its head fit no backend.
	blocked uint64
	// served is the weighted service of its finished requests, settled
	// to their usage; tokensIn and tokensOut the tokens in it.
	served              float64
	tokensIn, tokensOut int64
	inFlight            int
	// unpushed is the weighted service charged here since the last
	// sync with the other replicas; seen the flow's shared total at that
	// sync (synced: seen is set).
	unpushed float64
	seen     float64
	synced   bool
	// confirming counts, per class, its grants the shared account is
	// asked to confirm, and confirmingIn their weighted input charged
	// (pool_fair_confirm.go); nil until its first.
	confirming   []int
	confirmingIn float64
}

// fairQueue is a pool's queue under Tokens: the flows, and per class
// the flows with waiting requests in it.
type fairQueue struct {
	on        bool
	wIn, wOut float64
	flows     map[string]*flow
	active    [][]*flow // per class
	n         []int     // waiting per class
	// lastLeft is the counter of the last flow whose queue emptied: what
	// a flow becoming active is lifted to when no other waits.
	lastLeft float64
	pass     uint64
	// remote is the other replicas' claims as the last sync read them
	// (nil: none; pool_fair_sync.go). A grant is held back for a flow
	// waiting there with a counter lower by more than margin (the
	// largest weighted prompt granted here), or for an older request of
	// its own flow there, from holdFrom (the first grant held back since
	// the last grant, or the last pass that found no room) for at most
	// hold.
	remote   []remoteFlows
	margin   float64
	holdFrom time.Time
	hold     time.Duration
}

func (fq *fairQueue) init(classes int) {
	fq.flows = map[string]*flow{}
	fq.active = make([][]*flow, classes)
	fq.n = make([]int, classes)
}

// setWeights takes the pool config's token weights (0: the defaults, 1
// and 2).
func (fq *fairQueue) setWeights(in, out float64) {
	fq.wIn, fq.wOut = in, out
	if fq.wIn <= 0 {
		fq.wIn = 1
	}
	if fq.wOut <= 0 {
		fq.wOut = 2
	}
}

// flowLocked finds or adds t's flow and takes its weight (a key's weight
// reloads with the key).
func (p *Pool) flowLocked(t *Ticket) *flow {
	f := p.fair.flows[t.Flow]
	if f == nil {
		f = &flow{name: t.Flow, queues: make([][]*waiter, len(p.queue))}
		p.fair.flows[t.Flow] = f
	}
	f.weight = t.Weight
	if f.weight <= 0 {
		f.weight = 1
	}
	return f
}

// counterLocked folds f's pending output charges into its counter and
// returns it.
func (p *Pool) counterLocked(f *flow) float64 {
	if d := f.pendingOut.Swap(0); d != 0 {
		p.chargeLocked(f, 0, d)
	}
	return f.vtc
}

// chargeLocked adds in input and out output tokens (either may be
// negative: a correction) to f's counter and its service to share.
func (p *Pool) chargeLocked(f *flow, in, out int64) {
	s := float64(in)*p.fair.wIn + float64(out)*p.fair.wOut
	f.vtc += s / f.weight
	f.unpushed += s
}

// liftLocked lifts f, becoming active, to the least counter of the
// active flows (or of the last one to leave the queue when none is), so
// that a flow's idle time is not banked as a claim on the backends. A
// flow that waits on another replica is not becoming active in the
// fleet: it is lifted to where it stands there (liftTargetLocked).
func (p *Pool) liftLocked(f *flow) {
	least, any := 0.0, false
	if p.depth == 0 {
		// Nobody waits: no scan.
		if t := p.liftTargetLocked(f, p.fair.lastLeft); p.counterLocked(f) < t {
			f.vtc = t
		}
		return
	}
	for _, g := range p.fair.flows {
		if g.waiting > 0 && g != f {
			c := p.counterLocked(g)
			if g.confirmingIn != 0 {
				c -= g.confirmingIn / g.weight // may yet be refused
			}
			if !any || c < least {
				least, any = c, true
			}
		}
	}
	if !any {
		least = p.fair.lastLeft
	}
	if t := p.liftTargetLocked(f, least); p.counterLocked(f) < t {
		f.vtc = t
	}
}

// enqueueFairLocked puts w in its flow's queue of its class: at the end,
// or (again: the shared account refused its grant) back at its place by
// arrival order. A flow becoming active is lifted (liftLocked), unless
// again: its request was waiting, or just lifted at its grant, and the
// flow was never idle; a lift there would take away the lag it built
// while it waited each time the store refuses it a slot another replica
// took first.
func (p *Pool) enqueueFairLocked(w *waiter, again bool) {
	f := w.f
	c := w.t.Class
	if f.waiting == 0 && !again {
		p.liftLocked(f)
	}
	q := f.queues[c]
	i := len(q)
	if again {
		if j := slices.IndexFunc(q, func(x *waiter) bool { return x.order > w.order }); j >= 0 {
			i = j
		}
	}
	if len(q) == 0 {
		p.fair.active[c] = append(p.fair.active[c], f)
	}
	f.queues[c] = slices.Insert(q, i, w)
	f.waiting++
	p.fair.n[c]++
}

// dequeueFairLocked takes w out of its flow's queue (granted, gone or
// flushed).
func (p *Pool) dequeueFairLocked(w *waiter) bool {
	f, c := w.f, w.t.Class
	i := slices.Index(f.queues[c], w)
	if i < 0 {
		return false
	}
	if i == 0 {
		f.queues[c] = f.queues[c][1:] // the head (a grant): no copy
	} else {
		f.queues[c] = slices.Delete(f.queues[c], i, i+1)
	}
	f.waiting--
	p.fair.n[c]--
	if len(f.queues[c]) == 0 {
		a := p.fair.active[c]
		if j := slices.Index(a, f); j >= 0 {
			p.fair.active[c] = slices.Delete(a, j, j+1)
		}
	}
	if f.waiting == 0 {
		p.fair.lastLeft = p.counterLocked(f)
	}
	return true
}

// leastFlowLocked is the active flow of class c with the least counter
// (on a tie, the one whose head came first) whose head was not found
// blocked in this pass; nil when none is left. O(active flows).
func (p *Pool) leastFlowLocked(c int) *flow {
	var best *flow
	var least float64
	for _, f := range p.fair.active[c] {
		if f.blocked == p.fair.pass {
			continue
		}
		v := p.counterLocked(f)
		if best == nil || v < least || v == least && f.queues[c][0].order < best.queues[c][0].order {
			best, least = f, v
		}
	}
	return best
}

// grantFairLocked grants class c's waiting requests while backends have
// room: each time the head of the flow with the least counter that fits a
// backend (work-conserving: a flow whose head fits nowhere is passed over
// in this pass, not waited for). It reports whether the class emptied,
// so that the next class may go (priorities first, as under FIFO).
//
// A pass that ends with requests left and none of them held back found
// no room for them: a hold running since an earlier pass is over (the
// slot it kept went elsewhere), and the next grant held back starts a
// new one rather than going ahead at once on the old one's clock.
func (p *Pool) grantFairLocked(c int) bool {
	p.fair.pass++
	held := false
	for p.fair.n[c] > 0 {
		f := p.leastFlowLocked(c)
		if f == nil {
			if !held {
				p.fair.holdFrom = time.Time{}
			}
			return false
		}
		w := f.queues[c][0]
		l := p.grantLocked(&w.t)
		if l == nil {
			f.blocked = p.fair.pass
			continue
		}
		if p.holdBackLocked(l, &w.t, w.sinceMs) {
			f.blocked, held = p.fair.pass, true
			continue
		}
		p.dequeueFairLocked(w)
		p.depth--
		p.chargeGrantLocked(l, f, &w.t)
		w.granted = l
		w.ch <- l
	}
	return true
}

// chargeGrantLocked charges a granted request's input to its flow: the
// door's exact prompt count, or the estimate (corrected by Settle).
func (p *Pool) chargeGrantLocked(l *Lease, f *flow, t *Ticket) {
	l.flow = f
	l.chargedIn = int64(t.Prompt)
	f.inFlight++
	if m := float64(t.Prompt) * p.fair.wIn; m > p.fair.margin {
		p.fair.margin = m
	}
	p.chargeLocked(f, l.chargedIn, 0)
	if p.cfg.Shared != nil {
		p.confirmingLocked(l, t.Class)
	}
}

// settleFairLocked ends a lease's charge: corrected to the usage Settle
// gave (each part that is known), or given back when the request was
// never sent (unused).
func (p *Pool) settleFairLocked(l *Lease, unused bool) {
	f := l.flow
	p.confirmedLocked(l)
	f.inFlight--
	in, out := l.chargedIn, l.chargedOut
	if unused {
		in, out = 0, 0
	}
	if l.settled&settledIn != 0 {
		in = l.finalIn
	}
	if l.settled&settledOut != 0 {
		out = l.finalOut
	}
	p.chargeLocked(f, in-l.chargedIn, 0)
	f.pendingOut.Add(out - l.chargedOut)
	f.served += float64(in)*p.fair.wIn + float64(out)*p.fair.wOut
	f.tokensIn += in
	f.tokensOut += out
}

// Charge adds output tokens the request generated (as its answer
// streams) to its flow's service, under Tokens fairness; a no-op
// otherwise. It takes no lock: call it from the request's goroutine as
// often as the answer goes (each SSE event, say); Settle corrects it.
func (l *Lease) Charge(output int) {
	if f := l.flow; f != nil && output != 0 {
		l.chargedOut += int64(output)
		f.pendingOut.Add(int64(output))
	}
}

// Charges reports whether the lease charges a flow (Tokens fairness):
// the caller reads the usage for Settle only then.
func (l *Lease) Charges() bool { return l.flow != nil }

// SettleInput and SettleOutput give the request's usage at its end (the
// backend's report, or the gateway's count), before Release: its flow is
// charged that instead of what was charged on the way (the door's count
// or estimate, the streamed events). A part not settled keeps its charge.
func (l *Lease) SettleInput(tokens int64) {
	l.finalIn = tokens
	l.settled |= settledIn
}

// SettleOutput: see SettleInput.
func (l *Lease) SettleOutput(tokens int64) {
	l.finalOut = tokens
	l.settled |= settledOut
}

const (
	settledIn uint8 = 1 << iota
	settledOut
)

// setFairnessLocked switches the queue's policy (a reload), moving the
// requests waiting from one shape of queue to the other in their order.
func (p *Pool) setFairnessLocked(f Fairness, wIn, wOut float64) {
	p.fair.setWeights(wIn, wOut)
	on := f == Tokens
	if on == p.fair.on {
		return
	}
	byClass := make([][]*waiter, len(p.queue))
	for c := range p.queue {
		if !p.fair.on {
			byClass[c], p.queue[c] = p.queue[c], nil
			continue
		}
		var ws []*waiter
		for _, fl := range p.fair.active[c] {
			ws = append(ws, fl.queues[c]...)
		}
		for _, w := range ws {
			p.dequeueFairLocked(w)
			w.f = nil
		}
		slices.SortFunc(ws, func(a, b *waiter) int { return cmp.Compare(a.order, b.order) })
		byClass[c] = ws
	}
	p.fair.on = on
	p.fair.remote = nil
	for c, ws := range byClass {
		for _, w := range ws {
			if on {
				w.f = p.flowLocked(&w.t)
				if w.f.waiting == 0 {
					p.liftLocked(w.f) // active from now under tokens
				}
				p.enqueueFairLocked(w, true)
			} else {
				p.queue[c] = append(p.queue[c], w)
			}
		}
	}
}

// FlowStats is a snapshot of one flow under Tokens fairness.
type FlowStats struct {
	Name   string
	Weight float64
	// Counter is the flow's virtual token counter (service / weight,
	// lifts included); the flow with the least goes first.
	Counter float64
	// Service is the weighted token service of its finished requests;
	// TokensIn and TokensOut are the tokens in it.
	Service             float64
	TokensIn, TokensOut int64
	Waiting, InFlight   int
}

// Flows lists the pool's flows under Tokens fairness, by name (none
// under FIFO).
func (p *Pool) Flows() []FlowStats {
	p.mu.Lock()
	defer p.unlock()
	if !p.fair.on {
		return nil
	}
	return p.flowStatsLocked()
}

// flowStatsLocked lists the flows, by name.
func (p *Pool) flowStatsLocked() []FlowStats {
	out := make([]FlowStats, 0, len(p.fair.flows))
	for _, f := range p.fair.flows {
		out = append(out, FlowStats{Name: f.name, Weight: f.weight, Counter: p.counterLocked(f), Service: f.served,
			TokensIn: f.tokensIn, TokensOut: f.tokensOut, Waiting: f.waiting, InFlight: f.inFlight})
	}
	slices.SortFunc(out, func(a, b FlowStats) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}
