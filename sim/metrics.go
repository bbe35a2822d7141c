package sim

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are vLLM's Prometheus series (names, types, label sets and bucket
// boundaries as in vllm/v1/metrics/loggers.py), registered on a registry
// owned by the Server. Gauges are computed at scrape time from the
// scheduler, so a scrape is always consistent with Stats.
type metrics struct {
	reg *prometheus.Registry

	ttft        *prometheus.HistogramVec
	itl         *prometheus.HistogramVec
	e2e         *prometheus.HistogramVec
	queue       *prometheus.HistogramVec
	reqPrompt   *prometheus.HistogramVec
	reqGen      *prometheus.HistogramVec
	success     *prometheus.CounterVec
	promptTok   *prometheus.CounterVec
	genTok      *prometheus.CounterVec
	preemptions *prometheus.CounterVec
	simAborted  *prometheus.CounterVec
	simCut      *prometheus.CounterVec
	// With PrefixCaching only: prompt tokens looked up in the prefix
	// cache, and those found.
	prefixQueries *prometheus.CounterVec
	prefixHits    *prometheus.CounterVec
}

var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// tokenBuckets is vLLM's build_1_2_5_buckets(max_model_len).
func tokenBuckets(maxModelLen int) []float64 {
	var out []float64
	for exp := 1; ; exp *= 10 {
		for _, m := range []int{1, 2, 5} {
			v := m * exp
			if v > maxModelLen {
				return out
			}
			out = append(out, float64(v))
		}
	}
}

var baseLabels = []string{"model_name", "engine"}

func newMetrics(s *Server, model string, maxModelLen int, prefixCaching bool) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{reg: reg}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, baseLabels)
		reg.MustRegister(h)
		return h
	}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append(append([]string{}, baseLabels...), extra...))
		reg.MustRegister(c)
		return c
	}
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestLatencyBuckets)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets)
	m.reqPrompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokenBuckets(maxModelLen))
	m.reqGen = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokenBuckets(maxModelLen))
	m.success = counter("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason")
	m.promptTok = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.genTok = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
	m.simAborted = counter("sim_aborted_requests_total", "Requests the simulator aborted because the client went away.")
	m.simCut = counter("sim_cut_streams_total", "Streams the simulator cut on purpose (CutAfterChunks).")
	if prefixCaching {
		m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
		m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
	}
	reg.MustRegister(&gaugeCollector{s: s})
	m.touch(model)
	return m
}

// touch creates the series of model so that they are exported (as 0) before
// the first request, as vLLM does.
func (m *metrics) touch(model string) {
	for _, h := range []*prometheus.HistogramVec{m.ttft, m.itl, m.e2e, m.queue, m.reqPrompt, m.reqGen} {
		h.WithLabelValues(model, "0")
	}
	for _, c := range []*prometheus.CounterVec{m.promptTok, m.genTok, m.preemptions, m.simAborted, m.simCut, m.prefixQueries, m.prefixHits} {
		if c != nil {
			c.WithLabelValues(model, "0")
		}
	}
	for _, r := range []string{"stop", "length", "abort", "error"} {
		m.success.WithLabelValues(model, "0", r)
	}
}

var (
	descRunning = prometheus.NewDesc("vllm:num_requests_running",
		"Number of requests in model execution batches.", baseLabels, nil)
	descWaiting = prometheus.NewDesc("vllm:num_requests_waiting",
		"Number of requests waiting to be processed.", baseLabels, nil)
	descKV = prometheus.NewDesc("vllm:kv_cache_usage_perc",
		"KV-cache usage. 1 means 100 percent usage.", baseLabels, nil)
	cacheInfoLabels = []string{"block_size", "cache_dtype", "calculate_kv_scales", "cpu_offload_gb",
		"enable_prefix_caching", "gpu_memory_utilization", "is_attention_free", "num_cpu_blocks",
		"num_gpu_blocks", "num_gpu_blocks_override", "prefix_caching_hash_algo", "sliding_window", "swap_space"}
	descCacheInfo = prometheus.NewDesc("vllm:cache_config_info",
		"Information of the LLMEngine CacheConfig", cacheInfoLabels, nil)
)

// gaugeCollector reports the scheduler gauges and cache_config_info at
// scrape time, labelled with the current model name.
type gaugeCollector struct{ s *Server }

func (g *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRunning
	ch <- descWaiting
	ch <- descKV
	ch <- descCacheInfo
}

func (g *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	s := g.s
	s.mu.Lock()
	model := s.cfg.Model
	running, waiting := s.running, len(s.queue)
	kv := s.kvUsageLocked()
	blocks, blockSize := s.cfg.kvBlocks(), s.cfg.BlockSize
	hashAlgo := "builtin"
	if s.cache != nil {
		hashAlgo = "sha256"
	}
	s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(running), model, "0")
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(waiting), model, "0")
	ch <- prometheus.MustNewConstMetric(descKV, prometheus.GaugeValue, kv, model, "0")
	ch <- prometheus.MustNewConstMetric(descCacheInfo, prometheus.GaugeValue, 1,
		strconv.Itoa(blockSize), "auto", "False", "0", "True", "0.9", "False", "None",
		strconv.Itoa(blocks), "None", hashAlgo, "None", "4")
}
