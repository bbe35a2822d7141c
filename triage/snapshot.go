package triage

import (
	"math"
	"sort"
	"time"
)

// This file takes the typed snapshot the rules read: under the engine's
// lock, every model and backend series is merged over the window, its
// latency judged against its baseline and its latest state copied, so that
// the rules, the evidence and the sentences run on plain values.

// terms are what a report is judged by.
type terms struct {
	th     Thresholds
	window time.Duration // Config.Window
	recent time.Duration // Thresholds.Recent, in whole buckets
	now    time.Time
}

// agg is a series merged over the window.
type agg struct {
	requests, ok         int
	layers               [numLayers]int
	ttft, tpot           hist
	stalled              int
	stallNs, totalNs     int64
	running, waiting, kv gauge
	samples, notReady    int
	preDelta, preSpan    float64
}

// movingBase is a moving baseline as read at the report.
type movingBase struct {
	value    float64 // ns
	ok       bool
	coverage time.Duration
}

func (m *ewma) read() movingBase {
	v, ok := m.value()
	return movingBase{value: v, ok: ok, coverage: m.coverage}
}

// latency is a backend's TTFT or TPOT over the window, judged against its
// baseline.
type latency struct {
	name     string  // "TTFT" or "TPOT"
	n        int     // samples in the window
	p50, p95 float64 // ns
	warm     float64 // the warm-up figure, ns (0: none measured)
	moving   movingBase
	base     float64 // the baseline judged against, ns (0: none)
	src      string  // which: "warmup", "moving" or ""
	ratio    float64 // p50 / base, the larger of window and recent (0: not judged)
	rising   bool
	recent   judged // the newest Thresholds.Recent of the window, on its own
}

// judged is a latency figure over the newest part of the window.
type judged struct {
	p50    float64 // ns
	n      int     // samples
	ratio  float64 // p50 / baseline
	rising bool
}

// backendWindow is one model+backend series over the window.
type backendWindow struct {
	model *modelWindow
	name  string // "" for the requests that reached no backend
	a     agg

	ttft, tpot latency
	tpotStable bool

	running, waiting, kv gaugeStat
	prePerMin            float64 // preemptions a minute
	preKnown             bool
	preBase              float64 // its moving baseline, a minute
	preBaseKnown         bool

	// The gateway's view, from the latest sample.
	sampled, ready, ejected         bool
	state, stateReason, gaugesState string
	stateSince, lastSample          time.Time
	compat                          *Compatibility
	// notReadyNow: its latest sample, in the window, says not ready or
	// ejected.
	notReadyNow bool

	slow []SlowPathSignal // the slow-path signals it shows against its peers
}

// qualified is "model/backend".
func (b *backendWindow) qualified() string { return b.model.name + "/" + b.name }

// waitingGrowing: vLLM's waiting queue grows (slope) or is high.
func (b *backendWindow) waitingGrowing(th *Thresholds) bool {
	return b.waiting.N > 0 && (b.waiting.SlopePerMin >= th.GrowthPerMin || b.waiting.Last >= th.WaitingHigh)
}

// modelWindow is one model over the window: its gateway queue, its reasons
// and its backends.
type modelWindow struct {
	name       string
	requests   int
	rejections map[string]int // door rejections by reason
	failures   map[string]int // other failures by reason
	q          gaugeStat      // gateway queue depth
	// queueGrowing: the gateway queue grows (slope) or is high.
	queueGrowing bool
	backends     []*backendWindow
}

// windows takes the snapshot of every model (by name) and its backends (by
// name). Call with e.mu held: it advances the rings, folding expired
// buckets into the baselines.
func (e *Engine) windows(t *terms) []*modelWindow {
	nowIdx := e.bucketIdx(t.now)
	lo := nowIdx - numBuckets + 1
	models := append([]*model(nil), e.order...)
	sort.Slice(models, func(i, j int) bool { return models[i].name < models[j].name })
	out := make([]*modelWindow, 0, len(models))
	for _, m := range models {
		mw := e.modelWindow(m, lo, nowIdx, t)
		sers := append([]*series(nil), m.order...)
		sort.Slice(sers, func(i, j int) bool { return sers[i].name < sers[j].name })
		for _, s := range sers {
			e.advance(s, nowIdx)
			bw := e.backendWindow(s, mw, lo, t)
			mw.backends = append(mw.backends, bw)
			mw.requests += bw.a.requests
		}
		flagSlowPath(mw, &t.th)
		out = append(out, mw)
	}
	return out
}

func (e *Engine) modelWindow(m *model, lo, nowIdx int64, t *terms) *modelWindow {
	e.advanceModel(m, nowIdx)
	var door, fail [maxReasonSlots]int
	var queue gauge
	for i := range m.buckets {
		b := &m.buckets[i]
		if !b.used || b.idx < lo {
			continue
		}
		for k := range b.door {
			door[k] += int(b.door[k])
			fail[k] += int(b.fail[k])
		}
		queue.mergeShift(&b.queue, time.Duration((b.idx-lo)*int64(e.width)).Seconds())
	}
	mw := &modelWindow{name: m.name, rejections: e.reasonCounts(&door), failures: e.reasonCounts(&fail), q: queue.stat()}
	mw.queueGrowing = mw.q.N > 0 && (mw.q.SlopePerMin >= t.th.GrowthPerMin || mw.q.Last >= t.th.QueueDepthHigh)
	return mw
}

func (e *Engine) reasonCounts(c *[maxReasonSlots]int) map[string]int {
	out := map[string]int{}
	for i, n := range c {
		if n > 0 {
			out[e.reasonName(i)] += n
		}
	}
	return out
}

// backendWindow merges a series over the window (buckets from lo), judges
// its latency and copies its state.
func (e *Engine) backendWindow(s *series, mw *modelWindow, lo int64, t *terms) *backendWindow {
	bw := &backendWindow{model: mw, name: s.name}
	a := &bw.a
	var recentTTFT, recentTPOT hist
	recentFrom := lo + numBuckets - e.recentBuckets()
	for i := range s.buckets {
		b := &s.buckets[i]
		if !b.used || b.idx < lo {
			continue
		}
		a.add(b, time.Duration((b.idx-lo)*int64(e.width)).Seconds())
		// The newest buckets on their own: a change shows there before
		// it outweighs the rest of the window.
		if b.idx >= recentFrom {
			recentTTFT.merge(&b.ttft)
			recentTPOT.merge(&b.tpot)
		}
	}
	var warmTTFT, warmTPOT float64
	if s.warm {
		warmTTFT, warmTPOT = float64(s.warmTTFT), float64(s.warmTPOT)
	}
	th := &t.th
	bw.ttft = judge("TTFT", &a.ttft, &recentTTFT, warmTTFT, s.base.ttft.read(), th, th.TTFTRiseFactor, th.TTFTMinDelta)
	bw.tpot = judge("TPOT", &a.tpot, &recentTPOT, warmTPOT, s.base.tpot.read(), th, th.TPOTRiseFactor, th.TPOTMinDelta)
	bw.tpotStable = true
	if bw.tpot.base > 0 {
		if bw.tpot.n >= th.MinSamples {
			bw.tpotStable = bw.tpot.p50 < th.TPOTStableFactor*bw.tpot.base
		}
		bw.tpotStable = bw.tpotStable && !bw.tpot.recent.rising
	}
	bw.running, bw.waiting, bw.kv = a.running.stat(), a.waiting.stat(), a.kv.stat()
	if a.preSpan > 0 {
		bw.prePerMin, bw.preKnown = a.preDelta/a.preSpan*60, true
	}
	if v, ok := s.base.pre.value(); ok {
		bw.preBase, bw.preBaseKnown = v*60, true
	}
	bw.sampled, bw.ready, bw.ejected = s.sampled, s.ready, s.ejected
	bw.state, bw.stateReason, bw.gaugesState = s.state, s.stateReason, s.gaugesState
	bw.stateSince, bw.lastSample = s.stateSince, s.lastSample
	if s.compat != nil {
		c := *s.compat
		bw.compat = &c
	}
	origin := time.Unix(0, lo*int64(e.width))
	bw.notReadyNow = s.sampled && (!s.ready || s.ejected) && !s.lastSample.Before(origin)
	return bw
}

// add merges one bucket, whose start is d seconds after the window's.
func (a *agg) add(b *bucket, d float64) {
	a.requests += int(b.requests)
	a.ok += int(b.ok)
	for k := range b.layers {
		a.layers[k] += int(b.layers[k])
	}
	a.ttft.merge(&b.ttft)
	a.tpot.merge(&b.tpot)
	a.stalled += int(b.stalled)
	a.stallNs += b.stallNs
	a.totalNs += b.totalNs
	a.running.mergeShift(&b.running, d)
	a.waiting.mergeShift(&b.waiting, d)
	a.kv.mergeShift(&b.kv, d)
	a.samples += int(b.samples)
	a.notReady += int(b.notReady)
	a.preDelta += b.preemptDelta
	a.preSpan += b.preemptSpan
}

// judge reads a latency over the window and over its newest part, and
// judges both against the baseline (the lower of warm-up and moving): it is
// rising when either is; the ratio is the larger of the two that could be
// judged (each needs Thresholds.MinSamples samples).
func judge(name string, window, recent *hist, warm float64, moving movingBase, th *Thresholds, factor float64, delta time.Duration) latency {
	l := latency{name: name, n: int(window.n), p50: window.quantile(0.5), p95: window.quantile(0.95), warm: warm, moving: moving}
	l.base, l.src = pickBase(warm, moving, th.MinBaselineCoverage)
	if l.base <= 0 {
		return l
	}
	rising := func(p50 float64) bool { return p50 >= factor*l.base && p50-l.base >= float64(delta) }
	if l.n >= th.MinSamples {
		l.ratio = l.p50 / l.base
		l.rising = rising(l.p50)
	}
	if int(recent.n) >= th.MinSamples {
		p := recent.quantile(0.5)
		l.recent = judged{p50: p, n: int(recent.n), ratio: p / l.base, rising: rising(p)}
		l.ratio = math.Max(l.ratio, l.recent.ratio)
		l.rising = l.rising || l.recent.rising
	}
	return l
}

// recentBuckets is the number of newest buckets Thresholds.Recent covers
// (rounded up, at least one, at most the window).
func (e *Engine) recentBuckets() int64 {
	k := int64((e.cfg.Thresholds.Recent + e.width - 1) / e.width)
	return min(max(k, 1), numBuckets)
}

// pickBase returns the lower of the warm-up figure and the moving baseline
// (once it covers minCov): warm-up is the idle floor, the moving baseline
// what normal load looks like; the lower one makes a slowdown that has lasted
// long enough to enter the moving baseline still read as a rise.
func pickBase(warm float64, mv movingBase, minCov time.Duration) (float64, string) {
	ok := mv.ok && mv.coverage >= minCov && mv.value > 0
	switch {
	case warm > 0 && ok && mv.value < warm:
		return mv.value, "moving"
	case warm > 0:
		return warm, "warmup"
	case ok:
		return mv.value, "moving"
	}
	return 0, ""
}

// SlowPathSignal is one figure of a backend far above its peers': the
// signal (warmup_ttft, warmup_tpot or window_tpot_p50), its value and the
// median of the same figure on the model's other backends.
type SlowPathSignal struct {
	Signal        string  `json:"signal"`
	ValueMs       float64 `json:"value_ms"`
	PeersMedianMs float64 `json:"peers_median_ms"`
	Ratio         float64 `json:"ratio"`
}

// flagSlowPath flags backends whose warm-up TTFT/TPOT or window TPOT is far
// above the median of the model's other backends.
func flagSlowPath(mw *modelWindow, th *Thresholds) {
	var bws []*backendWindow
	for _, b := range mw.backends {
		if b.name != "" {
			bws = append(bws, b)
		}
	}
	if len(bws) < 2 {
		return
	}
	signals := []struct {
		name string
		get  func(*backendWindow) (float64, bool)
	}{
		{"warmup_ttft", func(b *backendWindow) (float64, bool) { return b.ttft.warm, b.ttft.warm > 0 }},
		{"warmup_tpot", func(b *backendWindow) (float64, bool) { return b.tpot.warm, b.tpot.warm > 0 }},
		{"window_tpot_p50", func(b *backendWindow) (float64, bool) { return b.tpot.p50, b.tpot.n >= th.MinSamples }},
	}
	vals := make([]float64, 0, len(bws))
	for _, sg := range signals {
		for _, b := range bws {
			v, ok := sg.get(b)
			if !ok || v <= 0 {
				continue
			}
			vals = vals[:0]
			for _, o := range bws {
				if ov, ok := sg.get(o); o != b && ok && ov > 0 {
					vals = append(vals, ov)
				}
			}
			if len(vals) == 0 {
				continue
			}
			if med := median(vals); v >= th.SlowPathFactor*med {
				b.slow = append(b.slow, SlowPathSignal{Signal: sg.name, ValueMs: ms(v), PeersMedianMs: ms(med), Ratio: r3(v / med)})
			}
		}
	}
}

func median(v []float64) float64 {
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func r3(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1000) / 1000
}

func ms(ns float64) float64 { return r3(ns / 1e6) }

// snapshot is what the rules read: the windows of a scope (the fleet, or
// one model) and its totals.
type snapshot struct {
	*terms
	backends []*backendWindow // by model, then backend
	models   []*modelWindow

	requests, ok, stalled int
	layers                [numLayers]int // failures by layer
	stallNs, totalNs      int64
	rejections, failures  map[string]int // door rejections, other failures, by reason
	backendRequests       int            // requests that reached a backend
	nBackends, nReady     int
}

func newSnapshot(t *terms, models []*modelWindow) *snapshot {
	s := &snapshot{terms: t, models: models, rejections: map[string]int{}, failures: map[string]int{}}
	for _, mw := range models {
		s.backends = append(s.backends, mw.backends...)
		for r, n := range mw.rejections {
			s.rejections[r] += n
		}
		for r, n := range mw.failures {
			s.failures[r] += n
		}
	}
	for _, b := range s.backends {
		a := &b.a
		s.requests += a.requests
		s.ok += a.ok
		s.stalled += a.stalled
		s.stallNs += a.stallNs
		s.totalNs += a.totalNs
		for k := range s.layers {
			s.layers[k] += a.layers[k]
		}
		if b.name == "" {
			continue
		}
		s.backendRequests += a.requests
		s.nBackends++
		if b.sampled && b.ready {
			s.nReady++
		}
	}
	return s
}

// significant: a failure count of at least MinFailures making at least
// MinFailureShare of the scope's requests.
func (s *snapshot) significant(n int) bool {
	return n >= s.th.MinFailures && float64(n) >= s.th.MinFailureShare*float64(s.requests)
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// stallShare is the total time blocked writing to clients over the total
// time; stalledShare the share of requests that were stalled.
func (s *snapshot) stallShare() float64 {
	if s.totalNs == 0 {
		return 0
	}
	return float64(s.stallNs) / float64(s.totalNs)
}

func (s *snapshot) stalledShare() float64 { return share(s.stalled, s.requests) }

// affected returns the backends that show a per-backend class and the
// share of backend traffic they served; ok when that share is at least
// MinAffectedShare (with no backend traffic, any affected backend is all
// of it).
func (s *snapshot) affected(shows func(*backendWindow, *Thresholds) bool) (affected, bool) {
	var aff affected
	req := 0
	for _, b := range s.backends {
		if b.name != "" && shows(b, &s.th) {
			aff.backends = append(aff.backends, b)
			aff.AffectedBackends = append(aff.AffectedBackends, b.qualified())
			req += b.a.requests
		}
	}
	if len(aff.backends) == 0 {
		return aff, false
	}
	sh := 1.0
	if s.backendRequests > 0 {
		sh = share(req, s.backendRequests)
	}
	aff.AffectedShare = r3(sh)
	return aff, sh >= s.th.MinAffectedShare
}

// modelsOf returns the models of the given backends, in the scope's order.
func modelsOf(bws []*backendWindow, models []*modelWindow) []*modelWindow {
	var out []*modelWindow
	for _, mw := range models {
		for _, b := range bws {
			if b.model == mw {
				out = append(out, mw)
				break
			}
		}
	}
	return out
}
