package config

// FleetConfig is the part of a config that package fleet reads: the
// models and their backends, how backends are probed (health), the DNS
// server that dns and srv entries are resolved with, and how long a
// draining backend's requests may run (drain_timeout). Its keys are
// top-level keys of the file; Config.Fleet gathers them. It shares the
// Config's lists (plain data, not modified after Validate).
type FleetConfig struct {
	Models       []ModelConfig
	Health       HealthConfig
	Resolver     string
	DrainTimeout Duration
	// ScrapeBudget is scrape_budget (RunScraper's fleet-wide bound).
	ScrapeBudget Budget
}

// Fleet returns the fleet's section of c.
func (c *Config) Fleet() FleetConfig {
	return FleetConfig{Models: c.Models, Health: c.Health, Resolver: c.Resolver, DrainTimeout: c.DrainTimeout, ScrapeBudget: c.ScrapeBudget}
}
