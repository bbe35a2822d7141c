package triage

import (
	"math"
	"sort"
	"time"
)

// Verdicts, in precedence order (the first that matches is the verdict).
const (
	VerdictCompat      = "compatibility"
	VerdictUnavailable = "backend_unavailable"
	VerdictKV          = "kv_pressure"
	VerdictDecode      = "decode_pressure"
	VerdictPrefill     = "admission_or_prefill_pressure"
	VerdictBoundary    = "boundary"
	VerdictClient      = "client_side"
	VerdictHealthy     = "healthy"
)

// Precedence lists the symptom classes from most to least dominant. A cause
// earlier in the list explains symptoms later in it: a backend held back
// because it serves other ingredients (tokenizer, template, context length)
// is unavailable for a reason no restart fixes; a dead backend fills
// queues and makes clients give up; a full KV cache preempts, which slows
// decode and grows the waiting queue; slow decode lowers throughput, which
// grows queues. Door rejections and client behaviour say nothing about the
// fleet, so they come last among the failure classes.
func Precedence() []string {
	return []string{VerdictCompat, VerdictUnavailable, VerdictKV, VerdictDecode, VerdictPrefill, VerdictBoundary, VerdictClient}
}

var nextSteps = map[string][]string{
	VerdictCompat: {
		"the tokenizer folder and chat template this gateway loads (models[].tokenizer, chat_template) against the backend's (vLLM --tokenizer, --chat-template, --revision of the model)",
		"the two counts of the probe conversation (gateway vs backend) in incompatible_backends; POST /tokenize on both with the same body shows where they part",
		"max_model_len in the config against the backend's --max-model-len (GET /v1/models)",
		"a difference that is known and harmless can be accepted with tokenizer_check: warn on the model",
	},
	VerdictKV: {
		"free GPU memory on the affected backends (nvidia-smi)",
		"configured gpu_memory_utilization (and max_model_len, which sizes the worst case)",
		"active sequences (vllm:num_requests_running) against max_num_seqs",
		"context lengths of the running requests (prompt + max_tokens)",
		"allocator and preemption messages in the vLLM logs",
	},
	VerdictDecode: {
		"batch size (vllm:num_requests_running) against max_num_seqs",
		"GPU memory bandwidth utilisation",
		"cross-GPU collectives (tensor-parallel interconnect, NCCL)",
		"a noisy neighbour on the same GPU or host",
	},
	VerdictPrefill: {
		"gateway queue depth and vLLM waiting queue (vllm:num_requests_waiting)",
		"prompt lengths of recent requests",
		"chunked prefill settings (enable_chunked_prefill, max_num_batched_tokens)",
		"add capacity (replicas) or shed load at the gateway",
	},
	VerdictBoundary: {
		"client payloads, by rejection reason",
		"requests the backend refused itself (backend_rejections, failures_by_reason backend_rejected): the backend's log says why",
		"max_tokens requested against the model's max_model_len",
		"whether a client stopped truncating its history",
	},
	VerdictUnavailable: {
		"backend logs around the listed 'since' times",
		"GET /health on each listed backend",
		"restarts, OOM kills and scheduling of the backend processes",
	},
	VerdictClient: {
		"client network path (latency, bandwidth, proxies in between)",
		"client read loops: is the stream consumed as it arrives?",
		"client timeouts shorter than TTFT plus generation time",
	},
	VerdictHealthy: {
		"nothing stands out in the window; if users report slowness, compare their timings with the figures here",
	},
}

// Next returns what to inspect next for a verdict, per the triage manual.
func Next(verdict string) []string {
	return append([]string(nil), nextSteps[verdict]...)
}

// Report is the triage of the current window.
type Report struct {
	Verdict  string         `json:"verdict"`
	Evidence map[string]any `json:"evidence"`
	// Said is the verdict's evidence in sentences (the figures that made
	// it, and for latency which baseline they were judged against).
	Said        []string      `json:"said"`
	Next        []string      `json:"next"`
	Window      string        `json:"window"`
	Requests    int           `json:"requests"`
	Models      []ModelReport `json:"models"`
	Others      []Finding     `json:"others,omitempty"`
	GeneratedAt time.Time     `json:"generated_at"`
	// Dropped counts observations and samples that arrived older than the
	// window, since the engine started.
	Dropped uint64 `json:"dropped,omitempty"`
}

// Finding is one symptom class that matches, with its evidence.
type Finding struct {
	Verdict  string         `json:"verdict"`
	Evidence map[string]any `json:"evidence"`
	Said     []string       `json:"said"`
	Next     []string       `json:"next"`
}

// ModelReport is the triage of one model.
type ModelReport struct {
	Model    string          `json:"model"`
	Verdict  string          `json:"verdict"`
	Evidence map[string]any  `json:"evidence"`
	Said     []string        `json:"said"`
	Next     []string        `json:"next"`
	Requests int             `json:"requests"`
	Backends []BackendReport `json:"backends"`
	Others   []Finding       `json:"others,omitempty"`
}

// BackendReport is the detail of one backend of a model.
type BackendReport struct {
	Backend     string `json:"backend"`
	Requests    int    `json:"requests"`
	Ready       bool   `json:"ready"`
	State       string `json:"state,omitempty"`
	StateReason string `json:"state_reason,omitempty"`
	StateSince  string `json:"state_since,omitempty"`
	// Ejected: the gateway's queue ejected it as an outlier (StateReason
	// says until when).
	Ejected bool `json:"ejected,omitempty"`
	// Gauges is the gateway's trust in its scraped gauges: unknown, fresh,
	// stale (counted as saturated) or unavailable (scrapes failing; the
	// backend is admitted on its in-flight and token-budget limits alone).
	Gauges string `json:"gauges,omitempty"`
	// Compatibility is a difference of ingredients found at warm-up,
	// holding it back or accepted (tokenizer_check: warn).
	Compatibility *Compatibility `json:"compatibility,omitempty"`
	// Matches lists the per-backend classes this backend shows
	// (compatibility, backend_unavailable, kv_pressure, decode_pressure,
	// admission_or_prefill_pressure), in precedence order.
	Matches          []string         `json:"matches,omitempty"`
	SlowPathFallback bool             `json:"possible_slow_path_fallback"`
	SlowPath         []map[string]any `json:"slow_path_evidence,omitempty"`
	Evidence         map[string]any   `json:"evidence"`
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

// beval is one series evaluated over the window.
type beval struct {
	s  *series
	ms *mscope
	a  agg

	ttftP50, ttftP95, tpotP50, tpotP95 float64 // ns
	ttftBase, tpotBase                 float64 // ns, 0 unknown
	ttftSrc, tpotSrc                   string
	ttftRatio, tpotRatio               float64 // 0 unknown
	ttftRising, tpotRising, tpotStable bool
	// The newest Thresholds.Recent of the window, judged on its own.
	ttftRecent, tpotRecent judged

	running, waiting, kv gaugeStat
	prePerMin            float64
	preKnown             bool
	preBase              float64
	preBaseKnown         bool

	notReadyNow                         bool
	incompatible                        bool
	unavailable, kvM, decodeM, prefillM bool
	slow                                []map[string]any
}

type mscope struct {
	m            *model
	requests     int
	door, fail   [maxReasonSlots]int
	queue        gauge
	q            gaugeStat
	queueGrowing bool
	bes          []*beval
}

func r3(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1000) / 1000
}

func ms(ns float64) float64 { return r3(ns / 1e6) }

// Report classifies the current window. It folds buckets that have left
// the window into the moving baselines, so it takes the engine's lock; it
// costs O(models x backends x buckets).
func (e *Engine) Report() Report {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	nowIdx := e.bucketIdx(now)
	lo := nowIdx - numBuckets + 1
	origin := time.Unix(0, lo*int64(e.width))
	th := e.cfg.Thresholds

	models := append([]*model(nil), e.order...)
	sort.Slice(models, func(i, j int) bool { return models[i].name < models[j].name })
	var scopes []*mscope
	var all []*beval
	for _, m := range models {
		e.advanceModel(m, nowIdx)
		msc := &mscope{m: m}
		for i := range m.buckets {
			b := &m.buckets[i]
			if !b.used || b.idx < lo {
				continue
			}
			for k := range b.door {
				msc.door[k] += int(b.door[k])
				msc.fail[k] += int(b.fail[k])
			}
			msc.queue.mergeShift(&b.queue, time.Duration((b.idx-lo)*int64(e.width)).Seconds())
		}
		msc.q = msc.queue.stat()
		msc.queueGrowing = msc.q.N > 0 && (msc.q.SlopePerMin >= th.GrowthPerMin || msc.q.Last >= th.QueueDepthHigh)
		sers := append([]*series(nil), m.order...)
		sort.Slice(sers, func(i, j int) bool { return sers[i].name < sers[j].name })
		for _, s := range sers {
			e.advance(s, nowIdx)
			be := &beval{s: s, ms: msc}
			e.evalSeries(be, lo, origin, now)
			msc.bes = append(msc.bes, be)
			msc.requests += be.a.requests
			all = append(all, be)
		}
		e.slowPath(msc)
		scopes = append(scopes, msc)
	}

	rep := Report{Window: e.cfg.Window.String(), GeneratedAt: now, Dropped: e.dropped}
	rep.Verdict, rep.Evidence, rep.Said, rep.Others = e.evaluate(all, scopes, now)
	rep.Next = Next(rep.Verdict)
	for _, msc := range scopes {
		mr := ModelReport{Model: msc.m.name, Requests: msc.requests}
		mr.Verdict, mr.Evidence, mr.Said, mr.Others = e.evaluate(msc.bes, []*mscope{msc}, now)
		mr.Next = Next(mr.Verdict)
		rep.Requests += msc.requests
		for _, be := range msc.bes {
			if be.s.name == "" {
				continue
			}
			mr.Backends = append(mr.Backends, e.backendReport(be, now))
		}
		rep.Models = append(rep.Models, mr)
	}
	return rep
}

func (e *Engine) evalSeries(be *beval, lo int64, origin time.Time, now time.Time) {
	th := e.cfg.Thresholds
	s, a := be.s, &be.a
	for i := range s.buckets {
		b := &s.buckets[i]
		if !b.used || b.idx < lo {
			continue
		}
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
		d := time.Duration((b.idx - lo) * int64(e.width)).Seconds()
		a.running.mergeShift(&b.running, d)
		a.waiting.mergeShift(&b.waiting, d)
		a.kv.mergeShift(&b.kv, d)
		a.samples += int(b.samples)
		a.notReady += int(b.notReady)
		a.preDelta += b.preemptDelta
		a.preSpan += b.preemptSpan
	}
	be.ttftP50, be.ttftP95 = a.ttft.quantile(0.5), a.ttft.quantile(0.95)
	be.tpotP50, be.tpotP95 = a.tpot.quantile(0.5), a.tpot.quantile(0.95)
	// The newest buckets on their own: a change shows there before it
	// outweighs the rest of the window.
	var rt, rp hist
	for i := range s.buckets {
		b := &s.buckets[i]
		if b.used && b.idx >= lo && b.idx > lo+numBuckets-1-e.recentBuckets() {
			rt.merge(&b.ttft)
			rp.merge(&b.tpot)
		}
	}

	var warmTTFT, warmTPOT float64
	if s.warm {
		warmTTFT, warmTPOT = float64(s.warmTTFT), float64(s.warmTPOT)
	}
	be.ttftBase, be.ttftSrc = pickBase(warmTTFT, &s.base.ttft, th.MinBaselineCoverage)
	be.tpotBase, be.tpotSrc = pickBase(warmTPOT, &s.base.tpot, th.MinBaselineCoverage)
	minN := uint32(th.MinSamples)
	// Rising over the whole window, or over its newest part alone; the
	// ratio reported is the larger of the two that could be judged.
	rising := func(p50, base, factor float64, delta time.Duration) bool {
		return p50 >= factor*base && p50-base >= float64(delta)
	}
	if be.ttftBase > 0 {
		if a.ttft.n >= minN {
			be.ttftRatio = be.ttftP50 / be.ttftBase
			be.ttftRising = rising(be.ttftP50, be.ttftBase, th.TTFTRiseFactor, th.TTFTMinDelta)
		}
		if rt.n >= minN {
			p := rt.quantile(0.5)
			be.ttftRecent = judged{p50: p, n: int(rt.n), ratio: p / be.ttftBase, rising: rising(p, be.ttftBase, th.TTFTRiseFactor, th.TTFTMinDelta)}
			be.ttftRatio = math.Max(be.ttftRatio, be.ttftRecent.ratio)
			be.ttftRising = be.ttftRising || be.ttftRecent.rising
		}
	}
	be.tpotStable = true
	if be.tpotBase > 0 {
		if a.tpot.n >= minN {
			be.tpotRatio = be.tpotP50 / be.tpotBase
			be.tpotRising = rising(be.tpotP50, be.tpotBase, th.TPOTRiseFactor, th.TPOTMinDelta)
			be.tpotStable = be.tpotP50 < th.TPOTStableFactor*be.tpotBase
		}
		if rp.n >= minN {
			p := rp.quantile(0.5)
			be.tpotRecent = judged{p50: p, n: int(rp.n), ratio: p / be.tpotBase, rising: rising(p, be.tpotBase, th.TPOTRiseFactor, th.TPOTMinDelta)}
			be.tpotRatio = math.Max(be.tpotRatio, be.tpotRecent.ratio)
			be.tpotRising = be.tpotRising || be.tpotRecent.rising
			be.tpotStable = be.tpotStable && !be.tpotRecent.rising
		}
	}

	be.running, be.waiting, be.kv = a.running.stat(), a.waiting.stat(), a.kv.stat()
	if a.preSpan > 0 {
		be.prePerMin, be.preKnown = a.preDelta/a.preSpan*60, true
	}
	if v, ok := s.base.pre.value(); ok {
		be.preBase, be.preBaseKnown = v*60, true
	}

	be.notReadyNow = s.sampled && (!s.ready || s.ejected) && !s.lastSample.Before(origin)
	// Held back for its ingredients: compatibility, not availability.
	be.incompatible = be.notReadyNow && !s.ready && s.compat != nil && !s.compat.Accepted
	connect := a.layers[layerConnect] + a.layers[layerUnready]
	be.unavailable = (be.notReadyNow && !be.incompatible) || (connect >= th.MinFailures && float64(connect) >= th.MinFailureShare*float64(a.requests))
	waitingGrowing := be.waiting.N > 0 && (be.waiting.SlopePerMin >= th.GrowthPerMin || be.waiting.Last >= th.WaitingHigh)
	be.kvM = be.kv.N > 0 && be.kv.Max >= th.KVFull &&
		((be.preKnown && be.prePerMin > th.PreemptionsPerMin) ||
			(be.waiting.N > 1 && be.waiting.SlopePerMin >= th.GrowthPerMin && be.running.SlopePerMin < th.GrowthPerMin))
	be.decodeM = be.tpotRising
	be.prefillM = (be.ms.queueGrowing || waitingGrowing) && be.ttftRising && be.tpotStable
}

// judged is a latency figure over the newest part of the window.
type judged struct {
	p50    float64 // ns
	n      int     // samples
	ratio  float64 // p50 / baseline
	rising bool
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
func pickBase(warm float64, mv *ewma, minCov time.Duration) (float64, string) {
	v, ok := mv.value()
	ok = ok && mv.coverage >= minCov && v > 0
	switch {
	case warm > 0 && ok && v < warm:
		return v, "moving"
	case warm > 0:
		return warm, "warmup"
	case ok:
		return v, "moving"
	}
	return 0, ""
}

// slowPath flags backends whose warm-up TTFT/TPOT or window TPOT is far
// above the median of the model's other backends.
func (e *Engine) slowPath(msc *mscope) {
	th := e.cfg.Thresholds
	var bes []*beval
	for _, be := range msc.bes {
		if be.s.name != "" {
			bes = append(bes, be)
		}
	}
	if len(bes) < 2 {
		return
	}
	type sig struct {
		name string
		get  func(*beval) (float64, bool)
	}
	sigs := []sig{
		{"warmup_ttft", func(b *beval) (float64, bool) { return float64(b.s.warmTTFT), b.s.warmTTFT > 0 }},
		{"warmup_tpot", func(b *beval) (float64, bool) { return float64(b.s.warmTPOT), b.s.warmTPOT > 0 }},
		{"window_tpot_p50", func(b *beval) (float64, bool) { return b.tpotP50, b.a.tpot.n >= uint32(th.MinSamples) }},
	}
	vals := make([]float64, 0, len(bes))
	for _, sg := range sigs {
		for _, b := range bes {
			v, ok := sg.get(b)
			if !ok || v <= 0 {
				continue
			}
			vals = vals[:0]
			for _, o := range bes {
				if o == b {
					continue
				}
				if ov, ok := sg.get(o); ok && ov > 0 {
					vals = append(vals, ov)
				}
			}
			if len(vals) == 0 {
				continue
			}
			med := median(vals)
			if v >= th.SlowPathFactor*med {
				b.slow = append(b.slow, map[string]any{
					"signal": sg.name, "value_ms": ms(v), "peers_median_ms": ms(med), "ratio": r3(v / med),
				})
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

func qualified(be *beval) string {
	return be.ms.m.name + "/" + be.s.name
}

// figures returns the latency and gauge evidence of a set of series.
func (e *Engine) figures(bes []*beval, scopes []*mscope) map[string]any {
	ev := map[string]any{}
	var tt, tp hist
	var ttB, ttBW, ttR, ttRW, tpB, tpBW, tpR, tpRW float64
	var wF, wL, wS, rF, rL, rS, kvMax, kvMean, pre, preB float64
	var nW, nR, nKV, nPre, nPreB int
	for _, be := range bes {
		a := &be.a
		tt.merge(&a.ttft)
		tp.merge(&a.tpot)
		if w := float64(a.ttft.n); w > 0 && be.ttftBase > 0 {
			ttB += w * be.ttftBase
			ttBW += w
			if be.ttftRatio > 0 {
				ttR += w * be.ttftRatio
				ttRW += w
			}
		}
		if w := float64(a.tpot.n); w > 0 && be.tpotBase > 0 {
			tpB += w * be.tpotBase
			tpBW += w
			if be.tpotRatio > 0 {
				tpR += w * be.tpotRatio
				tpRW += w
			}
		}
		if be.waiting.N > 0 {
			wF, wL, wS = wF+be.waiting.First, wL+be.waiting.Last, wS+be.waiting.SlopePerMin
			nW++
		}
		if be.running.N > 0 {
			rF, rL, rS = rF+be.running.First, rL+be.running.Last, rS+be.running.SlopePerMin
			nR++
		}
		if be.kv.N > 0 {
			kvMax = math.Max(kvMax, be.kv.Max)
			kvMean += be.kv.Mean
			nKV++
		}
		if be.preKnown {
			pre += be.prePerMin
			nPre++
		}
		if be.preBaseKnown {
			preB += be.preBase
			nPreB++
		}
	}
	if tt.n > 0 {
		ev["ttft_samples"] = int(tt.n)
		ev["ttft_p50_ms"] = ms(tt.quantile(0.5))
		ev["ttft_p95_ms"] = ms(tt.quantile(0.95))
	}
	if ttBW > 0 {
		ev["ttft_baseline_ms"] = ms(ttB / ttBW)
	}
	if ttRW > 0 {
		ev["ttft_ratio"] = r3(ttR / ttRW)
	}
	if tp.n > 0 {
		ev["tpot_samples"] = int(tp.n)
		ev["tpot_p50_ms"] = ms(tp.quantile(0.5))
		ev["tpot_p95_ms"] = ms(tp.quantile(0.95))
	}
	if tpBW > 0 {
		ev["tpot_baseline_ms"] = ms(tpB / tpBW)
	}
	if tpRW > 0 {
		ev["tpot_ratio"] = r3(tpR / tpRW)
	}
	if nW > 0 {
		ev["waiting_first"], ev["waiting_last"], ev["waiting_slope_per_min"] = r3(wF), r3(wL), r3(wS)
	}
	if nR > 0 {
		ev["running_first"], ev["running_last"], ev["running_slope_per_min"] = r3(rF), r3(rL), r3(rS)
	}
	if nKV > 0 {
		ev["kv_usage_max"], ev["kv_usage_mean"] = r3(kvMax), r3(kvMean/float64(nKV))
	}
	if nPre > 0 {
		ev["preemptions_per_min"] = r3(pre)
	}
	if nPreB > 0 {
		ev["preemptions_per_min_baseline"] = r3(preB)
	}
	var qF, qL, qS, qMax float64
	nQ := 0
	for _, msc := range scopes {
		if msc.q.N > 0 {
			qF, qL, qS, qMax = qF+msc.q.First, qL+msc.q.Last, qS+msc.q.SlopePerMin, qMax+msc.q.Max
			nQ++
		}
	}
	if nQ > 0 {
		ev["queue_depth_first"], ev["queue_depth_last"] = r3(qF), r3(qL)
		ev["queue_depth_max"], ev["queue_slope_per_min"] = r3(qMax), r3(qS)
	}
	return ev
}

// evaluate applies every rule to a scope (the fleet, or one model) and
// returns the dominant verdict, the evidence (scope figures overlaid with
// the dominant finding's) and the other matching findings in precedence
// order.
func (e *Engine) evaluate(bes []*beval, scopes []*mscope, now time.Time) (string, map[string]any, []string, []Finding) {
	th := e.cfg.Thresholds
	var requests, ok, stalled int
	var layers [numLayers]int
	var stallNs, totalNs int64
	var door, fail [maxReasonSlots]int
	backendReq := 0
	for _, be := range bes {
		a := &be.a
		requests += a.requests
		ok += a.ok
		stalled += a.stalled
		stallNs += a.stallNs
		totalNs += a.totalNs
		for k := range layers {
			layers[k] += a.layers[k]
		}
		if be.s.name != "" {
			backendReq += a.requests
		}
	}
	for _, msc := range scopes {
		for k := range door {
			door[k] += msc.door[k]
			fail[k] += msc.fail[k]
		}
	}
	failures := requests - ok

	core := e.figures(bes, scopes)
	core["requests"] = requests
	core["failures"] = failures
	fbl := map[string]int{}
	for k, n := range layers {
		if n > 0 {
			fbl[layerNames[k]] = n
		}
	}
	core["failures_by_layer"] = fbl
	rbr, fbr := e.reasonMap(&door), e.reasonMap(&fail)
	core["rejections_by_reason"] = rbr
	if len(fbr) > 0 {
		core["failures_by_reason"] = fbr
	}
	clientStallShare, stalledShare := 0.0, 0.0
	if totalNs > 0 {
		clientStallShare = float64(stallNs) / float64(totalNs)
	}
	if requests > 0 {
		stalledShare = float64(stalled) / float64(requests)
	}
	core["client_stall_share"] = r3(clientStallShare)
	core["stalled_request_share"] = r3(stalledShare)
	core["client_closed"] = layers[layerClient]
	nb, nready := 0, 0
	var slow []string
	for _, be := range bes {
		if be.s.name == "" {
			continue
		}
		nb++
		if be.s.sampled && be.s.ready {
			nready++
		}
		if len(be.slow) > 0 {
			slow = append(slow, qualified(be))
		}
	}
	core["backends"] = nb
	core["backends_ready"] = nready
	if len(slow) > 0 {
		core["slow_path_backends"] = slow
	}

	significant := func(n int) bool {
		return n >= th.MinFailures && float64(n) >= th.MinFailureShare*float64(requests)
	}
	share := func(n, of int) float64 {
		if of == 0 {
			return 0
		}
		return float64(n) / float64(of)
	}
	// per-backend classes: the affected backends and the share of backend
	// traffic they served.
	perBackend := func(match func(*beval) bool) ([]*beval, float64, bool) {
		var aff []*beval
		req := 0
		for _, be := range bes {
			if be.s.name != "" && match(be) {
				aff = append(aff, be)
				req += be.a.requests
			}
		}
		if len(aff) == 0 {
			return nil, 0, false
		}
		sh := 1.0
		if backendReq > 0 {
			sh = share(req, backendReq)
		}
		return aff, sh, sh >= th.MinAffectedShare
	}
	affected := func(ev map[string]any, aff []*beval, sh float64) {
		names := make([]string, len(aff))
		for i, be := range aff {
			names[i] = qualified(be)
		}
		ev["affected_backends"] = names
		ev["affected_share"] = r3(sh)
	}

	var found []Finding
	add := func(v string, ev map[string]any, said []string) {
		found = append(found, Finding{Verdict: v, Evidence: ev, Said: said, Next: Next(v)})
	}

	// compatibility
	var incompat []map[string]any
	for _, be := range bes {
		if be.s.name == "" || !be.incompatible {
			continue
		}
		c := be.s.compat
		d := map[string]any{"backend": qualified(be), "check": c.Check, "gateway": c.Gateway, "backend_value": c.Backend,
			"state": be.s.state, "state_reason": be.s.stateReason}
		if !be.s.stateSince.IsZero() {
			d["since"] = be.s.stateSince.UTC().Format(time.RFC3339)
		}
		incompat = append(incompat, d)
	}
	if len(incompat) > 0 {
		add(VerdictCompat, map[string]any{
			"incompatible_backends": incompat,
			"backends":              nb,
			"backends_ready":        nready,
		}, sayCompat(bes))
	}

	// backend_unavailable
	unav := layers[layerUnready] + layers[layerConnect]
	var downList []map[string]any
	anyDownNow := false
	for _, be := range bes {
		if be.s.name == "" {
			continue
		}
		conn := be.a.layers[layerConnect]
		if !be.unavailable && be.a.notReady == 0 && conn == 0 || be.incompatible {
			continue
		}
		anyDownNow = anyDownNow || be.notReadyNow
		d := map[string]any{
			"backend":          qualified(be),
			"ready":            be.s.sampled && be.s.ready,
			"connect_failures": conn,
		}
		switch {
		case be.notReadyNow && be.s.ejected:
			d["reason"] = "ejected"
		case be.notReadyNow:
			d["reason"] = "not_ready"
		case conn > 0:
			d["reason"] = "connect_failures"
		}
		if be.s.state != "" {
			d["state"] = be.s.state
		}
		if be.s.stateReason != "" {
			d["state_reason"] = be.s.stateReason
		}
		if !be.s.stateSince.IsZero() {
			d["since"] = be.s.stateSince.UTC().Format(time.RFC3339)
			d["for_s"] = r3(now.Sub(be.s.stateSince).Seconds())
		}
		if be.a.samples > 0 {
			d["not_ready_share"] = r3(share(be.a.notReady, be.a.samples))
		}
		downList = append(downList, d)
	}
	if significant(unav) || anyDownNow {
		add(VerdictUnavailable, map[string]any{
			"unavailable_failures":      unav,
			"no_ready_backend_failures": layers[layerUnready],
			"connect_failures":          layers[layerConnect],
			"unavailable_share":         r3(share(unav, requests)),
			"unavailable_backends":      downList,
			"backends":                  nb,
			"backends_ready":            nready,
		}, sayUnavailable(bes, layers[layerUnready], layers[layerConnect], requests, now))
	}

	// kv_pressure
	if aff, sh, okm := perBackend(func(b *beval) bool { return b.kvM }); okm {
		ev := e.figures(aff, nil)
		affected(ev, aff, sh)
		add(VerdictKV, ev, e.sayKV(aff))
	}
	// decode_pressure
	if aff, sh, okm := perBackend(func(b *beval) bool { return b.decodeM }); okm {
		ev := e.figures(aff, nil)
		affected(ev, aff, sh)
		add(VerdictDecode, ev, e.sayLatency(aff, false))
	}
	// admission_or_prefill_pressure
	gq := layers[layerQueue]
	np := layers[layerPrefill]
	aff, sh, okm := perBackend(func(b *beval) bool { return b.prefillM })
	if okm || significant(gq) || significant(np) {
		ev := e.figures(aff, affScopes(aff, scopes))
		if okm {
			affected(ev, aff, sh)
		}
		if !okm {
			for k, v := range e.figures(nil, scopes) {
				ev[k] = v
			}
		}
		ev["gateway_queue_failures"] = gq
		ev["prefill_failures"] = np
		add(VerdictPrefill, ev, e.sayPrefill(aff, affScopes(aff, scopes), gq, np))
	}
	// boundary: requests refused at the door, or by the backend itself
	// (its own 4xx: a shape the door does not check).
	nd, nb := layers[layerDoor], layers[layerBackend]
	if significant(nd+nb) && share(nd+nb, failures) >= th.DoorShare {
		add(VerdictBoundary, map[string]any{
			"door_rejections":      nd,
			"backend_rejections":   nb,
			"door_share":           r3(share(nd+nb, failures)),
			"rejection_rate":       r3(share(nd+nb, requests)),
			"rejections_by_reason": rbr,
		}, sayBoundary(nd, nb, failures, requests, rbr))
	}
	// client_side
	nc := layers[layerClient]
	clientFail := significant(nc) && share(nc, failures) >= th.ClientShare
	stallDom := stalled >= th.MinFailures && stalledShare >= th.StalledRequestShare
	if clientFail || stallDom {
		add(VerdictClient, map[string]any{
			"client_closed":         nc,
			"client_failure_share":  r3(share(nc, failures)),
			"client_stall_share":    r3(clientStallShare),
			"stalled_requests":      stalled,
			"stalled_request_share": r3(stalledShare),
		}, e.sayClient(clientFail, nc, failures, stallDom, stalled, requests))
	}

	if len(found) == 0 {
		return VerdictHealthy, core, e.sayHealthy(requests, failures), nil
	}
	for k, v := range found[0].Evidence {
		core[k] = v
	}
	var others []Finding
	if len(found) > 1 {
		others = found[1:]
	}
	return found[0].Verdict, core, found[0].Said, others
}

// affScopes returns the model scopes of the affected series.
func affScopes(aff []*beval, scopes []*mscope) []*mscope {
	var out []*mscope
	for _, msc := range scopes {
		for _, be := range aff {
			if be.ms == msc {
				out = append(out, msc)
				break
			}
		}
	}
	return out
}

func (e *Engine) reasonMap(c *[maxReasonSlots]int) map[string]int {
	out := map[string]int{}
	for i, n := range c {
		if n > 0 {
			out[e.reasonName(i)] += n
		}
	}
	return out
}

func (e *Engine) backendReport(be *beval, now time.Time) BackendReport {
	s := be.s
	br := BackendReport{
		Backend:     s.name,
		Requests:    be.a.requests,
		Ready:       s.sampled && s.ready,
		State:       s.state,
		StateReason: s.stateReason,
		Ejected:     s.sampled && s.ejected,
		Gauges:      s.gaugesState,
	}
	if s.compat != nil {
		c := *s.compat
		br.Compatibility = &c
	}
	if !s.stateSince.IsZero() {
		br.StateSince = s.stateSince.UTC().Format(time.RFC3339)
	}
	for _, c := range []struct {
		v string
		m bool
	}{{VerdictCompat, be.incompatible}, {VerdictUnavailable, be.unavailable}, {VerdictKV, be.kvM}, {VerdictDecode, be.decodeM}, {VerdictPrefill, be.prefillM}} {
		if c.m {
			br.Matches = append(br.Matches, c.v)
		}
	}
	br.SlowPathFallback = len(be.slow) > 0
	br.SlowPath = be.slow
	ev := e.figures([]*beval{be}, nil)
	ev["requests"] = be.a.requests
	ev["failures"] = be.a.requests - be.a.ok
	fbl := map[string]int{}
	for k, n := range be.a.layers {
		if n > 0 {
			fbl[layerNames[k]] = n
		}
	}
	ev["failures_by_layer"] = fbl
	if be.ttftSrc != "" {
		ev["ttft_baseline_source"] = be.ttftSrc
	}
	if be.tpotSrc != "" {
		ev["tpot_baseline_source"] = be.tpotSrc
	}
	ev["ttft_baseline_words"] = e.baselineWords(be, false)
	ev["tpot_baseline_words"] = e.baselineWords(be, true)
	for _, r := range []struct {
		k string
		j judged
	}{{"ttft", be.ttftRecent}, {"tpot", be.tpotRecent}} {
		if r.j.n > 0 {
			ev[r.k+"_recent_p50_ms"] = ms(r.j.p50)
			ev[r.k+"_recent_samples"] = r.j.n
			ev[r.k+"_recent_ratio"] = r3(r.j.ratio)
		}
	}
	if s.warmTTFT > 0 {
		ev["ttft_warmup_ms"] = ms(float64(s.warmTTFT))
	}
	if s.warmTPOT > 0 {
		ev["tpot_warmup_ms"] = ms(float64(s.warmTPOT))
	}
	if v, ok := s.base.ttft.value(); ok {
		ev["ttft_moving_baseline_ms"] = ms(v)
		ev["ttft_moving_baseline_coverage_s"] = r3(s.base.ttft.coverage.Seconds())
	}
	if v, ok := s.base.tpot.value(); ok {
		ev["tpot_moving_baseline_ms"] = ms(v)
		ev["tpot_moving_baseline_coverage_s"] = r3(s.base.tpot.coverage.Seconds())
	}
	if be.kv.N > 0 {
		ev["kv_usage_min"] = r3(be.kv.Min)
	}
	if be.waiting.N > 0 {
		ev["waiting_max"] = r3(be.waiting.Max)
	}
	if be.a.samples > 0 {
		ev["samples"] = be.a.samples
		ev["not_ready_share"] = r3(float64(be.a.notReady) / float64(be.a.samples))
	}
	if s.sampled {
		ev["last_sample_age_s"] = r3(now.Sub(s.lastSample).Seconds())
	}
	br.Evidence = ev
	return br
}
