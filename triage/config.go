package triage

import "time"

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
