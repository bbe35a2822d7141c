// Package fleet knows the backends: the models and backends named in the
// configuration (package config), their state as seen by probes, and which
// one a request goes to.
//
// # Model
//
// Each configured model has one or more backends (vLLM servers). A prober
// goroutine per backend moves it through a state machine every
// health.interval:
//
//	loading   /health does not answer 200 (vLLM refuses connections while it loads)
//	warming   /health 200; then /v1/models must list the model with a
//	          max_model_len agreeing with the config, the warm-up
//	          generation must succeed (WarmupTokens streamed tokens,
//	          ignore_eos: it measures the backend's TTFT and TPOT idle,
//	          BackendStatus.WarmupTTFT/WarmupTPOT, the floor triage
//	          judges latency against), and the backend's /tokenize must count
//	          a probe conversation as the gateway does
//	          (tokenizer_check: warn serves it anyway, recording the
//	          mismatch; off skips the probe). A failed warm-up is retried
//	          with exponential backoff up to health.warmup_backoff_max
//	ready     requests may go here
//	unhealthy unhealthy_threshold failed probes or real connection failures
//	          in a row; it warms up again when /health recovers
//
// A backend's LoRA adapters are the cards of its /v1/models listing that
// name a parent (vLLM lists each loaded adapter so, root its path). They
// are learned at warm-up and listed again after every health probe of a
// ready backend (every health.interval), so that adapters loaded or
// unloaded at runtime (/v1/load_lora_adapter) appear and disappear
// without a restart; Backend.RefreshAdapters asks for a listing at once
// (the gateway does when a backend answers 404 for an adapter it was
// thought to have). A failed listing keeps the last known adapters.
// OnAdapters hears every change.
//
// A scraper reads each ready backend's /metrics every scrape_interval
// (vllm:num_requests_waiting, running, kv_cache_usage_perc,
// num_preemptions_total, cache_config_info) for the admission pools and
// triage. It streams the page line by line and parses only those families'
// samples, up to MaxMetricsBytes; a failed scrape is a *ScrapeError that
// tells an unreadable answer (error status, not vLLM's page, too large)
// from no answer, and the pools judge from that whether the gauges are
// stale or unavailable. Probe requests carry X-Maitred-Probe.
//
// # Concurrency
//
// Backend state is written by its prober and read by request goroutines
// under the backend's mutex; in-flight counts are atomics. A backend's
// adapter list is part of that state: replaced whole by its prober (the
// backend's Run goroutine, which also serves RefreshAdapters' requests
// through a one-slot channel), never modified in place, so a reader may
// keep the slice it got. Fleet itself is
// immutable after New. fleet uses net/http only as a client.
package fleet
