package admission

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
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

// PoolConfig configures one model's queue and routing.
type PoolConfig struct {
	QueueSize    int
	QueueTimeout time.Duration
	// Classes is the number of priority classes; class 0 goes first.
	Classes int
	// SaturatedWaiting and SaturatedKV: a backend whose scraped
	// vllm:num_requests_waiting or kv_cache_usage_perc reaches these gets
	// no new requests until it recovers. Zero disables the check.
	SaturatedWaiting float64
	SaturatedKV      float64
	// StaleAfter: scraped gauges older than this count as saturated (a
	// scrape missed under load must not let a burst through on old
	// numbers), unless they are unavailable.
	StaleAfter time.Duration
	// GaugesUnavailableAfter: scrapes failing for this long, whatever the
	// error, make a backend's gauges unavailable (0: only by
	// UnreadableScrapes answers in a row, or when none ever succeeded).
	// Unavailable gauges are not checked at all: the backend is admitted
	// on its in-flight and token-budget limits alone, rather than held
	// back for ever by numbers that will not come.
	GaugesUnavailableAfter time.Duration
	// EjectAfter consecutive 5xx answers or connection failures eject a
	// backend for EjectFor.
	EjectAfter int
	EjectFor   time.Duration
	// MaxEjectionPercent bounds ejection, as Envoy's max_ejection_percent:
	// at most this share of the model's ready backends are ejected at once,
	// rounded down but at least one; and never the last ready backend left
	// in rotation, so a model is never emptied by ejection (a client able
	// to provoke 5xx must not be able to switch a model off).
	MaxEjectionPercent int
	// OnEvent, when set, is told of ejections and their ends, ejections
	// held back by the bound, and changes of a backend's gauges state. It
	// is called after the pool's lock is released.
	OnEvent func(Event)
	// AffinityLoad bounds prefix affinity: a backend is skipped when its
	// outstanding tokens exceed AffinityLoad times the average (e.g. 1.25).
	AffinityLoad float64
	// Shared, when set, is the account of every replica's holdings on the
	// backends: a slot picked here is granted only once Shared confirms
	// it (see shared.go). A slot Shared refused is held elsewhere: it is
	// not picked again until SharedFreed or SharedRecheck.
	Shared Shared
	// RejectWhenStoreDown: while Shared cannot be reached, requests get
	// StoreDown; otherwise (on_store_error local) they are admitted on this
	// replica's share of each limit, the limit divided by the live
	// replicas Shared last counted (at least 1).
	RejectWhenStoreDown bool
}

// SlotConfig describes one backend to the pool.
type SlotConfig struct {
	// Name identifies the backend (its host:port): slots are added,
	// updated and removed by name (SetSlots), and tickets, events and
	// stats name slots by it.
	Name string
	// Ready reports the fleet's view (warmed up and healthy).
	Ready func() bool
	// MaxInFlight caps concurrent requests (0: no cap).
	MaxInFlight int
	// KVTokens is the token budget from the config, used when the backend
	// does not export vllm:cache_config_info (0: no budget).
	KVTokens int
}

// EventKind is what happened to a backend in the pool.
type EventKind int

const (
	// Ejected: EjectAfter failures in a row; no requests until Until.
	Ejected EventKind = iota
	// EjectionEnded: back in rotation (Reason says why: eject_for elapsed,
	// or no other ready backend was left in rotation).
	EjectionEnded
	// EjectionHeld: EjectAfter failures in a row, but ejecting it would
	// exceed MaxEjectionPercent or leave no ready backend in rotation; it
	// keeps its traffic. Reported once per run of failures.
	EjectionHeld
	// GaugesChanged: the backend's gauges state changed (Gauges, Reason).
	GaugesChanged
)

var eventNames = [...]string{"ejected", "ejection_ended", "ejection_held", "gauges_changed"}

func (k EventKind) String() string {
	if k >= 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is a change in a backend's standing in the pool.
type Event struct {
	Kind EventKind
	// Slot is the backend's name (SlotConfig.Name).
	Slot string
	// Failures is the run of consecutive failures (Ejected, EjectionHeld).
	Failures int
	// Until is the end of an ejection (Ejected).
	Until time.Time
	// Ejected and Ready count the model's ejected and ready backends after
	// the event.
	Ejected, Ready int
	// Gauges is the new gauges state (GaugesChanged).
	Gauges GaugesState
	// Reason explains EjectionEnded and GaugesChanged.
	Reason string
}

// GaugesState is how far a backend's scraped gauges can be trusted.
type GaugesState int

const (
	GaugesUnknown     GaugesState = iota // not scraped yet: not checked
	GaugesFresh                          // checked against the saturation levels
	GaugesStale                          // older than StaleAfter: counted as saturated
	GaugesUnavailable                    // cannot be read (see GaugesUnavailableAfter): not checked
	numGaugesStates
)

// GaugesStates lists every GaugesState, for metric labels.
func GaugesStates() []GaugesState {
	return []GaugesState{GaugesUnknown, GaugesFresh, GaugesStale, GaugesUnavailable}
}

var gaugesStateNames = [...]string{"unknown", "fresh", "stale", "unavailable"}

func (g GaugesState) String() string {
	if g >= 0 && g < numGaugesStates {
		return gaugesStateNames[g]
	}
	return fmt.Sprintf("GaugesState(%d)", int(g))
}

// UnreadableScrapes answers in a row that cannot be read (an error status,
// not vLLM's exposition, too large) make a backend's gauges unavailable at
// once: waiting does not mend them.
const UnreadableScrapes = 3

// Gauges are a backend's scraped vLLM gauges.
type Gauges struct {
	Waiting, Running, KVUsage float64
	// KVCapacity is num_gpu_blocks x block_size from cache_config_info.
	KVCapacity int
	At         time.Time
}

// Slot is one backend's capacity as the pool accounts it.
type Slot struct {
	Name string
	cfg  SlotConfig
	// removed: SetSlots took it out of the pool; leases granted before
	// still release here, and say nothing more about the backend.
	removed bool

	inFlight int
	tokens   int // sum of the in-flight requests' token reservations
	gauges   Gauges
	scraped  bool // gauges were read at least once

	// Failed scrapes: the current run, of which the last unreadable ones
	// in a row, since when; the total and the last error.
	scrapeFails, unreadable int
	failingSince            time.Time
	scrapeErrors            int
	lastScrapeErr           string
	gstate                  GaugesState // as last reported

	fails        int
	ejectedUntil time.Time // zero when not ejected
	ejections    int
	held         bool // an EjectionHeld was reported for this run of failures

	// elsewhere: the shared account refused this slot (other replicas
	// hold its room) and nothing was freed since; wakes counts the frees
	// heard (a refusal older than the last free does not set elsewhere).
	elsewhere bool
	wakes     uint64
}

// SlotStats is a snapshot of a slot.
type SlotStats struct {
	Name           string
	InFlight       int
	Tokens, Budget int
	Gauges         Gauges
	Ejected        bool
	EjectedUntil   time.Time
	Ejections      int
	// Failures is the current run of consecutive failures.
	Failures int
	// GaugesState is how far its gauges can be trusted; ScrapeErrors
	// counts failed scrapes, LastScrapeError is the latest.
	GaugesState     GaugesState
	ScrapeErrors    int
	LastScrapeError string
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
	// Exclude names slots already tried (connection failures).
	Exclude []string
	// Only, when non-nil, names the subset of slots the request may go to
	// at all (the backends that have the LoRA adapter it names loaded);
	// nil: every slot. The pool grants, counts ready backends and judges
	// the request's size among those alone.
	Only []string
}

// allows reports whether t may go to slot s.
func (t *Ticket) allows(s *Slot) bool {
	return !slices.Contains(t.Exclude, s.Name) && (t.Only == nil || slices.Contains(t.Only, s.Name))
}

// Lease is a granted slot. Release it exactly once when the request ends.
type Lease struct {
	Slot   *Slot
	Waited time.Duration
	Policy string // "p2c", "affinity" or "only"
	pool   *Pool
	tokens int
	done   bool
	// The slot's limits and wake count when it was picked, and the shared
	// account's hold once confirmed.
	maxIn, budget int
	wakes         uint64
	hold          Hold
	at            time.Time // granted
}

// Result is how a dispatched request went, for outlier ejection.
type Result int

const (
	Succeeded     Result = iota
	ServerError          // the backend answered 5xx
	ConnectFailed        // the backend could not be reached
	Abandoned            // the client left or the gateway ended it: says nothing about the backend
)

type waiter struct {
	t       Ticket
	ch      chan *Lease // buffered 1
	order   uint64      // arrival order, kept over tries
	since   time.Time
	granted *Lease
	gone    bool
}

// Pool is one model's admission queue in front of its backends. Requests
// are granted a backend when it has room in all of: in-flight requests, its
// token budget, and its scraped saturation; otherwise they wait FIFO within
// their priority class, bounded in number and time. Safe for concurrent use.
type Pool struct {
	name  string
	cfg   PoolConfig
	now   func() time.Time
	mu    sync.Mutex
	slots []*Slot
	queue [][]*waiter
	depth int
	// arrivals numbers the requests, for their order in the queue.
	arrivals uint64
	// drain rate: releases per second, exponentially weighted.
	rate    float64
	lastRel time.Time
	// held: how long a lease is held (grant to release), exponentially
	// weighted; what the queue's capacity drains at once the rate is stale.
	held      time.Duration
	draining  bool
	closed    bool // Close: the model left the config
	rnd       *rand.Rand
	ring      []ringPoint
	decisions map[string]int
	// pending events, delivered to cfg.OnEvent by unlock.
	pending []Event
}

type ringPoint struct {
	hash uint64
	slot *Slot
}

// NewPool builds a model's pool.
func NewPool(name string, cfg PoolConfig, slots []SlotConfig, now func() time.Time) *Pool {
	if cfg.Classes < 1 {
		cfg.Classes = 1
	}
	if now == nil {
		now = time.Now
	}
	p := &Pool{name: name, cfg: cfg, now: now, queue: make([][]*waiter, cfg.Classes), rnd: rand.New(rand.NewPCG(1, 2)), decisions: map[string]int{}}
	p.setSlotsLocked(slots)
	return p
}

// SetSlots makes slots the pool's backends, by name: a slot already in
// the pool keeps its state (in-flight requests and tokens, gauges,
// failures, ejection) and takes the new limits; a new one starts empty;
// one not listed is removed, and the leases granted on it still release.
// Waiting requests are dispatched again, since capacity may have come.
func (p *Pool) SetSlots(slots []SlotConfig) {
	p.mu.Lock()
	p.setSlotsLocked(slots)
	p.dispatchLocked()
	p.unlock()
}

func (p *Pool) setSlotsLocked(slots []SlotConfig) {
	old := make(map[string]*Slot, len(p.slots))
	for _, s := range p.slots {
		old[s.Name] = s
	}
	next := make([]*Slot, 0, len(slots))
	p.ring = p.ring[:0]
	for _, sc := range slots {
		s := old[sc.Name]
		if s == nil {
			s = &Slot{Name: sc.Name}
		}
		delete(old, sc.Name)
		s.cfg = sc
		next = append(next, s)
		for v := range 64 { // virtual nodes for the affinity ring
			h := fnv.New64a()
			fmt.Fprintf(h, "%s#%d", sc.Name, v)
			p.ring = append(p.ring, ringPoint{h.Sum64(), s})
		}
	}
	for _, s := range old {
		s.removed = true
	}
	p.slots = next
	sort.Slice(p.ring, func(a, b int) bool { return p.ring[a].hash < p.ring[b].hash })
}

// Idle reports whether no lease is out on the slot named name (or there is
// no such slot): a backend leaving the model may be forgotten.
func (p *Pool) Idle(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slotLocked(name)
	return s == nil || s.inFlight == 0
}

func (p *Pool) slotLocked(name string) *Slot {
	for _, s := range p.slots {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// SetConfig changes the pool's limits and routing settings (a config
// reload): QueueSize, QueueTimeout, saturation levels, staleness, ejection
// and affinity. Classes and OnEvent stay as built. Requests already waiting
// keep the queue timeout they started with; a smaller QueueSize refuses
// new requests until the queue is below it.
func (p *Pool) SetConfig(cfg PoolConfig) {
	p.mu.Lock()
	cfg.Classes, cfg.OnEvent = p.cfg.Classes, p.cfg.OnEvent
	p.cfg = cfg
	p.reconcileLocked(p.now())
	p.dispatchLocked()
	p.unlock()
}

// unlock releases the lock, then delivers the events raised under it.
func (p *Pool) unlock() {
	ev := p.pending
	p.pending = nil
	p.mu.Unlock()
	if p.cfg.OnEvent != nil {
		for _, e := range ev {
			p.cfg.OnEvent(e)
		}
	}
}

func (p *Pool) emit(e Event) {
	if p.cfg.OnEvent == nil {
		return
	}
	e.Ready, e.Ejected = p.countLocked()
	p.pending = append(p.pending, e)
}

// countLocked counts the ready backends and those of them ejected.
func (p *Pool) countLocked() (ready, ejected int) {
	for _, s := range p.slots {
		if s.cfg.Ready() {
			ready++
			if !s.ejectedUntil.IsZero() {
				ejected++
			}
		}
	}
	return ready, ejected
}

// reconcileLocked ends ejections whose time is up, and those that leave
// the model without a ready backend in rotation (the backends still in
// rotation may have turned unready since): ejection moves traffic to a
// backend's peers, and without peers there is nowhere to move it.
func (p *Pool) reconcileLocked(now time.Time) {
	for _, s := range p.slots {
		if !s.ejectedUntil.IsZero() && !now.Before(s.ejectedUntil) {
			s.ejectedUntil = time.Time{}
			p.emit(Event{Kind: EjectionEnded, Slot: s.Name, Reason: "eject_for elapsed"})
		}
	}
	if ready, ejected := p.countLocked(); ejected > 0 && ejected == ready {
		for _, s := range p.slots {
			if !s.ejectedUntil.IsZero() && s.cfg.Ready() {
				s.ejectedUntil = time.Time{}
				p.emit(Event{Kind: EjectionEnded, Slot: s.Name, Reason: "no other ready backend left in rotation"})
			}
		}
	}
}

// mayEjectLocked applies the ejection bound to one more ejection.
func (p *Pool) mayEjectLocked() bool {
	ready, ejected := p.countLocked()
	allowed := max(1, p.cfg.MaxEjectionPercent*ready/100)
	allowed = min(allowed, ready-1)
	return ejected+1 <= allowed
}

// Acquire waits for a backend slot for t, or returns why not. The context
// is the client's: when it ends, the request leaves the queue at once and
// is never dispatched. With a Shared account, the slot picked here is
// confirmed there (outside the lock); a slot held elsewhere sends the
// request back to the head of its class, to wait for a free.
func (p *Pool) Acquire(ctx context.Context, t Ticket) (*Lease, Outcome) {
	t.Class = min(max(t.Class, 0), p.cfg.Classes-1)
	var q queued
	defer q.stop()
	for again := false; ; again = true {
		l, o := p.acquireLocal(ctx, t, &q, again)
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

// queued is a request's time in the queue, over its tries.
type queued struct {
	since time.Time
	order uint64
	timer *time.Timer
}

func (q *queued) stop() {
	if q.timer != nil {
		q.timer.Stop()
	}
}

// acquireLocal is one try of Acquire on this pool's own account. again: a
// try after the shared account refused the last grant; the request keeps
// its place (the head of its class) and is not counted against the queue
// size again.
func (p *Pool) acquireLocal(ctx context.Context, t Ticket, q *queued, again bool) (*Lease, Outcome) {
	p.mu.Lock()
	if p.closed {
		p.unlock()
		return nil, ModelRemoved
	}
	if q.order == 0 {
		p.arrivals++
		q.order = p.arrivals
	}
	if p.draining {
		p.unlock()
		return nil, Draining
	}
	if !p.anyReadyLocked(&t) {
		p.unlock()
		return nil, NoBackend
	}
	if t.Exact && p.tooLargeLocked(&t) {
		p.unlock()
		return nil, OverBudget
	}
	// Only when nobody of the same or a higher class waits, so FIFO holds
	// (a request tried again was ahead of its class already).
	ahead := p.waitingAtOrAbove(t.Class)
	if again {
		ahead = t.Class > 0 && p.waitingAtOrAbove(t.Class-1)
	}
	if !ahead {
		if l := p.grantLocked(t); l != nil {
			p.unlock()
			if !q.since.IsZero() {
				l.Waited = p.now().Sub(q.since)
			}
			return l, Admitted
		}
	}
	if !again && p.depth >= p.cfg.QueueSize {
		p.unlock()
		return nil, QueueFull
	}
	if q.since.IsZero() {
		q.since = p.now()
	}
	w := &waiter{t: t, ch: make(chan *Lease, 1), since: q.since, order: q.order}
	if again {
		// Back to its place: ahead of every later arrival (several
		// refused at once go back in their order).
		cq := p.queue[t.Class]
		i := slices.IndexFunc(cq, func(x *waiter) bool { return x.order > w.order })
		if i < 0 {
			i = len(cq)
		}
		p.queue[t.Class] = slices.Insert(cq, i, w)
	} else {
		p.queue[t.Class] = append(p.queue[t.Class], w)
	}
	p.depth++
	p.unlock()

	if q.timer == nil {
		q.timer = time.NewTimer(p.cfg.QueueTimeout)
	}
	var why Outcome
	select {
	case l := <-w.ch:
		if l == nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return nil, ModelRemoved
			}
			return nil, Draining
		}
		l.Waited = p.now().Sub(w.since)
		return l, Admitted
	case <-ctx.Done():
		why = ClientGone
	case <-q.timer.C:
		why = QueueTimeout
	}
	p.mu.Lock()
	if w.granted != nil {
		// Granted as it gave up: the grant goes back, unused.
		l := w.granted
		p.unlock()
		l.release(Abandoned, false)
		return nil, why
	}
	w.gone = true
	p.removeLocked(w)
	p.unlock()
	return nil, why
}

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
	p.dispatchLocked()
	p.unlock()
}

// SharedRecheck forgets every slot held elsewhere and re-runs dispatch: the
// slow safety net under SharedFreed (a replica that died frees its
// holdings when its lease ends, which nobody announces), and what follows
// a change in the store's standing (up or down, the live replica count).
func (p *Pool) SharedRecheck() {
	p.mu.Lock()
	for _, s := range p.slots {
		s.elsewhere = false
		s.wakes++
	}
	p.dispatchLocked()
	p.unlock()
}

func (p *Pool) waitingAtOrAbove(class int) bool {
	for c := 0; c <= class; c++ {
		if len(p.queue[c]) > 0 {
			return true
		}
	}
	return false
}

func (p *Pool) removeLocked(w *waiter) {
	q := p.queue[w.t.Class]
	if i := slices.Index(q, w); i >= 0 {
		p.queue[w.t.Class] = slices.Delete(q, i, i+1)
		p.depth--
	}
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

// budget is the slot's token budget: scraped capacity, else config, else 0.
func (s *Slot) budget() int {
	if s.gauges.KVCapacity > 0 {
		return s.gauges.KVCapacity
	}
	return s.cfg.KVTokens
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

// eligible: ready, not ejected, not saturated by its own gauges.
func (p *Pool) eligible(s *Slot, now time.Time) bool {
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

// gaugesLocked is the slot's gauges state:
//
//	unavailable  scrapes are failing and none ever succeeded, or the last
//	             UnreadableScrapes were answered with an unreadable page, or
//	             they have failed for GaugesUnavailableAfter
//	unknown      never scraped
//	stale        the last success is older than StaleAfter
//	fresh        otherwise
func (p *Pool) gaugesLocked(s *Slot, now time.Time) GaugesState {
	switch {
	case s.scrapeFails > 0 && (!s.scraped || s.unreadable >= UnreadableScrapes ||
		(p.cfg.GaugesUnavailableAfter > 0 && now.Sub(s.failingSince) >= p.cfg.GaugesUnavailableAfter)):
		return GaugesUnavailable
	case !s.scraped:
		return GaugesUnknown
	case p.staleLocked(s, now):
		return GaugesStale
	}
	return GaugesFresh
}

// noteGaugesLocked reports a slot entering or leaving GaugesUnavailable.
func (p *Pool) noteGaugesLocked(s *Slot, now time.Time, reason string) {
	st := p.gaugesLocked(s, now)
	was := s.gstate
	s.gstate = st
	if (st == GaugesUnavailable) != (was == GaugesUnavailable) {
		p.emit(Event{Kind: GaugesChanged, Slot: s.Name, Gauges: st, Reason: reason})
	}
}

// staleLocked: the slot's gauges are too old to trust (see eligible).
func (p *Pool) staleLocked(s *Slot, now time.Time) bool {
	return s.scraped && p.cfg.StaleAfter > 0 && now.Sub(s.gauges.At) > p.cfg.StaleAfter
}

func (p *Pool) fits(s *Slot, tokens int) bool {
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
func (p *Pool) grantLocked(t Ticket) *Lease {
	now := p.now()
	p.reconcileLocked(now)
	var cands []*Slot
	for _, s := range p.slots {
		if t.allows(s) && p.eligible(s, now) && p.fits(s, t.Tokens) {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	var pick *Slot
	policy := "only"
	if t.Affinity != 0 && len(cands) > 1 {
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
	pick.inFlight++
	pick.tokens += t.Tokens
	p.decisions[policy]++
	return &Lease{Slot: pick, Policy: policy, pool: p, tokens: t.Tokens, maxIn: pick.cfg.MaxInFlight, budget: pick.budget(), wakes: pick.wakes, at: p.now()}
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

// dispatchLocked grants queued requests, highest class first, FIFO within a
// class, while backends have room. It stops at the first head that does not
// fit, so a large request is not overtaken forever by small ones.
func (p *Pool) dispatchLocked() {
	for c := range p.queue {
		for len(p.queue[c]) > 0 {
			w := p.queue[c][0]
			l := p.grantLocked(w.t)
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
		// waiters dispatched below find its room free in the store.
		h.Release()
	}
	p.mu.Lock()
	defer p.unlock()
	s := l.Slot
	s.inFlight--
	s.tokens -= l.tokens
	if h != nil {
		s.elsewhere = false
		s.wakes++
	}
	now := p.now()
	switch {
	case s.removed:
		// The backend left the pool: its answer says nothing any more.
	case r == Succeeded:
		s.fails, s.held = 0, false
	case r == ServerError || r == ConnectFailed:
		s.fails++
		if p.cfg.EjectAfter > 0 && s.fails >= p.cfg.EjectAfter && s.ejectedUntil.IsZero() {
			p.reconcileLocked(now)
			switch {
			case p.mayEjectLocked():
				s.ejectedUntil = now.Add(p.cfg.EjectFor)
				s.ejections++
				p.emit(Event{Kind: Ejected, Slot: s.Name, Failures: s.fails, Until: s.ejectedUntil})
				s.fails, s.held = 0, false
				// Dispatch when the cool-off ends, so that waiters do not
				// depend on another event to be served.
				time.AfterFunc(p.cfg.EjectFor, p.Kick)
			case !s.held:
				s.held = true
				p.emit(Event{Kind: EjectionHeld, Slot: s.Name, Failures: s.fails})
			}
		}
	}
	if count {
		p.observeRelease(now)
		p.observeHeld(now.Sub(l.at))
	}
	p.dispatchLocked()
}

// observeRelease updates the drain rate: an exponentially weighted mean of
// the gaps between releases, with a horizon of about 20 releases.
func (p *Pool) observeRelease(now time.Time) {
	if !p.lastRel.IsZero() {
		gap := now.Sub(p.lastRel).Seconds()
		if gap > 0 {
			inst := 1 / gap
			if p.rate == 0 {
				p.rate = inst
			} else {
				p.rate += (inst - p.rate) * 0.05
			}
		}
	}
	p.lastRel = now
}

// observeHeld updates the mean time a lease is held, with a horizon of
// about 20 releases.
func (p *Pool) observeHeld(d time.Duration) {
	if d <= 0 {
		return
	}
	if p.held == 0 {
		p.held = d
		return
	}
	p.held += time.Duration(float64(d-p.held) * 0.05)
}

// Kick re-runs dispatch: call when a backend became ready, its gauges
// changed or an ejection expired.
func (p *Pool) Kick() {
	p.mu.Lock()
	p.reconcileLocked(p.now())
	p.dispatchLocked()
	p.unlock()
}

// SetGauges records a backend's scraped gauges and re-runs dispatch. A
// name that is not one of the pool's slots is ignored.
func (p *Pool) SetGauges(name string, g Gauges) {
	p.mu.Lock()
	s := p.slotLocked(name)
	if s == nil {
		p.unlock()
		return
	}
	s.gauges, s.scraped = g, true
	s.scrapeFails, s.unreadable, s.failingSince = 0, 0, time.Time{}
	p.noteGaugesLocked(s, p.now(), "scraped again")
	p.dispatchLocked()
	p.unlock()
}

// ScrapeFailed records a failed scrape of a backend's /metrics. answered:
// the backend answered with a page that cannot be read (an error status,
// not vLLM's exposition, too large), as opposed to no answer in time;
// reason is the error, for the log. Gauges that turn unavailable free the
// backend for work the queue was holding back.
func (p *Pool) ScrapeFailed(name string, answered bool, reason string) {
	p.mu.Lock()
	s := p.slotLocked(name)
	if s == nil {
		p.unlock()
		return
	}
	now := p.now()
	if s.scrapeFails == 0 {
		s.failingSince = now
	}
	s.scrapeFails++
	s.scrapeErrors++
	s.lastScrapeErr = reason
	if answered {
		s.unreadable++
	} else {
		s.unreadable = 0
	}
	p.noteGaugesLocked(s, now, reason)
	p.dispatchLocked()
	p.unlock()
}

// Drain refuses every waiting request with Draining and all later ones.
func (p *Pool) Drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draining = true
	p.flushLocked()
}

// Close refuses every waiting request and all later ones with
// ModelRemoved: a config reload removed the model. Leases out still
// release.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.flushLocked()
}

// Flush refuses every request waiting now with Draining; later ones are
// still admitted (the gateway serves during its drain delay).
func (p *Pool) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
}

func (p *Pool) flushLocked() {
	for c := range p.queue {
		for _, w := range p.queue[c] {
			w.ch <- nil
		}
		p.queue[c] = nil
	}
	p.depth = 0
}

// Wait is the queue's advice to a rejected or waiting client.
type Wait struct {
	Depth int
	// Expected is the time the queue needs to drain Depth requests, never
	// over QueueTimeout (a request waits no longer than that anyway): at
	// the observed release rate while releases are recent, else from
	// capacity (the requests running and how long a request holds its
	// backend); QueueTimeout when neither is known yet.
	Expected time.Duration
	// RatePerSecond is the observed release rate.
	RatePerSecond float64
}

// Advice returns the queue's depth and expected wait, for Retry-After.
//
// The release rate is a mean of the gaps between releases, so it is
// current only while releases keep coming: after an idle spell the first
// burst would otherwise be advised from a gap of minutes. A rate whose last
// release is older than twice its mean gap is stale, and the wait comes
// from capacity instead: depth+1 requests, each holding a backend for the
// mean held time, drained by as many at once as run now (at least one).
func (p *Pool) Advice() Wait {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := Wait{Depth: p.depth, RatePerSecond: p.rate}
	rate := p.rate
	fresh := rate > 0 && !p.lastRel.IsZero() && p.now().Sub(p.lastRel).Seconds() <= 2/rate
	switch {
	case fresh:
		w.Expected = time.Duration(float64(p.depth+1) / rate * float64(time.Second))
	case p.held > 0:
		running := 0
		for _, s := range p.slots {
			running += s.inFlight
		}
		w.Expected = time.Duration(float64(p.depth+1) * float64(p.held) / float64(max(running, 1)))
	default:
		w.Expected = p.cfg.QueueTimeout
	}
	if p.cfg.QueueTimeout > 0 {
		w.Expected = min(w.Expected, p.cfg.QueueTimeout)
	}
	return w
}

// Blockage says why a model's backends take no more work: each backend
// counted once, by the first reason that holds it back.
type Blockage struct {
	Backends  int
	NotReady  int // not ready (loading, warming, unhealthy)
	Ejected   int // ejected after consecutive failures
	Saturated int // its scraped waiting queue or KV usage at the configured level
	Stale     int // its gauges were not scraped recently (counted as saturated)
	Busy      int // at max_in_flight or its token budget
	Elsewhere int // its room is held by other replicas (the shared store)
	Free      int // has room (the queue's head may still not fit)
}

// String reads like "of 2 backends: 1 ejected after consecutive failures,
// 1 busy (at max_in_flight or its token budget)".
func (b Blockage) String() string {
	if b.Ejected > 0 && b.Ejected == b.Backends {
		return fmt.Sprintf("all %d backends ejected after consecutive failures", b.Backends)
	}
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{b.NotReady, "not ready"},
		{b.Ejected, "ejected after consecutive failures"},
		{b.Saturated, "saturated (vLLM's waiting queue or KV cache usage at the configured level)"},
		{b.Stale, "with stale gauges (no recent /metrics scrape; counted as saturated)"},
		{b.Busy, "busy (at max_in_flight or its token budget)"},
		{b.Elsewhere, "busy with other replicas' requests (at max_in_flight or its token budget in the shared store)"},
		{b.Free, "with room for a smaller request"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	noun := "backends"
	if b.Backends == 1 {
		noun = "backend"
	}
	return fmt.Sprintf("of %d %s: %s", b.Backends, noun, strings.Join(parts, ", "))
}

// Blocked classifies the backends for a request like t that could not be
// placed, for the message of a queue timeout.
func (p *Pool) Blocked(t Ticket) Blockage {
	p.mu.Lock()
	defer p.unlock()
	now := p.now()
	p.reconcileLocked(now)
	b := Blockage{}
	for _, s := range p.slots {
		if t.Only != nil && !slices.Contains(t.Only, s.Name) {
			continue // not one of its backends at all
		}
		b.Backends++
		switch {
		case !s.cfg.Ready():
			b.NotReady++
		case !s.ejectedUntil.IsZero():
			b.Ejected++
		case p.gaugesLocked(s, now) == GaugesStale:
			b.Stale++
		case !p.eligible(s, now):
			b.Saturated++
		case s.elsewhere:
			b.Elsewhere++
		case !p.fits(s, t.Tokens):
			b.Busy++
		default:
			b.Free++
		}
	}
	return b
}

// PoolStats is a snapshot for metrics.
type PoolStats struct {
	Depth     []int // per class
	Slots     []SlotStats
	Decisions map[string]int
}

// Ejected names the slots ejected as outliers right now, for work that
// bypasses the queue but should still avoid them. It follows the queue's
// rule: an ejection that would leave no ready backend in rotation has
// ended.
func (p *Pool) Ejected() []string {
	p.mu.Lock()
	defer p.unlock()
	p.reconcileLocked(p.now())
	var out []string
	for _, s := range p.slots {
		if !s.ejectedUntil.IsZero() {
			out = append(out, s.Name)
		}
	}
	return out
}

// Stats returns a snapshot.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.unlock()
	st := PoolStats{Depth: make([]int, len(p.queue)), Decisions: map[string]int{}}
	for c, q := range p.queue {
		st.Depth[c] = len(q)
	}
	now := p.now()
	p.reconcileLocked(now)
	for _, s := range p.slots {
		st.Slots = append(st.Slots, SlotStats{Name: s.Name, InFlight: s.inFlight, Tokens: s.tokens, Budget: s.budget(),
			Gauges: s.gauges, Ejected: !s.ejectedUntil.IsZero(), EjectedUntil: s.ejectedUntil, Ejections: s.ejections, Failures: s.fails,
			GaugesState: p.gaugesLocked(s, now), ScrapeErrors: s.scrapeErrors, LastScrapeError: s.lastScrapeErr})
	}
	for k, v := range p.decisions {
		st.Decisions[k] = v
	}
	return st
}
