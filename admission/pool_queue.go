package admission

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Outcome is how a request left the gateway's queue. It is a closed set
// that doubles as the outcome label of maitred_admission_total.
type Outcome int

const (
	Admitted     Outcome = iota // a backend slot was granted (at once or after waiting)
	QueueFull                   // the queue was full: 429
	QueueTimeout                // queue_timeout passed while waiting: 503
	ClientGone                  // the client left while waiting: nothing is sent
	OverBudget                  // larger than every backend's whole token budget: 400
	NoBackend                   // no backend of the model is ready: 503 model_not_ready
	Draining                    // the gateway is shutting down: 503
	StoreDown                   // the shared store cannot be reached and on_store_error is reject: 503
	ModelRemoved                // a config reload removed the model: 404, as for a model never configured
	numOutcomes
)

var outcomeNames = [...]string{"admitted", "queue_full", "queue_timeout", "client_gone", "over_budget", "no_backend", "draining", "store_down", "model_removed"}

func (o Outcome) String() string {
	if o >= 0 && o < numOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Outcomes lists every Outcome, for metric labels.
func Outcomes() []Outcome {
	out := make([]Outcome, numOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// Ticket is what a request asks of the pool.
type Ticket struct {
	// Tokens is its reservation: prompt + output budget.
	Tokens int
	// Exact: Tokens is exact, so a request larger than every budget can be
	// refused as OverBudget. Estimates are never refused.
	Exact bool
	Class int
	// Affinity is a hash of the prompt's first tokens; 0 for none.
	Affinity uint64
	// Prefix, when set, routes by the backends' cached prefixes of the
	// prompt (PromptTokens tokens), weighed by PrefixWeights
	// (pool_prefix.go); Affinity and power of two choices are its
	// fallback.
	Prefix        PrefixMatcher
	PromptTokens  int
	PrefixWeights PrefixWeights
	// Exclude names slots already tried (connection failures).
	Exclude []string
	// Only, when non-nil, names the subset of slots the request may go to
	// at all (the backends that have the LoRA adapter it names loaded);
	// nil: every slot. The pool grants, counts ready backends and judges
	// the request's size among those alone.
	Only []string
	// Flow names the request's flow under Tokens fairness (its API key's
	// name; "" for none), Weight its share (0: 1), and Prompt the input
	// charged to it when granted (the door's exact count, or an estimate
	// that Lease.SettleInput corrects).
	Flow   string
	Weight float64
	Prompt int
}

// allows reports whether t may go to slot s.
func (t *Ticket) allows(s *Slot) bool {
	return !slices.Contains(t.Exclude, s.Name) && (t.Only == nil || slices.Contains(t.Only, s.Name))
}

// Lease is a granted slot. Release it exactly once when the request ends.
type Lease struct {
	Slot   *Slot
	Waited time.Duration
	Policy string // "p2c", "affinity", "precise" or "only"
	// Cached is the pick's expected cached-prefix tokens of the prompt
	// (precise routing; 0 otherwise).
	Cached int
	pool   *Pool
	tokens int
	done   bool
	// The slot's limits and wake count when it was picked, and the shared
	// account's hold once confirmed.
	maxIn, budget int
	wakes         uint64
	hold          Hold
	at            time.Time // granted
	// Under Tokens fairness: the flow charged, what was charged (input at
	// the grant, output by Charge) and the usage Settle gave.
	flow                  *flow
	chargedIn, chargedOut int64
	finalIn, finalOut     int64
	settled               uint8
	// confirm is the class (+1) of a grant the shared account is asked
	// to confirm, under Tokens fairness (0: none): its flow counts it as
	// waiting meanwhile (pool_fair_confirm.go). An int32 beside settled:
	// in the struct's padding.
	confirm int32
}

// waiter is a request in the queue: what a waiting request holds beyond
// its goroutine (with the channel it is woken on, its timer and their
// runtime records: 0.5 KB).
type waiter struct {
	t       Ticket
	ch      chan *Lease // buffered 1: its grant, or nil (timed out, flushed)
	order   uint64      // arrival order, kept over tries
	granted *Lease
	gone    bool
	// timedOut: its queue_timeout ran out and expire took it out of the
	// queue (the nil it is woken with means that).
	timedOut bool
	// sinceMs is when it was queued first, in Unix milliseconds modulo
	// 2^32 (msOf: in the struct's padding beside the two bools; a
	// difference of two is right below 49 days), for its flow's claims.
	sinceMs uint32
	f       *flow // its flow under Tokens fairness
}

// Acquire waits for a backend slot for t, or returns why not. The context
// is the client's: when it ends, the request leaves the queue at once and
// is never granted. With a Shared account, the slot picked here is
// confirmed there (outside the lock); a slot held elsewhere sends the
// request back to the head of its class, to wait for a free.
func (p *Pool) Acquire(ctx context.Context, t Ticket) (*Lease, Outcome) {
	return p.AcquireTicket(ctx, &t)
}

// AcquireTicket is Acquire for a ticket the caller keeps: read where it
// is rather than copied onto the caller's stack (a by-value argument of
// its size is copied there twice, 0.3 KiB under the frames of a request
// that waits), its Class clamped to the pool's classes in place.
func (p *Pool) AcquireTicket(ctx context.Context, t *Ticket) (*Lease, Outcome) {
	t.Class = min(max(t.Class, 0), p.cfg.Classes-1)
	var q queued
	defer q.stop()
	for again := false; ; again = true {
		l, w, o := p.acquireLocal(t, &q, again)
		if w != nil {
			// Parked here, not deeper: the stack a waiting request
			// holds is the frames above this one.
			if p.cfg.Parked != nil {
				p.cfg.Parked.Add(1)
			}
			l, o = p.await(ctx, w, &q)
			if p.cfg.Parked != nil {
				p.cfg.Parked.Add(-1)
			}
		}
		if o != Admitted || p.cfg.Shared == nil {
			return l, o
		}
		o, retry := p.confirm(ctx, l)
		if !retry {
			if o != Admitted {
				return nil, o
			}
			return l, o
		}
	}
}

// queued is a request's time in the queue, over its tries: its timer
// runs out at deadline (queue_timeout after its first try queued).
type queued struct {
	since    time.Time
	order    uint64
	deadline time.Time
	timer    *time.Timer
}

func (q *queued) stop() {
	if q.timer != nil {
		q.timer.Stop()
	}
}

// arm sets q's timer to take w out of the queue at q's deadline (expire):
// a timer that calls back rather than one with a channel, so that the
// waiter parks on one channel (and its context's) and holds no timer
// channel. A try after the first arms it again for the waiter it queued.
func (q *queued) arm(p *Pool, w *waiter) {
	if q.timer == nil {
		q.deadline = time.Now().Add(p.cfg.QueueTimeout)
	} else {
		q.timer.Stop()
	}
	q.timer = time.AfterFunc(time.Until(q.deadline), func() { p.expire(w) })
}

// expire takes w out of the queue when its time there ran out, and wakes
// it (timedOut); a waiter already granted, gone or flushed is left as it
// is.
func (p *Pool) expire(w *waiter) {
	p.mu.Lock()
	if w.granted != nil || w.gone || !p.removeLocked(w) {
		p.unlock()
		return
	}
	w.gone, w.timedOut = true, true
	p.unlock()
	w.ch <- nil
}

// acquireLocal is one try of Acquire on this pool's own account: a grant,
// a refusal, or w, queued, for the caller to await. again: a try after
// the shared account refused the last grant; the request keeps its place
// (the head of its class) and is not counted against the queue size
// again.
func (p *Pool) acquireLocal(t *Ticket, q *queued, again bool) (*Lease, *waiter, Outcome) {
	p.mu.Lock()
	if p.closed {
		p.unlock()
		return nil, nil, ModelRemoved
	}
	if q.order == 0 {
		p.arrivals++
		q.order = p.arrivals
	}
	if p.draining {
		p.unlock()
		return nil, nil, Draining
	}
	if !p.anyReadyLocked(t) {
		p.unlock()
		return nil, nil, NoBackend
	}
	if t.Exact && p.tooLargeLocked(t) {
		p.unlock()
		return nil, nil, OverBudget
	}
	// Only when nobody of the same or a higher class waits, so FIFO holds
	// (a request tried again was ahead of its class already).
	ahead := p.waitingAtOrAboveLocked(t.Class)
	if again {
		ahead = t.Class > 0 && p.waitingAtOrAboveLocked(t.Class-1)
	}
	if !ahead {
		if l := p.grantLocked(t); l != nil && (p.fair.remote == nil || !p.holdBackLocked(l, t, msOf(q.since))) {
			if p.fair.on {
				f := p.flowLocked(t)
				if f.waiting == 0 {
					p.liftLocked(f)
				}
				p.chargeGrantLocked(l, f, t)
			}
			p.unlock()
			if !q.since.IsZero() {
				l.Waited = p.now().Sub(q.since)
			}
			return l, nil, Admitted
		}
	}
	if !again && p.depth >= p.cfg.QueueSize {
		p.unlock()
		return nil, nil, QueueFull
	}
	if q.since.IsZero() {
		q.since = p.now()
	}
	w := &waiter{t: *t, ch: make(chan *Lease, 1), order: q.order, sinceMs: msOf(q.since)}
	switch {
	case p.fair.on:
		w.f = p.flowLocked(t)
		p.enqueueFairLocked(w, again)
		p.depth++
		// A flow with a smaller counter, or whose head fits where the
		// others' do not, may go before those waiting.
		p.grantWaitingLocked()
		p.unlock()
		return nil, w, Admitted
	case again:
		// Back to its place: ahead of every later arrival (several
		// refused at once go back in their order).
		cq := p.queue[t.Class]
		i := slices.IndexFunc(cq, func(x *waiter) bool { return x.order > w.order })
		if i < 0 {
			i = len(cq)
		}
		p.queue[t.Class] = slices.Insert(cq, i, w)
	default:
		p.queue[t.Class] = append(p.queue[t.Class], w)
	}
	p.depth++
	p.unlock()
	return nil, w, Admitted
}

// await waits for w's grant, its client leaving or its time in the queue
// (QueueTimeout, from its first try) running out (expire).
func (p *Pool) await(ctx context.Context, w *waiter, q *queued) (*Lease, Outcome) {
	q.arm(p, w)
	select {
	case l := <-w.ch:
		if l != nil {
			l.Waited = p.now().Sub(q.since)
			return l, Admitted
		}
		if w.timedOut {
			return nil, QueueTimeout
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil, ModelRemoved
		}
		return nil, Draining
	case <-ctx.Done():
	}
	p.mu.Lock()
	if w.granted != nil {
		// Granted as it gave up: the grant goes back, unused.
		l := w.granted
		p.unlock()
		l.release(Abandoned, false)
		return nil, ClientGone
	}
	w.gone = true
	p.removeLocked(w)
	p.unlock()
	return nil, ClientGone
}

func (p *Pool) waitingAtOrAboveLocked(class int) bool {
	for c := 0; c <= class; c++ {
		if len(p.queue[c]) > 0 || p.fair.n[c] > 0 {
			return true
		}
	}
	return false
}

// removeLocked takes w out of the queue; false: it was not in it.
func (p *Pool) removeLocked(w *waiter) bool {
	if w.f != nil {
		if p.dequeueFairLocked(w) {
			p.depth--
			return true
		}
		return false
	}
	q := p.queue[w.t.Class]
	if i := slices.Index(q, w); i >= 0 {
		p.queue[w.t.Class] = slices.Delete(q, i, i+1)
		p.depth--
		return true
	}
	return false
}

// anyReadyLocked: some ready backend t may go to and has not tried yet.
func (p *Pool) anyReadyLocked(t *Ticket) bool {
	for _, s := range p.slots {
		if s.cfg.Ready() && t.allows(s) {
			return true
		}
	}
	return false
}

// tooLargeLocked: t is larger than the budget of every backend it may go to.
func (p *Pool) tooLargeLocked(t *Ticket) bool {
	for _, s := range p.slots {
		if !t.allows(s) {
			continue
		}
		if b := s.budget(); b == 0 || t.Tokens <= b {
			return false
		}
	}
	return true
}

// grantWaitingLocked grants queued requests, highest class first, FIFO
// within a class (or by flows' counters under Tokens: grantFairLocked),
// while backends have room. Under FIFO it stops at the first head that
// does not fit, so a large request is not overtaken forever by small
// ones.
func (p *Pool) grantWaitingLocked() {
	for c := range p.queue {
		if p.fair.on {
			if !p.grantFairLocked(c) {
				return
			}
			continue
		}
		for len(p.queue[c]) > 0 {
			w := p.queue[c][0]
			l := p.grantLocked(&w.t)
			if l == nil {
				return
			}
			p.queue[c] = p.queue[c][1:]
			p.depth--
			w.granted = l
			w.ch <- l
		}
	}
}

// Release returns the lease's capacity and records how the request went.
func (l *Lease) Release(r Result) { l.release(r, true) }

func (l *Lease) release(r Result, count bool) {
	p := l.pool
	p.mu.Lock()
	if l.done {
		p.unlock()
		return
	}
	l.done = true
	h := l.hold
	l.hold = nil
	p.unlock()
	if h != nil {
		// The shared holding goes first, outside the lock, so that the
		// waiters granted below find its room free in the store.
		h.Release()
	}
	p.mu.Lock()
	defer p.unlock()
	s := l.Slot
	s.inFlight--
	s.tokens -= l.tokens
	if l.flow != nil {
		p.settleFairLocked(l, !count)
	}
	if h != nil {
		s.elsewhere = false
		s.wakes++
	}
	now := p.now()
	p.recordResultLocked(s, r, now)
	if count {
		p.observeReleaseLocked(now)
		p.observeHeldLocked(now.Sub(l.at))
	}
	p.grantWaitingLocked()
}
