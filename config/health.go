package config

// HealthConfig configures how backends are probed.
type HealthConfig struct {
	// Interval between probes of one backend.
	Interval Duration `yaml:"interval"`
	// Timeout of one probe request.
	Timeout Duration `yaml:"timeout"`
	// UnhealthyThreshold is how many consecutive failed probes, or
	// connection failures of real requests, turn a ready backend unhealthy.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
	// WarmupPrompt is the prompt of the warm-up generation (a few streamed
	// tokens that also measure the backend's idle TTFT and TPOT)
	// a backend must answer before it is ready, and of the tokenizer probe.
	WarmupPrompt string `yaml:"warmup_prompt"`
	// WarmupTimeout bounds the warm-up generation's wait for each token
	// (the first included): a slow backend that keeps producing tokens is
	// waited for, and a busy one is not waited for (see package fleet).
	WarmupTimeout Duration `yaml:"warmup_timeout"`
	// WarmupBackoffMax caps the wait between failed warm-ups: a backend
	// whose warm-up fails (a tokenizer or max_model_len mismatch, a failed
	// generation) is tried again after one interval, then twice that, and
	// so on up to this; success, or the backend restarting, resets it.
	WarmupBackoffMax Duration `yaml:"warmup_backoff_max"`
	// Budget bounds the whole fleet's health probes a second: past it,
	// every backend's probe interval grows to n / budget (n the fleet's
	// backends); a ready backend's adapter listing takes half of it.
	// auto: 128 backends at interval (128 a second at 1s).
	Budget Budget `yaml:"budget"`
}

// validate checks the health section (health.*).
func (h *HealthConfig) validate(p *problems) {
	p.positive("health.warmup_timeout", h.WarmupTimeout)
	p.positive("health.interval", h.Interval)
	p.positive("health.timeout", h.Timeout)
	p.positive("health.warmup_backoff_max", h.WarmupBackoffMax)
	h.Budget.validate(p, "health.budget")
	if h.UnhealthyThreshold < 1 {
		p.add("health.unhealthy_threshold", "must be at least 1, got %d", h.UnhealthyThreshold)
	}
	if h.WarmupPrompt == "" {
		p.add("health.warmup_prompt", "must not be empty")
	}
}
