// Package triage names the layer that slow or failing requests are stuck
// in, with the numbers that show it. It follows the triage manual's rule:
// classify the symptom before turning knobs; start with where progress
// stopped.
//
// The package is pure logic: it imports only the standard library, no HTTP
// and no metrics client. The gateway feeds it and renders its Report (GET
// /debug/triage, `maitred triage`, the status page).
//
// # Inputs
//
//   - Engine.Observe: one finished request, its phase durations (door,
//     gateway queue, backend connect, TTFT, TPOT, client write stalls,
//     total) and, if it failed, the Layer where progress stopped (door,
//     gateway_queue, backend_unready, backend_connect, backend (the
//     backend's own 4xx), prefill, decode, client) with a reason code.
//   - Engine.Sample: one scrape of a backend's vLLM gauges
//     (num_requests_running, num_requests_waiting, kv_cache_usage_perc,
//     the num_preemptions_total counter) and the gateway's view of its state
//     (ready or not, ejected, loading/warming/ready/unhealthy, why, since
//     when, the trust in its gauges, a known compatibility difference); a
//     sample with NoGauges carries the state only.
//   - Engine.GatewayQueue: a sample of the gateway's queue depth for a model.
//   - Engine.Warmup: a backend's TTFT and TPOT measured at warm-up, idle.
//
// # The window
//
// Everything is aggregated per model and backend in a ring of 30 time
// buckets, each Config.Window/30 wide (10s for the default 5m window). A
// bucket holds counts (requests, failures by layer), TTFT and TPOT as
// log-linear histograms (8 bins per power of two, 131µs to 275s; quantiles
// interpolated within a bin and clamped to the exact min and max), client
// stall totals, and per gauge its first, last, min, max, mean and the sums
// of a least-squares fit (the slope of a queue is a regression over every
// sample in the window, not last minus first). Preemptions are a counter:
// rates come from the deltas between consecutive scrapes, and a counter
// that goes down (a restarted backend) counts its new value as the delta.
// Gateway queue depth and reasons are kept per model.
//
// Buckets expire by time, judged by the clock given to New: there are no
// goroutines and no timers. An event older than the window is dropped
// (Report.Dropped counts them); one from the future is placed in the
// current bucket.
//
// # Baselines: what "rising" and "stable" mean
//
// Latency is judged per backend against its baseline, the lower of:
//
//   - its warm-up figures (Engine.Warmup): TTFT and TPOT of a few tokens
//     streamed when the backend turned ready, idle; the floor, there from
//     the backend's first request, and
//   - its moving baseline: an exponentially weighted mean (time constant
//     Config.Baseline, default 1h) of the per-bucket p50s, weighted by
//     sample count, fed by buckets as they leave the window. It is used once
//     it covers Thresholds.MinBaselineCoverage (default 2m) of traffic.
//
// Because the window never feeds its own baseline, a window that is slow
// throughout still reads as a rise against the hour before it; and because
// the lower baseline is taken, a slowdown that has lasted long enough to
// enter the moving baseline still reads as a rise against warm-up. With
// neither, latency cannot be called rising: the rules that need a rise do
// not match, and no ratio is reported.
//
// The floor has two consequences, both chosen. A backend slow from its
// first request (its warm-up fast, its traffic slow) is judged against its
// own warm-up, and stays flagged however long it stays slow. A backend
// whose warm-up was itself slow has no faster figure of its own to be
// judged against: it is only seen relative to its peers (the slow-path flag
// below), so a model served by one backend that is slow from the start is
// not named. And since the warm-up runs one request alone, a backend whose
// TPOT under normal load (a large batch) is TPOTRiseFactor x its idle TPOT
// reads as decode_pressure; raise tpot_rise_factor where that is normal.
//
// Each latency is judged twice: over the whole window, and over its newest
// Thresholds.Recent (default 20s, rounded up to whole buckets: the current
// bucket and the one before) on its own, each with MinSamples samples; it
// is rising when either is, stable when neither is rising and the window's
// p50 is below the stable factor. So a change is named once it dominates
// the last 20 seconds, not only once it outweighs the rest of the window;
// the ratio reported is the larger of the two.
//
// A backend needs Thresholds.MinSamples (default 20) TTFT or TPOT samples
// in the window to be judged.
//
//   - TTFT rising: p50 (window or recent) >= TTFTRiseFactor (2) x baseline
//     and p50 - baseline >= TTFTMinDelta (50ms).
//   - TPOT rising: p50 (window or recent) >= TPOTRiseFactor (1.5) x
//     baseline and p50 - baseline >= TPOTMinDelta (2ms).
//   - TPOT stable: window p50 < TPOTStableFactor (1.3) x baseline and not
//     rising, or not judged.
//   - A queue is growing when its least-squares slope over the window is >=
//     GrowthPerMin (0.5 per minute), or its last value is >= QueueDepthHigh
//     (4, gateway queue) or WaitingHigh (4, vLLM waiting).
//
// # The rules
//
// The rules are one list of values (rules.go), each with the verdict it
// names, the failure layers whose counts it reads, for the classes a single
// backend shows a predicate over that backend's window, and the rule over a
// scope, which returns its typed evidence when it matches. Report copies
// the window into a typed snapshot (snapshot.go: per model and backend the
// merged counts, histograms and gauges, the latency judged against its
// baseline, the latest state) and runs every rule on it, for the whole
// fleet and for each model. The first that matches, in this order, is the
// verdict; the others that match are listed in Others, in the same order. The order is causal: a dead
// backend fills queues and makes clients give up; a full KV cache preempts,
// which slows decode and grows the waiting queue; slow decode lowers
// throughput, which grows queues; rejections at the door and clients say
// nothing about the fleet. A "significant" failure count below is at least
// MinFailures (5) failures making at least MinFailureShare (1%) of the
// window's requests.
//
//  0. compatibility (the ingredients layer): a backend held back because
//     it serves other ingredients than the gateway's: its /tokenize counts
//     the warm-up probe differently (tokenizer or chat template), or it
//     serves another max_model_len. No restart fixes that. Evidence:
//     incompatible_backends, each with the check, the gateway's count and
//     the backend's (backend_value), its state and since when. A mismatch
//     accepted with tokenizer_check: warn is not a verdict; it shows in
//     the BackendReport's Compatibility.
//  1. backend_unavailable: significant backend_unready + backend_connect
//     failures, or a backend whose latest sample in the window says not
//     ready or ejected as an outlier (other than for compatibility).
//     Evidence: the failures, and per backend its state, reason (ejected,
//     not_ready, connect_failures), since when, the share of not-ready
//     samples and its connect failures.
//  2. kv_pressure (per backend): max KV usage >= KVFull (0.95) and either
//     preemptions per minute > PreemptionsPerMin (0), or waiting growing
//     (slope) while running is not.
//  3. decode_pressure (per backend): TPOT rising.
//  4. admission_or_prefill_pressure (per backend): the model's gateway queue
//     or the backend's vLLM waiting queue growing, TTFT rising, TPOT stable.
//     Also matches on significant gateway_queue failures (queue full or
//     queue timeouts, where requests never reach a backend) or significant
//     prefill failures (timed out before the first token, so no TTFT was
//     measured).
//  5. boundary: significant door rejections plus the backends' own 4xx
//     answers (layer backend: a request the door passed and vLLM refused)
//     making >= DoorShare (50%) of the failures. Evidence: rejections by
//     reason, door_rejections and backend_rejections.
//  6. client_side: significant client-layer failures making >= ClientShare
//     (50%) of the failures, or stalled requests (ClientStall >=
//     StallFraction (20%) of Total) making >= StalledRequestShare (20%) of
//     the requests (and at least MinFailures of them).
//  7. healthy: none of the above.
//
// A per-backend class (2-4) is the verdict of a model or of the fleet when
// the backends that show it served at least MinAffectedShare (20%) of the
// requests that reached a backend; each BackendReport lists the classes that
// backend shows in Matches.
//
// Separately, a backend is flagged "possible slow-path fallback" when its
// warm-up TTFT, its warm-up TPOT or its window TPOT p50 is >= SlowPathFactor
// (3) x the median of the same figure on its model's other backends (it
// needs a peer). An unsupported dtype, attention backend or compiled shape
// that falls back silently shows up this way. Only slowness is flagged.
// BackendReport.SlowPath lists each figure that flags it (signal, value_ms,
// peers_median_ms, ratio).
//
// Each verdict comes with Next, what to inspect next per the manual, and
// Said: its evidence in sentences (for latency: the p50, over what, against
// which baseline and why that one), for the status page and for people.
//
// Engine.Series returns the window bucket by bucket (per backend: request
// and failure counts by layer, TTFT and TPOT p50/p99, the last vLLM
// waiting, running and KV usage; per model: the highest gateway queue
// depth), what the status page draws. It only reads; a figure not observed
// in a bucket is absent, not zero.
//
// # Evidence
//
// Evidence is typed (evidence.go): each rule returns a struct whose json
// tags are the keys below, and says it in sentences (words.go). The
// Report's Evidence maps are those structs laid out by key (report.go, the
// one place they become maps), so the JSON and the maps read in process
// hold the same keys and values. Durations are milliseconds (float, 3
// decimals); shares and ratios are fractions (3 decimals); slopes are per
// minute. A key is absent when there is nothing to compute it from. For a
// scope (fleet or model):
//
//	requests, failures                   counts in the window
//	failures_by_layer                    {layer: count}
//	rejections_by_reason                 door rejections {reason: count}
//	failures_by_reason                   other failures {reason: count}
//	ttft_samples, ttft_p50_ms, ttft_p95_ms
//	ttft_baseline_ms                     per-backend baselines, weighted by samples
//	ttft_ratio                           per-backend p50/baseline, weighted by samples
//	tpot_samples, tpot_p50_ms, tpot_p95_ms, tpot_baseline_ms, tpot_ratio
//	queue_depth_first, queue_depth_last, queue_depth_max, queue_slope_per_min
//	                                     gateway queue, summed over models
//	waiting_first, waiting_last, waiting_slope_per_min
//	running_first, running_last, running_slope_per_min
//	                                     vLLM gauges, summed over backends
//	kv_usage_max, kv_usage_mean          max over backends, mean of their means
//	preemptions_per_min                  summed over backends
//	preemptions_per_min_baseline         the moving baseline of the same
//	client_closed                        client-layer failures
//	client_stall_share                   total client stall / total time
//	stalled_request_share                stalled requests / requests
//	backends, backends_ready             counts
//	slow_path_backends                   "model/backend" flagged as above
//
// The dominant finding's own keys are merged in (for a per-backend class
// its latency and gauge figures are those of the affected backends):
// affected_backends, affected_share; unavailable_failures,
// no_ready_backend_failures, connect_failures, unavailable_share,
// unavailable_backends; gateway_queue_failures, prefill_failures;
// door_rejections, backend_rejections, door_share, rejection_rate;
// client_failure_share, stalled_requests. Backend evidence adds ttft_warmup_ms,
// ttft_moving_baseline_ms (and its coverage in seconds),
// ttft_baseline_source ("warmup" or "moving"), ttft_baseline_words (which
// baseline, its value and why that one, in a sentence), ttft_recent_p50_ms,
// ttft_recent_samples and ttft_recent_ratio (the newest Recent), the same
// for TPOT,
// kv_usage_min, waiting_max, samples, not_ready_share and
// last_sample_age_s.
//
// # Bounded memory and cost
//
// At most Config.MaxModels (64) models, MaxBackends (64) backends per model
// and MaxSeries (256) model+backend pairs in all, and MaxReasons (63)
// reasons are tracked; beyond, values are counted under "other" (as is any
// Layer outside the closed set). Counts are never lost, only merged. A
// model+backend pair costs about 54 KB and a model about 19 KB, so the
// defaults bound the engine at about 22 MB whatever the label values; a
// fleet of 8 backends uses about half a megabyte. Observe, Sample and
// GatewayQueue are O(1) and do not allocate once a label has been seen
// (about 90 ns); Report walks every bucket, about 1.5 ms for 64 backends
// (BenchmarkReport).
//
// # Ownership and concurrency
//
// An Engine is safe for concurrent use: one mutex guards it, held briefly
// by the write methods and, in Report, while the window is copied into the
// snapshot (which also folds expired buckets into the baselines); the rules,
// the evidence and the sentences run on the copy, outside the lock. The gateway owns one Engine; the
// Report it returns is a fresh value the caller owns and may marshal to
// JSON as is.
package triage
