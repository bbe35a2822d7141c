package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/triage"
)

// observe writes a finished request's conclusion to the phase metrics and
// the triage engine.
func (g *Gateway) observe(x *exchange, res *Result) {
	if x.rt == nil || x.spec.unobserved { // outside the queue
		return
	}
	mm := &x.rt.metrics
	for i, d := range res.Phases.list() {
		if d > 0 {
			mm.phaseOf[i].Observe(d.Seconds())
		}
	}
	o := observation(x, res)
	if a := x.att; a != nil && x.stream && !a.firstEventAt.IsZero() {
		mm.ttft.WithLabelValues(o.Backend).Observe(o.TTFT.Seconds())
		if a.events-2 >= 2 {
			mm.tpot.WithLabelValues(o.Backend).Observe(o.TPOT.Seconds())
		}
	}
	if res.Layer != triage.LayerNone {
		mm.failures.WithLabelValues(string(res.Layer)).Inc()
	}
	g.triage.Observe(o)
}

// observation is the triage sample of a finished request: its
// conclusion's layer and code (the reason), its phases, and its last
// attempt's backend and token timings.
func observation(x *exchange, res *Result) triage.Observation {
	o := triage.Observation{
		Time: time.Now(), Model: x.rt.name, Layer: res.Layer, Reason: res.Code,
		Door: res.Phases.door, Queue: res.Phases.queue, Connect: res.Phases.connect,
		ClientStall: x.clientStall, Total: res.Duration, Stream: x.stream,
	}
	a := x.att
	if a == nil {
		return o
	}
	o.Backend = a.backend.URL.Host
	o.OutputTokens = max(a.events-2, 0)
	if x.stream && !a.firstEventAt.IsZero() {
		o.TTFT = a.firstEventAt.Sub(a.sentAt)
		// Events between the first and the last: one per token as vLLM
		// streams them (the first carries the role, the last is [DONE]).
		if tokens := a.events - 2; tokens >= 2 {
			o.TPOT = a.lastEventAt.Sub(a.firstEventAt) / time.Duration(tokens)
		}
	}
	return o
}

// sampleBackend feeds a backend's state and, when gs is set, the gauges of
// a scrape to the triage engine.
func (g *Gateway) sampleBackend(rt *modelRuntime, b *fleet.Backend, gs *fleet.Gauges) {
	st := b.Status()
	smp := triage.BackendSample{
		Time: time.Now(), Model: rt.name, Backend: b.URL.Host, NoGauges: gs == nil,
		Ready: st.State == fleet.Ready, State: st.State.String(), StateReason: st.Reason, StateSince: st.Since,
	}
	if mm := st.Mismatch; mm != nil {
		smp.Compat = &triage.Compatibility{Check: mm.Check, Gateway: mm.Gateway, Backend: mm.Backend, Accepted: mm.Accepted}
	}
	if gs != nil {
		smp.Running, smp.Waiting, smp.KVUsage, smp.Preemptions = gs.Running, gs.Waiting, gs.KVUsage, gs.Preemptions
		if !gs.At.IsZero() {
			smp.Time = gs.At
		}
	}
	if slot, ok := rt.pool.Slot(b.URL.Host); ok { // this backend's slot only: flat in the number of backends
		smp.GaugesState = slot.GaugesState.String()
		if slot.Ejected {
			smp.Ejected = true
			smp.StateReason = fmt.Sprintf("ejected after %d consecutive failures until %s", g.conf().EjectAfter, slot.EjectedUntil.UTC().Format(time.RFC3339))
			smp.StateSince = slot.EjectedUntil.Add(-g.conf().EjectFor.D())
		}
	}
	g.triage.Sample(smp)
	g.triage.GatewayQueue(rt.name, rt.pool.Advice().Depth, smp.Time)
}

// onTransition tells the queue and the triage engine about a state change.
func (g *Gateway) onTransition(m *fleet.Model, b *fleet.Backend, _, to fleet.State) {
	rt := g.live().byName[m.Name]
	rt.pool.Kick()
	if to == fleet.Ready {
		// The warm-up's figures, measured idle, are the floor triage
		// judges this backend's latency against from its first request.
		if st := b.Status(); st.WarmupTTFT > 0 || st.WarmupTPOT > 0 {
			g.triage.Warmup(m.Name, b.URL.Host, st.WarmupTTFT, st.WarmupTPOT)
		}
	}
	g.sampleBackend(rt, b, nil)
}

// debugTriage answers GET /debug/triage with the current report.
func (g *Gateway) debugTriage(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	writeJSON(w, http.StatusOK, g.triage.Report())
	return nil
}

type backendRecord struct {
	Model string `json:"model"`
	fleet.BackendStatus
	CacheConfig      map[string]string `json:"cache_config,omitempty"`
	TokenBudget      int               `json:"token_budget"`
	MaxInFlight      int               `json:"max_in_flight,omitempty"` // its config entry's (0: no cap)
	KVTokens         int               `json:"kv_tokens,omitempty"`     // its config entry's (0: none)
	InFlightTokens   int               `json:"in_flight_tokens"`
	Ejected          bool              `json:"ejected"`
	EjectedUntil     *time.Time        `json:"ejected_until,omitempty"`
	Ejections        int               `json:"ejections"`
	Failures         int               `json:"consecutive_failures"`
	GaugesState      string            `json:"gauges_state"`
	ScrapeErrors     int               `json:"scrape_errors"`
	LastScrapeError  string            `json:"last_scrape_error,omitempty"`
	SlowPathFallback bool              `json:"possible_slow_path_fallback"`
	// Uncounted is why the model's chat requests are all forwarded
	// uncounted (its chat template did not compile: which, the line and
	// the reason; or no tokenizer).
	Uncounted string `json:"uncounted,omitempty"`
	// KVIndex is the backend's prefix-cache index (routing: precise):
	// its state, why it is not live, what cleared it last.
	KVIndex *kvIndexRecord `json:"kv_index,omitempty"`
}

// debugBackends answers GET /debug/backends: each backend's record taken at
// warm-up (version, max_model_len, cache config, warm-up time) and now.
func (g *Gateway) debugBackends(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	rep := g.triage.Report()
	slow := map[string]bool{}
	for _, mr := range rep.Models {
		for _, br := range mr.Backends {
			if br.SlowPathFallback {
				slow[mr.Model+"/"+br.Backend] = true
			}
		}
	}
	var out []backendRecord
	for _, rt := range g.live().models {
		slots := rt.slotStats()
		for _, b := range rt.fm.Backends() {
			sl := slots[b.URL.Host]
			maxInFlight, kv := b.Limits()
			rec := backendRecord{MaxInFlight: maxInFlight, KVTokens: kv, Model: rt.name, BackendStatus: b.Status(), CacheConfig: b.LastGauges().Info,
				TokenBudget: sl.Budget, InFlightTokens: sl.Tokens, Ejected: sl.Ejected,
				Ejections: sl.Ejections, Failures: sl.Failures,
				GaugesState: sl.GaugesState.String(), ScrapeErrors: sl.ScrapeErrors, LastScrapeError: sl.LastScrapeError,
				SlowPathFallback: slow[rt.name+"/"+b.URL.Host], Uncounted: rt.uncountedWhy, KVIndex: kvIndexOf(rt, b.URL.Host)}
			if sl.Ejected {
				until := sl.EjectedUntil.UTC()
				rec.EjectedUntil = &until
			}
			out = append(out, rec)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// verdictOf is the report's verdict for one model.
func verdictOf(rep triage.Report, model string) string {
	for _, m := range rep.Models {
		if m.Model == model {
			return m.Verdict
		}
	}
	return ""
}

// triageConfig maps the config file's triage keys onto the engine's; zero
// values keep the engine's defaults.
func triageConfig(c config.Config) triage.Config {
	tc := triage.DefaultConfig()
	tc.Window = c.TriageWindow.D()
	t := c.Triage
	if t.Baseline > 0 {
		tc.Baseline = t.Baseline.D()
	}
	th := &tc.Thresholds
	setI := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	setF := func(dst *float64, v float64) {
		if v > 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v config.Duration) {
		if v > 0 {
			*dst = v.D()
		}
	}
	setI(&th.MinSamples, t.MinSamples)
	setF(&th.TTFTRiseFactor, t.TTFTRiseFactor)
	setD(&th.TTFTMinDelta, t.TTFTMinDelta)
	setF(&th.TPOTStableFactor, t.TPOTStableFactor)
	setF(&th.TPOTRiseFactor, t.TPOTRiseFactor)
	setD(&th.TPOTMinDelta, t.TPOTMinDelta)
	setI(&th.MinFailures, t.MinFailures)
	setF(&th.MinFailureShare, t.MinFailureShare)
	setF(&th.KVFull, t.KVFull)
	setF(&th.SlowPathFactor, t.SlowPathFactor)
	return tc
}
