// Package fleet knows the backends: the models and backends named in the
// configuration (package config) or found through DNS, their state as seen
// by probes, and which one a request goes to. New and Apply take the
// fleet's own section of the config (config.FleetConfig: the models and
// their backends, health, resolver, drain_timeout), not the whole.
//
// # Files
//
// fleet.go holds the Fleet (New, its watchers, Run and the per-backend
// goroutines); state.go the backend states and the reasons for them;
// backend.go a Backend and its snapshot (BackendStatus); model.go a Model
// and how a backend is picked; members.go and discovery.go membership
// (below); budget.go the fleet-wide budgets that stretch the probe,
// listing and scrape intervals of a large fleet (below); probe.go the state machine's step (health, warm-up checks,
// tokenizer probe); warmup.go the warm-up generation; adapters.go the
// LoRA adapter listings; client.go the fleet's requests to a backend
// and its transport (NewTransport); beat.go the fleet-wide clock the
// probers and scrapers wait on; scrape.go the /metrics scraper; events.go
// the KV-event subscriptions
// (RunEvents: for a model with routing: precise, one kvevents.Subscriber
// per data-parallel rank of each backend with kv_events, into the model's
// prefixindex.Index, started and stopped with the backend and restarted
// when a reload changes its kv_events or the model's index).
//
// # Membership
//
// Each entry of a model's backends list is a source (members.go): a url
// is one backend (source "static"); a dns entry (name:port) stands for
// every address of name, and an srv entry for its SRV records' targets
// (discovery.go), each resolved every dns_interval, by the config's
// resolver or the system's. A lookup is the whole answer: an address new
// to the model joins (loading: traffic only once warmed up), one that
// stays keeps its Backend and all its state, and one that left drains
// (Ready is false: nothing new is sent; its requests finish), then is
// forgotten once idle (its in-flight count and HoldDrain's, the gateway's
// leases) or drain_timeout after it began to drain. A draining address
// listed again comes back as it was. A failed lookup, or an answer with no
// address, keeps the last known set (never emptying the fleet), logged
// when it starts and ends and counted (Discovery). A backend is named by
// its host:port, unique within its model. Apply puts a reloaded config in
// force the same way: models and entries that stay keep their backends,
// new ones join, removed ones drain. OnMembers hears every change of a
// model's list (the gateway's pool follows it).
//
// # Model
//
// Each configured model has one or more backends (vLLM servers). A prober
// goroutine per backend moves it through a state machine every
// health.interval (ProbeEvery: longer past health.budget, below; the
// probes of a round all start at one fleet-wide beat):
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
//	          mismatch; off skips the probe). Each step has its own
//	          deadline (health.timeout; the generation warmup_timeout
//	          per token). A backend busy serving others (requests
//	          waiting, vllm:generation_tokens_total rising across two
//	          /metrics reads while the generation has no token yet) is
//	          warm: the queued generation is given up and the backend is
//	          ready unmeasured (BackendStatus.WarmupBusy). A failed
//	          warm-up is retried with exponential backoff up to
//	          health.warmup_backoff_max
//	ready     requests may go here
//	unhealthy unhealthy_threshold failed probes or real connection failures
//	          in a row; it warms up again when /health recovers
//
// A backend's LoRA adapters are the cards of its /v1/models listing that
// name a parent (vLLM lists each loaded adapter so, root its path). They
// are learned at warm-up and listed again after every health probe of a
// ready backend (every health.interval; past half of health.budget,
// after the probe due ListEvery since the last listing), so that adapters
// loaded or unloaded at runtime (/v1/load_lora_adapter) appear and
// disappear without a restart, within ListEvery and half a probe interval; Backend.RefreshAdapters asks for a listing at once
// (the gateway does when a backend answers 404 for an adapter it was
// thought to have). A failed listing keeps the last known adapters.
// OnAdapters hears every change.
//
// A scraper reads each ready backend's /metrics every scrape_interval
// (ScrapeEvery: longer past scrape_budget; each Gauges carries the
// interval it was read at, Every, which the pools' staleness follows) (vllm:num_requests_waiting, running, kv_cache_usage_perc,
// num_preemptions_total, cache_config_info, generation_tokens_total) for the admission pools and
// triage. It streams the page line by line and parses only those families'
// samples, up to MaxMetricsBytes; a failed scrape is a *ScrapeError that
// tells an unreadable answer (error status, not vLLM's page, too large)
// from no answer, and the pools judge from that whether the gauges are
// stale or unavailable. Probe requests carry X-Maitred-Probe.
//
// # Cost at scale
//
// 512 backends at the configured intervals would be 512 /health probes,
// 512 adapter listings and 2,048 /metrics scrapes a second (3,072
// requests, about 70 us of CPU each: a fifth of a core). The requests
// cannot be dropped one by one: /health is vLLM's engine check (/metrics
// answers while the engine is dead), the listing finds adapters loaded at
// runtime, and /metrics is asked for whole (vLLM ignores
// prometheus_client's name[] filter: its Instrumentator route shadows the
// ASGI app that would honour it, vllm-project/vllm#53140; the simulator
// ignores it too). So each kind is bounded for the whole fleet
// (budget.go): past a budget, every backend is asked every n / budget (n
// the fleet's backends, draining ones aside), read again at every beat,
// so the fleet's requests a second stay at the budget as it grows.
// Defaults (auto): scrapes 64 backends every scrape_interval (256 a
// second; 512 backends every 2 s, stale after 8 s), probes 128 backends
// every health.interval (128 a second; 512 every 4 s), adapter listings
// half the probes' (64 a second; 512 every 8 s): 448 requests a second at
// 512 backends. Fleets up to 64 backends are probed, listed and scraped
// as before (probed as before up to 128). The probes stretch too: with
// 512 probes and 512 listings a second no scrape budget reaches 5% of a
// core at 512 backends; a dead backend between two probes is found by its
// failing requests (connection failures count toward
// unhealthy_threshold; 5xx eject it, admission/pool_eject.go).
//
// What keeps each request cheap: every backend's probes (and scrapes) of
// a round start at one fleet-wide beat (beat.go), so the idle process
// wakes once a round, not once a backend (an idle process pays more for
// a wake-up than for the request: spreading the scrapes over the interval
// doubled the CPU); the fleet's own transport (NewTransport) is
// maitred's HTTP/1.1 client for plain-http backends (internal/upstream,
// the gateway's too): each probe, listing, warm-up and scrape written and
// its answer read on its caller's goroutine, without net/http's read and
// write loops and their hand-offs (net/http's Transport carries https
// ones); it keeps two idle connections a backend with no cap in all, so
// no round dials again, and a request is sent again once on a new
// connection when the backend closed the idle one. Answers are read to
// their end so their connection is kept; a scrape's line buffer is kept
// for the next. Figures: docs/performance.md.
//
// # Concurrency
//
// Backend state is written by its prober and read by request goroutines
// under the backend's mutex; in-flight counts are atomics. A backend's
// adapter list is part of that state: replaced whole by its prober (the
// backend's Run goroutine, which also serves RefreshAdapters' requests
// through a one-slot channel), never modified in place, so a reader may
// keep the slice it got. The fleet's models, a model's settings and its
// list of backends are replaced whole (under the Fleet's mutex, read
// through atomics), so readers keep what they got; Run and RunScraper
// start a goroutine per backend (and per dns or srv entry) that joins and
// cancel those of backends forgotten, and each one more for its beat.
// Lock order: Fleet, then a caller's (the gateway's pool, from
// OnMembers), then Backend. fleet uses net/http only as a client, and
// net's resolver.
package fleet
