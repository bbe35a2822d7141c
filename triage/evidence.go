package triage

import "time"

// This file holds the evidence: typed values whose JSON field names are the
// evidence keys the report serves (doc.go lists them). Durations are
// milliseconds, shares and ratios fractions, both rounded to 3 decimals; a
// figure with nothing to compute it from is a nil pointer, absent from the
// JSON.

// evidence is what a rule found, in figures (its JSON fields) and in
// sentences.
type evidence interface {
	said(t *terms) []string
}

// figures are the latency and gauge figures of a set of backends and the
// gateway queue of a set of models.
type figures struct {
	TTFTSamples  int      `json:"ttft_samples,omitempty"`
	TTFTP50      *float64 `json:"ttft_p50_ms,omitempty"`
	TTFTP95      *float64 `json:"ttft_p95_ms,omitempty"`
	TTFTBaseline *float64 `json:"ttft_baseline_ms,omitempty"` // per-backend baselines, weighted by samples
	TTFTRatio    *float64 `json:"ttft_ratio,omitempty"`       // per-backend p50/baseline, weighted by samples
	TPOTSamples  int      `json:"tpot_samples,omitempty"`
	TPOTP50      *float64 `json:"tpot_p50_ms,omitempty"`
	TPOTP95      *float64 `json:"tpot_p95_ms,omitempty"`
	TPOTBaseline *float64 `json:"tpot_baseline_ms,omitempty"`
	TPOTRatio    *float64 `json:"tpot_ratio,omitempty"`

	// vLLM's gauges, summed over backends (KV: the max over backends and
	// the mean of their means).
	WaitingFirst        *float64 `json:"waiting_first,omitempty"`
	WaitingLast         *float64 `json:"waiting_last,omitempty"`
	WaitingSlope        *float64 `json:"waiting_slope_per_min,omitempty"`
	RunningFirst        *float64 `json:"running_first,omitempty"`
	RunningLast         *float64 `json:"running_last,omitempty"`
	RunningSlope        *float64 `json:"running_slope_per_min,omitempty"`
	KVUsageMax          *float64 `json:"kv_usage_max,omitempty"`
	KVUsageMean         *float64 `json:"kv_usage_mean,omitempty"`
	Preemptions         *float64 `json:"preemptions_per_min,omitempty"`
	PreemptionsBaseline *float64 `json:"preemptions_per_min_baseline,omitempty"`

	// The gateway queue, summed over models.
	QueueFirst *float64 `json:"queue_depth_first,omitempty"`
	QueueLast  *float64 `json:"queue_depth_last,omitempty"`
	QueueMax   *float64 `json:"queue_depth_max,omitempty"`
	QueueSlope *float64 `json:"queue_slope_per_min,omitempty"`
}

func some(x float64) *float64 { return &x }

// weighted is a mean weighted by sample counts.
type weighted struct{ sum, w float64 }

func (m *weighted) add(x, w float64) {
	m.sum += w * x
	m.w += w
}

// of returns the mean through round (ms or r3), nil with no weight.
func (m weighted) of(round func(float64) float64) *float64 {
	if m.w <= 0 {
		return nil
	}
	return some(round(m.sum / m.w))
}

// figuresOf returns the figures of backends bws and of the gateway queues
// of models.
func figuresOf(bws []*backendWindow, models []*modelWindow) figures {
	var f figures
	f.TTFTSamples, f.TTFTP50, f.TTFTP95, f.TTFTBaseline, f.TTFTRatio = latencyFigures(bws, func(b *backendWindow) (*hist, *latency) { return &b.a.ttft, &b.ttft })
	f.TPOTSamples, f.TPOTP50, f.TPOTP95, f.TPOTBaseline, f.TPOTRatio = latencyFigures(bws, func(b *backendWindow) (*hist, *latency) { return &b.a.tpot, &b.tpot })
	f.gauges(bws)
	var first, last, slope, most float64
	n := 0
	for _, mw := range models {
		if mw.q.N > 0 {
			first, last, slope, most = first+mw.q.First, last+mw.q.Last, slope+mw.q.SlopePerMin, most+mw.q.Max
			n++
		}
	}
	if n > 0 {
		f.QueueFirst, f.QueueLast, f.QueueMax, f.QueueSlope = some(r3(first)), some(r3(last)), some(r3(most)), some(r3(slope))
	}
	return f
}

// latencyFigures merges one latency of backends: samples, p50, p95, and the
// baselines and ratios weighted by samples.
func latencyFigures(bws []*backendWindow, of func(*backendWindow) (*hist, *latency)) (n int, p50, p95, base, ratio *float64) {
	var all hist
	var bases, ratios weighted
	for _, b := range bws {
		h, l := of(b)
		all.merge(h)
		if w := float64(h.n); w > 0 && l.base > 0 {
			bases.add(l.base, w)
			if l.ratio > 0 {
				ratios.add(l.ratio, w)
			}
		}
	}
	if all.n > 0 {
		n, p50, p95 = int(all.n), some(ms(all.quantile(0.5))), some(ms(all.quantile(0.95)))
	}
	return n, p50, p95, bases.of(ms), ratios.of(r3)
}

// gauges sums vLLM's gauges over backends.
func (f *figures) gauges(bws []*backendWindow) {
	var wF, wL, wS, rF, rL, rS, kvMax, kvMean, pre, preB float64
	var nW, nR, nKV, nPre, nPreB int
	for _, b := range bws {
		if b.waiting.N > 0 {
			wF, wL, wS = wF+b.waiting.First, wL+b.waiting.Last, wS+b.waiting.SlopePerMin
			nW++
		}
		if b.running.N > 0 {
			rF, rL, rS = rF+b.running.First, rL+b.running.Last, rS+b.running.SlopePerMin
			nR++
		}
		if b.kv.N > 0 {
			kvMax = max(kvMax, b.kv.Max)
			kvMean += b.kv.Mean
			nKV++
		}
		if b.preKnown {
			pre += b.prePerMin
			nPre++
		}
		if b.preBaseKnown {
			preB += b.preBase
			nPreB++
		}
	}
	if nW > 0 {
		f.WaitingFirst, f.WaitingLast, f.WaitingSlope = some(r3(wF)), some(r3(wL)), some(r3(wS))
	}
	if nR > 0 {
		f.RunningFirst, f.RunningLast, f.RunningSlope = some(r3(rF)), some(r3(rL)), some(r3(rS))
	}
	if nKV > 0 {
		f.KVUsageMax, f.KVUsageMean = some(r3(kvMax)), some(r3(kvMean/float64(nKV)))
	}
	if nPre > 0 {
		f.Preemptions = some(r3(pre))
	}
	if nPreB > 0 {
		f.PreemptionsBaseline = some(r3(preB))
	}
}

// scopeEvidence is the evidence of a scope (the fleet or a model) whatever
// its verdict; the verdict's own evidence is laid over it.
type scopeEvidence struct {
	Requests           int            `json:"requests"`
	Failures           int            `json:"failures"`
	FailuresByLayer    map[string]int `json:"failures_by_layer"`
	RejectionsByReason map[string]int `json:"rejections_by_reason"` // door rejections
	FailuresByReason   map[string]int `json:"failures_by_reason,omitempty"`
	figures
	ClientClosed        int      `json:"client_closed"`
	ClientStallShare    float64  `json:"client_stall_share"`    // total client stall / total time
	StalledRequestShare float64  `json:"stalled_request_share"` // stalled requests / requests
	Backends            int      `json:"backends"`
	BackendsReady       int      `json:"backends_ready"`
	SlowPathBackends    []string `json:"slow_path_backends,omitempty"` // "model/backend"
}

func (s *snapshot) evidence() *scopeEvidence {
	ev := &scopeEvidence{
		Requests: s.requests, Failures: s.requests - s.ok, FailuresByLayer: layerCounts(&s.layers),
		RejectionsByReason: s.rejections, FailuresByReason: s.failures, figures: figuresOf(s.backends, s.models),
		ClientClosed: s.layers[layerClient], ClientStallShare: r3(s.stallShare()), StalledRequestShare: r3(s.stalledShare()),
		Backends: s.nBackends, BackendsReady: s.nReady,
	}
	for _, b := range s.backends {
		if b.name != "" && len(b.slow) > 0 {
			ev.SlowPathBackends = append(ev.SlowPathBackends, b.qualified())
		}
	}
	return ev
}

func layerCounts(layers *[numLayers]int) map[string]int {
	out := map[string]int{}
	for k, n := range layers {
		if n > 0 {
			out[layerNames[k]] = n
		}
	}
	return out
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// compatEvidence: backends held back because they serve other ingredients.
type compatEvidence struct {
	Incompatible  []incompatibleBackend `json:"incompatible_backends"`
	Backends      int                   `json:"backends"`
	BackendsReady int                   `json:"backends_ready"`
}

type incompatibleBackend struct {
	Backend      string `json:"backend"`
	Check        string `json:"check"`
	Gateway      int    `json:"gateway"`
	BackendValue int    `json:"backend_value"`
	State        string `json:"state"`
	StateReason  string `json:"state_reason"`
	Since        string `json:"since,omitempty"`
}

// unavailableEvidence: failures for want of a backend, and the backends
// down or failing to connect.
type unavailableEvidence struct {
	Failures       int           `json:"unavailable_failures"`
	NoReadyBackend int           `json:"no_ready_backend_failures"`
	Connect        int           `json:"connect_failures"`
	Share          float64       `json:"unavailable_share"`
	Down           []downBackend `json:"unavailable_backends"`
	Backends       int           `json:"backends"`
	BackendsReady  int           `json:"backends_ready"`
	requests       int
}

type downBackend struct {
	Backend         string   `json:"backend"`
	Ready           bool     `json:"ready"`
	ConnectFailures int      `json:"connect_failures"`
	Reason          string   `json:"reason,omitempty"` // ejected, not_ready or connect_failures
	State           string   `json:"state,omitempty"`
	StateReason     string   `json:"state_reason,omitempty"`
	Since           string   `json:"since,omitempty"`
	For             *float64 `json:"for_s,omitempty"`
	NotReadyShare   *float64 `json:"not_ready_share,omitempty"`
	b               *backendWindow
}

func (s *snapshot) downBackend(b *backendWindow) downBackend {
	d := downBackend{Backend: b.qualified(), Ready: b.sampled && b.ready, ConnectFailures: b.a.layers[layerConnect],
		State: b.state, StateReason: b.stateReason, Since: rfc3339(b.stateSince), b: b}
	switch {
	case b.notReadyNow && b.ejected:
		d.Reason = "ejected"
	case b.notReadyNow:
		d.Reason = "not_ready"
	case d.ConnectFailures > 0:
		d.Reason = "connect_failures"
	}
	if !b.stateSince.IsZero() {
		d.For = some(r3(s.now.Sub(b.stateSince).Seconds()))
	}
	if b.a.samples > 0 {
		d.NotReadyShare = some(r3(share(b.a.notReady, b.a.samples)))
	}
	return d
}

// affected are the backends that show a per-backend class, and the share
// of the backend traffic they served.
type affected struct {
	AffectedBackends []string `json:"affected_backends"`
	AffectedShare    float64  `json:"affected_share"`
	backends         []*backendWindow
}

// kvEvidence and decodeEvidence: the figures of the affected backends.
type kvEvidence struct {
	figures
	affected
}

type decodeEvidence struct {
	figures
	affected
}

// prefillEvidence: the figures of the affected backends (if any) and of
// their models' gateway queues, and the failures in the queue and before
// the first token.
type prefillEvidence struct {
	figures
	AffectedBackends []string `json:"affected_backends,omitempty"`
	AffectedShare    *float64 `json:"affected_share,omitempty"`
	QueueFailures    int      `json:"gateway_queue_failures"`
	PrefillFailures  int      `json:"prefill_failures"`
	aff              []*backendWindow
	queues           []*modelWindow
}

// boundaryEvidence: requests refused at the door or by the backend itself.
type boundaryEvidence struct {
	Door          int            `json:"door_rejections"`
	Backend       int            `json:"backend_rejections"`
	DoorShare     float64        `json:"door_share"`     // of the failures
	RejectionRate float64        `json:"rejection_rate"` // of the requests
	ByReason      map[string]int `json:"rejections_by_reason"`
	failures      int
	requests      int
}

// clientEvidence: clients that left, or were slow to read.
type clientEvidence struct {
	Closed          int     `json:"client_closed"`
	FailureShare    float64 `json:"client_failure_share"`
	StallShare      float64 `json:"client_stall_share"`
	Stalled         int     `json:"stalled_requests"`
	StalledShare    float64 `json:"stalled_request_share"`
	left            bool    // client failures dominate
	stalledDominate bool    // stalled requests dominate
	failures        int
	requests        int
}

// healthyEvidence: no rule matched.
type healthyEvidence struct{ requests, failures int }

// backendEvidence is one backend's figures, its baselines and its samples.
type backendEvidence struct {
	Requests        int            `json:"requests"`
	Failures        int            `json:"failures"`
	FailuresByLayer map[string]int `json:"failures_by_layer"`
	figures
	ttftBaseline
	tpotBaseline
	KVUsageMin    *float64 `json:"kv_usage_min,omitempty"`
	WaitingMax    *float64 `json:"waiting_max,omitempty"`
	Samples       int      `json:"samples,omitempty"`
	NotReadyShare *float64 `json:"not_ready_share,omitempty"`
	LastSampleAge *float64 `json:"last_sample_age_s,omitempty"`
}

// ttftBaseline is what a backend's TTFT was judged against: the baseline's
// source and why, in words; the newest part of the window on its own; the
// warm-up figure and the moving baseline with its coverage. tpotBaseline is
// the same for TPOT (the two convert into each other).
type ttftBaseline struct {
	Source         string   `json:"ttft_baseline_source,omitempty"` // "warmup" or "moving"
	Words          string   `json:"ttft_baseline_words"`
	RecentP50      *float64 `json:"ttft_recent_p50_ms,omitempty"`
	RecentSamples  int      `json:"ttft_recent_samples,omitempty"`
	RecentRatio    *float64 `json:"ttft_recent_ratio,omitempty"`
	Warmup         *float64 `json:"ttft_warmup_ms,omitempty"`
	Moving         *float64 `json:"ttft_moving_baseline_ms,omitempty"`
	MovingCoverage *float64 `json:"ttft_moving_baseline_coverage_s,omitempty"`
}

type tpotBaseline struct {
	Source         string   `json:"tpot_baseline_source,omitempty"`
	Words          string   `json:"tpot_baseline_words"`
	RecentP50      *float64 `json:"tpot_recent_p50_ms,omitempty"`
	RecentSamples  int      `json:"tpot_recent_samples,omitempty"`
	RecentRatio    *float64 `json:"tpot_recent_ratio,omitempty"`
	Warmup         *float64 `json:"tpot_warmup_ms,omitempty"`
	Moving         *float64 `json:"tpot_moving_baseline_ms,omitempty"`
	MovingCoverage *float64 `json:"tpot_moving_baseline_coverage_s,omitempty"`
}

func (b *backendWindow) evidence(t *terms) *backendEvidence {
	ev := &backendEvidence{Requests: b.a.requests, Failures: b.a.requests - b.a.ok, FailuresByLayer: layerCounts(&b.a.layers),
		figures: figuresOf([]*backendWindow{b}, nil), ttftBaseline: b.ttft.baseline(t), tpotBaseline: tpotBaseline(b.tpot.baseline(t))}
	if b.kv.N > 0 {
		ev.KVUsageMin = some(r3(b.kv.Min))
	}
	if b.waiting.N > 0 {
		ev.WaitingMax = some(r3(b.waiting.Max))
	}
	if b.a.samples > 0 {
		ev.Samples = b.a.samples
		ev.NotReadyShare = some(r3(float64(b.a.notReady) / float64(b.a.samples)))
	}
	if b.sampled {
		ev.LastSampleAge = some(r3(t.now.Sub(b.lastSample).Seconds()))
	}
	return ev
}

func (l *latency) baseline(t *terms) ttftBaseline {
	ev := ttftBaseline{Source: l.src, Words: l.baselineWords(t)}
	if l.recent.n > 0 {
		ev.RecentP50, ev.RecentSamples, ev.RecentRatio = some(ms(l.recent.p50)), l.recent.n, some(r3(l.recent.ratio))
	}
	if l.warm > 0 {
		ev.Warmup = some(ms(l.warm))
	}
	if l.moving.ok {
		ev.Moving, ev.MovingCoverage = some(ms(l.moving.value)), some(r3(l.moving.coverage.Seconds()))
	}
	return ev
}
