package gateway

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/triage"
)

// PriorityHeader names the request's priority class.
const PriorityHeader = "X-Maitred-Priority"

// poolEvent logs a pool's ejection events and tells triage at once, so
// that an ejection is never silent.
func (g *Gateway) poolEvent(rt *modelRuntime, e admission.Event) {
	b := rt.backends[e.Index]
	fields := []zap.Field{zap.String("model", rt.name), zap.String("backend", b.URL.Host),
		zap.Int("ejected_backends", e.Ejected), zap.Int("ready_backends", e.Ready)}
	switch e.Kind {
	case admission.Ejected:
		g.log.Warn("backend ejected after consecutive failures", append(fields,
			zap.Int("failures", e.Failures), zap.Duration("eject_for", g.cfg.EjectFor.D()), zap.Time("until", e.Until))...)
	case admission.EjectionEnded:
		g.log.Info("backend ejection ended", append(fields, zap.String("reason", e.Reason))...)
	case admission.EjectionHeld:
		g.log.Warn("backend not ejected: max_ejection_percent reached or no other ready backend left in rotation",
			append(fields, zap.Int("failures", e.Failures), zap.Int("max_ejection_percent", g.cfg.MaxEjectionPercent))...)
	case admission.GaugesChanged:
		lvl := zap.InfoLevel
		if e.Gauges == admission.GaugesUnavailable {
			lvl = zap.WarnLevel
		}
		if ce := g.log.Check(lvl, "backend gauges "+e.Gauges.String()); ce != nil {
			ce.Write(append(fields, zap.String("reason", e.Reason))...)
		}
	}
	g.sampleBackend(rt, b, nil)
}

// ObserveScrape feeds a backend's scraped gauges, or the scrape's failure,
// to its model's pool, and its state to triage.
func (g *Gateway) ObserveScrape(m *fleet.Model, b *fleet.Backend, gs fleet.Gauges, err error) {
	rt, ok := g.byName[m.Name]
	if !ok {
		return
	}
	if errors.Is(err, fleet.ErrNotReady) {
		g.sampleBackend(rt, b, nil)
		return
	}
	i, ok := rt.slotOf(b)
	if !ok {
		return
	}
	if err != nil {
		// The last gauges age and turn stale; failures that persist
		// turn them unavailable (see admission.Pool.ScrapeFailed).
		var se *fleet.ScrapeError
		rt.pool.ScrapeFailed(i, errors.As(err, &se) && se.Answered, err.Error())
		g.sampleBackend(rt, b, nil)
		return
	}
	rt.pool.SetGauges(i, admission.Gauges{Waiting: gs.Waiting, Running: gs.Running, KVUsage: gs.KVUsage, KVCapacity: gs.KVCapacity, At: gs.At})
	g.sampleBackend(rt, b, &gs)
}

// class maps the priority header to a class index.
func (g *Gateway) class(r *http.Request) (int, string) {
	v := strings.TrimSpace(r.Header.Get(PriorityHeader))
	for i, c := range g.cfg.PriorityClasses {
		if c == v {
			return i, c
		}
	}
	for i, c := range g.cfg.PriorityClasses {
		if c == g.cfg.DefaultPriority {
			return i, c
		}
	}
	return 0, g.cfg.PriorityClasses[0]
}

// ticket sizes a request's claim on a backend's token budget: its prompt
// plus n times its output budget, for each prompt of a batch (vLLM runs a
// list prompt as that many requests; PromptTokens is already their sum).
// An uncounted prompt is estimated at four bytes a token, for the budget
// only; it is never refused on that guess. The claim saturates at
// maxTicket, beyond any budget, so the arithmetic cannot overflow.
func ticket(rt *modelRuntime, dec admission.Decision, bodyLen int, class int) admission.Ticket {
	out := dec.MaxTokens
	if out == 0 {
		out = rt.expectedOutput
	}
	t := admission.Ticket{Class: class, Exact: dec.Uncounted == admission.Counted}
	prompt := dec.PromptTokens
	if !t.Exact {
		prompt = bodyLen / 4
	}
	t.Tokens = min(prompt+satMul(satMul(max(dec.Prompts, 1), max(dec.N, 1)), out), maxTicket)
	return t
}

// maxTicket caps a reservation: more tokens than any KV cache holds, small
// enough that adding up reservations cannot overflow.
const maxTicket = 1 << 40

// satMul is a*b for non-negative operands, saturating at maxTicket.
func satMul(a, b int) int {
	if a != 0 && b > maxTicket/a {
		return maxTicket
	}
	return a * b
}

// queueError renders a pool outcome that is not Admitted.
func (g *Gateway) queueError(rt *modelRuntime, o admission.Outcome, t admission.Ticket) error {
	p := rt.pool
	w := p.Advice()
	switch o {
	case admission.QueueFull:
		return &Error{Status: http.StatusTooManyRequests, Type: typeServer, Code: codeQueueFull, Layer: triage.LayerQueue, RetryAfter: w.Expected,
			Message: fmt.Sprintf("Model %q is at capacity and its queue is full (%d waiting); expected wait %s. Retry after %d s.",
				rt.name, w.Depth, w.Expected.Round(time.Millisecond), retrySeconds(w.Expected))}
	case admission.QueueTimeout:
		return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeQueueTimeout, Layer: triage.LayerQueue, RetryAfter: w.Expected,
			Message: fmt.Sprintf("The request waited %s for a backend of model %q without one freeing up, %s (%d still waiting; expected wait %s).",
				rt.queueTimeout, rt.name, p.Blocked(t), w.Depth, w.Expected.Round(time.Millisecond))}
	case admission.OverBudget:
		return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeExceedsKV, Param: "max_tokens", Layer: triage.LayerDoor,
			Message: fmt.Sprintf("The request needs %d tokens of KV cache (prompt plus output budget), more than any backend of model %q holds; it can never run. Lower max_tokens or n.", t.Tokens, rt.name)}
	case admission.NoBackend:
		return g.notReady(rt)
	case admission.Draining:
		return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeShuttingDown, Layer: triage.LayerNone, RetryAfter: time.Second,
			Message: "The gateway is shutting down; retry on another instance."}
	case admission.ClientGone:
		return errClientGone
	}
	return fmt.Errorf("unexpected queue outcome %s", o)
}

// prefixHash hashes the first k tokens of the rendered prompt, for prefix
// affinity; 0 when it cannot be computed.
func prefixHash(rt *modelRuntime, ep admission.Endpoint, req *ojson.Value) uint64 {
	tok, k := rt.tok, rt.affinity
	if tok == nil || k <= 0 || req == nil {
		return 0
	}
	var text string
	var err error
	if ep == admission.Chat {
		if text, err = tok.RenderChat(req); err != nil {
			return 0
		}
	} else if p := req.Get("prompt"); p != nil && p.Kind == ojson.String {
		text = p.Str
	} else {
		return 0
	}
	// k tokens are rarely more than 8k bytes: encode only that prefix.
	if len(text) > 8*k {
		text = text[:8*k]
	}
	ids := tok.Encoder().Encode(text, false)
	if len(ids) > k {
		ids = ids[:k]
	}
	h := fnv.New64a()
	var b [4]byte
	for _, id := range ids {
		b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
		h.Write(b[:])
	}
	return h.Sum64() | 1
}

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
	routingDesc     = prometheus.NewDesc("maitred_routing_decisions_total", "Backend choices by policy: p2c (power of two choices), affinity (prefix), only (one candidate).", []string{"model", "policy"}, nil)
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueDepthDesc, inflightTokDesc, budgetDesc, inflightDesc, vllmWaitDesc, vllmRunDesc, vllmKVDesc, ejectedDesc, ejectionsDesc, routingDesc, gaugesStateDesc, scrapeErrDesc, mismatchDesc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range c.g.models {
		name, st := rt.name, rt.pool.Stats()
		for i, d := range st.Depth {
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(d), name, c.g.cfg.PriorityClasses[i])
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
		for _, b := range rt.backends {
			if mm := b.Status().Mismatch; mm != nil {
				ch <- prometheus.MustNewConstMetric(mismatchDesc, prometheus.GaugeValue, 1, name, b.URL.Host, mm.Check, strconv.FormatBool(mm.Accepted))
			}
		}
		for policy, n := range st.Decisions {
			ch <- prometheus.MustNewConstMetric(routingDesc, prometheus.CounterValue, float64(n), name, policy)
		}
	}
}
