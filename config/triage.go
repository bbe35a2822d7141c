package config

// TriageConfig holds the thresholds of the triage rules (0: the default).
type TriageConfig struct {
	// Baseline is the time constant of each backend's moving baseline.
	Baseline Duration `yaml:"baseline" reload:"restart"`
	// MinSamples latency samples a backend needs before it is judged.
	MinSamples int `yaml:"min_samples"`
	// TTFT rises at TTFTRiseFactor x baseline and TTFTMinDelta above it.
	TTFTRiseFactor float64  `yaml:"ttft_rise_factor"`
	TTFTMinDelta   Duration `yaml:"ttft_min_delta"`
	// TPOT is stable below TPOTStableFactor x baseline, and rises at
	// TPOTRiseFactor x baseline and TPOTMinDelta above it.
	TPOTStableFactor float64  `yaml:"tpot_stable_factor"`
	TPOTRiseFactor   float64  `yaml:"tpot_rise_factor"`
	TPOTMinDelta     Duration `yaml:"tpot_min_delta"`
	// A failure class counts from MinFailures failures making
	// MinFailureShare of the window's requests.
	MinFailures     int     `yaml:"min_failures"`
	MinFailureShare float64 `yaml:"min_failure_share"`
	// KVFull is the KV usage that reads as near full.
	KVFull float64 `yaml:"kv_full"`
	// SlowPathFactor: a backend this many times slower than its model's
	// peers is flagged as a possible slow-path fallback.
	SlowPathFactor float64 `yaml:"slow_path_factor"`
}

// validate checks the triage section: every threshold is 0 (the default)
// or positive, and shares are fractions.
func (t *TriageConfig) validate(p *problems) {
	if t.Baseline < 0 || t.TTFTMinDelta < 0 || t.TPOTMinDelta < 0 || t.MinSamples < 0 || t.MinFailures < 0 ||
		t.TTFTRiseFactor < 0 || t.TPOTStableFactor < 0 || t.TPOTRiseFactor < 0 || t.SlowPathFactor < 0 ||
		t.MinFailureShare < 0 || t.MinFailureShare > 1 || t.KVFull < 0 || t.KVFull > 1 {
		p.add("triage", "thresholds must not be negative; shares and kv_full are fractions from 0 to 1")
	}
}
