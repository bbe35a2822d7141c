package gateway

import (
	"strconv"

	"github.com/maitred-dev/maitred/fleet"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are registered on the registry the caller injects; the gateway
// touches no global registry, so tests and embedders can run several.
type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	inFlight      *prometheus.GaugeVec
	streamErrors  *prometheus.CounterVec
	rejections    *prometheus.CounterVec
	uncounted     *prometheus.CounterVec
	tokChecks     *prometheus.CounterVec
	backendErrors *prometheus.CounterVec
	admissions    *prometheus.CounterVec
	queueWait     *prometheus.HistogramVec
	flowWait      *prometheus.HistogramVec
	connections   prometheus.Gauge

	// The phase clock (phases.go): where each request's time went.
	phase    *prometheus.HistogramVec
	ttft     *prometheus.HistogramVec
	tpot     *prometheus.HistogramVec
	failures *prometheus.CounterVec

	// Precise routing's expected prefix-cache hits (prefix.go).
	prefixHit, prefixPrompt *prometheus.CounterVec

	// By API key name (keys.go; "" for requests without a valid key).
	keyRequests    *prometheus.CounterVec
	keyInFlight    *prometheus.GaugeVec
	keyTokens      *prometheus.CounterVec
	keyRejections  *prometheus.CounterVec
	keyReloads     *prometheus.CounterVec
	configReloads  *prometheus.CounterVec
	keyRateLimited *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{}
	m.requestMetrics()
	m.phaseMetrics()
	m.keyMetrics()
	for _, r := range []string{"success", "failure"} {
		m.configReloads.WithLabelValues(r)
	}
	reg.MustRegister(m.configReloads, m.requests, m.duration, m.inFlight, m.streamErrors, m.rejections, m.uncounted, m.tokChecks, m.backendErrors,
		m.admissions, m.queueWait, m.flowWait, m.connections, m.phase, m.ttft, m.tpot, m.failures, m.prefixHit, m.prefixPrompt,
		m.keyRequests, m.keyInFlight, m.keyTokens, m.keyRejections, m.keyReloads, m.keyRateLimited,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// requestMetrics are the requests', the queue's and the backends' counts.
func (m *metrics) requestMetrics() {
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_requests_total",
		Help: "Requests answered, by model, endpoint and HTTP status code.",
	}, []string{"model", "endpoint", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "maitred_request_duration_seconds",
		Help: "Time from the request's arrival to the last byte of its answer.",
		// From sub-millisecond rejections at the door to long generations.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"model", "endpoint"})
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "maitred_in_flight_requests",
		Help: "Requests being served, by model.",
	}, []string{"model"})
	m.streamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_stream_errors_total",
		Help: "Streams that broke after their 200 went out, by model and reason.",
	}, []string{"model", "reason"})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_rejections_total",
		Help: "Requests the door rejected before any backend work, by model and reason.",
	}, []string{"model", "reason"})
	m.prefixHit = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_prefix_hit_tokens_total",
		Help: "Prompt tokens the precise pick expected its backend to hold in its prefix cache (routing: precise), by model.",
	}, []string{"model"})
	m.prefixPrompt = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_prefix_prompt_tokens_total",
		Help: "Prompt tokens of the requests precise routing scored, by model: maitred_prefix_hit_tokens_total over it is the expected hit rate.",
	}, []string{"model"})
	m.uncounted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_admission_uncounted_total",
		Help: "Requests forwarded without an exact prompt count (vLLM decides), by model and reason.",
	}, []string{"model", "reason"})
	m.tokChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_tokenizer_checks_total",
		Help: "Sampled comparisons of the local prompt count with the backend's POST /tokenize, by model and result (match, mismatch, error).",
	}, []string{"model", "result"})
	m.backendErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_backend_errors_total",
		Help: "Backend failures by model, backend and kind: connect_failed, failed_before_headers, backend_timeout (before the answer's headers), stream_stalled, stream_disconnected, body_stalled, body_disconnected (after them).",
	}, []string{"model", "backend", "kind"})
	m.admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_admission_total",
		Help: "Queue decisions by model and outcome: admitted, or the failure's code: queue_full, queue_timeout, client_gone, exceeds_kv_capacity, model_not_ready, server_shutting_down, store_unavailable, model_removed.",
	}, []string{"model", "outcome"})
	m.connections = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "maitred_client_connections",
		Help: "Client connections open (max_connections caps them).",
	})
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "maitred_queue_wait_seconds",
		Help:    "Time admitted requests waited in the gateway's queue, by model and priority class.",
		Buckets: []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"model", "class"})
	m.flowWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "maitred_flow_queue_wait_seconds",
		Help:    "Time admitted requests waited in the gateway's queue, by model and flow (the API key's name; keyed requests only).",
		Buckets: []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"model", "flow"})
}

// phaseMetrics are the phase clock's (phases.go): where each request's
// time went, and where failed ones stopped.
func (m *metrics) phaseMetrics() {
	m.phase = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "maitred_phase_seconds",
		Help:    "Time per request phase (read, door, queue, connect, prefill, decode, tail), by model.",
		Buckets: []float64{.0001, .0005, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"model", "phase"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "maitred_ttft_seconds",
		Help:    "Time to first token of streams as the gateway sees it (request sent -> first event: vLLM's queue + prefill), by model and backend.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"model", "backend"})
	m.tpot = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "maitred_tpot_seconds",
		Help:    "Mean time per output token of streams (first -> last event over the events between), by model and backend.",
		Buckets: []float64{.001, .0025, .005, .01, .02, .04, .08, .15, .3, .6, 1},
	}, []string{"model", "backend"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_failures_total",
		Help: "Failed requests by model and the layer where progress stopped: door, gateway_queue, backend_unready, backend_connect, backend (its own 4xx), prefill, decode, client.",
	}, []string{"model", "layer"})
}

// keyMetrics are by API key name (keys.go), and the reloads'.
func (m *metrics) keyMetrics() {
	m.keyRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_key_requests_total",
		Help: "Requests that presented a valid API key, by key name.",
	}, []string{"key"})
	m.keyInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "maitred_key_in_flight_requests",
		Help: "Requests being served, by API key name.",
	}, []string{"key"})
	m.keyTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_key_tokens_total",
		Help: "Tokens the requests used (their answers' usage, or the gateway's count), by API key name and kind: prompt, completion, or prompt_and_completion when the door could not count the prompt exactly.",
	}, []string{"key", "kind"})
	m.keyRejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_key_rejections_total",
		Help: "Requests refused before any backend work, by API key name (\"\" when no valid key was presented) and reason (invalid_api_key, model_not_allowed, rate_limited, or a door rejection's reason).",
	}, []string{"key", "reason"})
	m.keyRateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_key_rate_limited_total",
		Help: "Requests refused by one of their API key's limits, by key name and limit (requests, tokens, tokens_per_day, concurrent).",
	}, []string{"key", "limit"})
	m.keyReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_keys_file_reloads_total",
		Help: "Changes of auth.keys_file seen, by result: loaded, or refused (the keys in force kept serving).",
	}, []string{"result"})
	m.configReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "maitred_config_reloads_total",
		Help: "Config reloads (SIGHUP, or the config file changed), by result: success, or failure (the running config kept serving).",
	}, []string{"result"})
}

// modelsCollector exports, at scrape time, the configured models whose
// chat requests all go uncounted, from the runtimes in force.
type modelsCollector struct{ g *Gateway }

var modelUncountedDesc = prometheus.NewDesc("maitred_model_uncounted",
	"1 for a configured model whose chat requests are all forwarded uncounted, by reason: no_tokenizer, or chat_template_not_compiled (its chat template did not compile; the log, /debug/backends and the status page name its line and why).",
	[]string{"model", "reason"}, nil)

func (c modelsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- modelUncountedDesc }

func (c modelsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range c.g.live().models {
		if rt.uncounted != "" {
			ch <- prometheus.MustNewConstMetric(modelUncountedDesc, prometheus.GaugeValue, 1, rt.name, rt.uncounted)
		}
	}
}

// fleetCollector exports each backend's state at scrape time, so the gauge
// can never disagree with /readyz.
type fleetCollector struct{ fleet *fleet.Fleet }

var backendStateDesc = prometheus.NewDesc("maitred_backend_state",
	"1 for the state each backend is in (loading, warming, ready, unhealthy), else 0.",
	[]string{"model", "backend", "state"}, nil)

var backendInfoDesc = prometheus.NewDesc("maitred_backend_info",
	"A backend's record from its warm-up: vLLM version, max_model_len, KV cache config (labels of vllm:cache_config_info) and warm-up time; value 1.",
	[]string{"model", "backend", "version", "max_model_len", "block_size", "num_gpu_blocks", "cache_dtype", "warmup_seconds"}, nil)

var modelReadyDesc = prometheus.NewDesc("maitred_model_ready_backends",
	"Ready backends per model (draining ones are not).", []string{"model"}, nil)

var backendDrainingDesc = prometheus.NewDesc("maitred_backend_draining",
	"1 while a backend drains: its address left its source (DNS, SRV or the config); it takes no new requests and is forgotten once its requests end.",
	[]string{"model", "backend", "source"}, nil)

var discoveryErrorsDesc = prometheus.NewDesc("maitred_discovery_errors_total",
	"Failed lookups of a dns or srv backend entry (answers without an address included); the last known backends stay.",
	[]string{"model", "source"}, nil)

var discoveryFailingDesc = prometheus.NewDesc("maitred_discovery_failing",
	"1 while the last lookup of a dns or srv backend entry failed.", []string{"model", "source"}, nil)

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backendDrainingDesc
	ch <- discoveryErrorsDesc
	ch <- discoveryFailingDesc
	ch <- backendStateDesc
	ch <- modelReadyDesc
	ch <- backendInfoDesc
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.fleet.Models() {
		ready := 0
		for _, b := range m.Backends() {
			st := b.Status()
			if st.State == fleet.Ready && !st.Draining {
				ready++
			}
			if st.Draining {
				ch <- prometheus.MustNewConstMetric(backendDrainingDesc, prometheus.GaugeValue, 1, m.Name, b.URL.Host, st.Source)
			}
			if st.State == fleet.Ready || st.Version != "" {
				info := b.LastGauges().Info
				ch <- prometheus.MustNewConstMetric(backendInfoDesc, prometheus.GaugeValue, 1, m.Name, b.URL.Host, st.Version,
					strconv.Itoa(st.MaxModelLen), info["block_size"], info["num_gpu_blocks"], info["cache_dtype"],
					strconv.FormatFloat(st.WarmupSeconds, 'f', 4, 64))
			}
			for _, s := range fleet.States() {
				v := 0.0
				if s == st.State {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(backendStateDesc, prometheus.GaugeValue, v, m.Name, b.URL.Host, s.String())
			}
		}
		ch <- prometheus.MustNewConstMetric(modelReadyDesc, prometheus.GaugeValue, float64(ready), m.Name)
	}
	for _, d := range c.fleet.Discovery() {
		ch <- prometheus.MustNewConstMetric(discoveryErrorsDesc, prometheus.CounterValue, float64(d.Errors), d.Model, d.Source)
		failing := 0.0
		if d.Failing {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(discoveryFailingDesc, prometheus.GaugeValue, failing, d.Model, d.Source)
	}
}
