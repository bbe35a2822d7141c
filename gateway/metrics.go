package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are registered on the registry the caller injects; the gateway
// touches no global registry, so tests and embedders can run several.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	streamErrors *prometheus.CounterVec
	rejections   *prometheus.CounterVec
	uncounted    *prometheus.CounterVec
	tokChecks    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "maitred_requests_total",
			Help: "Requests answered, by model, endpoint and HTTP status code.",
		}, []string{"model", "endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "maitred_request_duration_seconds",
			Help: "Time from the request's arrival to the last byte of its answer.",
			// From sub-millisecond rejections at the door to long generations.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"model", "endpoint"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "maitred_in_flight_requests",
			Help: "Requests being served, by model.",
		}, []string{"model"}),
		streamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "maitred_stream_errors_total",
			Help: "Streams that broke after their 200 went out, by model and reason.",
		}, []string{"model", "reason"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "maitred_rejections_total",
			Help: "Requests the door rejected before any backend work, by model and reason.",
		}, []string{"model", "reason"}),
		uncounted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "maitred_admission_uncounted_total",
			Help: "Requests forwarded without an exact prompt count (vLLM decides), by model and reason.",
		}, []string{"model", "reason"}),
		tokChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "maitred_tokenizer_checks_total",
			Help: "Sampled comparisons of the local prompt count with the backend's POST /tokenize, by model and result (match, mismatch, error).",
		}, []string{"model", "result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.inFlight, m.streamErrors, m.rejections, m.uncounted, m.tokChecks,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
