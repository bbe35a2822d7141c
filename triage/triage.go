package triage

import (
	"strings"
	"sync"
	"time"
)

// Layer is where progress stopped for a failed request.
type Layer string

const (
	LayerNone    Layer = ""                // succeeded
	LayerDoor    Layer = "door"            // rejected at the door (bad request, context overflow...)
	LayerQueue   Layer = "gateway_queue"   // queue full / queue timeout in the gateway
	LayerUnready Layer = "backend_unready" // no ready backend
	LayerConnect Layer = "backend_connect" // could not connect / failed before headers / first-byte timeout
	LayerBackend Layer = "backend"         // the backend refused the request with its own 4xx
	LayerPrefill Layer = "prefill"         // failed or timed out before the first token
	LayerDecode  Layer = "decode"          // broke or stalled after the first token
	LayerClient  Layer = "client"          // the client left or read too slowly
)

// Layer indexes in the per-bucket counters. layerOther holds any Layer
// value outside the closed set above.
const (
	layerDoor = iota
	layerQueue
	layerUnready
	layerConnect
	layerBackend
	layerPrefill
	layerDecode
	layerClient
	layerOther
	numLayers
)

var layerNames = [numLayers]string{
	layerDoor:    string(LayerDoor),
	layerQueue:   string(LayerQueue),
	layerUnready: string(LayerUnready),
	layerConnect: string(LayerConnect),
	layerBackend: string(LayerBackend),
	layerPrefill: string(LayerPrefill),
	layerDecode:  string(LayerDecode),
	layerClient:  string(LayerClient),
	layerOther:   OverflowLabel,
}

func layerIndex(l Layer) int {
	switch l {
	case LayerDoor:
		return layerDoor
	case LayerQueue:
		return layerQueue
	case LayerUnready:
		return layerUnready
	case LayerConnect:
		return layerConnect
	case LayerBackend:
		return layerBackend
	case LayerPrefill:
		return layerPrefill
	case LayerDecode:
		return layerDecode
	case LayerClient:
		return layerClient
	}
	return layerOther
}

// Layers lists the failure layers, for pre-registering label values.
func Layers() []Layer {
	return []Layer{LayerDoor, LayerQueue, LayerUnready, LayerConnect, LayerBackend, LayerPrefill, LayerDecode, LayerClient}
}

// OverflowLabel is the name under which models, backends and reasons beyond
// the configured caps (and unknown layers) are counted.
const OverflowLabel = "other"

// Observation is one finished request, as the gateway saw it.
type Observation struct {
	Time           time.Time // when it finished (zero: now)
	Model, Backend string    // Backend "" when it never reached one
	Layer          Layer     // LayerNone on success
	// Reason is the door rejection reason (e.g. "context_length_exceeded")
	// or failure code ("backend_timeout", "client_closed"...).
	Reason string
	// Phase durations. Connect is backend connect until response headers.
	Door, Queue, Connect time.Duration
	TTFT                 time.Duration // request start at backend -> first token (0 if none)
	TPOT                 time.Duration // mean time per output token after the first (0 if < 2 tokens)
	ClientStall          time.Duration // time spent blocked writing to the client
	Total                time.Duration
	OutputTokens         int
	Stream               bool
}

// BackendSample is one scrape of a backend's vLLM gauges.
type BackendSample struct {
	Time             time.Time // zero: now
	Model, Backend   string
	Running, Waiting float64 // vllm:num_requests_running / waiting
	KVUsage          float64 // vllm:kv_cache_usage_perc, 0..1
	Preemptions      float64 // vllm:num_preemptions_total (a counter)
	Ready            bool
	// Ejected: ready, but ejected as an outlier by the gateway's queue
	// (StateReason says until when); counts as not ready.
	Ejected bool
	// NoGauges: a sample of the state only (the scrape failed, or the
	// backend is not scraped): the gauge fields are ignored.
	NoGauges bool
	// GaugesState is the gateway's trust in the backend's gauges:
	// unknown, fresh, stale or unavailable ("" when not told).
	GaugesState string
	// Compat is a known difference of ingredients (tokenizer, chat
	// template, context length) between the gateway and the backend; nil
	// when none is known.
	Compat      *Compatibility
	State       string // gateway's view: loading/warming/ready/unhealthy
	StateReason string
	StateSince  time.Time
}

// Compatibility is a difference of ingredients between the gateway and a
// backend found at warm-up: the backend counts the probe conversation with
// another tokenizer or chat template, or serves another context length.
type Compatibility struct {
	// Check is "tokenizer" or "max_model_len".
	Check string `json:"check"`
	// Gateway and Backend are the two counts (or context lengths).
	Gateway int `json:"gateway"`
	Backend int `json:"backend"`
	// Accepted: the model's tokenizer_check is warn, so the backend is
	// served anyway.
	Accepted bool `json:"accepted,omitempty"`
}

// Thresholds are every threshold the rules use. A zero field takes its
// default (see DefaultThresholds), so set only what you change; to make a
// threshold "zero" use a tiny positive value.
type Thresholds struct {
	// MinSamples is the number of TTFT (or TPOT) samples a backend needs in
	// the window before its latency is judged rising or stable. Default 20.
	MinSamples int
	// TTFT is rising when window p50 >= TTFTRiseFactor x baseline and
	// p50 - baseline >= TTFTMinDelta. Defaults 2 and 50ms.
	TTFTRiseFactor float64
	TTFTMinDelta   time.Duration
	// TPOT is stable when window p50 < TPOTStableFactor x baseline (or
	// unknown). Default 1.3.
	TPOTStableFactor float64
	// TPOT is rising when window p50 >= TPOTRiseFactor x baseline and
	// p50 - baseline >= TPOTMinDelta. Defaults 1.5 and 2ms.
	TPOTRiseFactor float64
	TPOTMinDelta   time.Duration
	// A failure class (door, unavailable, client, gateway queue) counts only
	// with at least MinFailures failures making at least MinFailureShare of
	// the window's requests. Defaults 5 and 0.01.
	MinFailures     int
	MinFailureShare float64
	// boundary: door rejections >= DoorShare of all failures. Default 0.5.
	DoorShare float64
	// client_side: client failures >= ClientShare of all failures. Default 0.5.
	ClientShare float64
	// client_side: a request is stalled when ClientStall >= StallFraction x
	// Total; stalls dominate when stalled requests >= StalledRequestShare of
	// requests. Defaults 0.2 and 0.2.
	StallFraction       float64
	StalledRequestShare float64
	// A queue (gateway depth or vLLM waiting) is growing when its
	// least-squares slope over the window >= GrowthPerMin (per minute), or
	// its last value >= QueueDepthHigh (gateway) / WaitingHigh (vLLM).
	// Defaults 0.5/min, 4, 4.
	GrowthPerMin   float64
	QueueDepthHigh float64
	WaitingHigh    float64
	// kv_pressure: max KV usage in the window >= KVFull, and preemptions per
	// minute > PreemptionsPerMin (or waiting growing while running is not).
	// Defaults 0.95 and 0 (a tiny positive value is used for zero).
	KVFull            float64
	PreemptionsPerMin float64
	// A per-backend class (kv, decode, prefill) is the verdict of a model or
	// of the fleet when the matching backends served >= MinAffectedShare of
	// the requests that reached a backend. Default 0.2.
	MinAffectedShare float64
	// A backend is flagged "possible slow-path fallback" when its warm-up
	// TTFT or TPOT, or its window TPOT p50, is >= SlowPathFactor x the
	// median of its model's other backends. Default 3.
	SlowPathFactor float64
	// The moving baseline is used once it covers MinBaselineCoverage of
	// traffic. Default 2m.
	MinBaselineCoverage time.Duration
	// Recent is the newest part of the window whose latency is also judged
	// on its own (rounded up to whole buckets, at most the window): a
	// slowdown is named once it dominates the last Recent, not only once it
	// dominates the whole window. Default 20s (two buckets of the default
	// window: the current one and the one before).
	Recent time.Duration
}

// DefaultThresholds returns the documented defaults.
func DefaultThresholds() Thresholds {
	return Thresholds{
		MinSamples:          20,
		TTFTRiseFactor:      2,
		TTFTMinDelta:        50 * time.Millisecond,
		TPOTStableFactor:    1.3,
		TPOTRiseFactor:      1.5,
		TPOTMinDelta:        2 * time.Millisecond,
		MinFailures:         5,
		MinFailureShare:     0.01,
		DoorShare:           0.5,
		ClientShare:         0.5,
		StallFraction:       0.2,
		StalledRequestShare: 0.2,
		GrowthPerMin:        0.5,
		QueueDepthHigh:      4,
		WaitingHigh:         4,
		KVFull:              0.95,
		PreemptionsPerMin:   0,
		MinAffectedShare:    0.2,
		SlowPathFactor:      3,
		MinBaselineCoverage: 2 * time.Minute,
		Recent:              20 * time.Second,
	}
}

// Config configures an Engine. Zero fields take their defaults.
type Config struct {
	Window     time.Duration // sliding window (default 5m), split in 30 buckets
	Baseline   time.Duration // time constant of the moving baseline (default 1h)
	Thresholds Thresholds

	// Caps on distinct label values, so hostile values cannot grow memory.
	// Beyond a cap, values are counted under OverflowLabel.
	MaxModels   int // default 64
	MaxBackends int // per model, default 64
	MaxSeries   int // model+backend pairs over all models, default 256
	MaxReasons  int // distinct reasons, default 63 (+ "other"), at most 63
}

const maxReasonSlots = 64 // 63 named + OverflowLabel

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Window:      5 * time.Minute,
		Baseline:    time.Hour,
		Thresholds:  DefaultThresholds(),
		MaxModels:   64,
		MaxBackends: 64,
		MaxSeries:   256,
		MaxReasons:  maxReasonSlots - 1,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Window <= 0 {
		c.Window = d.Window
	}
	if c.Window < numBuckets*time.Millisecond {
		c.Window = numBuckets * time.Millisecond
	}
	if c.Baseline <= 0 {
		c.Baseline = d.Baseline
	}
	if c.MaxModels <= 0 {
		c.MaxModels = d.MaxModels
	}
	if c.MaxBackends <= 0 {
		c.MaxBackends = d.MaxBackends
	}
	if c.MaxSeries <= 0 {
		c.MaxSeries = d.MaxSeries
	}
	if c.MaxReasons <= 0 || c.MaxReasons > maxReasonSlots-1 {
		c.MaxReasons = maxReasonSlots - 1
	}
	t, dt := &c.Thresholds, d.Thresholds
	setI := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setF := func(v *float64, def float64) {
		if *v <= 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setI(&t.MinSamples, dt.MinSamples)
	setF(&t.TTFTRiseFactor, dt.TTFTRiseFactor)
	setD(&t.TTFTMinDelta, dt.TTFTMinDelta)
	setF(&t.TPOTStableFactor, dt.TPOTStableFactor)
	setF(&t.TPOTRiseFactor, dt.TPOTRiseFactor)
	setD(&t.TPOTMinDelta, dt.TPOTMinDelta)
	setI(&t.MinFailures, dt.MinFailures)
	setF(&t.MinFailureShare, dt.MinFailureShare)
	setF(&t.DoorShare, dt.DoorShare)
	setF(&t.ClientShare, dt.ClientShare)
	setF(&t.StallFraction, dt.StallFraction)
	setF(&t.StalledRequestShare, dt.StalledRequestShare)
	setF(&t.GrowthPerMin, dt.GrowthPerMin)
	setF(&t.QueueDepthHigh, dt.QueueDepthHigh)
	setF(&t.WaitingHigh, dt.WaitingHigh)
	setF(&t.KVFull, dt.KVFull)
	if t.PreemptionsPerMin < 0 {
		t.PreemptionsPerMin = 0
	}
	setF(&t.MinAffectedShare, dt.MinAffectedShare)
	setF(&t.SlowPathFactor, dt.SlowPathFactor)
	setD(&t.MinBaselineCoverage, dt.MinBaselineCoverage)
	setD(&t.Recent, dt.Recent)
	return c
}

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
