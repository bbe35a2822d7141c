package triage

import (
	"strings"
	"sync"
	"time"
)

// This file holds the Engine: its series and models, their rings of
// buckets, and the write methods (Observe, Sample, GatewayQueue, Warmup).

// series is one model+backend pair: its window buckets, its baselines and
// its latest state.
type series struct {
	name    string // backend name ("" = requests that reached no backend)
	model   *model
	head    int64 // newest bucket number the ring was advanced to
	buckets [numBuckets]bucket
	base    baseline

	warm               bool
	warmTTFT, warmTPOT time.Duration
	hasPrev            bool
	prevPreempt        float64
	prevTime           time.Time
	lastSample         time.Time
	ready, ejected     bool
	state, stateReason string
	gaugesState        string
	compat             *Compatibility
	stateSince         time.Time
	sampled            bool
}

type model struct {
	name     string
	head     int64
	buckets  [numBuckets]mbucket
	backends map[string]*series
	order    []*series
}

// Engine aggregates observations and samples over a sliding window and
// classifies them. It is safe for concurrent use. Memory is bounded by the
// caps in Config, whatever the traffic.
type Engine struct {
	mu     sync.Mutex
	cfg    Config
	now    func() time.Time
	width  time.Duration
	models map[string]*model
	order  []*model
	nser   int

	reasons     map[string]int
	reasonNames []string

	dropped uint64 // observations or samples older than the window
}

// New returns an Engine. now is the clock (nil: time.Now); all expiry is
// driven by it, there are no goroutines or timers.
func New(cfg Config, now func() time.Time) *Engine {
	if now == nil {
		now = time.Now
	}
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg:     cfg,
		now:     now,
		width:   cfg.Window / numBuckets,
		models:  make(map[string]*model),
		reasons: make(map[string]int),
	}
	return e
}

// Config returns the effective configuration (defaults filled in).
func (e *Engine) Config() Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

// SetThresholds puts new rule thresholds in force (a config reload); the
// window, the baseline and the caps stay as the Engine was built with.
func (e *Engine) SetThresholds(th Thresholds) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg.Thresholds = th
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func (e *Engine) bucketIdx(t time.Time) int64 {
	return floorDiv(t.UnixNano(), int64(e.width))
}

// place returns the bucket number for an event at t, or false when t is
// older than the window. Events from the future are placed in the current
// bucket.
func (e *Engine) place(t time.Time, nowIdx int64) (int64, bool) {
	idx := e.bucketIdx(t)
	if idx > nowIdx {
		idx = nowIdx
	}
	if idx <= nowIdx-numBuckets {
		return 0, false
	}
	return idx, true
}

func (e *Engine) model(name string) *model {
	if m, ok := e.models[name]; ok {
		return m
	}
	if len(e.models) >= e.cfg.MaxModels {
		name = OverflowLabel
		if m, ok := e.models[name]; ok {
			return m
		}
	}
	name = strings.Clone(name) // do not pin the caller's buffer
	m := &model{name: name, backends: make(map[string]*series)}
	e.models[name] = m
	e.order = append(e.order, m)
	return m
}

func (e *Engine) series(m *model, backend string) *series {
	if s, ok := m.backends[backend]; ok {
		return s
	}
	if backend != "" && (len(m.backends) >= e.cfg.MaxBackends || e.nser >= e.cfg.MaxSeries) {
		backend = OverflowLabel
		if s, ok := m.backends[backend]; ok {
			return s
		}
	}
	backend = strings.Clone(backend)
	s := &series{name: backend, model: m}
	m.backends[backend] = s
	m.order = append(m.order, s)
	if backend != "" && backend != OverflowLabel {
		e.nser++
	}
	return s
}

func (e *Engine) reasonSlot(r string) int {
	if i, ok := e.reasons[r]; ok {
		return i
	}
	if len(e.reasonNames) >= e.cfg.MaxReasons {
		return maxReasonSlots - 1
	}
	i := len(e.reasonNames)
	r = strings.Clone(r)
	e.reasons[r] = i
	e.reasonNames = append(e.reasonNames, r)
	return i
}

func (e *Engine) reasonName(i int) string {
	if i < len(e.reasonNames) {
		return e.reasonNames[i]
	}
	return OverflowLabel
}

// advance moves the series ring to nowIdx, folding buckets that left the
// window into the moving baseline, oldest first.
func (e *Engine) advance(s *series, nowIdx int64) {
	if nowIdx <= s.head {
		return
	}
	s.head = nowIdx
	var exp [numBuckets]int
	n := 0
	for i := range s.buckets {
		b := &s.buckets[i]
		if b.used && b.idx <= nowIdx-numBuckets {
			// insertion sort by bucket number
			j := n
			for j > 0 && s.buckets[exp[j-1]].idx > b.idx {
				exp[j] = exp[j-1]
				j--
			}
			exp[j] = i
			n++
		}
	}
	for _, i := range exp[:n] {
		e.fold(s, &s.buckets[i])
		s.buckets[i].used = false
	}
}

func (e *Engine) fold(s *series, b *bucket) {
	h := e.cfg.Baseline
	if b.ttft.n > 0 {
		s.base.ttft.add(b.idx, b.ttft.quantile(0.5), float64(b.ttft.n), e.width, h)
	}
	if b.tpot.n > 0 {
		s.base.tpot.add(b.idx, b.tpot.quantile(0.5), float64(b.tpot.n), e.width, h)
	}
	if b.preemptSpan > 0 {
		s.base.pre.add(b.idx, b.preemptDelta/b.preemptSpan, b.preemptSpan, e.width, h)
	}
}

func (e *Engine) advanceModel(m *model, nowIdx int64) {
	if nowIdx <= m.head {
		return
	}
	m.head = nowIdx
	for i := range m.buckets {
		if m.buckets[i].used && m.buckets[i].idx <= nowIdx-numBuckets {
			m.buckets[i].used = false
		}
	}
}

func (s *series) bucket(idx int64) *bucket {
	b := &s.buckets[int(((idx%numBuckets)+numBuckets)%numBuckets)]
	if !b.used || b.idx != idx {
		b.reset(idx)
	}
	return b
}

func (m *model) bucket(idx int64) *mbucket {
	b := &m.buckets[int(((idx%numBuckets)+numBuckets)%numBuckets)]
	if !b.used || b.idx != idx {
		*b = mbucket{idx: idx, used: true}
	}
	return b
}

// slot finds the bucket of an event at t (zero: now) for model and backend,
// advancing the series' ring first; ok is false (and the event counted as
// dropped) when t is older than the window. Call with e.mu held.
func (e *Engine) slot(t time.Time, model, backend string) (m *model, s *series, b *bucket, idx, nowIdx int64, at time.Time, ok bool) {
	now := e.now()
	nowIdx = e.bucketIdx(now)
	if t.IsZero() {
		t = now
	}
	idx, ok = e.place(t, nowIdx)
	if !ok {
		e.dropped++
		return nil, nil, nil, 0, 0, t, false
	}
	m = e.model(model)
	s = e.series(m, backend)
	e.advance(s, nowIdx)
	return m, s, s.bucket(idx), idx, nowIdx, t, true
}

// Observe records one finished request. O(1); it allocates only the first
// time a model, backend or reason is seen.
func (e *Engine) Observe(o Observation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, _, b, idx, nowIdx, _, ok := e.slot(o.Time, o.Model, o.Backend)
	if !ok {
		return
	}
	b.requests++
	if o.Layer == LayerNone {
		b.ok++
	} else {
		li := layerIndex(o.Layer)
		b.layers[li]++
		e.advanceModel(m, nowIdx)
		mb := m.bucket(idx)
		if li == layerDoor {
			mb.door[e.reasonSlot(o.Reason)]++
		} else if o.Reason != "" {
			mb.fail[e.reasonSlot(o.Reason)]++
		}
	}
	if o.TTFT > 0 {
		b.ttft.add(o.TTFT)
	}
	if o.TPOT > 0 {
		b.tpot.add(o.TPOT)
	}
	if o.Total > 0 {
		b.totalNs += int64(o.Total)
		if o.ClientStall > 0 {
			b.stallNs += int64(o.ClientStall)
			if float64(o.ClientStall) >= e.cfg.Thresholds.StallFraction*float64(o.Total) {
				b.stalled++
			}
		}
	}
}

// Sample records one scrape of a backend's gauges and the gateway's view of
// its state.
func (e *Engine) Sample(smp BackendSample) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, s, b, idx, _, t, ok := e.slot(smp.Time, smp.Model, smp.Backend)
	if !ok {
		return
	}
	b.samples++
	if !smp.Ready || smp.Ejected {
		b.notReady++
	}
	if !smp.NoGauges {
		e.gauges(s, b, idx, t, smp)
	}
	if !s.sampled || !t.Before(s.lastSample) {
		s.sampled = true
		s.lastSample = t
		s.ready, s.ejected = smp.Ready, smp.Ejected
		s.state, s.stateReason = smp.State, smp.StateReason
		s.stateSince = smp.StateSince
		if smp.GaugesState != "" {
			s.gaugesState = smp.GaugesState
		}
		s.compat = nil
		if smp.Compat != nil {
			c := *smp.Compat
			s.compat = &c
		}
	}
}

// gauges adds a sample's gauges to its bucket and the preemption rate.
func (e *Engine) gauges(s *series, b *bucket, idx int64, t time.Time, smp BackendSample) {
	off := t.Sub(time.Unix(0, idx*int64(e.width))).Seconds()
	b.running.add(off, smp.Running)
	b.waiting.add(off, smp.Waiting)
	b.kv.add(off, smp.KVUsage)
	if s.hasPrev && t.After(s.prevTime) {
		d := smp.Preemptions - s.prevPreempt
		if d < 0 { // counter reset: count what the new counter has seen
			d = smp.Preemptions
		}
		if d >= 0 {
			b.preemptDelta += d
			b.preemptSpan += t.Sub(s.prevTime).Seconds()
		}
	}
	if !s.hasPrev || t.After(s.prevTime) {
		s.hasPrev, s.prevPreempt, s.prevTime = true, smp.Preemptions, t
	}
}

// GatewayQueue records a sample of the gateway's queue depth for model.
func (e *Engine) GatewayQueue(model string, depth int, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	nowIdx := e.bucketIdx(now)
	if at.IsZero() {
		at = now
	}
	idx, ok := e.place(at, nowIdx)
	if !ok {
		e.dropped++
		return
	}
	m := e.model(model)
	e.advanceModel(m, nowIdx)
	b := m.bucket(idx)
	b.queue.add(at.Sub(time.Unix(0, idx*int64(e.width))).Seconds(), float64(depth))
}

// Warmup records a backend's baseline figures measured at warm-up, when it
// was idle. A zero figure leaves the previous one.
func (e *Engine) Warmup(model, backend string, ttft, tpot time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.series(e.model(model), backend)
	s.warm = true
	if ttft > 0 {
		s.warmTTFT = ttft
	}
	if tpot > 0 {
		s.warmTPOT = tpot
	}
}
