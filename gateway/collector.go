package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/maitred-dev/maitred/admission"
)

// poolCollector exports queue and capacity state at scrape time.
type poolCollector struct {
	g *Gateway
}

var (
	queueDepthDesc  = prometheus.NewDesc("maitred_queue_depth", "Requests waiting for a backend, by model and priority class.", []string{"model", "class"}, nil)
	inflightTokDesc = prometheus.NewDesc("maitred_backend_inflight_tokens", "Tokens reserved (prompt + output budget) by requests in flight, per backend.", []string{"model", "backend"}, nil)
	budgetDesc      = prometheus.NewDesc("maitred_backend_token_budget", "A backend's token budget: KV capacity from vllm:cache_config_info, else kv_tokens (0: none).", []string{"model", "backend"}, nil)
	inflightDesc    = prometheus.NewDesc("maitred_backend_inflight_requests", "Requests in flight per backend.", []string{"model", "backend"}, nil)
	vllmWaitDesc    = prometheus.NewDesc("maitred_backend_vllm_waiting", "vllm:num_requests_waiting as last scraped.", []string{"model", "backend"}, nil)
	vllmRunDesc     = prometheus.NewDesc("maitred_backend_vllm_running", "vllm:num_requests_running as last scraped.", []string{"model", "backend"}, nil)
	vllmKVDesc      = prometheus.NewDesc("maitred_backend_vllm_kv_cache_usage", "vllm:kv_cache_usage_perc as last scraped (0 to 1).", []string{"model", "backend"}, nil)
	ejectedDesc     = prometheus.NewDesc("maitred_backend_ejected", "1 while a backend is ejected as an outlier.", []string{"model", "backend"}, nil)
	gaugesStateDesc = prometheus.NewDesc("maitred_backend_gauges_state", "1 for the state of a backend's scraped vLLM gauges: unknown (not scraped yet), fresh, stale (counted as saturated), unavailable (scrapes failing: admitted on in-flight and token-budget limits alone).", []string{"model", "backend", "state"}, nil)
	mismatchDesc    = prometheus.NewDesc("maitred_backend_mismatch", "1 while a backend serves other ingredients than this gateway's, found at warm-up: check tokenizer (its /tokenize counts the probe differently) or max_model_len; accepted=true when tokenizer_check is warn and it is served anyway.", []string{"model", "backend", "check", "accepted"}, nil)
	scrapeErrDesc   = prometheus.NewDesc("maitred_backend_scrape_errors_total", "Failed scrapes of a backend's /metrics.", []string{"model", "backend"}, nil)
	ejectionsDesc   = prometheus.NewDesc("maitred_backend_ejections_total", "Outlier ejections per backend.", []string{"model", "backend"}, nil)
	routingDesc     = prometheus.NewDesc("maitred_routing_decisions_total", "Backend choices by policy: p2c (power of two choices), affinity (prefix), precise (the backends' cached prefixes, routing: precise), only (one candidate).", []string{"model", "policy"}, nil)
	fallbackDesc    = prometheus.NewDesc("maitred_precise_fallbacks_total", "Requests scored for precise routing (routing: precise) that were routed as without it, by reason: not_live (a candidate's KV-event index is not live), nothing_cached (no candidate holds a block of the prompt).", []string{"model", "reason"}, nil)
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueDepthDesc, inflightTokDesc, budgetDesc, inflightDesc, vllmWaitDesc, vllmRunDesc, vllmKVDesc, ejectedDesc, ejectionsDesc, routingDesc, fallbackDesc, gaugesStateDesc, scrapeErrDesc, mismatchDesc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range c.g.live().models {
		name, st := rt.name, rt.pool.Stats()
		for i, d := range st.Depth {
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(d), name, c.g.conf().PriorityClasses[i])
		}
		for _, s := range st.Slots {
			gv := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name, s.Name)
			}
			gv(inflightTokDesc, float64(s.Tokens))
			gv(budgetDesc, float64(s.Budget))
			gv(inflightDesc, float64(s.InFlight))
			gv(vllmWaitDesc, s.Gauges.Waiting)
			gv(vllmRunDesc, s.Gauges.Running)
			gv(vllmKVDesc, s.Gauges.KVUsage)
			ejected := 0.0
			if s.Ejected {
				ejected = 1
			}
			gv(ejectedDesc, ejected)
			ch <- prometheus.MustNewConstMetric(ejectionsDesc, prometheus.CounterValue, float64(s.Ejections), name, s.Name)
			for _, gs := range admission.GaugesStates() {
				v := 0.0
				if gs == s.GaugesState {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(gaugesStateDesc, prometheus.GaugeValue, v, name, s.Name, gs.String())
			}
			ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.CounterValue, float64(s.ScrapeErrors), name, s.Name)
		}
		for _, b := range rt.fm.Backends() {
			if mm := b.Status().Mismatch; mm != nil {
				ch <- prometheus.MustNewConstMetric(mismatchDesc, prometheus.GaugeValue, 1, name, b.URL.Host, mm.Check, strconv.FormatBool(mm.Accepted))
			}
		}
		for policy, n := range st.Decisions {
			ch <- prometheus.MustNewConstMetric(routingDesc, prometheus.CounterValue, float64(n), name, policy)
		}
		if rt.fm.Index() != nil {
			for _, why := range admission.PreciseFallbackReasons() {
				ch <- prometheus.MustNewConstMetric(fallbackDesc, prometheus.CounterValue, float64(st.PreciseFallbacks[why]), name, why)
			}
		}
	}
}
