package admission

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// PoolConfig configures one model's queue and routing.
type PoolConfig struct {
	QueueSize    int
	QueueTimeout time.Duration
	// Parked, when set, counts the requests parked in Acquire waiting for
	// a grant (shared by a gateway's pools: while any wait, its doors run
	// off their handlers' stacks).
	Parked *atomic.Int64
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
	// ScrapeInterval is the interval StaleAfter and GaugesUnavailableAfter
	// were set for: a backend scraped less often (Gauges.Every) has them
	// grown in proportion. 0: they stay as set.
	ScrapeInterval time.Duration
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
	// Fairness is the queue's policy within a priority class: FIFO, or
	// Tokens (flows' virtual token counters, pool_fair.go), with
	// InputWeight and OutputWeight weighing a token of each in a flow's
	// service (0: 1 and 2).
	Fairness                  Fairness
	InputWeight, OutputWeight float64
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
	heldReported bool // an EjectionHeld was reported for this run of failures

	// elsewhere: the shared account refused this slot (other replicas
	// hold its room) and nothing was freed since; wakes counts the frees
	// heard (a refusal older than the last free does not set elsewhere).
	elsewhere bool
	wakes     uint64
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
	// meanHeld: how long a lease is held (grant to release), exponentially
	// weighted; what the queue's capacity drains at once the rate is stale.
	meanHeld  time.Duration
	draining  bool
	closed    bool // Close: the model left the config
	rnd       *rand.Rand
	ring      []ringPoint
	decisions map[string]int
	// fallbacks counts the precise picks that routed as without, by
	// reason (pool_prefix.go).
	fallbacks map[string]int
	// ejected counts the slots with an ejection in force (ejectedUntil
	// set), so that a grant reconciles ejections only when there are some.
	ejected int
	// cands is the grant's scratch list of candidate slots.
	cands []*Slot
	// names and cached: the precise pick's scratch (pool_prefix.go).
	names  []string
	cached []int
	// pending events, delivered to cfg.OnEvent by unlock.
	pending []Event
	// fair is the queue under Tokens fairness (pool_fair.go).
	fair fairQueue
}

// NewPool builds a model's pool.
func NewPool(name string, cfg PoolConfig, slots []SlotConfig, now func() time.Time) *Pool {
	if cfg.Classes < 1 {
		cfg.Classes = 1
	}
	if now == nil {
		now = time.Now
	}
	p := &Pool{name: name, cfg: cfg, now: now, queue: make([][]*waiter, cfg.Classes), rnd: rand.New(rand.NewPCG(1, 2)), decisions: map[string]int{}, fallbacks: map[string]int{}}
	p.fair.init(cfg.Classes)
	p.setFairnessLocked(cfg.Fairness, cfg.InputWeight, cfg.OutputWeight)
	p.setSlotsLocked(slots)
	return p
}

// SetSlots makes slots the pool's backends, by name: a slot already in
// the pool keeps its state (in-flight requests and tokens, gauges,
// failures, ejection) and takes the new limits; a new one starts empty;
// one not listed is removed, and the leases granted on it still release.
// Waiting requests are granted again where they fit, since capacity may
// have come.
func (p *Pool) SetSlots(slots []SlotConfig) {
	p.mu.Lock()
	p.setSlotsLocked(slots)
	p.grantWaitingLocked()
	p.unlock()
}

func (p *Pool) setSlotsLocked(slots []SlotConfig) {
	old := make(map[string]*Slot, len(p.slots))
	for _, s := range p.slots {
		old[s.Name] = s
	}
	next := make([]*Slot, 0, len(slots))
	for _, sc := range slots {
		s := old[sc.Name]
		if s == nil {
			s = &Slot{Name: sc.Name}
		}
		delete(old, sc.Name)
		s.cfg = sc
		next = append(next, s)
	}
	for _, s := range old {
		s.removed = true
	}
	p.slots = next
	p.ejected = 0
	for _, s := range next {
		if !s.ejectedUntil.IsZero() {
			p.ejected++
		}
	}
	p.buildRingLocked()
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
// reload): QueueSize, QueueTimeout, saturation levels, staleness, ejection,
// affinity and fairness (the requests waiting move to the new policy's
// queue in their order). Classes and OnEvent stay as built. Requests already waiting
// keep the queue timeout they started with; a smaller QueueSize refuses
// new requests until the queue is below it.
func (p *Pool) SetConfig(cfg PoolConfig) {
	p.mu.Lock()
	cfg.Classes, cfg.OnEvent = p.cfg.Classes, p.cfg.OnEvent
	p.cfg = cfg
	p.setFairnessLocked(cfg.Fairness, cfg.InputWeight, cfg.OutputWeight)
	p.reconcileLocked(p.now())
	p.grantWaitingLocked()
	p.unlock()
}

// Kick grants the waiting requests again: call when a backend became
// ready, its gauges changed or an ejection expired.
func (p *Pool) Kick() {
	p.mu.Lock()
	p.reconcileLocked(p.now())
	p.grantWaitingLocked()
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
		for len(p.fair.active[c]) > 0 {
			f := p.fair.active[c][0]
			for _, w := range slices.Clone(f.queues[c]) {
				p.dequeueFairLocked(w)
				w.ch <- nil
			}
		}
	}
	p.depth = 0
}
